"""The `axes` of a reduction: where they come from, how they normalize, what shape remains.

`axes` is an attribute before opset 13 (ReduceSum) / 18 (the others) and an optional int64
input after (`axes_from_input`); `raw_axes` gives them as written, or None when the input's
value is only known at run time (`runtime_axes`). `norm_axes` normalizes them: empty axes
reduce every axis, unless `noop_with_empty_axes` (input form only) makes the op the identity on
the reduction; negative axes count from the back; a repeated axis is a ModelError.
`reduced_shape` is the output shape, with or without `keepdims`.
"""

from __future__ import annotations

from collections.abc import Sequence

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.ops.elementwise.arithmetic import int_attr
from onnxjit.ir.ops.elementwise.inference import dims_of
from onnxjit.ir.ops.shape_utils import normalize_axis
from onnxjit.ir.types import DType

D = DType


def axes_from_input(node: Node) -> bool:
    """Whether the node's opset takes axes as an input (else as an attribute)."""
    return node.version >= (13 if node.op == "ReduceSum" else 18)


def raw_axes(node: Node) -> tuple[int, ...] | None:
    """The axes as written (not normalized; () for absent/empty); None if only known at run
    time."""
    if not axes_from_input(node):
        a = node.attr("axes")
        return () if a is None else tuple(int(x) for x in a)
    v = node.input(1)
    if v is None:
        return ()
    if v.dtype is not None and v.dtype != D.INT64:
        raise ModelError(f"input 1 (axes) must be int64, got {v.dtype.short}", where=node)
    d = dims_of(v)
    if d is None or not all(isinstance(x, int) for x in d):
        return None
    return tuple(d)


def noop_empty(node: Node) -> bool:
    return axes_from_input(node) and int_attr(node, "noop_with_empty_axes", 0, (0, 1)) == 1


def norm_axes(node: Node, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """Normalized, sorted reduced axes for written `axes` (empty: all, or none with noop)."""
    if not axes:
        return () if noop_empty(node) else tuple(range(rank))
    out = [normalize_axis(a, rank, node, "axes value") for a in axes]
    if len(set(out)) != len(out):
        raise ModelError(f"axes {list(axes)} name an axis twice", where=node)
    return tuple(sorted(out))


def reduced_shape(shape: Sequence, axes: Sequence[int], keep: bool) -> tuple:
    return tuple(1 if k in axes else d for k, d in enumerate(shape) if keep or k not in axes)
