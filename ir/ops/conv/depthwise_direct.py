"""Conv, C/G == 1 (depthwise, any channel multiplier): the direct nest.

Parallel over (image, output channel), per output row; the innermost loops run along the
contiguous output row, which the code generator vectorizes. Rows whose taps all stay inside
the image along the outer dims sum every tap in one pass over their interior columns
(`bias + sum w_t * x_t`, the weights hoisted per channel; at stride 1 in whole vectors, the
last one overlapping its neighbour, see `conv.blocking.whole_vectors`); other rows store the
bias, then add `w * x[row slice]` per tap over its valid range. Small 2-D images go through
`conv.depthwise_phased` (stride-phased copies of each plane) instead, tiny ones (4x4 outputs or
fewer) through `conv.depthwise_tiny` (vectors across channels). A fused conv's epilogue
runs in the fused rows' interior loop on the value in a register (INLINE_EPILOGUE), and as a
pass only over the other columns and rows. Moved out of `conv.conv` (which re-exports
`lower_depthwise`) to keep files small.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from onnxjit.ir.loop_builder import Builder, const, row_major_strides
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.narrow import accumulator
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.blocking import whole_vectors
from onnxjit.ir.ops.conv.geometry import (
    CONTRACT,
    Geometry,
    Nest,
    operand,
    outer_positions,
    tap_bounds,
    tap_shift,
    taps,
    valid_range,
)

if TYPE_CHECKING:
    from onnxjit.ir.ops.fused.epilogue import Epilogue


def lower_depthwise(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                    bias: Buffer | None, epilogue: Epilogue | None = None) -> None:
    """Direct nest for C/G == 1, parallel over (image, output channel), per output row.

    Rows whose every kernel tap lies inside the image along the outer dims (the interior)
    take the fused path: one pass over the row's interior columns sums every tap
    (`bias + sum w_t * x_t`, weights hoisted per channel), and the few edge columns get the
    taps whose input is inside. Other rows (top/bottom borders) store the bias, then add each
    tap over its valid range. Kernels with more than `MAX_FUSED_TAPS` taps always take the
    second path, with the outer kernel dims as loops. A fused conv's `epilogue`
    (`fused.linear.Epilogue`) runs in the fused rows' interior columns before their store
    and as a pass (`emit`) over the other columns and rows (INLINE_EPILOGUE; else a pass over
    each (image, channel) plane right after it is computed: rows = 1, cols = P). Small 2-D
    images go through `conv.depthwise_phased` instead (one flat loop per plane). Float16
    planes are summed in a float32 scratch plane and rounded once into y (then the epilogue
    runs as a pass): a tap's product alone may exceed float16's range where the sum does not.
    """
    from onnxjit.ir.ops.conv import pad_nan

    if pad_nan.needed(gm, w):  # padded taps times non-finite weights: `conv.pad_nan`
        _nest(ctx, gm, x, w, y, bias, None)
        pad_nan.fix_up(ctx, gm, w, y, epilogue)
        return
    _nest(ctx, gm, x, w, y, bias, epilogue)


def _nest(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
          bias: Buffer | None, epilogue: Epilogue | None) -> None:
    """The nests of `lower_depthwise`, which skip the taps on the padding."""
    from onnxjit.ir.ops.conv.depthwise_phased import lower_depthwise_phased, phased_applies
    from onnxjit.ir.ops.conv.depthwise_tiny import lower_depthwise_tiny, tiny_applies

    if tiny_applies(gm, w, y):
        lower_depthwise_tiny(ctx, gm, x, w, y, bias, None if epilogue is None else epilogue.emit)
        return
    if phased_applies(gm, y):
        lower_depthwise_phased(ctx, gm, x, w, y, bias, epilogue)
        return
    a, b = gm.a, Builder()
    ow, kw, sw, pw, iw = gm.out[-1], gm.k[-1], a.strides[-1], gm.begin[-1], gm.ins[-1]
    fused = gm.kprod <= MAX_FUSED_TAPS
    out = y
    if accumulator(y.dtype) != y.dtype:  # f16: every tap sums in f32, rounded once at the end
        y = ctx.scratch("dw_sum", accumulator(y.dtype), tuple(y.shape))
    inline = epilogue if INLINE_EPILOGUE and fused and out is y else None
    with b.loop(0, gm.n * gm.m, parallel=True, hint="q") as q:
        n, m = (b.op("div", q, i64(gm.m)), b.op("rem", q, i64(gm.m))) if gm.n > 1 else (i64(0), q)
        ch = b.op("div", m, i64(gm.mg)) if gm.mg > 1 else m  # the input channel (group)
        xbase = b.imul(b.iadd(b.imul(n, gm.c), ch), gm.in_plane)
        init = const(0, y.dtype) if bias is None else b.load(bias, m)
        if out is not y and bias is not None:
            init = b.cast(init, y.dtype)
        wbase = b.imul(m, gm.kprod)
        wv = [b.load(w, b.iadd(wbase, i64(t)), hint="w") for t in range(gm.kprod)] if fused \
            else []
        per_row = inline.per_row(b, m) if inline is not None else {}
        with Nest(b, gm.out[:-1], "o") as o:
            yrow = b.iadd(b.imul(q, gm.p), b.imul(b.linear(o, row_major_strides(gm.out[:-1])),
                                                  ow))
            inside = _rows_inside(b, o, gm) if fused else i64(0)

            def row() -> None:
                if inline is None:
                    _fused_row(b, gm, x, y, xbase, yrow, o, wv, init)
                    return
                done = _fused_row(b, gm, x, y, xbase, yrow, o, wv, init,
                                  lambda acc, at, c: inline.value(b, acc, at, c, per_row))
                for lo, hi in ((0, done[0]), (done[1], ow)):  # the edge columns
                    if lo < hi:
                        inline.emit(b, b.iadd(yrow, i64(lo)), ow, 1, hi - lo, m)

            if inside is None:
                row()
            else:
                if fused:
                    with b.loop(0, inside, hint="interior"):
                        row()
                with b.loop(inside, 1, hint="border"):
                    with b.loop(0, ow, hint="w") as i:
                        b.store(y, b.iadd(yrow, i), init)
                    with Nest(b, gm.k[:-1], "t") as t:
                        valid, off = outer_positions(b, o, t, a, gm.begin, gm.ins, gm.out, gm.k)
                        xrow = b.iadd(xbase, off)
                        tap = b.linear(t, row_major_strides(gm.k[:-1]))
                        for tw in taps(b, kw):
                            shift = tap_shift(b, tw, a.dilations[-1], pw)
                            wt = b.load(w, b.iadd(wbase, b.iadd(b.imul(tap, kw), operand(tw))))
                            lo, hi = tap_bounds(b, valid, shift, sw, iw, ow)
                            _axpy(b, y, x, yrow, b.iadd(xrow, operand(shift)), sw, wt, lo, hi)
                    if inline is not None:
                        inline.emit(b, yrow, ow, 1, ow, m)
        if out is not y:  # the plane's f32 sums rounded to the output's type
            with b.loop(0, gm.p, hint="p") as i:
                at = b.iadd(b.imul(q, gm.p), i)
                b.store(out, at, b.cast(b.load(y, at), out.dtype))
        if epilogue is not None and inline is None:
            epilogue.emit(b, b.imul(q, gm.p), gm.p, 1, gm.p, m)
    ctx.kernel("conv_depthwise", b.body, contract=CONTRACT)


#: Finish stride-1 fused rows with one overlapping whole vector (`whole_vectors`); False
#: restores one loop over the interior. Measured, one thread, 3x3 depthwise + Relu against
#: False: 144ch at 56x56 1.05x, 96ch at 112x112 1.20x, 32ch at 112x112 1.33x; MobileNetV2-like
#: 1.016x. Strided rows keep one loop: their 48-column loop is fully unrolled before the loop
#: vectorizer sees it and loses the interleaved loads (stride 2 at 112x112: 0.51x).
OVERLAP_TAIL = True

#: A fused conv's epilogue runs in the fused rows' interior loop (the column's value is in a
#: register), and as a pass only over the other columns and rows; False: a pass over each
#: plane after it is computed. Measured, one thread, depthwise 3x3 + Relu against False: 144
#: channels at 56x56 1.077x, 96 channels stride 2 from 112x112 1.035x; MobileNetV2-like
#: 1.013x (two threads 1.010x).
INLINE_EPILOGUE = True

#: Largest kernel (taps) whose depthwise rows are summed in one fused pass.
MAX_FUSED_TAPS = 64


def _axpy(b: Builder, y: Buffer, x: Buffer, yrow: Operand, xrow: Operand, s: int,
          wt: Operand, lo: Operand, hi: Operand) -> None:
    """y[yrow + i] += wt * x[xrow + i*s] for i in [lo, hi)."""
    with b.loop(lo, hi, hint="w") as i:
        at = b.iadd(yrow, i)
        xv = b.load(x, b.iadd(xrow, b.imul(i, s)))
        if x.dtype != y.dtype:  # f16 input and weights, f32 sums
            xv, wt = b.cast(xv, y.dtype), b.cast(wt, y.dtype)
        b.store(y, at, b.op("add", b.load(y, at), b.op("mul", wt, xv)))


def _rows_inside(b: Builder, o: list, gm: Geometry) -> Operand | None:
    """i64 1 when every outer kernel tap of output position `o` is inside the input, else 0;
    None when that holds for every position (no outer dim can reach the padding)."""
    a = gm.a
    cond: Operand | None = None
    for j, oj in enumerate(o):
        s, dl, pb, size = a.strides[j], a.dilations[j], gm.begin[j], gm.ins[j]
        reach = (gm.k[j] - 1) * dl
        if pb <= 0 and (gm.out[j] - 1) * s + reach - pb < size:
            continue
        first = b.iadd(b.imul(oj, s), i64(-pb))
        c = b.op("and", b.op("ge", first, i64(0)), b.op("lt", b.iadd(first, i64(reach)),
                                                       i64(size)))
        cond = c if cond is None else b.op("and", cond, c)
    return None if cond is None else b.op("select", cond, i64(1), i64(0))


def store_column(b: Builder, y: Buffer, yrow: Operand, i: Operand, rows: list, wv: list,
                 kw: int, init: Operand, value, tap) -> None:
    """y[yrow + i] = init + the sum over outer-tap rows r and columns tw of
    wv[r * kw + tw] * tap(rows[r], tw), stored through `value(acc, at, i)` when given. f16
    sums in f32 and rounds once, then adds the bias, as the reference's matmul does
    (`narrow.accumulator`); bf16 and wide types accumulate in their own type."""
    at = accumulator(y.dtype)
    acc: Operand = init if at == y.dtype else const(0, at)
    for r, xrow in enumerate(rows):
        for tw in range(kw):
            xv = tap(xrow, tw)
            if xv is None:  # a tap on the padding, known at compile time
                continue
            acc = b.op("add", acc, b.op("mul", b.cast(wv[r * kw + tw], at), b.cast(xv, at)))
    if at != y.dtype:
        acc = b.op("add", b.cast(acc, y.dtype), init)
    idx = b.iadd(yrow, i)
    b.store(y, idx, acc if value is None else value(acc, idx, i))


def _fused_row(b: Builder, gm: Geometry, x: Buffer, y: Buffer, xbase: Operand, yrow: Operand,
               o: list, wv: list, init: Operand, value=None) -> tuple[int, int]:
    """One output row whose outer taps are all inside: interior columns in one pass, stored
    through `value(acc, at, column)` when given. Returns the interior columns [lo, hi)."""
    a = gm.a
    ow, kw, sw, dw, pw, iw = (gm.out[-1], gm.k[-1], a.strides[-1], a.dilations[-1],
                              gm.begin[-1], gm.ins[-1])
    ranges = [valid_range(tw * dw - pw, sw, iw, ow) for tw in range(kw)]
    lo_all, hi_all = max(r[0] for r in ranges), min(r[1] for r in ranges)
    if lo_all >= hi_all:  # no column sees every tap: all columns are edges
        lo_all = hi_all = ow
    in_str = row_major_strides(gm.ins)
    rows = []  # x row offset of each outer tap
    for t in np.ndindex(*gm.k[:-1]):
        off: Operand = xbase
        for j, (oj, tj) in enumerate(zip(o, t)):
            pos = b.iadd(b.imul(oj, a.strides[j]), i64(tj * a.dilations[j] - gm.begin[j]))
            off = b.iadd(off, b.imul(pos, in_str[j]))
        rows.append(off)
    for lo, hi in ((0, lo_all), (hi_all, ow)):
        if lo < hi:
            with b.loop(lo, hi, hint="w") as i:
                b.store(y, b.iadd(yrow, i), init)
    if lo_all < hi_all:
        pieces = whole_vectors(lo_all, hi_all, y.dtype.itemsize, sw) if OVERLAP_TAIL \
            else [(lo_all, hi_all)]
        for lo, hi in pieces:
            with b.loop(lo, hi, hint="w") as i:
                store_column(b, y, yrow, i, rows, wv, kw, init, value,
                             lambda xrow, tw: b.load(x, b.iadd(b.iadd(xrow, i64(tw * dw - pw)),
                                                               b.imul(i, sw))))
    for r, xrow in enumerate(rows):
        for tw, (lo, hi) in enumerate(ranges):
            for a_, b_ in ((lo, min(lo_all, hi)), (max(hi_all, lo), hi)):
                if a_ < b_:
                    _axpy(b, y, x, yrow, b.iadd(xrow, i64(tw * dw - pw)), sw, wv[r * kw + tw],
                          i64(a_), i64(b_))
    return lo_all, hi_all
