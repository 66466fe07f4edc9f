"""Ops whose output SIZE depends on the input data: NonZero, Compress, Unique.

Their `infer` gives the rank and dtype with unknown (None) dims where the count depends on
values; such a node never reaches `lower-to-loops`. The run-time shape phase
(`onnxjit.staged`) runs the graph up to the node natively, evaluates the node on the host with
`evaluate` (numpy, exactly the ONNX semantics below), and compiles the rest for the sizes it
produced. With constant inputs, fold-constants evaluates them at compile time instead.

- NonZero: int64 [rank, count] indices of the non-zero elements in row-major order (a 0-d
  input gives [0, count]: no coordinates).
- Compress: elements (along `axis`, or of the flattened input) whose condition is true; the
  condition may be shorter than the axis (missing entries are false), never longer.
- Unique: sorted (or first-occurrence) unique values, with indices of first occurrences,
  inverse indices and counts; along `axis` it compares slices.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import InputError, ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.elementwise.inference import check_dtype
from onnxjit.ir.ops.shape_utils import normalize_axis, tensor_input
from onnxjit.ir.types import DType, TensorType, ValueType

# --------------------------------------------------------------------------- NonZero


def _nonzero_infer(node: Node) -> list[ValueType | None]:
    t = tensor_input(node, 0, "X")
    check_dtype(node, 0)
    rank = None if t.shape is None else len(t.shape)
    return [TensorType(DType.INT64, (rank, None))]


def _nonzero_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    if x.ndim == 0:
        return [np.zeros((0, int(bool(x))), np.int64)]
    return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


op("NonZero", (9, 13), infer=_nonzero_infer, evaluate=_nonzero_eval,
   doc="indices of the non-zero elements, int64 [rank, count]")


# --------------------------------------------------------------------------- Compress


def _compress_infer(node: Node) -> list[ValueType | None]:
    t = tensor_input(node, 0, "input")
    dt = check_dtype(node, 0)
    c = tensor_input(node, 1, "condition")
    if c.dtype != DType.BOOL:
        raise ModelError(f"condition must be bool, got {c.dtype.short}", where=node)
    if c.shape is not None and len(c.shape) != 1:
        raise ModelError(f"condition must be 1-D, got rank {len(c.shape)}", where=node)
    axis = node.attr("axis")
    if axis is None:
        return [TensorType(dt, (None,))]
    if t.shape is None:
        return [TensorType(dt, None)]
    axis = normalize_axis(axis, len(t.shape), node)
    return [TensorType(dt, tuple(None if k == axis else d for k, d in enumerate(t.shape)))]


def _compress_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x, cond = np.asarray(inputs[0]), np.asarray(inputs[1], dtype=bool)
    axis = node.attr("axis")
    n = x.size if axis is None else x.shape[normalize_axis(axis, x.ndim, node)]
    if cond.size > n:
        raise InputError(f"condition has {cond.size} entries but the compressed "
                         f"{'input' if axis is None else 'axis'} has {n}", where=node)
    return [np.compress(cond, x, axis=axis)]


op("Compress", (9, 11), infer=_compress_infer, evaluate=_compress_eval,
   doc="select slices (or elements) where a bool condition holds")


# --------------------------------------------------------------------------- Unique


def _unique_infer(node: Node) -> list[ValueType | None]:
    t = tensor_input(node, 0, "X")
    dt = check_dtype(node, 0)
    axis = node.attr("axis")
    if axis is None or t.shape is None:
        y = TensorType(dt, (None,) if axis is None else None)
    else:
        a = normalize_axis(axis, len(t.shape), node)
        y = TensorType(dt, tuple(None if k == a else d for k, d in enumerate(t.shape)))
    idx = TensorType(DType.INT64, (None,))
    return [y, idx, idx, idx][:len(node.outputs)]


def _unique_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axis = node.attr("axis")
    if axis is not None:
        axis = normalize_axis(axis, x.ndim, node)
    y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                          return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not node.attr("sorted", 1):
        # First-occurrence order: renumber the sorted uniques by where they first appear.
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    outs = [y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)]
    return outs[:len(node.outputs)]


op("Unique", (11,), infer=_unique_infer, evaluate=_unique_eval,
   doc="unique values (or slices) with first indices, inverse indices and counts")
