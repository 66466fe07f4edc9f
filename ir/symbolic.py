"""Symbolic sizes while compiling one program for every size of some dims.

A symbolic program (`loops.Program.symbolic`) is compiled from a graph whose inputs carry
`Sym` dims (the model's `dim_param` names, or one symbol per unnamed dim). Three things the
passes and lowerings share live here, for the duration of one compilation (context variables,
so concurrent compilations in other threads keep their own):

- size hints: the concrete sizes of the call that asked for the program. Lowerings make
  performance choices (block sizes, which algorithm) on `hint(d)`; the code they emit must be
  right for every size, so a hint never decides anything but speed;
- assumptions: relations between sizes that shape inference or a lowering relies on but cannot
  prove from the symbols (a dim `N` broadcast against a fixed 5 must be 5 at run time, a
  MatMul's `K` of one operand must equal the other's). `assume_equal(a, b, why)` records one;
  the runtime checks all of them when a concrete shape is bound, and a shape that violates
  one is compiled on its own (the shape-specialised path either runs it or names the error);
- `symbolic_session()` opens one compilation's scope.

Sizes are ints or `Sym`s (`types.Sym`: + * // max over named symbols).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from onnxjit.ir.types import Dim, Sym, evaluate_dim

_HINTS: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar(
    "onnxjit_size_hints", default=None)
_ASSUMED: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "onnxjit_assumptions", default=None)

#: The size a symbol is taken to have for performance choices when no hint names it.
DEFAULT_HINT = 64


@contextlib.contextmanager
def symbolic_session(hints: dict[str, int]) -> Iterator[list[tuple[Dim, Dim, str]]]:
    """Within: `hint` reads `hints`, `assume_equal` appends to the yielded list."""
    assumed: list[tuple[Dim, Dim, str]] = []
    t1, t2 = _HINTS.set(dict(hints)), _ASSUMED.set(assumed)
    try:
        yield assumed
    finally:
        _HINTS.reset(t1)
        _ASSUMED.reset(t2)


def active() -> bool:
    """A symbolic compilation is under way (sizes may be `Sym`s)."""
    return _ASSUMED.get() is not None


def hint(d: Dim) -> int:
    """A concrete stand-in for size `d`, for performance choices only (see the docstring)."""
    if isinstance(d, int):
        return d
    if d is None:
        return DEFAULT_HINT
    hints = _HINTS.get() or {}
    binds = {s: hints.get(s, DEFAULT_HINT) for s in d.symbols()}
    v = evaluate_dim(d, binds)
    return DEFAULT_HINT if v is None else max(0, v)


def static(d: Dim) -> bool:
    return isinstance(d, int)


def assume_equal(a: Dim, b: Dim, why: str) -> None:
    """Record that sizes `a` and `b` are equal for every call (see the docstring). Two ints
    must already be equal; structurally equal expressions need nothing."""
    if a == b:
        return
    if isinstance(a, int) and isinstance(b, int):
        raise ValueError(f"assumed {a} == {b}: {why}")
    assumed = _ASSUMED.get()
    if assumed is None:
        raise ValueError(f"symbolic sizes {a} and {b} compared outside a symbolic session")
    if (a, b, why) not in assumed:
        assumed.append((a, b, why))


def same_size(a: Dim, b: Dim, why: str) -> bool:
    """Whether `a` and `b` are known to be one size: equal ints or expressions, or (in a
    symbolic session, when one is symbolic) assumed so. None (unknown) is never the same."""
    if a is None or b is None:
        return False
    if a == b:
        return True
    if isinstance(a, int) and isinstance(b, int):
        return False
    if not active():
        return False
    assume_equal(a, b, why)
    return True


def symbols_of(d: Dim) -> set[str]:
    return d.symbols() if isinstance(d, Sym) else set()


def known_shape(t: object) -> tuple | None:
    """A tensor type's shape when every size is known: ints, or while compiling for symbolic
    sizes also `Sym` expressions; None otherwise (or for a non-tensor)."""
    shape = getattr(t, "shape", None)
    if shape is None or any(d is None for d in shape):
        return None
    if all(isinstance(d, int) for d in shape) or active():
        return tuple(shape)
    return None
