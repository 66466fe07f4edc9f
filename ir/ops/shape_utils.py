"""Shape helpers shared by the op table: broadcasting, axes, attribute access.

Broadcasting follows numpy (multidirectional, ONNX "Broadcasting in ONNX"): shapes are aligned
on the right; a dim of 1 stretches; two concrete unequal dims (neither 1) are an error; a symbol
against 1 gives the symbol; two different symbols (or unknowns) give `sym_max` when both are
known to be >=1 ... we cannot know, so we keep a symbol that is not 1 if one side is concrete,
and `None` (unknown) otherwise. While compiling for symbolic sizes (`ir.symbolic`) a
symbolic dim against another size is assumed equal to it instead: the runtime checks the
assumption for each call's shapes and compiles the shapes that break it on their own.
"""

from __future__ import annotations

from collections.abc import Sequence

from onnxjit.errors import ModelError
from onnxjit.ir import symbolic
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.types import Dim, TensorType


def broadcast_dims(a: Dim, b: Dim, node: Node) -> Dim:
    if a == 1:
        return b
    if b == 1:
        return a
    if a == b:
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise ModelError(f"shapes cannot broadcast: dims {a} and {b}", where=node)
    if a is not None and b is not None and symbolic.active():
        # compiling for symbolic sizes: the two are taken to be equal (checked per call)
        symbolic.assume_equal(a, b, "broadcast operand dims")
        return a if isinstance(a, int) else b
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return None


def broadcast_shapes(shapes: Sequence[tuple[Dim, ...] | None], node: Node
                     ) -> tuple[Dim, ...] | None:
    """numpy broadcasting of several shapes; None if any rank is unknown."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)  # type: ignore[arg-type]
    out: list[Dim] = [1] * rank
    for s in shapes:
        padded = [1] * (rank - len(s)) + list(s)  # type: ignore[arg-type]
        out = [broadcast_dims(x, y, node) for x, y in zip(out, padded)]
    return tuple(out)


def normalize_axis(axis: int, rank: int, node: Node, what: str = "axis") -> int:
    """An axis in [-rank, rank) as a non-negative int; ModelError naming the node otherwise."""
    if not -rank <= axis < rank:
        raise ModelError(f"{what} {axis} is out of range for rank {rank}", where=node)
    return axis + rank if axis < 0 else axis


def tensor_input(node: Node, i: int, what: str = "") -> TensorType:
    """The tensor type of the node's i-th input; ModelError if missing or not a tensor."""
    v = node.input(i)
    if v is None:
        raise ModelError(f"required input {i}{' (' + what + ')' if what else ''} is missing",
                         where=node)
    t = v.type
    if not isinstance(t, TensorType):
        raise ModelError(f"input {i} ({v.describe()}) must be a tensor, got {t}", where=node)
    return t


def const_input(node: Node, i: int) -> object:
    """The constant array of input i, or None when it is not (yet) known."""
    v: Value | None = node.input(i)
    return None if v is None else v.const


def require_attr(node: Node, name: str) -> object:
    if name not in node.attrs:
        raise ModelError(f"missing required attribute '{name}'", where=node)
    return node.attrs[name]
