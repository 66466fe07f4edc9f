"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearMatMul.

QuantizeLinear: y = clamp(rint(x / scale) + zero_point) to the range of y's integer type (the
zero point's type, else `output_dtype`, else uint8), x / scale in f32 (f64 for an i32 x or
with `precision` = f64); DequantizeLinear: y = (x - zero_point) * scale, computed in f32 like
the reference (an f16/bf16 scale is widened), rounded once to the output type (`output_dtype`,
else the scale's type). rint rounds half to even: r = floor(v) plus 1 when the fraction is
above 1/2, or exactly 1/2 and floor(v) is odd. A NaN quantizes to the type's
minimum (the spec leaves it undefined; onnxruntime's kernels give the minimum, and a model
quantized from a calibration that saw -inf carries NaN scales).

Scale/zero-point layouts (`axis`, default 1; `block_size` from opset 21): per tensor (one
element), per axis (1-D of x.shape[axis]) or blocked (x's rank, dim axis = ceil(n / block)).
All three index the scale as `o * so + (a // block) * sa + i * si` over x viewed as
(outer, n, inner) around the axis, so one loop nest lowers every layout.

Quantized types: int8/uint8/int16/uint16 (and int32 for DequantizeLinear's input), the 4-/2-bit
ints (clamped to their range like the others), and float8/float4e2m1, for which the spec has
no rint: y = cast(x / scale + zero_point) with Cast's rounding and `saturate` rules
(`ops_cast.emit_cast`). float6/float8e8m0 types and QuantizeLinear's f16/bf16 scales raise
UnsupportedError.

DynamicQuantizeLinear: a serial min/max pass gives scale = (max(0, max x) - min(0, min x)) / 255
(1/255 when the range is empty) and zp = rint(clamp(-min / scale, 0, 255)); a second,
parallel kernel quantizes x with them (read back from the outputs).
QLinearMatMul (per-tensor scales and zero points): (a - azp) and (b - bzp) widened to int32 in
scratch panels, one integer `loops.Matmul` per batch element, then y = clamp(rint(acc *
m) + yzp) in f64, with m = as * bs / ys computed in the scales' type (f32, f16 or bf16, each
op rounded), as the reference (numpy promotes int32 * float to f64).
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.elementwise_utils import tensor
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Operand, i64
from onnxjit.ir.narrow import (
    FLOAT_FORMATS,
    SATURATING,
    max_finite,
    narrow,
    to_cast_only,
    widen,
)
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops_cast import emit_cast
from onnxjit.ir.ops_elementwise import arity, int_attr
from onnxjit.ir.ops_linalg import batched_matmul, matmul_shape
from onnxjit.ir.shape_utils import normalize_axis, tensor_input
from onnxjit.ir.types import CAST_ONLY_DTYPES, DType

D = DType
_SUB_BYTE = {D.INT4: (-8, 7), D.UINT4: (0, 15), D.INT2: (-2, 1), D.UINT2: (0, 3)}
_Q_INTS = (D.INT8, D.UINT8, D.INT16, D.UINT16,
           *(t for t in _SUB_BYTE if t in CAST_ONLY_DTYPES))
_Q_FLOATS = tuple(t for t in FLOAT_FORMATS if t in CAST_ONLY_DTYPES)
_RANGES = {**{dt: (int(np.iinfo(dt.numpy).min), int(np.iinfo(dt.numpy).max))
              for dt in (D.INT8, D.UINT8, D.INT16, D.UINT16, D.INT32)}, **_SUB_BYTE}
_QUANT_NAMES = frozenset({D.INT4, D.UINT4, D.INT2, D.UINT2, D.FLOAT8E4M3FN, D.FLOAT8E4M3FNUZ,
                          D.FLOAT8E5M2, D.FLOAT8E5M2FNUZ, D.FLOAT4E2M1, D.FLOAT6E2M3,
                          D.FLOAT6E3M2, D.FLOAT8E8M0}) - set(_Q_INTS) - set(_Q_FLOATS)


def _unsupported_type(node: Node, dt: DType, what: str) -> UnsupportedError:
    names = ", ".join(t.short for t in _Q_INTS + _Q_FLOATS)
    return UnsupportedError(f"{node.op} with {what} of element type {dt.short} is not "
                            f"supported (supported: {names})", where=node)


def _quant_type(node: Node, i: int, what: str, allow_i32: bool = False) -> DType:
    dt = tensor_input(node, i).dtype
    if dt in _QUANT_NAMES or dt == D.FLOAT16 or dt == D.BFLOAT16:
        raise _unsupported_type(node, dt, what)
    if dt not in _Q_INTS + _Q_FLOATS and not (allow_i32 and dt == D.INT32):
        raise ModelError(f"input {i} ({what}) has element type {dt.short}, which {node.op} "
                         "does not accept", where=node)
    return dt


def _scale_type(node: Node, i: int, narrow_ok: bool = False) -> DType:
    """The scale's element type: f32, or also f16/bf16 where `narrow_ok` (module docstring)."""
    dt = tensor_input(node, i).dtype
    ok = (D.FLOAT, D.FLOAT16, D.BFLOAT16) if narrow_ok else (D.FLOAT,)
    if dt in (D.FLOAT16, D.BFLOAT16, D.FLOAT8E8M0) and dt not in ok:
        names = ", ".join(t.short for t in ok)
        raise UnsupportedError(f"{node.op} with a scale of element type {dt.short} is not "
                               f"supported (supported: {names})", where=node)
    if dt not in ok:
        raise ModelError(f"input {i} (scale) must be f32, f16 or bf16, got {dt.short}",
                         where=node)
    return dt


class _Layout:
    """How scale/zero point map onto x: strides (so, sa, si) and block over (outer, n, inner)."""

    def __init__(self, node: Node, x_shape: tuple, s_shape: tuple):
        axis = int_attr(node, "axis", 1) if node.version >= 13 else 1
        block = int_attr(node, "block_size", 0) if node.version >= 21 else 0
        rank = len(x_shape)
        numel = math.prod(s_shape)
        if block < 0:
            raise ModelError(f"block_size must be >= 0, got {block}", where=node)
        self.block = 1
        if len(s_shape) == 0 or (numel == 1 and block == 0):
            self.outer, self.n, self.inner = 1, 1, math.prod(x_shape)
            self.strides = (0, 0, 0)
            return
        ax = normalize_axis(axis, rank, node)
        self.outer, self.n, self.inner = (math.prod(x_shape[:ax]), x_shape[ax],
                                          math.prod(x_shape[ax + 1:]))
        if block == 0:
            if len(s_shape) != 1 or s_shape[0] != x_shape[ax]:
                raise ModelError(f"per-axis scale must have shape ({x_shape[ax]},) for axis "
                                 f"{ax} of x {list(x_shape)}, got {list(s_shape)}", where=node)
            self.strides = (0, 1, 0)
            return
        want = tuple(-(-d // block) if k == ax else d for k, d in enumerate(x_shape))
        if tuple(s_shape) != want:
            raise ModelError(f"blocked scale must have shape {list(want)} for x {list(x_shape)}, "
                             f"axis {ax}, block_size {block}; got {list(s_shape)}", where=node)
        self.block = block
        self.strides = (want[ax] * self.inner, self.inner, 1)


def _rint(b: Builder, v: Operand) -> Operand:
    """Round half to even (module docstring)."""
    dt = v.dtype
    r = b.op("floor", v)
    frac = b.op("sub", v, r)
    half = const(0.5, dt)
    odd = b.op("ne", b.op("sub", r, b.op("mul", const(2, dt),
                                         b.op("floor", b.op("mul", r, half)))), const(0, dt))
    up = b.op("or", b.op("gt", frac, half), b.op("and", b.op("eq", frac, half), odd))
    return b.op("select", up, b.op("add", r, const(1, dt)), r)


def _saturate(b: Builder, v: Operand, dt: DType) -> Operand:
    lo, hi = _RANGES[dt]
    low = const(lo, v.dtype)
    v = b.op("select", b.op("gt", v, low), v, low)  # NaN -> lo (module docstring)
    return b.cast(b.op("min", v, const(hi, v.dtype)), dt)


def _layout_nest(b: Builder, lay: _Layout, body) -> None:
    """Loops over x as (outer, n, inner); body(x_index, scale_index). The outermost loop that
    has more than one iteration is the parallel one."""
    so, sa, si = lay.strides
    if lay.strides == (0, 0, 0):  # per tensor: one flat loop
        with b.loop(0, lay.outer * lay.n * lay.inner, parallel=True, hint="i") as i:
            body(i, i64(0))
        return
    with contextlib.ExitStack() as stack:
        o: Operand = i64(0)
        if lay.outer > 1:
            o = stack.enter_context(b.loop(0, lay.outer, parallel=True, hint="o"))
        a = stack.enter_context(b.loop(0, lay.n, parallel=lay.outer == 1, hint="a"))
        blk = a if lay.block == 1 else b.op("div", a, i64(lay.block))
        row = b.iadd(b.imul(o, lay.n * lay.inner), b.imul(a, lay.inner))
        srow = b.iadd(b.imul(o, so), b.imul(blk, sa))
        with b.loop(0, lay.inner, hint="i") as i:
            body(b.iadd(row, i), b.iadd(srow, b.imul(i, si)))


# --------------------------------------------------------------------------- QuantizeLinear


def _q_out_type(node: Node) -> DType:
    zp = node.input(2)
    out = node.attr("output_dtype", 0) if node.version >= 21 else 0
    if zp is not None:
        dt = _quant_type(node, 2, "zero point")
        if out and out != dt.value:
            raise ModelError(f"output_dtype {out} differs from the zero point's type "
                             f"{dt.short}", where=node)
        return dt
    if out:
        try:
            dt = DType(int(out))
        except ValueError:
            raise ModelError(f"output_dtype {out} is not an element type", where=node) from None
        if dt not in _Q_INTS + _Q_FLOATS:
            raise _unsupported_type(node, dt, "output type")
        return dt
    return D.UINT8


def _q_ftype(node: Node, x: DType) -> DType:
    """The float type x / scale is computed in: `precision` (opset 25+), else f64 for an i32
    x (numpy promotes int32 / float32 to float64, as the reference does), else f32."""
    prec = node.attr("precision", 0) if node.version >= 25 else 0
    if prec in (D.FLOAT.value, D.DOUBLE.value):
        return DType(prec)
    if prec:
        raise UnsupportedError(f"{node.op} with precision {prec} is not supported (supported: "
                               "f32 (1), f64 (11))", where=node)
    return D.DOUBLE if x == D.INT32 else D.FLOAT


def _q_infer(node: Node) -> list:
    arity(node, 2, 3)
    xt = tensor_input(node, 0).dtype
    if xt in (D.FLOAT16, D.BFLOAT16):
        raise UnsupportedError(f"{node.op} on element type {xt.short} (input 0) is not "
                               "supported (supported: f32, i32)", where=node)
    if xt not in (D.FLOAT, D.INT32):
        raise ModelError(f"input 0 must be f32 or i32, got {xt.short}", where=node)
    _scale_type(node, 1)
    _q_ftype(node, xt)
    out = _q_out_type(node)
    x, s = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if x is not None and s is not None and all(isinstance(d, int) for d in (*x, *s)):
        _Layout(node, x, s)
    return tensor(out, x)


def _q_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, s = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    dt = _q_out_type(node)
    lay = _Layout(node, x.shape, s.shape)
    xs = x.astype(_q_ftype(node, DType.from_numpy(x.dtype)).numpy)
    v = xs / _expand(s, lay, x.shape).astype(xs.dtype)
    if dt in _Q_FLOATS:  # no rint: the cast rounds (and saturates) as Cast does
        if zp is not None:
            v = v + _expand(zp, lay, x.shape).astype(np.float32).astype(v.dtype)
        if dt in SATURATING and int(node.attr("saturate", 1)):
            v = np.clip(v, -max_finite(dt), max_finite(dt))
        return [to_cast_only(v, dt)]
    v = np.rint(v)
    if zp is not None:
        v = v + _expand(zp, lay, x.shape)
    lo, hi = _RANGES[dt]
    return [np.clip(v, lo, hi).astype(dt.numpy)]


def _expand(v: np.ndarray, lay: _Layout, shape: tuple) -> np.ndarray:
    """A scale/zero point broadcast to x's (outer, n, inner) view, reshaped like x."""
    so, sa, si = lay.strides
    o = np.arange(lay.outer)[:, None, None]
    a = np.arange(lay.n)[None, :, None] // lay.block
    i = np.arange(lay.inner)[None, None, :]
    return v.reshape(-1)[o * so + a * sa + i * si].reshape(shape)


def _q_lower(ctx: LowerContext, node: Node) -> None:
    x, s, y = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.outputs[0])
    zp = ctx.buf(node.inputs[2]) if node.input(2) is not None else None
    if y.numel == 0:
        return
    lay = _Layout(node, x.shape, s.shape)
    ft = _q_ftype(node, x.dtype)
    b = Builder()

    def body(xi: Operand, si: Operand) -> None:
        v = b.op("div", b.cast(b.load(x, xi), ft), b.cast(b.load(s, si), ft))
        if y.dtype not in _Q_FLOATS:
            v = _rint(b, v)
        if zp is not None:
            v = b.op("add", v, b.cast(b.load(zp, si), ft))
        if y.dtype in _Q_FLOATS:
            b.store(y, xi, emit_cast(b, v, y.dtype, bool(int(node.attr("saturate", 1)))))
        else:
            b.store(y, xi, _saturate(b, v, y.dtype))

    _layout_nest(b, lay, body)
    ctx.kernel("quantize", b.body)


_Q_VERSIONS = (10, 13, 19, 21, 23, 24, 25, 28)
op("QuantizeLinear", _Q_VERSIONS, infer=_q_infer, evaluate=_q_evaluate, lower=_q_lower,
   doc="saturate(rint(x / scale) + zero_point), per tensor, axis or block")

# --------------------------------------------------------------------------- DequantizeLinear


def _dq_infer(node: Node) -> list:
    arity(node, 2, 3)
    dt = _quant_type(node, 0, "input", allow_i32=True)
    if node.input(2) is not None and _quant_type(node, 2, "zero point", True) != dt:
        raise ModelError(f"the zero point must have x's element type {dt.short}", where=node)
    out = _dq_out_type(node)
    x, s = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if x is not None and s is not None and all(isinstance(d, int) for d in (*x, *s)):
        _Layout(node, x, s)
    return tensor(out, x)


def _dq_out_type(node: Node) -> DType:
    """`output_dtype` (opset 23+), else the scale's type (f32, f16 or bf16)."""
    st = _scale_type(node, 1, narrow_ok=True)
    out = node.attr("output_dtype", 0) if node.version >= 23 else 0
    if not out:
        return st
    if out not in (D.FLOAT.value, D.FLOAT16.value, D.BFLOAT16.value):
        raise ModelError(f"output_dtype {out} must be f32 (1), f16 (10) or bf16 (16)",
                         where=node)
    return DType(int(out))


def _dq_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, s = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    lay = _Layout(node, x.shape, s.shape)
    v = x.astype(np.float32)
    if zp is not None:
        v = v - _expand(zp, lay, x.shape).astype(np.float32)
    v = v * widen(_expand(s, lay, x.shape))
    out = _dq_out_type(node)
    return [v if out == D.FLOAT else narrow(v, out)]


def _dq_lower(ctx: LowerContext, node: Node) -> None:
    x, s, y = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.outputs[0])
    zp = ctx.buf(node.inputs[2]) if node.input(2) is not None else None
    if y.numel == 0:
        return
    lay = _Layout(node, x.shape, s.shape)
    b = Builder()

    def body(xi: Operand, si: Operand) -> None:
        v = b.cast(b.load(x, xi), D.FLOAT)
        if zp is not None:
            v = b.op("sub", v, b.cast(b.load(zp, si), D.FLOAT))
        # f32 product of the widened scale, rounded once to y's type, as the reference does
        b.store(y, xi, b.cast(b.op("mul", v, b.cast(b.load(s, si), D.FLOAT)), y.dtype))

    _layout_nest(b, lay, body)
    ctx.kernel("dequantize", b.body)


op("DequantizeLinear", _Q_VERSIONS, infer=_dq_infer, evaluate=_dq_evaluate, lower=_dq_lower,
   doc="(x - zero_point) * scale, per tensor, axis or block")

# --------------------------------------------------------------------------- DynamicQuantizeLinear


def _dyn_infer(node: Node) -> list:
    arity(node, 1)
    dt = tensor_input(node, 0).dtype
    if dt != D.FLOAT:
        if dt in (D.FLOAT16, D.BFLOAT16):
            raise UnsupportedError(f"{node.op} on element type {dt.short} is not supported",
                                   where=node)
        raise ModelError(f"input 0 must be f32, got {dt.short}", where=node)
    return [tensor(D.UINT8, tensor_input(node, 0).shape)[0], tensor(D.FLOAT, ())[0],
            tensor(D.UINT8, ())[0]]


def _dyn_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    mx = np.float32(max(0.0, float(x.max()) if x.size else 0.0))
    mn = np.float32(min(0.0, float(x.min()) if x.size else 0.0))
    scale = np.float32(1.0 if mx == mn else mx - mn) / np.float32(255)
    zp = np.rint(np.clip(np.float32(0) - mn / scale, 0, 255))
    y = np.clip(np.rint(x / scale) + zp, 0, 255)
    return [y.astype(np.uint8), np.asarray(scale, np.float32), np.asarray(zp, np.uint8)]


def _dyn_lower(ctx: LowerContext, node: Node) -> None:
    x, y, ys, yz = (ctx.buf(v) for v in (node.inputs[0], *node.outputs))
    f = D.FLOAT
    b = Builder()
    mx, mn = b.var(const(0, f), hint="max"), b.var(const(0, f), hint="min")
    with b.loop(0, x.numel, hint="i") as i:
        v = b.load(x, i)
        b.assign(mx, "max", mx, v)
        b.assign(mn, "min", mn, v)
    rng = b.op("select", b.op("eq", mx, mn), const(1, f), b.op("sub", mx, mn))
    scale = b.op("div", rng, const(255, f))
    zp = _rint(b, b.op("min", b.op("max", b.op("neg", b.op("div", mn, scale)), const(0, f)),
                       const(255, f)))
    b.store(ys, i64(0), scale)
    b.store(yz, i64(0), b.cast(zp, D.UINT8))
    ctx.kernel("dynamic_quantize_range", b.body)
    if x.numel == 0:
        return
    b = Builder()
    scale = b.load(ys, i64(0))
    zpf = b.cast(b.load(yz, i64(0)), f)
    with b.loop(0, x.numel, parallel=True, hint="i") as i:
        v = b.op("add", _rint(b, b.op("div", b.load(x, i), scale)), zpf)
        b.store(y, i, _saturate(b, v, D.UINT8))
    ctx.kernel("dynamic_quantize", b.body)


op("DynamicQuantizeLinear", (11,), infer=_dyn_infer, evaluate=_dyn_evaluate, lower=_dyn_lower,
   doc="uint8 quantization with scale and zero point computed from x's range")

# --------------------------------------------------------------------------- QLinearMatMul


def _qmm_infer(node: Node) -> list:
    arity(node, 8)
    for i, what in ((0, "a"), (3, "b")):
        _quant_type(node, i, what)
        if _quant_type(node, i + 2, what + "_zero_point") != tensor_input(node, i).dtype:
            raise ModelError(f"{what}_zero_point must have {what}'s element type", where=node)
    out = _quant_type(node, 7, "y_zero_point")
    for i in (1, 2, 4, 5, 6, 7):
        if i in (1, 4, 6) and _scale_type(node, i, narrow_ok=True) != _scale_type(node, 1,
                                                                                  True):
            raise ModelError("a_scale, b_scale and y_scale must have one element type",
                             where=node)
        s = tensor_input(node, i).shape
        if s is not None and any(d != 1 for d in s):
            raise UnsupportedError(f"QLinearMatMul with a non-scalar scale or zero point "
                                   f"(input {i}, shape {list(s)}) is not supported", where=node)
    return tensor(out, matmul_shape(node, tensor_input(node, 0).shape,
                                    tensor_input(node, 3).shape))


def _qmm_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    a, sa, za, bm, sb, zb, sy, zy = inputs
    acc = np.matmul(a.astype(np.int32) - za.astype(np.int32),
                    bm.astype(np.int32) - zb.astype(np.int32))
    mult = sa * sb / sy  # in the scales' type, each op rounded (f16/bf16 per op, as numpy)
    v = np.rint(acc.astype(np.float64) * widen(mult).astype(np.float64)) + zy.astype(np.float64)
    lo, hi = _RANGES[DType.from_numpy(zy.dtype)]
    return [np.clip(v, lo, hi).astype(zy.dtype)]


def _qmm_lower(ctx: LowerContext, node: Node) -> None:
    a, sa, za, bm, sb, zb, sy, zy = (ctx.buf(v) for v in node.inputs)
    y = ctx.buf(node.outputs[0])
    if y.numel == 0:
        return
    i32, f = D.INT32, D.DOUBLE
    b = Builder()
    panels = []
    for src, zp in ((a, za), (bm, zb)):
        p = ctx.scratch("qmm_in", i32, src.shape)
        z = b.cast(b.load(zp, i64(0)), i32)
        with b.loop(0, src.numel, parallel=True) as i:
            b.store(p, i, b.op("sub", b.cast(b.load(src, i), i32), z))
        panels.append(p)
    acc = ctx.scratch("qmm_acc", i32, y.shape)
    batched_matmul(b, acc, panels[0], panels[1], a.shape, bm.shape)
    ctx.kernel("qlinearmatmul_product", b.body)
    b = Builder()
    # The multiplier rounds in the scales' type op by op, then the requantization runs in
    # f64 (numpy promotes int32 * float to float64 in the reference; exact for any int32 acc)
    mult = b.cast(b.op("div", b.op("mul", b.load(sa, i64(0)), b.load(sb, i64(0))),
                       b.load(sy, i64(0))), f)
    zpf = b.cast(b.load(zy, i64(0)), f)
    with b.loop(0, y.numel, parallel=True) as i:
        v = _rint(b, b.op("mul", b.cast(b.load(acc, i), f), mult))
        b.store(y, i, _saturate(b, b.op("add", v, zpf), y.dtype))
    ctx.kernel("qlinearmatmul_requantize", b.body)


op("QLinearMatMul", (10, 21), infer=_qmm_infer, evaluate=_qmm_evaluate, lower=_qmm_lower,
   doc="requantized integer matmul of quantized a and b (per-tensor scales)")
