"""`CompiledModel.ir`: the IR text of one stage for one of a model's signatures.

Algorithm: 1) the signature: the last one called (`CompiledModel._last`, kept current on every
call path), or the one a caller names by input shapes (a dict name -> shape, or a sequence of
shapes in graph-input order), matched against the signatures this object has served;
2) the model is bound to that signature and run through the pipeline again up to the stage
asked for (nothing is cached: IR text is for reading, not for the hot path); a signature a
symbolic program served (`onnxjit.dynamic`) shows that program, lowered again from its
symbolic signature and size hints, so its sizes read as expressions of the input dims;
3) LLVM text and assembly come from the code generator's dump hook.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from onnxjit.errors import InputError, OnnxJitError
from onnxjit.signature import describe

STAGES = ("graph", "loops", "llvm", "llvm-opt", "asm")


def _shape_of(entry: Any) -> tuple | None:
    """The shape in a signature entry of a tensor input (None for sequences, optionals)."""
    kind, shape = entry
    return tuple(shape) if isinstance(shape, tuple) and hasattr(kind, "numpy") else None


def _wanted(fn: Any, signature: Any) -> dict[int, tuple]:
    """Input index -> the shape a caller asked for."""
    if isinstance(signature, Mapping):
        unknown = [n for n in signature if n not in fn._index]
        if unknown:
            raise InputError(f"ir(): unknown input name(s) {unknown}; inputs are "
                             f"{fn._all_names}")
        items = [(fn._index[n], s) for n, s in signature.items()]
    elif isinstance(signature, Sequence) and not isinstance(signature, str):
        if len(signature) != len(fn._all_names):
            raise InputError(f"ir(): {len(signature)} shapes given for the "
                             f"{len(fn._all_names)} inputs {fn._all_names}")
        items = list(enumerate(signature))
    else:
        raise InputError("ir(): signature takes input shapes, as a dict name -> shape or a "
                         f"tuple of shapes in input order; got {type(signature).__name__}")
    try:
        if any(isinstance(s, (str, bytes)) for _, s in items):
            raise TypeError
        return {i: tuple(int(d) for d in s) for i, s in items}
    except (TypeError, ValueError):
        raise InputError(f"ir(): shapes must be sequences of ints, got {signature!r}") from None


def find_signature(fn: Any, signature: Any) -> tuple:
    """The signature (as stored) of the artifact `signature` names; InputError when this model
    has not been called with those shapes."""
    wanted = _wanted(fn, signature)
    seen: dict[tuple, None] = {}
    for art in list(fn._fast.values()):
        sig = art.signature
        if all(_shape_of(sig[i]) == s for i, s in wanted.items()):
            seen[sig] = None
    if len(seen) == 1:
        return next(iter(seen))
    known = "; ".join(fn.signatures) or "none yet"
    if not seen:
        raise InputError(f"ir(): no signature with shapes {signature!r} was called; signatures "
                         f"called: {known}")
    raise InputError(f"ir(): shapes {signature!r} match several signatures ({known}); name "
                     "the shape of every input")


def _artifact(fn: Any, signature: Any) -> Any:
    """The artifact serving `signature` (default: the last one called)."""
    if signature is None:
        if fn._last is None:
            raise OnnxJitError("no signature compiled yet: call the model first")
        return fn._last
    sig = find_signature(fn, signature)
    return next(a for a in list(fn._fast.values()) if a.signature == sig)


def ir_text(fn: Any, stage: str, signature: Any = None) -> str:
    """IR text of `stage` for `signature` (default: the last signature called)."""
    if stage not in STAGES:
        raise OnnxJitError(f"unknown stage '{stage}'; stages are {STAGES}")
    art = _artifact(fn, signature)
    symbolic = getattr(art, "symbolic", None)
    if symbolic is not None and symbolic.signature is not None:
        program = _symbolic_program(fn, symbolic, stage)
    else:
        program = _specialised_program(fn, art.signature, stage)
    if isinstance(program, str):  # the graph stage
        return program
    if stage == "loops":
        from onnxjit.driver import print_ir

        return print_ir(program)[1]
    from onnxjit.codegen import compile_program

    texts: dict[str, str] = {}
    compile_program(program, opt_level=fn.options.opt_level,
                    dump=lambda name, text: texts.__setitem__(name, text))
    return texts[{"llvm": "llvm.ll", "llvm-opt": "llvm-opt.ll", "asm": "asm.s"}[stage]]


def _specialised_program(fn: Any, sig: tuple, stage: str) -> Any:
    """The graph text (stage "graph") or the loop program of a shape-specialised signature."""
    from onnxjit.driver import bind_signature, lower_bound, print_ir
    from onnxjit.staged import first_dynamic

    final = bind_signature(fn._graph(), sig, fn._with_base())
    if stage == "graph":
        return print_ir(final)[1]
    if first_dynamic(final) is not None:
        raise OnnxJitError(f"the signature {describe(fn._all_names, sig)} runs in stages "
                           "because shapes depend on input values; its graph IR is "
                           "available, and `dump_ir` writes every stage")
    return lower_bound(final, fn._with_base())


def _symbolic_program(fn: Any, symbolic: Any, stage: str) -> Any:
    """The graph text or the loop program of the symbolic program that served a signature
    (its sizes are expressions of the input dims), lowered again with its size hints."""
    from onnxjit.driver import bind_signature, lower_symbolic, print_ir
    from onnxjit.ir.symbolic import symbolic_session

    if stage == "graph":
        with symbolic_session(symbolic.hints):
            return print_ir(bind_signature(fn._graph(), symbolic.signature,
                                           fn._with_base()))[1]
    return lower_symbolic(fn._graph(), symbolic.signature, symbolic.hints, fn._with_base())
