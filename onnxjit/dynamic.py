"""Programs compiled once for every size of some dims, and their binding to a call's shapes.

A symbolic program (`ir.symbolic`) has sizes that are `Sym` expressions of its input dims. Its
`SymbolicArtifact` holds the loaded code and what the runtime needs to call it for one concrete
signature; `bind(signature)` makes that signature's `Artifact` (cheap: no compiling), which the
caller keeps for later calls of the same shapes. The size arithmetic below runs as Python code
generated once per program (`size_code.SizeCode`). Algorithm of `bind`:
1) solve the symbols: each input dim that is a bare symbol takes the array's size there (the
   first occurrence wins); then every input dim, evaluated, must equal the array's;
2) check the program's assumptions (sizes shape inference or a lowering took to be equal); a
   violated one, like a dim that does not match, returns None: that signature is compiled on
   its own (the shape-specialised path runs it or names the error), never run wrongly;
3) evaluate every temp's size and place them in the arena by liveness (`plan_memory.FirstFit`,
   the same first fit the static pass runs) at sizes rounded up to `size_bucket`s: a placement
   of larger temps holds smaller ones, so calls whose sizes fall in the same buckets (a
   decoder's steps, one token more each) reuse one placement (`_placements`) instead of
   placing again (0.3 ms a new shape for a GPT-style decoder's 100 temps);
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

from onnxjit.artifact import ArenaShare, Artifact
from onnxjit.ir.arena import FirstFit
from onnxjit.ir.types import DType, Sym
from onnxjit.size_code import SizeCode

Size = Any  # int | Sym


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


def symbol_positions(declared: list, sig: tuple) -> list[tuple[int, int, str]]:
    """(input, axis, symbol) of every declared-symbolic dim of `sig` (its inputs' ranks)."""
    out = []
    for k, ((name, kind, dims), (_, shape)) in enumerate(zip(declared, sig)):
        if isinstance(kind, DType) and dims is not None and len(dims) == len(shape):
            for axis, d in enumerate(dims):
                if not isinstance(d, int):
                    out.append((k, axis, d if isinstance(d, str) else symbol_name(name, axis)))
    return out


#: placements kept per program (by their size buckets) before the memo starts over
MAX_PLACEMENTS = 256


def size_bucket(n: int) -> int:
    """n bytes rounded up to m * 2**e with 8 <= m < 16 (at most 12.5% more), 64 at least: the
    sizes a symbolic program's temps are placed at (see the module docstring)."""
    if n <= 64:
        return 64
    e = n.bit_length() - 4
    return -(-n >> e) << e


class SymbolicArtifact:
    """A loaded symbolic program: `bind` makes the `Artifact` of one concrete signature."""

    def __init__(self, code: SizeCode, out_dtypes: list[Any], temps: list[tuple[str, int, int]],
                 n_kernels: int, consts: list[np.ndarray], messages: list[str], library: Any,
                 use_py_entry: bool, num_threads: int, out_names: list[str] | None,
                 source: str = "compiled", described: dict[str, Any] | None = None):
        self.code = code
        self.temps = temps  # (name, first kernel, last kernel)
        self.n_kernels = n_kernels
        self.consts = consts
        self.messages = messages
        self.library = library
        self.use_py_entry = use_py_entry
        self.num_threads = num_threads
        self.out_names = out_names
        self.source = source
        #: the sizes as IR text (inputs, outputs, dims, temps, assumptions), for `onnxjit info`
        self.described = described or {}
        self.compile_seconds = 0.0
        #: the symbolic signature and size hints it was lowered with (`Specializer.program`
        #: sets them; `CompiledModel.ir` lowers them again)
        self.signature: tuple | None = None
        self.hints: dict[str, int] = {}
        self._names = [k for k, _, _ in temps]
        self._plan = FirstFit([(f, la) for _, f, la in temps], n_kernels)
        self._placements: dict[tuple[int, ...], tuple[list[int], int]] = {}
        self._arena_share = ArenaShare()
        self._out_dtypes = out_dtypes
        self._prefix = Artifact.table_prefix(consts, library, num_threads)

    @staticmethod
    def of_program(program: Any, library: Any, use_py_entry: bool, num_threads: int
                   ) -> SymbolicArtifact:
        from onnxjit.ir.text_types import dim_text

        inputs = [tuple(b.shape) for b in program.inputs]
        outputs = [tuple(b.shape) for b in program.outputs]
        temps = [(t.buffer.name, t.nbytes, t.first, t.last) for t in program.temps]
        assumptions = list(program.assumptions)
        code = SizeCode(inputs, assumptions, [n for _, n, _, _ in temps], outputs,
                        list(program.dims))

        def text(shape: tuple) -> list[str]:
            return [dim_text(d) for d in shape]

        described = {"inputs": [text(s) for s in inputs], "outputs": [text(s) for s in outputs],
                     "temps": [[k, dim_text(n)] for k, n, _, _ in temps],
                     "assumptions": [[dim_text(a), dim_text(b), why]
                                     for a, b, why in assumptions]}
        return SymbolicArtifact(
            code, [b.dtype.numpy for b in program.outputs], [(k, f, la) for k, _, f, la in temps],
            len(program.kernels), [b.data for b in program.consts], program.messages(),
            library, use_py_entry, num_threads, [b.name for b in program.outputs],
            described=described)

    def solve(self, sig: tuple) -> dict[str, int] | None:
        """The symbols' sizes for `sig`, or None when it does not fit this program."""
        r = self.code.sizes(tuple(shape for _, shape in sig))
        return None if r is None else dict(zip(self.code.symbols, r[0]))

    def bind(self, sig: tuple) -> Any:
        """The `Artifact` running this program for the concrete signature `sig`, or None
        (the signature violates a size relation the program assumes)."""
        r = self.code.sizes(tuple(shape for _, shape in sig))
        if r is None:
            return None
        symbols, sizes, outs = r
        buckets = tuple([size_bucket(n) for n in sizes])
        placed = self._placements.get(buckets)
        if placed is None:
            if len(self._placements) >= MAX_PLACEMENTS:
                self._placements.clear()
            placed = self._placements[buckets] = self._plan.place(list(buckets))
        offsets, arena = placed
        table = np.array(self.code.table(symbols, dict(zip(self._names, offsets))) or [0],
                         dtype=np.int64)
        art = Artifact(sig, list(zip(outs, self._out_dtypes)), self.consts, arena,
                       self.messages, self.library, self.use_py_entry, source=self.source,
                       num_threads=self.num_threads, out_names=self.out_names, dims=table,
                       table_prefix=self._prefix)
        art.symbolic = self
        art.arena_share = self._arena_share
        return art

    # the disk cache --------------------------------------------------------------------------
    def to_meta(self) -> dict[str, Any]:
        return {"symbolic": 2, "code": self.code.source, "symbols": self.code.symbols,
                "out_dtypes": [np.dtype(dt).str for dt in self._out_dtypes],
                "temps": [list(t) for t in self.temps], "n_kernels": self.n_kernels,
                "messages": self.messages, "out_names": self.out_names,
                "described": self.described}

    @staticmethod
    def from_meta(m: dict[str, Any], consts: list[np.ndarray], library: Any,
                  use_py_entry: bool, num_threads: int, compiled: bytes | None = None
                  ) -> SymbolicArtifact:
        if m.get("symbolic") != 2:
            raise ValueError("a symbolic entry of an earlier format")
        return SymbolicArtifact(
            SizeCode.from_source(m["code"], m["symbols"], compiled),
            [np.dtype(d) for d in m["out_dtypes"]],
            [(k, int(f), int(la)) for k, f, la in m["temps"]], int(m["n_kernels"]), consts,
            list(m["messages"]), library, use_py_entry, num_threads, m.get("out_names"),
            source="disk", described=m.get("described"))
