"""lower-to-loops: graph IR with concrete shapes -> loop IR `Program`.

Contract: requires every value's type to be a tensor of static shape and a storage dtype
(`types.STORAGE_DTYPES`; checked here, naming the value: the op rules already refuse
arithmetic on the cast-only ones); ensures every graph output has its own `output` buffer.

Algorithm:
1) buffers for the interface: graph inputs -> `input` (slot = position), graph outputs ->
   `output` (slot = n_inputs + position), constants -> `const` (the array, passed by pointer);
   every other value gets a `temp` buffer on first use (plan-memory gives it an arena offset),
   except the inputs of Concats that their producers write in place (`concat_in_place`: views
   of the Concat's output at their offsets);
2) each node, in order, emits kernels through its OpDef's `lower` (a lone elementwise node goes
   through the same nest helper as a Fused region); reshape-like ops alias storage with `view`;
3) an output that is not written by any node (it is an input, a constant, a view, or a second
   slot holding the same value) gets a copy kernel, so outputs never alias anything.

Symbolic programs (`ir.symbolic`): shapes may hold `Sym` sizes. A node whose buffers are all
static lowers as ever; one with a symbolic size needs an op whose lowering takes symbolic sizes
(`OpDef.symbolic`, or a scalar rule: the shared elementwise nest), else `NotSymbolic` names it
and the caller compiles that part for concrete shapes.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import CompileError, UnsupportedError
from onnxjit.ir.graph import Model, Node, Value
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Buffer, Kernel, Matmul, Program, Size, Stmt, Store, walk
from onnxjit.ir.opdef import resolve
from onnxjit.ir.ops.fused.region import lower_elementwise_nodes
from onnxjit.ir.symbolic import active as symbolic_active
from onnxjit.ir.types import STORAGE_DTYPES, DType, Sym, TensorType, supported_dtypes_text
from onnxjit.options import available_cores
from onnxjit.passes import PassContext, PassResult
from onnxjit.passes.concat_in_place import place_concat_inputs

name = "lower-to-loops"
level = "graph->loops"


class NotSymbolic(CompileError):
    """A node with symbolic sizes whose lowering needs concrete ones (`node`)."""

    def __init__(self, node: Node, why: str):
        super().__init__(f"op '{node.op}' cannot be compiled for symbolic sizes yet ({why})",
                         where=node)
        self.node = node


class Lowering:
    """The LowerContext the op table's `lower` rules see."""

    def __init__(self, model: Model, fast_algorithms: bool = True, num_threads: int = 1):
        self.graph = model.graph
        self.fast_algorithms = fast_algorithms
        self.num_threads = max(1, num_threads)
        self.buffers: list[Buffer] = []
        self.kernels: list[Kernel] = []
        self.of: dict[Value, Buffer] = {}
        self._names: dict[str, int] = {}
        self._n_consts = 0
        self._current: Node | None = None
        self._workspaces: dict[tuple[str, DType], Buffer] = {}

    # LowerContext ---------------------------------------------------------------------------
    def buf(self, value: Value) -> Buffer:
        b = self.of.get(value)
        if b is None:
            dtype, shape = _static(value, self._current)
            if value.const is not None:
                data = np.ascontiguousarray(value.const, dtype=dtype.numpy)
                b = self._new(value.name or "c", dtype, shape, "const", slot=self._n_consts)
                b.data = data
                self._n_consts += 1
            else:
                b = self._new(value.name or "t", dtype, shape, "temp")
            self.of[value] = b
        return b

    def kernel(self, name: str, body: list[Stmt], contract: bool = False,
               gather: bool = False) -> None:
        base = self._current.op.lower() if self._current is not None and name == "" else name
        self.kernels.append(Kernel(self._unique(f"{base}"), body, contract, gather=gather))

    def view(self, out: Value, src: Buffer) -> None:
        dtype, shape = _static(out, self._current)
        existing = self.of.get(out)
        if existing is not None:  # an output buffer: it must be written
            self._copy(src, existing)
            return
        self.of[out] = self._new(out.name or "v", dtype, shape, "view", base=src)

    def place(self, value: Value, base: Buffer, offset: int) -> Buffer:
        """A view buffer for `value` inside `base`, `offset` bytes in (see concat_in_place)."""
        dtype, shape = _static(value, None)
        b = self._new(value.name or "v", dtype, shape, "view", base=base)
        b.offset = offset
        return b

    def scratch(self, hint: str, dtype: DType, shape: tuple[Size, ...]) -> Buffer:
        """A temporary buffer no graph value owns (an im2col panel, a partial sum...).

        It lives in the arena like any temp; plan-memory reuses its bytes once the last
        kernel that touches it has run.
        """
        return self._new(hint, dtype, tuple(d if isinstance(d, Sym) else int(d)
                                            for d in shape), "temp")

    def workspace(self, hint: str, dtype: DType, numel: int) -> Buffer:
        """The one temp buffer named `hint` of `dtype` that every kernel asking for it shares,
        grown to the largest `numel` asked (its shape is final once lowering ends).

        A kernel whose parallel iteration p always uses the same part of it keeps that part
        in one core's cache from kernel to kernel and from call to call: the pool gives
        part p of a loop's range to the same thread every time. Separate scratch buffers are
        placed by plan-memory wherever they fit, so one kernel's part 1 lands on another's
        part 0, and the cores take the lines from each other on every write.
        """
        key = (hint, dtype)
        b = self._workspaces.get(key)
        if b is None:
            b = self._workspaces[key] = self._new(hint, dtype, (int(numel),), "temp")
        elif numel > b.shape[0]:
            b.shape = (int(numel),)
        return b

    def constant(self, hint: str, data: np.ndarray) -> Buffer:
        """A new constant buffer holding `data` (weights repacked at compile time); like the
        graph's constants it is passed by pointer and kept in the disk cache."""
        data = np.ascontiguousarray(data)
        b = self._new(hint, DType.from_numpy(data.dtype), data.shape, "const",
                      slot=self._n_consts)
        b.data = data
        self._n_consts += 1
        return b

    def reinterpret(self, base: Buffer, dtype: DType, hint: str) -> Buffer:
        """A view of `base`'s bytes as elements of `dtype` (records mixing ints and floats in
        one constant: a tree node's feature, child and threshold share a cache line)."""
        n = base.nbytes // dtype.itemsize
        return self._new(hint, dtype, (n,), "view", base=base)

    # helpers ----------------------------------------------------------------------------------
    def _unique(self, hint: str) -> str:
        hint = "".join(c if c.isalnum() or c == "_" else "_" for c in hint) or "b"
        k = self._names.get(hint, 0)
        self._names[hint] = k + 1
        return hint if k == 0 else f"{hint}_{k}"

    def _new(self, hint: str, dtype: DType, shape: tuple, kind: str, slot: int = -1,
             base: Buffer | None = None) -> Buffer:
        b = Buffer(self._unique(hint), dtype, tuple(shape), kind, slot=slot, base=base)
        self.buffers.append(b)
        return b

    def _copy(self, src: Buffer, dst: Buffer) -> None:
        b = Builder()
        with b.loop(0, dst.numel, parallel=True) as i:
            b.store(dst, i, b.load(src, i))
        self.kernels.append(Kernel(self._unique("copy"), b.body))

    def run(self) -> Program:
        g = self.graph
        for k, v in enumerate(g.inputs):
            dtype, shape = _static(v, None)
            self.of[v] = self._new(v.name or f"in{k}", dtype, shape, "input", slot=k)
        out_bufs: list[tuple[Value, Buffer]] = []
        for k, v in enumerate(g.outputs):
            dtype, shape = _static(v, None)
            out_name = (g.output_names or [])[k] if k < len(g.output_names or []) else v.name
            b = self._new(out_name or f"out{k}", dtype, shape, "output", slot=len(g.inputs) + k)
            if v not in self.of and v.const is None:
                self.of[v] = b
            out_bufs.append((v, b))
        place_concat_inputs(self)
        symbolic = symbolic_active()
        skip = _size_only(g) if symbolic else set()
        for node in g.nodes:
            if node in skip:
                continue
            self._current = node
            opdef = resolve(node)
            if symbolic and not (opdef.symbolic or opdef.lower is None) and \
                    not _all_static(node):
                raise NotSymbolic(node, "its lowering takes concrete sizes only")
            if opdef.lower is not None:
                try:
                    opdef.lower(self, node)
                except TypeError as e:  # a size compared as a number: not symbolic yet
                    if symbolic and not _all_static(node):
                        raise NotSymbolic(node, str(e)) from e
                    raise
            elif opdef.scalar is not None:
                lower_elementwise_nodes(self, [node], [v for v in node.inputs if v is not None],
                                        [v for v in node.inputs if v is not None],
                                        node.outputs[:1], node.outputs[:1], node.op.lower())
            else:
                raise UnsupportedError(f"op '{node.op}' has no lowering yet", where=node)
        self._current = None
        written = {s.buf.root() if isinstance(s, Store) else s.c.root()
                   for k in self.kernels for s in walk(k.body) if isinstance(s, (Store, Matmul))}
        for v, b in out_bufs:
            if b not in written:
                self._copy(self.buf(v), b)
        return Program(self.buffers, self.kernels, name="main")


