"""Padding ops: Pad (every opset: pads as attribute or input, `axes`, modes constant / reflect /
edge / wrap, negative pads) and CenterCropPad.

Both are table-driven copies (`tensor.pad_tables`): per axis, the source index of every output
position (or -1 for the constant), computed at compile time with numpy; lowering and constant
folding apply the same tables. Pad before opset 11 takes `paddings` (1) / `pads` (2) and
`value` as attributes; from 11 pads and constant_value are inputs; 18 adds `axes`; 19 adds
mode wrap. Negative pads crop (first, as onnxruntime does, then the window is padded).

CenterCropPad is Pad in constant mode (fill 0) with pads that center the input in the target
shape: pad begin (t - d) // 2 when growing, crop begin (d - t) // 2 when shrinking.

Pads, axes and CenterCropPad's shape set the output shape, so they must be compile-time
constants: a non-constant one leaves the dims unknown at inference and raises UnsupportedError
at lowering (naming the node and input). The constant value may be a run-time input.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.opdef import LowerContext, op, since_version
from onnxjit.ir.ops.elementwise.inference import check_dtype, tensor
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.ops.tensor.indexing import axes_list
from onnxjit.ir.ops.tensor.pad_tables import (
    apply_tables,
    axis_table,
    load_scalar,
    lower_tables,
    require_static,
    static_ints,
)
from onnxjit.ir.types import Dim, DType, ValueType

# --------------------------------------------------------------------------- Pad


def _pad_mode(node: Node) -> str:
    mode = node.attr("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    allowed = ("constant", "reflect", "edge") + (("wrap",) if since_version(node) >= 19 else ())
    if mode not in allowed:
        raise ModelError(f"mode '{mode}' is not one of {list(allowed)} (opset {node.version})",
                         where=node)
    return mode


def _pad_amounts(node: Node, rank: int) -> list[tuple[int, int]] | None:
    """(begin, end) per axis, or None when the pads are not known at compile time."""
    ver = since_version(node)
    if ver < 11:
        name = "paddings" if ver == 1 else "pads"
        raw = node.attr(name)
        if raw is None:
            raise ModelError(f"missing required attribute '{name}'", where=node)
        raw, axes = [int(p) for p in raw], list(range(rank))
    else:
        vals = static_ints(node, 1, "pads")
        if vals is None:
            if node.input(1) is None:
                raise ModelError("required input 1 (pads) is missing", where=node)
            return None
        raw = list(vals)
        given = static_ints(node, 3, "axes") if ver >= 18 else None
        if ver >= 18 and node.input(3) is not None and given is None:
            return None
        axes = axes_list(given, rank, node) if given is not None else list(range(rank))
    if len(raw) != 2 * len(axes):
        raise ModelError(f"pads has {len(raw)} values; expected {2 * len(axes)} (2 per axis)",
                         where=node)
    out = [(0, 0)] * rank
    for j, a in enumerate(axes):
        out[a] = (raw[j], raw[len(axes) + j])
    return out


def _pad_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    _pad_mode(node)
    if since_version(node) >= 11:
        t = tensor_input(node, 1, "pads")
        if t.dtype != DType.INT64:
            raise ModelError(f"pads must be i64, got {t.dtype.short}", where=node)
        cv = node.input(2)
        if cv is not None and cv.dtype is not None and cv.dtype != dt:
            raise ModelError(f"constant_value is {cv.dtype.short} but data is {dt.short}",
                             where=node)
    shape = tensor_input(node, 0).shape
    if shape is None:
        return tensor(dt, None)
    pads = _pad_amounts(node, len(shape))
    if pads is None:
        return tensor(dt, (None,) * len(shape))
    out: list[Dim] = []
    for d, (pb, pe) in zip(shape, pads):
        n = None if d is None else d + pb + pe if pb + pe >= 0 or isinstance(d, int) else None
        if isinstance(n, int) and n < 0:
            raise ModelError(f"pads ({pb}, {pe}) make a dim of {d} negative", where=node)
        out.append(n)
    return tensor(dt, tuple(out))


def _pad_fill(node: Node) -> object:
    return node.attr("value", 0.0) if since_version(node) < 11 else None


def _tables(node: Node, shape: Sequence[int], pads: Sequence[tuple[int, int]], mode: str
            ) -> list[np.ndarray]:
    return [axis_table(node, d, pb, pe, mode) for d, (pb, pe) in zip(shape, pads)]


def _pad_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    pads = _pad_amounts(node, x.ndim)
    assert pads is not None
    fill = _pad_fill(node)
    if fill is None:
        cv = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        fill = np.asarray(cv).reshape(-1)[0] if cv is not None and np.size(cv) else 0
    return [apply_tables(x, _tables(node, x.shape, pads, _pad_mode(node)), fill)]


def _pad_lower(ctx: LowerContext, node: Node) -> None:
    if since_version(node) >= 11:
        require_static(node, 1, "pads")
        if since_version(node) >= 18 and node.input(3) is not None:
            require_static(node, 3, "axes")
    x, out = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])  # type: ignore[arg-type]
    pads = _pad_amounts(node, len(x.shape))
    assert pads is not None
    mode = _pad_mode(node)
    b = Builder()
    fill = _pad_fill(node)
    cv = const(fill, x.dtype) if fill is not None else load_scalar(b, ctx, node.input(2), x.dtype)
    lower_tables(ctx, x, out, _tables(node, x.shape, pads, mode), cv, b, "pad")


op("Pad", (1, 2, 11, 13, 18, 19, 21, 23, 24, 25), infer=_pad_infer, evaluate=_pad_evaluate,
   lower=_pad_lower, value_inputs=(1, 3),
   doc="pad (or crop, with negative pads) in constant/reflect/edge/wrap mode")

# --------------------------------------------------------------------------- CenterCropPad


def _ccp_axes(node: Node, rank: int) -> list[int]:
    axes = node.attr("axes")
    return list(range(rank)) if axes is None else axes_list([int(a) for a in axes], rank, node)


def _ccp_target(node: Node, rank: int) -> list[int] | None:
    vals = static_ints(node, 1, "shape")
    if vals is None:
        return None
    axes = _ccp_axes(node, rank)
    if len(vals) != len(axes):
        raise ModelError(f"shape has {len(vals)} values for {len(axes)} axes", where=node)
    if any(v < 0 for v in vals):
        raise ModelError(f"shape {list(vals)} has a negative size", where=node)
    return list(vals)


def _ccp_pads(node: Node, shape: Sequence[int]) -> list[tuple[int, int]]:
    target = _ccp_target(node, len(shape))
    assert target is not None
    pads = [(0, 0)] * len(shape)
    for a, t in zip(_ccp_axes(node, len(shape)), target):
        d = shape[a]
        pb = (t - d) // 2 if t >= d else -((d - t) // 2)
        pads[a] = (pb, t - d - pb)
    return pads


def _ccp_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    t = tensor_input(node, 1, "shape")
    if t.dtype not in (DType.INT32, DType.INT64):
        raise ModelError(f"shape must be i32 or i64, got {t.dtype.short}", where=node)
    shape = tensor_input(node, 0).shape
    if shape is None:
        return tensor(dt, None)
    axes = _ccp_axes(node, len(shape))
    target = _ccp_target(node, len(shape))
    out: list[Dim] = list(shape)
    for j, a in enumerate(axes):
        out[a] = None if target is None else target[j]
    return tensor(dt, tuple(out))


def _ccp_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    return [apply_tables(x, _tables(node, x.shape, _ccp_pads(node, x.shape), "constant"), 0)]


def _ccp_lower(ctx: LowerContext, node: Node) -> None:
    require_static(node, 1, "shape")
    x, out = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])  # type: ignore[arg-type]
    tables = _tables(node, x.shape, _ccp_pads(node, x.shape), "constant")
    lower_tables(ctx, x, out, tables, const(0, x.dtype), Builder(), "center_crop_pad")


op("CenterCropPad", (18,), infer=_ccp_infer, evaluate=_ccp_evaluate, lower=_ccp_lower,
   value_inputs=(1,),
   doc="center crop or zero-pad to a target shape along axes")
