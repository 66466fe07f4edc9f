"""The op table: one `OpDef` per ONNX operator, holding all of its semantics.

An OpDef gives, for every opset version of its op (`versions`: the since-versions of the ONNX
schema; a node's `version` is its domain's imported opset, and the rules look at it where the
versions differ):

- `infer(node) -> list[type]`: verify inputs/attributes and return output types (symbolic shapes).
  It may read `input.const` and `input.sym_value`, and may set `output.sym_value`.
- `evaluate(node, inputs) -> list[np.ndarray]`: numpy semantics, used by constant folding.
  Elementwise ops need none: folding runs their `scalar` rule through `ir.scalar_eval`.
- `scalar(b, node, args) -> Operand`: for elementwise/broadcast ops, the scalar computation of one
  output element from one element of each input (loop-IR statements emitted through `b`). Ops
  with a scalar rule are fusible; the same rule drives lowering and folding (one source of truth).
- `lower(ctx, node)`: emit loop-IR kernels for a node whose shapes are all concrete.
- `value_inputs`: indexes of inputs whose VALUES the lowering needs at compile time (pads,
  sizes, scales, depth...). A node with such an input not constant after binding runs through
  the run-time shape phase (`onnxjit.staged`), which binds the value it receives.
- `draws(node) -> bool`: the node draws random numbers (with these attributes and constant
  inputs): it is never folded and runs on the host at every call (training-mode Dropout).
- `symbolic`: `lower` also takes buffers with symbolic sizes (`ir.symbolic`: loops, strides
  and Matmul sizes that are `Sym` expressions of the input dims). Ops with a scalar rule go
  through the shared elementwise nest, which always does.
- `size_inputs`: indexes of int inputs whose values the lowering takes from the types (their
  `sym_value`: a Reshape's target, Slice's bounds) once known, never reading their data; a
  symbolic program computes no kernel for a value only such inputs read.

Lookup is by (domain, op); `resolve` checks the node's version against what the table knows.

Loading is per op: the families under `onnxjit.ir.ops` register into `Registry` tables (`OPS`
here, the host tables of `ir.host_eval`), which note the module whose import made each entry
(`REGISTERED_BY`). The generated index `ir.op_index` maps every op to those modules, so a
lookup imports only its op's modules (a transformer's compile imports about 30 of 130). An op
the index does not know, or does not find where the index says, loads every family
(`load_all`); a stale index therefore costs time, never an op, and `tests/test_op_index.py`
fails until `python tools/gen_op_index.py` rewrites it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError

if TYPE_CHECKING:
    from onnxjit.ir.graph import Node, Value
    from onnxjit.ir.loop_builder import Builder
    from onnxjit.ir.loops import Buffer, Operand, Stmt
    from onnxjit.ir.types import DType, ValueType

#: Highest ai.onnx opset version whose semantics the table implements.
MAX_OPSET = 28


class LowerContext(Protocol):
    """What `OpDef.lower` may use (implemented by the lower-to-loops pass)."""

    #: Whether lowerings may use algorithms with fewer multiplies that round differently
    #: (`CompileOptions.fast_algorithms`: Strassen products, Winograd convs).
    fast_algorithms: bool
    #: The threads the program's parallel loops run on (`CompileOptions.num_threads`, part of
    #: the code key): a lowering may cut work into a multiple of them.
    num_threads: int

    def buf(self, value: Value) -> Buffer:
        """The buffer holding a graph value (inputs, constants, temps, outputs)."""

    def kernel(self, name: str, body: list[Stmt], contract: bool = False) -> None:
        """Append a kernel (a list of loop-IR statements) to the program; `contract`: see
        `loops.Kernel`."""

    def view(self, out: Value, src: Buffer) -> None:
        """Make `out` share `src`'s storage (reshape-like ops); copies when it must."""

    def scratch(self, hint: str, dtype: DType, shape: tuple[int, ...]) -> Buffer:
        """A temporary buffer no graph value owns (im2col panels, partial results)."""

    def workspace(self, hint: str, dtype: DType, numel: int) -> Buffer:
        """One temp buffer shared by every kernel asking for `hint` (grown to the largest
        request): a part of it a parallel iteration uses stays with one thread."""

    def constant(self, hint: str, data: np.ndarray) -> Buffer:
        """A new constant buffer holding `data` (weights repacked at compile time)."""

    def reinterpret(self, base: Buffer, dtype: DType, hint: str) -> Buffer:
        """A view of `base`'s bytes as elements of `dtype` (same itemsize multiple)."""