def _size_only(g: object) -> set[Node]:
    """Nodes of a symbolic program whose results nothing reads as data: only as sizes (the
    known `sym_value` of a value or size input, such as a Reshape's target computed by
    Shape -> Gather -> Concat), which the lowerings take from the types. They need no kernel."""
    needed: set[int] = {id(v) for v in g.outputs}  # type: ignore[attr-defined]
    skip: set[Node] = set()
    for node in reversed(g.nodes):  # type: ignore[attr-defined]
        if not any(id(v) in needed for v in node.outputs if v is not None):
            skip.add(node)
            continue
        d = resolve(node)
        sized = set(d.value_inputs) | set(d.size_inputs) if d.symbolic else set()
        for k, v in enumerate(node.inputs):
            if v is None or (k in sized and v.sym_value is not None
                             and all(x is not None for x in v.sym_value)):
                continue
            needed.add(id(v))
        for region in node.regions():
            for inner in region.walk():
                needed.update(id(v) for v in inner.inputs if v is not None)
    return skip


def _all_static(node: Node) -> bool:
    return all(isinstance(v.type, TensorType) and v.type.is_static
               for v in list(node.inputs) + list(node.outputs) if v is not None)


def _static(v: Value, node: Node | None) -> tuple[DType, tuple[Size, ...]]:
    t = v.type
    if not isinstance(t, TensorType):
        raise UnsupportedError(f"{v.describe()} has type {t}; only tensors are compiled "
                               "today", where=node)
    if t.shape is not None and symbolic_active() and all(d is not None for d in t.shape):
        pass  # sizes: ints or Sym expressions of the input dims
    elif not t.is_static:
        # Shapes that depend on run-time data (not yet computed in a shape phase) end here.
        raise UnsupportedError(f"{v.describe()} has shape {t}, which depends on data known "
                               "only at run time; data-dependent shapes are not supported yet",
                               where=node)
    if t.dtype not in STORAGE_DTYPES:
        raise UnsupportedError(f"dtype {t.dtype.short} of {v.describe()} is not supported "
                               f"(supported: {supported_dtypes_text(STORAGE_DTYPES)})",
                               where=node)
    return t.dtype, tuple(t.shape)  # type: ignore[arg-type]


def run(model: Model, ctx: PassContext) -> PassResult:
    opts = ctx.options
    threads = getattr(opts, "num_threads", 0) or available_cores()  # 0: all cores
    return PassResult(Lowering(model, getattr(opts, "fast_algorithms", True), threads).run(),
                      True)
