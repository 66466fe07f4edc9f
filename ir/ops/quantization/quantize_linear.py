"""Linear quantization: QuantizeLinear and DequantizeLinear.

QuantizeLinear: y = clamp(rint(x / scale) + zero_point) to the range of y's integer type (the
zero point's type, else `output_dtype`, else uint8). x (f32, f16, bf16, i32) / scale is
divided in one type P, both operands rounded to P first, as onnxruntime does: P is the
`precision` attribute (opset 23+: f32, f64, f16, bf16), else from opset 23 an f16/bf16
scale's type (the spec: the scale's type sets the division's precision), else f32 (f64 for an
i32 x, as numpy promotes in the reference). Opsets 19/21 do not say: f16/bf16 x and scale
divide in f32, as onnxruntime does (the reference rounds the quotient to f16). An f16/bf16
division is an f32 division of the widened operands rounded to P (correctly rounded: f32
has more than 2p + 2 bits); its overflow to inf saturates like any large value, and +-inf
saturate to the type's limits, as onnxruntime does (the reference's int32 cast of inf is
undefined). DequantizeLinear: y = (x - zero_point) * scale, computed in f32 like
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
(`elementwise.cast.emit_cast`). float6/float8e8m0 types and int32 scales raise UnsupportedError.

DynamicQuantizeLinear and QLinearMatMul are in `quantization.quantized_matmul`.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
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
from onnxjit.ir.ops.elementwise.arithmetic import arity, int_attr
from onnxjit.ir.ops.elementwise.cast import emit_cast
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import normalize_axis, tensor_input
from onnxjit.ir.types import CAST_ONLY_DTYPES, DType

D = DType
_SUB_BYTE = {D.INT4: (-8, 7), D.UINT4: (0, 15), D.INT2: (-2, 1), D.UINT2: (0, 3)}
_Q_INTS = (D.INT8, D.UINT8, D.INT16, D.UINT16,
           *(t for t in _SUB_BYTE if t in CAST_ONLY_DTYPES))
_Q_FLOATS = tuple(t for t in FLOAT_FORMATS if t in CAST_ONLY_DTYPES)
RANGES = {**{dt: (int(np.iinfo(dt.numpy).min), int(np.iinfo(dt.numpy).max))
              for dt in (D.INT8, D.UINT8, D.INT16, D.UINT16, D.INT32)}, **_SUB_BYTE}
_NARROW = (D.FLOAT16, D.BFLOAT16)
_QUANT_NAMES = frozenset({D.INT4, D.UINT4, D.INT2, D.UINT2, D.FLOAT8E4M3FN, D.FLOAT8E4M3FNUZ,
                          D.FLOAT8E5M2, D.FLOAT8E5M2FNUZ, D.FLOAT4E2M1, D.FLOAT6E2M3,
                          D.FLOAT6E3M2, D.FLOAT8E8M0}) - set(_Q_INTS) - set(_Q_FLOATS)


def _unsupported_type(node: Node, dt: DType, what: str) -> UnsupportedError:
    names = ", ".join(t.short for t in _Q_INTS + _Q_FLOATS)
    return UnsupportedError(f"{node.op} with {what} of element type {dt.short} is not "
                            f"supported (supported: {names})", where=node)


def quant_type(node: Node, i: int, what: str, allow_i32: bool = False) -> DType:
    """Input i's quantized element type (int32 too where `allow_i32`); UnsupportedError for a
    valid type not implemented, ModelError for one the ops do not accept."""
    dt = tensor_input(node, i).dtype
    if dt in _QUANT_NAMES or dt == D.FLOAT16 or dt == D.BFLOAT16:
        raise _unsupported_type(node, dt, what)
    if dt not in _Q_INTS + _Q_FLOATS and not (allow_i32 and dt == D.INT32):
        raise ModelError(f"input {i} ({what}) has element type {dt.short}, which {node.op} "
                         "does not accept", where=node)
    return dt


def scale_type(node: Node, i: int, narrow_ok: bool = False) -> DType:
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


def rint(b: Builder, v: Operand) -> Operand:
    """Round half to even (module docstring)."""
    dt = v.dtype
    r = b.op("floor", v)
    frac = b.op("sub", v, r)
    half = const(0.5, dt)
    odd = b.op("ne", b.op("sub", r, b.op("mul", const(2, dt),
                                         b.op("floor", b.op("mul", r, half)))), const(0, dt))
    up = b.op("or", b.op("gt", frac, half), b.op("and", b.op("eq", frac, half), odd))
    return b.op("select", up, b.op("add", r, const(1, dt)), r)


def saturate(b: Builder, v: Operand, dt: DType) -> Operand:
    """Float `v` clamped to integer type `dt`'s range and converted (NaN -> the minimum)."""
    lo, hi = RANGES[dt]
    low = const(lo, v.dtype)
    v = b.op("select", b.op("gt", v, low), v, low)  # NaN -> lo (module docstring)
    v = b.op("min", v, const(hi, v.dtype))
    if dt.itemsize < 4:  # in range already: through i32, whose conversion vectorizes (the
        v = b.cast(v, DType.INT32)  # saturating one to 8 bits was scalarized)
    return b.cast(v, dt)


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
        dt = quant_type(node, 2, "zero point")
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