@dataclass
class OpDef:
    op: str
    versions: tuple[int, ...]
    domain: str = ""
    infer: Callable[[Node], list[ValueType | None]] | None = None
    evaluate: Callable[[Node, list[np.ndarray | None]], list[np.ndarray]] | None = None
    scalar: Callable[[Builder, Node, list[Operand]], Operand] | None = None
    lower: Callable[[LowerContext, Node], None] | None = None
    doc: str = ""
    value_inputs: tuple[int, ...] = ()
    draws: Callable[[Node], bool] | None = None
    symbolic: bool = False
    size_inputs: tuple[int, ...] = ()

    @property
    def fusible(self) -> bool:
        return self.scalar is not None


#: (domain, op) -> names of the modules whose import registered something for it
REGISTERED_BY: dict[tuple[str, str], set[str]] = {}


class Registry(dict):
    """A table keyed by (domain, op) that notes which module's import made each entry."""

    def __setitem__(self, key: tuple[str, str], value: Any) -> None:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_name != "<module>":
            frame = frame.f_back  # the module body being imported
        if frame is not None:
            REGISTERED_BY.setdefault(key, set()).add(frame.f_globals.get("__name__", "?"))
        super().__setitem__(key, value)


OPS: Registry = Registry()


def register_op(opdef: OpDef) -> OpDef:
    key = (opdef.domain, opdef.op)
    if key in OPS:
        raise ValueError(f"op {opdef.op} registered twice")
    OPS[key] = opdef
    return opdef


def op(name: str, versions: tuple[int, ...], **kwargs: Any) -> OpDef:
    """Register and return an OpDef (a shorthand for `register_op(OpDef(...))`)."""
    return register_op(OpDef(name, versions, **kwargs))


_loaded = False  # every family imported
_ensured: set[tuple[str, str]] = set()  # keys whose indexed modules are imported


def load_all() -> None:
    """Import every module under `onnxjit.ir.ops` (sorted by dotted name, so registration order
    is deterministic): a new family or file lands without editing a list."""
    global _loaded
    if _loaded:
        return
    import importlib
    import pkgutil

    import onnxjit.ir.ops as package
    from onnxjit.timings import timed

    with timed("op-table"):
        names = [m.name for m in pkgutil.walk_packages(package.__path__, "onnxjit.ir.ops.")]
        for name in sorted(names):
            importlib.import_module(name)
    _loaded = True


def ensure(domain: str, op: str) -> None:
    """Import the modules that register `op` (every family when the index does not know it)."""
    key = (domain if domain != "ai.onnx" else "", op)
    if _loaded or key in _ensured:
        return
    import importlib

    from onnxjit.ir.op_index import modules_of
    from onnxjit.timings import timed

    mods = modules_of(key)
    if mods is None:
        load_all()
        return
    with timed("op-table"):
        for m in mods:
            importlib.import_module(m)
    _ensured.add(key)


def lookup(domain: str, op: str) -> OpDef | None:
    key = (domain if domain != "ai.onnx" else "", op)
    d = OPS.get(key)
    if d is None and not _loaded:
        ensure(*key)
        d = OPS.get(key)
        if d is None:  # not where the index says: every family
            load_all()
            d = OPS.get(key)
    return d


def resolve(node: Node) -> OpDef:
    """The OpDef for a node; UnsupportedError names the node when there is none."""
    d = lookup(node.domain, node.op)
    if d is None:
        dom = f" in domain '{node.domain}'" if node.domain else ""
        raise UnsupportedError(f"op '{node.op}'{dom} is not supported", where=node)
    if node.version < d.versions[0]:
        raise ModelError(f"op '{node.op}' does not exist in opset {node.version} "
                         f"(introduced in {d.versions[0]})", where=node)
    return d


def since_version(node: Node) -> int:
    """The since-version of the schema that applies to the node (latest <= node.version)."""
    d = resolve(node)
    return max(v for v in d.versions if v <= node.version)
