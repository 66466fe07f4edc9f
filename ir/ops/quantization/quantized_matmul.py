"""Quantized ops built on `quantization.quantize_linear`'s rounding: DynamicQuantizeLinear,
QLinearMatMul.

DynamicQuantizeLinear: a parallel max/min pass (16 partial results a chunk, `_range`) gives
scale = (max(0, max x) - min(0, min x)) / 255 (1/255 when the range is empty) and
zp = rint(max(0, min(255, -min / scale))), min and max as C++'s std::min/std::max (onnxruntime's,
and Python's in onnx.reference): a NaN (-inf in x makes -min / scale inf / inf) gives 255; a
second, parallel kernel quantizes x with them (read back from the outputs).
QLinearMatMul (per-tensor scales and zero points): (a - azp) and (b - bzp) widened to int32 in
scratch panels, one integer `loops.Matmul` per batch element, then y = clamp(rint(acc *
m) + yzp) in f64, with m = as * bs / ys computed in the scales' type (f32, f16 or bf16, each
op rounded), as the reference (numpy promotes int32 * float to f64).
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.narrow import widen
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import arity
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.linalg.matmul import batched_matmul, matmul_shape
from onnxjit.ir.ops.quantization.quantize_linear import (
    RANGES,
    quant_type,
    rint,
    saturate,
    scale_type,
)
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType

D = DType
#: partial results of DynamicQuantizeLinear's min and max (one 512-bit vector of f32), and the
#: elements of a chunk of its parallel range pass
RANGE_LANES, RANGE_CHUNK = 16, 16384

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
    zero = np.float32(0)
    # a NaN in x is the range's (np.maximum keeps it, as the native fold and onnxruntime do;
    # Python's max(0.0, nan) dropped it: scale 1/255 where theirs is NaN, fuzz seed 10002214)
    mx = np.maximum(zero, x.max()) if x.size else zero
    mn = np.minimum(zero, x.min()) if x.size else zero
    scale = np.float32(1.0 if mx == mn else mx - mn) / np.float32(255)
    with np.errstate(invalid="ignore"):
        v = np.float32(0) - mn / scale  # NaN when -inf makes the scale inf
        zp = np.rint(np.float32(0) if v <= 0 else np.float32(255) if not v < 255 else v)
        y = np.clip(np.rint(x / scale) + zp, 0, 255)
    y = np.where(np.isnan(y), 0, y)  # a NaN scale quantizes everything to 0
    return [y.astype(np.uint8), np.asarray(scale, np.float32), np.asarray(zp, np.uint8)]


def _range(ctx: LowerContext, b: Builder, x: Buffer) -> tuple[Operand, Operand]:
    """max(0, max x) and min(0, min x): a parallel loop over chunks of RANGE_CHUNK elements,
    each folding its chunk into RANGE_LANES partial maxima and minima kept in its own scratch
    row (lane k folds x[k], x[k + L], ...; a single accumulator is a chain of dependent
    compares, and partial results in variables were vectorized two lanes wide, while a row's
    consecutive stores let the SLP vectorizer make one vector of them), then a serial fold
    of the rows."""
    f, n, w = D.FLOAT, x.numel, RANGE_LANES
    chunks = max(1, -(-n // RANGE_CHUNK))
    part = ctx.scratch("dql_part", f, (chunks * 2 * w,))
    with b.loop(0, chunks, parallel=True, hint="c") as c:
        row = b.op("mul", c, i64(2 * w))
        start = b.op("mul", c, i64(RANGE_CHUNK))
        stop = b.op("min", b.op("add", start, i64(RANGE_CHUNK)), i64(n))
        with b.loop(0, 2 * w, hint="k") as k:
            b.store(part, b.op("add", row, k), const(0, f))
        q = b.op("div", b.op("sub", stop, start), i64(w))
        with b.loop(0, q, hint="iq") as t:
            i0 = b.op("add", start, b.op("mul", t, i64(w)))
            for k in range(w):
                v = b.load(x, b.iadd(i0, i64(k)))
                for at, kind in ((k, "max"), (w + k, "min")):
                    p = b.op("add", row, i64(at))
                    b.store(part, p, b.op(kind, b.load(part, p), v))
        with b.loop(b.op("add", start, b.op("mul", q, i64(w))), stop, hint="i") as i:
            v = b.load(x, i)  # the chunk's tail, into lane 0
            for at, kind in ((0, "max"), (w, "min")):
                p = b.op("add", row, i64(at))
                b.store(part, p, b.op(kind, b.load(part, p), v))
    out = []
    for at, kind in ((0, "max"), (w, "min")):
        acc = b.var(b.load(part, i64(at)), hint=kind)
        with b.loop(0, chunks, hint="c") as c:
            row = b.op("add", b.op("mul", c, i64(2 * w)), i64(at))
            with b.loop(0, w, hint="k") as k:
                b.assign(acc, kind, acc, b.load(part, b.op("add", row, k)))
        out.append(acc)
    return out[0], out[1]


def _dyn_lower(ctx: LowerContext, node: Node) -> None:
    x, y, ys, yz = (ctx.buf(v) for v in (node.inputs[0], *node.outputs))
    f = D.FLOAT
    b = Builder()
    mx, mn = _range(ctx, b, x)
    rng = b.op("select", b.op("eq", mx, mn), const(1, f), b.op("sub", mx, mn))
    scale = b.op("div", rng, const(255, f))
    v = b.op("neg", b.op("div", mn, scale))
    v = b.op("select", b.op("lt", v, const(255, f)), v, const(255, f))  # NaN -> 255
    zp = rint(b, b.op("select", b.op("gt", v, const(0, f)), v, const(0, f)))
    b.store(ys, i64(0), scale)
    b.store(yz, i64(0), b.cast(zp, D.UINT8))
    ctx.kernel("dynamic_quantize_range", b.body)
    if x.numel == 0:
        return
    b = Builder()
    scale = b.load(ys, i64(0))
    zpf = b.cast(b.load(yz, i64(0)), f)
    with b.loop(0, x.numel, parallel=True, hint="i") as i:
        v = b.op("add", rint(b, b.op("div", b.load(x, i), scale)), zpf)
        b.store(y, i, saturate(b, v, D.UINT8))
    ctx.kernel("dynamic_quantize", b.body)


op("DynamicQuantizeLinear", (11,), infer=_dyn_infer, evaluate=_dyn_evaluate, lower=_dyn_lower,
   doc="uint8 quantization with scale and zero point computed from x's range")

# --------------------------------------------------------------------------- QLinearMatMul


def _qmm_infer(node: Node) -> list:
    arity(node, 8)
    for i, what in ((0, "a"), (3, "b")):
        quant_type(node, i, what)
        if quant_type(node, i + 2, what + "_zero_point") != tensor_input(node, i).dtype:
            raise ModelError(f"{what}_zero_point must have {what}'s element type", where=node)
    out = quant_type(node, 7, "y_zero_point")
    for i in (1, 2, 4, 5, 6, 7):
        if i in (1, 4, 6) and scale_type(node, i, narrow_ok=True) != scale_type(node, 1,
                                                                                  True):
            raise ModelError("a_scale, b_scale and y_scale must have one element type",
                             where=node)
        s = tensor_input(node, i).shape
        if s is not None and any(isinstance(d, int) and d != 1 for d in s):
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
    lo, hi = RANGES[DType.from_numpy(zy.dtype)]
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
        v = rint(b, b.op("mul", b.cast(b.load(acc, i), f), mult))
        b.store(y, i, saturate(b, b.op("add", v, zpf), y.dtype))
    ctx.kernel("qlinearmatmul_requantize", b.body)


op("QLinearMatMul", (10, 21), infer=_qmm_infer, evaluate=_qmm_evaluate, lower=_qmm_lower,
   doc="requantized integer matmul of quantized a and b (per-tensor scales)")