def _q_div_type(node: Node, x: DType, scale: DType) -> DType:
    """The type x / scale is divided in (module docstring): both operands are rounded to it."""
    prec = node.attr("precision", 0) if node.version >= 23 else 0
    if prec and prec not in (D.FLOAT.value, D.DOUBLE.value, D.FLOAT16.value, D.BFLOAT16.value):
        raise UnsupportedError(f"{node.op} with precision {prec} is not supported (supported: "
                               "f32 (1), f16 (10), f64 (11), bf16 (16))", where=node)
    if prec:
        return DType(prec)
    if node.version >= 23 and scale in _NARROW:
        return scale
    return D.DOUBLE if x == D.INT32 else D.FLOAT


def _q_infer(node: Node) -> list:
    arity(node, 2, 3)
    xt = tensor_input(node, 0).dtype
    if xt not in (D.FLOAT, D.FLOAT16, D.BFLOAT16, D.INT32):
        raise ModelError(f"input 0 must be f32, f16, bf16 or i32, got {xt.short}", where=node)
    if tensor_input(node, 1).dtype == D.INT32 and node.version >= 23:
        raise UnsupportedError(f"{node.op} with a scale of element type i32 is not supported "
                               "(supported: f32, f16, bf16)", where=node)
    _q_div_type(node, xt, scale_type(node, 1, narrow_ok=True))
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
    dv = _q_div_type(node, DType.from_numpy(x.dtype), DType.from_numpy(s.dtype))

    def rounded(a: np.ndarray) -> np.ndarray:  # a in dv, as f32 when dv is narrow
        return widen(narrow(a, dv)) if dv in _NARROW else widen(a).astype(dv.numpy)

    with np.errstate(all="ignore"):
        v = rounded(x) / rounded(_expand(s, lay, x.shape))
        if dv in _NARROW:
            v = rounded(v)
    if dt in _Q_FLOATS:  # no rint: the cast rounds (and saturates) as Cast does
        if zp is not None:
            v = v + _expand(zp, lay, x.shape).astype(np.float32).astype(v.dtype)
        if dt in SATURATING and int(node.attr("saturate", 1)):
            v = np.clip(v, -max_finite(dt), max_finite(dt))
        return [to_cast_only(v, dt)]
    v = np.rint(v)
    if zp is not None:
        v = v + _expand(zp, lay, x.shape)
    lo, hi = RANGES[dt]
    return [np.clip(np.nan_to_num(v, nan=lo), lo, hi).astype(dt.numpy)]


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
    dv = _q_div_type(node, x.dtype, s.dtype)
    b = Builder()

    def body(xi: Operand, si: Operand) -> None:
        v = b.op("div", _rounded(b, b.load(x, xi), dv), _rounded(b, b.load(s, si), dv))
        if dv in _NARROW:
            v = _rounded(b, v, dv)
        if y.dtype not in _Q_FLOATS:
            v = rint(b, v)
        if zp is not None:
            v = b.op("add", v, b.cast(b.load(zp, si), v.dtype))
        if y.dtype in _Q_FLOATS:
            b.store(y, xi, emit_cast(b, v, y.dtype, bool(int(node.attr("saturate", 1)))))
        else:
            b.store(y, xi, saturate(b, v, y.dtype))

    _layout_nest(b, lay, body)
    ctx.kernel("quantize", b.body)


def _rounded(b: Builder, v: Operand, dt: DType) -> Operand:
    """`v` rounded to `dt`, as f32 when `dt` is f16/bf16 (which are computed in f32);
    narrow floats convert through f32 (exact) as `narrow`/`widen` do."""
    if v.dtype in _NARROW and v.dtype != dt:
        v = b.cast(v, D.FLOAT)
    if v.dtype != dt:
        v = b.cast(v, dt)
    return b.cast(v, D.FLOAT) if dt in _NARROW else v


_Q_VERSIONS = (10, 13, 19, 21, 23, 24, 25, 28)
op("QuantizeLinear", _Q_VERSIONS, infer=_q_infer, evaluate=_q_evaluate, lower=_q_lower,
   doc="saturate(rint(x / scale) + zero_point), per tensor, axis or block")

# --------------------------------------------------------------------------- DequantizeLinear


def _dq_infer(node: Node) -> list:
    arity(node, 2, 3)
    dt = quant_type(node, 0, "input", allow_i32=True)
    if node.input(2) is not None and quant_type(node, 2, "zero point", True) != dt:
        raise ModelError(f"the zero point must have x's element type {dt.short}", where=node)
    out = _dq_out_type(node)
    x, s = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if x is not None and s is not None and all(isinstance(d, int) for d in (*x, *s)):
        _Layout(node, x, s)
    return tensor(out, x)


def _dq_out_type(node: Node) -> DType:
    """`output_dtype` (opset 23+), else the scale's type (f32, f16 or bf16)."""
    st = scale_type(node, 1, narrow_ok=True)
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
