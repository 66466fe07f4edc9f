"""Attention on float16/bfloat16: the ONNX reference's rounding order, reproduced step by step.

The suite's expected outputs for narrow floats are the reference's bit for bit, and they fail
a tolerance check by a hair when the product is scaled once or the softmax multiplies by a
rounded reciprocal. So for Q of a narrow dtype `dt` (every op below rounds to its result
type, `types.NARROW_FLOATS`) the lowering of `attention.attention` does:
1) r = sqrt(scale) (`scale_root`), rounded to dt; Q*r and K*r, each product rounded to dt, into
   scratch copies (`prescaled`); S = (Q r) (K r)^T by the narrow Matmul (f32 sum, rounded
   once, as numpy's float16 matmul and ml_dtypes' bfloat16 -> f32 matmul then cast);
2) softcap and the bias add in dt (shared with the wide path, `attention.attention._row`); the
   softcap constant is rounded to dt first, as the function body's Cast(softcap, T1) does
   (onnx.reference divides by a float32 attribute instead, which promotes the scores to f32);
3) the softmax in pt (dt, or the softmax_precision type): x = cast(S, pt); max; exp(x - max)
   rounded per op; the sum accumulates as numpy does (`narrow.accumulator`: f16 in f32 and
   rounded once; bf16 rounded at every step, in order); then e / sum, a true division, not a
   product with a rounded reciprocal; fully masked rows become 0; the result is cast to dt
   (when pt is wider the exps are recomputed there rather than stored rounded).
"""

from __future__ import annotations

import copy
import math

import numpy as np

from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, Var
from onnxjit.ir.narrow import accumulator
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.reductions.lowering import Lanes
from onnxjit.ir.types import NARROW_FLOATS, DType

#: softmax_precision values (TensorProto element types) a narrow softmax may compute in.
_PRECISIONS = {t.value: t for t in (DType.FLOAT, DType.DOUBLE, *NARROW_FLOATS)}


def softmax_type(dt: DType, precision: int) -> DType:
    """The type a narrow `dt` softmax computes in: softmax_precision's, else dt."""
    return _PRECISIONS.get(precision, dt)


def scale_root(scale: float | None, dh: int) -> float:
    """sqrt(scale) as the reference computes it before rounding it to the input type: the
    default 1/sqrt(Dh) in f64, an explicit attribute (a float32) in f32."""
    if scale is None:
        return math.sqrt(1.0 / math.sqrt(dh)) if dh else 1.0
    return float(np.sqrt(np.float32(scale)))


def prescaled(ctx: LowerContext, srcs: tuple, factor: float) -> tuple:
    """Copies of the operands `srcs` (`attention.attention._Src`) multiplied by `factor`
    rounded to their type, each product rounded, in scratch buffers of the same layout: Q and
    K by sqrt(scale) here (step 1), Q alone by the scale for f32/f64 (`attention._lower`)."""
    b = Builder()
    out = []
    for src in srcs:
        buf = src.buf
        cp = ctx.scratch("scaled", buf.dtype, buf.shape)
        c = const(factor, buf.dtype)
        with b.loop(0, buf.numel, parallel=True, hint="e") as e:
            b.store(cp, e, b.op("mul", b.load(buf, e), c))
        twin = copy.copy(src)
        twin.buf = cp
        out.append(twin)
    ctx.kernel("attention_prescale", b.body)
    return tuple(out)


def softmax_row(b: Builder, s: Buffer, row: Operand, T: int, pt: DType,
                any_ok: Var | None, qk: Buffer | None, qk_row: Operand | None) -> None:
    """Step 3 on the T scores at s[row:] (in place); with `qk`, also the mode-3 output."""
    dt = s.dtype

    def x(j: Operand) -> Operand:
        return b.cast(b.load(s, b.iadd(row, j)), pt)

    mx_l = Lanes(b, const(-math.inf, pt), "max", T, hint="max")
    mx_l.run(T, x)
    mx = mx_l.result()
    safe = b.op("select", b.op("eq", mx, const(-math.inf, pt)), const(0, pt), mx)

    def exp_at(j: Operand) -> Operand:
        return b.op("exp", b.op("sub", x(j), safe))

    if pt == dt:  # the rounded exps are the reference's tmp: store them
        with b.loop(0, T, hint="j") as j:
            b.store(s, b.iadd(row, j), exp_at(j))
    term = (lambda j: b.load(s, b.iadd(row, j))) if pt == dt else exp_at
    acc = accumulator(pt)
    if pt == DType.BFLOAT16:  # ml_dtypes' add loop: in order, rounding every step
        tot = b.var(const(0, pt), hint="sum")
        with b.loop(0, T, hint="j") as j:
            b.assign(tot, "add", tot, term(j))
        total: Operand = tot
    else:
        sm = Lanes(b, const(0, acc), "add", T, hint="sum", terms_signed=False)
        sm.run(T, lambda j: b.cast(term(j), acc))
        total = b.cast(sm.result(), pt)
    total = b.op("select", b.op("eq", total, const(0, pt)), const(1, pt), total)
    with b.loop(0, T, hint="j") as j:
        at_j = b.iadd(row, j)
        e = b.load(s, at_j) if pt == dt else exp_at(j)
        p: Operand = b.op("div", e, total)
        if any_ok is not None:
            p = b.op("select", any_ok, p, const(0, pt))
        pv = b.cast(p, dt)
        b.store(s, at_j, pv)
        if qk is not None and qk_row is not None:
            b.store(qk, b.iadd(qk_row, j), pv)
