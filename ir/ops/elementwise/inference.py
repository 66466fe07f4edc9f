"""Shared inference helpers of the elementwise op families (elementwise.arithmetic,
elementwise.logic).

An elementwise op's output shape is the numpy broadcast of its input shapes. Before opset 7,
binary ops broadcast only with `broadcast=1`, aligning B's shape at `axis` of A's (default: as a
suffix); the suffix form is numpy broadcasting, other axes are rejected as unsupported because
the loop helper broadcasts numpy-style. Dtypes are checked in two steps: a dtype the compiler
cannot compute is `UnsupportedError`; a dtype the op does not accept (bool to Add, an int to
Exp) is `ModelError`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.ops.shape_utils import broadcast_shapes, normalize_axis, tensor_input
from onnxjit.ir.types import (
    COMPUTE_DTYPES,
    Dim,
    DType,
    TensorType,
    supported_dtypes_text,
    sym_floordiv,
)

#: Accepted-dtype classes: "float", "num" (no bool), "int" (i32/i64), "bool", "any".
KINDS = ("float", "num", "int", "bool", "any")

#: Ops whose ONNX schema allows tensor(string) where they accept "any" type, and the first
#: opset version that does. A node with a string input or output runs on the host
#: (`host_eval.is_host_only`) through its numpy `evaluate`, which moves object arrays as well.
STRING_OPS = {"Identity": 1, "Reshape": 5, "Flatten": 9, "Squeeze": 1, "Unsqueeze": 1,
              "Transpose": 1, "Concat": 4, "Split": 2, "Gather": 1, "GatherElements": 11,
              "GatherND": 11, "Slice": 1, "Expand": 8, "Tile": 6, "Compress": 9,
              "Trilu": 14, "ReverseSequence": 10, "DepthToSpace": 1, "SpaceToDepth": 1,
              "ScatterElements": 11, "ScatterND": 11, "Scatter": 9, "Unique": 11,
              "NonZero": 9, "Equal": 19, "Where": 9}


def check_dtype(node: Node, i: int, kind: str = "any") -> DType:
    """The dtype of input i, checked to be computable and of the accepted `kind`."""
    t = tensor_input(node, i)
    dt = t.dtype
    if dt == DType.STRING and kind == "any" and node.op in STRING_OPS and not node.domain:
        # Strings are data to these ops: they run on the host with object arrays.
        if node.version < STRING_OPS[node.op]:
            raise ModelError(f"op '{node.op}' accepts string tensors from opset "
                             f"{STRING_OPS[node.op]} on, the model imports opset "
                             f"{node.version}", where=node)
        return dt
    if dt not in COMPUTE_DTYPES:
        raise UnsupportedError(f"op '{node.op}' on element type {dt.short} (input {i}) is not "
                               f"supported (supported: {supported_dtypes_text()})", where=node)
    ok = {"float": dt.is_float, "num": dt != DType.BOOL, "int": dt.is_int,
          "bool": dt == DType.BOOL, "any": True}[kind]
    if not ok:
        want = {"float": "a float", "num": "a numeric", "int": "an integer",
                "bool": "a bool"}[kind]
        raise ModelError(f"input {i} must be {want} tensor, got {dt.short}", where=node)
    return dt


def same_dtypes(node: Node, idx: Sequence[int], kind: str = "any") -> DType:
    """Check inputs `idx` all have one accepted dtype; return it."""
    dts = [check_dtype(node, i, kind) for i in idx]
    for i, dt in zip(idx, dts):
        if dt != dts[0]:
            raise ModelError(f"input {i} is {dt.short} but input {idx[0]} is "
                             f"{dts[0].short}; they must match", where=node)
    return dts[0]


def present(node: Node) -> list[int]:
    """Positions of the inputs that are given (not omitted optional inputs)."""
    return [i for i, v in enumerate(node.inputs) if v is not None]


def out_shape(node: Node, idx: Sequence[int] | None = None) -> tuple[Dim, ...] | None:
    """Broadcast shape of inputs `idx` (default: all given), honouring legacy broadcast attrs."""
    idx = present(node) if idx is None else list(idx)
    shapes = [tensor_input(node, i).shape for i in idx]
    if node.version < 7 and len(idx) == 2 and ("broadcast" in node.attrs or _legacy(node)):
        return _legacy_shape(node, shapes[0], shapes[1])
    return broadcast_shapes(shapes, node)


def _legacy(node: Node) -> bool:
    return node.op in ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Less",
                       "Greater")


def _legacy_shape(node: Node, a: tuple | None, b: tuple | None) -> tuple[Dim, ...] | None:
    if not node.attr("broadcast", 0):
        if a is not None and b is not None and (len(a) != len(b) or any(
                isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(a, b))):
            raise ModelError(f"shapes {a} and {b} differ and broadcast=0", where=node)
        return broadcast_shapes([a, b], node)
    axis = node.attr("axis")
    if axis is not None and a is not None and b is not None:
        ax = normalize_axis(int(axis), len(a), node)
        if ax != len(a) - len(b):
            raise UnsupportedError(f"legacy broadcast with axis={axis} (B aligned inside A) is "
                                   "not supported; re-export the model with opset >= 7",
                                   where=node)
    return broadcast_shapes([a, b], node)


def tensor(dtype: DType, shape: tuple[Dim, ...] | None) -> list[TensorType]:
    return [TensorType(dtype, shape)]


# --------------------------------------------------------------------------- shape values


def dims_of(v: Value | None) -> tuple | None:
    """The dims an int64 value holds: its `sym_value`, or a small constant's contents."""
    if v is None:
        return None
    if v.sym_value is not None:
        return tuple(v.sym_value)
    c = v.const
    if c is not None and isinstance(c, np.ndarray) and c.dtype.kind == "i" and c.ndim <= 1 \
            and c.size <= 64:
        return tuple(int(x) for x in c.reshape(-1))
    return None


def set_sym_arith(node: Node, fn: str) -> None:
    """Propagate `sym_value` through Add/Sub/Mul/Div of int64 dim tensors (rank <= 1)."""
    a, b = node.input(0), node.input(1)
    if a is None or b is None or a.dtype != DType.INT64 or b.dtype != DType.INT64:
        return
    if a.sym_value is None and b.sym_value is None:
        return  # plain constants fold anyway
    x, y = dims_of(a), dims_of(b)
    if x is None or y is None or (len(x) != len(y) and 1 not in (len(x), len(y))):
        return
    if (a.shape is not None and len(a.shape) > 1) or (b.shape is not None and len(b.shape) > 1):
        return
    n = max(len(x), len(y))
    x = x * n if len(x) == 1 else x
    y = y * n if len(y) == 1 else y
    out = []
    for p, q in zip(x, y):
        if p is None or q is None:
            out.append(None)
        elif fn == "add":
            out.append(p + q)
        elif fn == "sub":
            out.append(p - q)
        elif fn == "mul":
            out.append(p * q)
        elif isinstance(p, int) and isinstance(q, int):
            # ONNX integer Div truncates toward zero; 0 divisors stay unknown.
            t = None if q == 0 else abs(p) // abs(q)
            out.append(None if t is None else t if (p < 0) == (q < 0) else -t)
        elif isinstance(q, int) and q > 0:
            out.append(sym_floordiv(p, q))  # dims are non-negative: floor == trunc
        else:
            out.append(None)
    node.outputs[0].sym_value = tuple(out)
