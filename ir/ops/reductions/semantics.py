"""Reductions: ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2
ReduceLogSum ReduceLogSumExp ReduceSumSquare.

Semantics (every opset): `axes` is an attribute before opset 13 (ReduceSum) / 18 (the others)
and an optional int64 input after; without axes (or with empty axes) every axis is reduced,
unless `noop_with_empty_axes` (input form only) makes the op the identity on the reduction
(numpy's `axis=()`: ReduceSumSquare still squares). `keepdims` (default 1) keeps reduced dims
as 1. Negative axes count from the back; repeated axes are a ModelError. An empty reduction
gives the identity of the combining op: 0 for sums, 1 for ReduceProd, -inf (or the dtype's
minimum, False for bool) for ReduceMax, the opposite for ReduceMin, NaN for a float ReduceMean
(0/0), -inf for ReduceLogSum(Exp). Sums accumulate in the element type (f32 in f32, like
onnxruntime; ints wrap), except float16: like onnxruntime, a float16 reduction computes in f32
from the element transform (|x|, x*x) to the final step (mean, sqrt, log) and rounds once, so
ReduceL2([300, 400, -541.5]) is 737, not inf (300^2 overflows float16). bfloat16 sums round
every step (`ir.narrow`). Integer L2/LogSum/LogSumExp compute the float part in f64 and
truncate.

Each reduction is `combine` over `elem(x)` then `final` (`reductions.lowering.KINDS`); the loop
nests are built by `reductions.lowering.emit_reduce`. A runtime (non-constant) axes input is
handled in `reductions.runtime_axes`.
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import (
    BF16,
    BOOL,
    FLOATS,
    WIDE_INTS,
    Types,
    accept,
    int_attr,
)
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.reductions.axes import (
    axes_from_input,
    noop_empty,
    norm_axes,
    raw_axes,
    reduced_shape,
)
from onnxjit.ir.ops.reductions.lowering import KINDS, emit_reduce, identity
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType

D = DType


# --------------------------------------------------------------------------- infer / evaluate

_NUM = FLOATS | WIDE_INTS
_BYTES = frozenset({D.INT8, D.UINT8})
_BASE: Types = ((1, _NUM), (13, _NUM | BF16))
_MINMAX: Types = ((1, _NUM), (12, _NUM | _BYTES), (13, _NUM | _BYTES | BF16),
                  (20, _NUM | _BYTES | BF16 | BOOL))
_LOG: Types = ((1, _NUM), (13, _NUM | BF16), (28, FLOATS | BF16))


def _types(name: str) -> Types:
    return _MINMAX if name in ("ReduceMax", "ReduceMin") else _LOG if "Log" in name else _BASE


def _infer(node: Node) -> list:
    n_in = len([v for v in node.inputs if v is not None])
    if n_in < 1 or node.inputs[0] is None or n_in > (2 if axes_from_input(node) else 1):
        raise ModelError(f"{node.op} (opset {node.version}) takes "
                         f"{'1 or 2 inputs' if axes_from_input(node) else '1 input'}, got "
                         f"{len(node.inputs)}", where=node)
    dt = accept(node, 0, _types(node.op))
    keep = int_attr(node, "keepdims", 1) != 0
    noop_empty(node)
    if axes_from_input(node) and "axes" in node.attrs:
        raise ModelError(f"{node.op} (opset {node.version}) takes axes as input 1, not as an "
                         "attribute", where=node)
    shape = tensor_input(node, 0).shape
    axes = raw_axes(node)
    if shape is None:
        return tensor(dt, None)
    if axes is not None:
        return tensor(dt, reduced_shape(shape, norm_axes(node, axes, len(shape)), keep))
    # Axes known only at run time: each dim may or may not be reduced.
    if keep:
        return tensor(dt, tuple(1 if d == 1 else None for d in shape))
    n_axes = tensor_input(node, 1).shape
    if n_axes is not None and len(n_axes) == 1 and isinstance(n_axes[0], int) and n_axes[0] > 0:
        return tensor(dt, (None,) * (len(shape) - n_axes[0]))
    return tensor(dt, None)


def evaluate_reduce(name: str, x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    """numpy semantics of a reduction over normalized `axes` (the op table's `evaluate`)."""
    kind = KINDS[name]
    dt = x.dtype
    if dt == np.float16:  # computed in f32, rounded once (module docstring)
        x = x.astype(np.float32)
    cdt = x.dtype
    with np.errstate(all="ignore"):
        v = x
        if kind.lse:
            wide = x.astype(np.float64) if dt.kind in "iub" else x
            m = np.max(wide, axis=axes, keepdims=True, initial=-np.inf)
            shift = np.where(np.isfinite(m), m, 0).astype(wide.dtype)
            s = np.sum(np.exp(wide - shift), axis=axes, keepdims=True)
            r = np.log(s) + shift
            r = r if keep else r.reshape(reduced_shape(x.shape, axes, False))
            return _to(r, dt)
        if kind.elem == "abs":
            v = np.abs(x)
        elif kind.elem == "square":
            v = x * x
        if kind.combine == "add":
            r = np.sum(v, axis=axes, keepdims=keep, dtype=cdt)
        elif kind.combine == "mul":
            r = np.prod(v, axis=axes, keepdims=keep, dtype=cdt)
        else:
            fn = np.max if kind.combine == "max" else np.min
            r = fn(v, axis=axes, keepdims=keep, initial=identity(kind.combine, D.from_numpy(cdt)))
        is_float = D.from_numpy(cdt).is_float  # bfloat16's numpy kind is "V", not "f"
        if kind.final == "mean":
            count = math.prod(x.shape[a] for a in axes)
            if is_float:
                r = r / np.asarray(count, dtype=cdt)
            else:  # truncating integer division; x / 0 -> 0 like the scalar `div`
                r = np.trunc(r / count).astype(dt) if count else np.zeros_like(r)
        elif kind.final == "sqrt":
            r = np.sqrt(r if is_float else r.astype(np.float64))
        elif kind.final == "log":
            r = np.log(r if is_float else r.astype(np.float64))
    return _to(r, dt)


def _to(r: np.ndarray, dt: np.dtype) -> np.ndarray:
    if dt.kind in "iu" and np.asarray(r).dtype.kind == "f":
        info = np.iinfo(dt)
        r = np.nan_to_num(np.clip(np.trunc(r), info.min, info.max), nan=0)  # saturating cast
    return np.asarray(r, dtype=dt, order="C")  # ascontiguousarray would make 0-d 1-d


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    axes = raw_axes(node)
    if axes is None:
        axes = tuple(int(a) for a in np.asarray(inputs[1]).reshape(-1))
    keep = int_attr(node, "keepdims", 1) != 0
    return [evaluate_reduce(node.op, x, norm_axes(node, axes, x.ndim), keep)]


def _lower(ctx: LowerContext, node: Node) -> None:
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    axes = raw_axes(node)
    if axes is None:
        if not (x.is_static and y.is_static):
            raise TypeError("reduction axes known only at run time, over symbolic sizes")
        from onnxjit.ir.ops.reductions.runtime_axes import lower_runtime_axes

        lower_runtime_axes(ctx, node, x, y)
        return
    b = Builder()
    emit_reduce(b, node.op, x, y, norm_axes(node, axes, len(x.shape)))
    if b.body:
        ctx.kernel(node.op.lower(), b.body)


for _name in KINDS:
    _v = (1, 11, 13) if _name == "ReduceSum" else (1, 11, 12, 13, 18, 20) \
        if _name in ("ReduceMax", "ReduceMin") else (1, 11, 13, 18, 28) if "Log" in _name \
        else (1, 11, 13, 18)
    op(_name, _v, infer=_infer, evaluate=_evaluate, lower=_lower,
       doc=f"{_name[6:].lower()} over axes (keepdims, noop_with_empty_axes)", symbolic=True)
