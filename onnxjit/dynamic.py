"""Programs compiled once for every size of some dims, and their binding to a call's shapes.

A symbolic program (`ir.symbolic`) has sizes that are `Sym` expressions of its input dims. Its
`SymbolicArtifact` holds the loaded code and what the runtime needs to call it for one concrete
signature; `bind(signature)` makes that signature's `Artifact` (cheap: no compiling), which the
caller keeps for later calls of the same shapes. Algorithm of `bind`:
1) solve the symbols: each input dim that is a bare symbol takes the array's size there (the
   first occurrence wins); then every input dim, evaluated, must equal the array's;
2) check the program's assumptions (sizes shape inference or a lowering took to be equal); a
   violated one, like a dim that does not match, returns None: that signature is compiled on
   its own (the shape-specialised path runs it or names the error), never run wrongly;
3) evaluate every temp's size and place them in the arena by liveness (`plan_memory.first_fit`,
   the same first fit the static pass runs);
4) evaluate the `dims` table (`Program.dims`: sizes the code reads, the temps' offsets) into an
   int64 array passed after the constants and the pool's slots, and the output shapes.

Which dims are symbolic is the policy's choice (`symbolic_signature`): every dim the model
declares symbolic (`specialize="dynamic"`), or only those seen with two sizes ("auto"). Dims
the model fixes stay ints. The program's description round-trips through the disk cache as text
(`to_meta` / `from_meta`), sizes in the IR's dim syntax.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.ir.types import DType, Sym

Size = Any  # int | Sym


def _eval(d: Size, binds: dict[str, int]) -> int:
    if isinstance(d, int):
        return d
    try:
        return d.evaluate(binds)
    except ZeroDivisionError:  # a floordiv by a size that is 0 for this call: nothing to do
        return 0


def symbol_name(input_name: str, axis: int) -> str:
    """The symbol of an input dim the model leaves unnamed."""
    return f"{input_name}_{axis}"


def symbolic_signature(declared: list, sig: tuple, symbolic: set[str] | None
                       ) -> tuple[tuple, dict[str, int]]:
    """(signature with `Sym` dims, size hints) for the concrete `sig`: a dim becomes symbolic
    when the model declares it symbolic (named, or unnamed: `symbol_name`) and its symbol is in
    `symbolic` (None: every such dim). Returns the signature unchanged when no dim is."""
    out, hints = [], {}
    for (name, kind, dims), (dtype, shape) in zip(declared, sig):
        if not isinstance(kind, DType) or dims is None or len(dims) != len(shape):
            out.append((dtype, shape))
            continue
        new = []
        for axis, (d, n) in enumerate(zip(dims, shape)):
            sym = None if isinstance(d, int) else (d if isinstance(d, str)
                                                   else symbol_name(name, axis))
            if sym is not None and (symbolic is None or sym in symbolic):
                new.append(Sym.var(sym))
                hints.setdefault(sym, int(n))
            else:
                new.append(n)
        out.append((dtype, tuple(new)))
    return tuple(out), hints


def dim_symbols(declared: list, sig: tuple) -> dict[str, int]:
    """The size each declared-symbolic dim has in `sig` (symbol name -> size)."""
    out: dict[str, int] = {}
    for (name, kind, dims), (_, shape) in zip(declared, sig):
        if isinstance(kind, DType) and dims is not None and len(dims) == len(shape):
            for axis, (d, n) in enumerate(zip(dims, shape)):
                if not isinstance(d, int):
                    out.setdefault(d if isinstance(d, str) else symbol_name(name, axis), int(n))
    return out


class SymbolicArtifact:
    """A loaded symbolic program: `bind` makes the `Artifact` of one concrete signature."""

    def __init__(self, inputs: list[tuple[Size, ...]], outputs: list[tuple[tuple, Any]],
                 dims: list[Size], temps: list[tuple[str, Size, int, int]], n_kernels: int,
                 assumptions: list[tuple[Size, Size, str]], consts: list[np.ndarray],
                 messages: list[str], library: Any, use_py_entry: bool, num_threads: int,
                 out_names: list[str] | None, source: str = "compiled"):
        self.inputs = inputs
        self.outputs = outputs
        self.dims = dims
        self.temps = temps
        self.n_kernels = n_kernels
        self.assumptions = assumptions
        self.consts = consts
        self.messages = messages
        self.library = library
        self.use_py_entry = use_py_entry
        self.num_threads = num_threads
        self.out_names = out_names
        self.source = source
        self.compile_seconds = 0.0

    @staticmethod
    def of_program(program: Any, library: Any, use_py_entry: bool, num_threads: int
                   ) -> SymbolicArtifact:
        return SymbolicArtifact(
            [tuple(b.shape) for b in program.inputs],
            [(tuple(b.shape), b.dtype.numpy) for b in program.outputs],
            list(program.dims),
            [(t.buffer.name, t.nbytes, t.first, t.last) for t in program.temps],
            len(program.kernels), list(program.assumptions),
            [b.data for b in program.consts], program.messages(), library, use_py_entry,
            num_threads, [b.name for b in program.outputs])

    def solve(self, sig: tuple) -> dict[str, int] | None:
        """The symbols' sizes for `sig`, or None when it does not fit this program."""
        binds: dict[str, int] = {}
        for dims, (_, shape) in zip(self.inputs, sig):
            if len(dims) != len(shape):
                return None
            for d, n in zip(dims, shape):
                if isinstance(d, Sym) and d.op == "var":
                    binds.setdefault(d.args[0], int(n))
        for dims, (_, shape) in zip(self.inputs, sig):
            for d, n in zip(dims, shape):
                try:
                    if _eval(d, binds) != n:
                        return None
                except KeyError:
                    return None
        try:
            if any(_eval(a, binds) != _eval(b, binds) for a, b, _ in self.assumptions):
                return None
        except KeyError:
            return None
        return binds

    def bind(self, sig: tuple) -> Any:
        """The `Artifact` running this program for the concrete signature `sig`, or None
        (the signature violates a size relation the program assumes)."""
        from onnxjit.artifact import Artifact
        from onnxjit.passes.plan_memory import first_fit

        binds = self.solve(sig)
        if binds is None:
            return None
        offsets, arena = first_fit([(_eval(n, binds), f, la) for _, n, f, la in self.temps],
                                   self.n_kernels)
        values = dict(binds)
        values.update({f"@{t[0]}": off for t, off in zip(self.temps, offsets)})
        table = np.array([_eval(d, values) for d in self.dims] or [0], dtype=np.int64)
        outs = [(tuple(_eval(d, binds) for d in shape), dt) for shape, dt in self.outputs]
        return Artifact(sig, outs, self.consts, arena, self.messages, self.library,
                        self.use_py_entry, source=self.source, num_threads=self.num_threads,
                        out_names=self.out_names, dims=table)

    # the disk cache --------------------------------------------------------------------------
    def to_meta(self) -> dict[str, Any]:
        from onnxjit.ir.text_types import dim_text

        def t(d: Size) -> str:
            return dim_text(d)

        return {"symbolic": 1, "inputs": [[t(d) for d in s] for s in self.inputs],
                "outputs": [[[t(d) for d in s], np.dtype(dt).str] for s, dt in self.outputs],
                "dims": [t(d) for d in self.dims],
                "temps": [[k, t(n), f, la] for k, n, f, la in self.temps],
                "n_kernels": self.n_kernels,
                "assumptions": [[t(a), t(b), w] for a, b, w in self.assumptions],
                "messages": self.messages, "out_names": self.out_names}

    @staticmethod
    def from_meta(m: dict[str, Any], consts: list[np.ndarray], library: Any,
                  use_py_entry: bool, num_threads: int) -> SymbolicArtifact:
        from onnxjit.ir.text_lexer import Cursor
        from onnxjit.ir.text_types import parse_dim

        def p(text: str) -> Size:
            cur = Cursor(text)
            d = parse_dim(cur)
            cur.finish()
            return d

        return SymbolicArtifact(
            [tuple(p(d) for d in s) for s in m["inputs"]],
            [(tuple(p(d) for d in s), np.dtype(dt)) for s, dt in m["outputs"]],
            [p(d) for d in m["dims"]], [(k, p(n), f, la) for k, n, f, la in m["temps"]],
            int(m["n_kernels"]), [(p(a), p(b), w) for a, b, w in m["assumptions"]],
            consts, list(m["messages"]), library, use_py_entry, num_threads,
            m.get("out_names"), source="disk")
