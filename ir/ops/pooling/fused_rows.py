"""Fused rows of 2-D max and average pools: each output column folds all its taps at once.

The general rows of `pooling.lowering` fold one window row at a time into the output row (a load
and a store of every output per window row). Where an output row's window rows all lie inside
the input (`row_inside`), `fused_row` instead runs one loop over the row's columns that folds
every tap of a column and stores it once:
- the interior columns (all taps inside along the width, `_Pool.interior`) unroll the taps;
  at stride 1 they run in whole vectors, the last one overlapping its neighbour (`_pieces`,
  OVERLAP: a column is a pure function of x, so the overlap recomputes the same values);
- the border columns loop over their tap range (`_Pool.tap_range`).
Averages sum in the general rows' order (0, then tap rows, then columns), so they are the same
bits, and divide by the window size (interior) or the column's count (`_Pool.count`). Maxima
fold with select(v > acc, v, acc) from the first tap, or from -inf with an all-NaN flag, as
`pooling.max_rule` decides for NaN taps (`max_rule.fold_taps`).
Used for pools of at most FUSED_TAPS taps without Indices (`fusable`); `pooling.lowering` keeps
the general rows for the others and for rows whose window rows reach the padding.
"""

from __future__ import annotations

import math

from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Operand, i64
from onnxjit.ir.ops.conv.blocking import whole_vectors
from onnxjit.ir.ops.pooling import max_rule
from onnxjit.ir.types import DType

#: 2-D max and average pools fold a row's taps in one pass where its window rows are all
#: inside (`fused_row`), for kernels of at most FUSED_TAPS taps; False: every row the general
#: way. Measured, one thread, against False: average 3x3 s1 at 28x28 2.2x, at 14x14 1.13x, 2x2
#: s2 over 56, 28 and 14 columns 1.9x, 3.7x, 1.1x (a 20-column one 3.4x, with
#: `target.TUNING`); average rows with border columns and fewer than FUSED_MIN_COLS interior
#: ones lost (10 columns 0.83x, 7 0.92x) and keep the general rows. Max 3x3 s2 at 111x111 1.9x,
#: 3x3 s1 at 28x28 2.3x, at 14x14 2.6x, at 7x7 1.29x (`fold_window`: 3 instructions a tap, not
#: 4); SqueezeNet 1.014x, Inception-v1 1.020x (two threads).
FUSED_ROWS, FUSED_TAPS, FUSED_MIN_COLS = True, 25, 12
#: Fused rows at stride 1 run their interior in whole vectors, the last one overlapping
#: (`_pieces`); False: one loop, whose remainder LLVM leaves scalar. Measured, one thread,
#: against False: max 3x3 pad 1 at 28x28 1.24x; average 3x3 at 30x30 1.68x, pad 1 at 28x28
#: 1.09x, at 56x56 1.31x.
OVERLAP = True


def fusable(pool) -> bool:
    """2-D max (without Indices) and average pools of at most FUSED_TAPS taps; average
    pools also need rows of all interior columns or at least FUSED_MIN_COLS of them."""
    if not (FUSED_ROWS and pool.k == 2 and pool.ind is None and pool.mode in ("max", "avg")
            and pool.g.kernel[0] * pool.g.kernel[1] <= FUSED_TAPS):
        return False
    first, stop = pool.interior()
    return (pool.mode == "max" or stop - first >= FUSED_MIN_COLS
            or first == 0 and stop == int(pool.g.out[-1]))


def row_inside(pool, o: Operand) -> Operand | None:
    """i64 1 when every tap of output row `o` lies inside the input rows, else 0; None
    when that holds for every row."""
    b, g = pool.b, pool.g
    s, d, pb, kk, n = g.strides[0], g.dilations[0], g.pb[0], g.kernel[0], pool.spatial[0]
    reach = (kk - 1) * d
    if pb <= 0 and (int(g.out[0]) - 1) * s + reach - pb < n:
        return None
    r0 = b.op("sub", b.imul(o, s), i64(pb))
    ok = b.op("and", b.op("ge", r0, i64(0)), b.op("lt", b.iadd(r0, i64(reach)), i64(n)))
    return b.op("select", ok, i64(1), i64(0))


def fused_row(pool, o0: Operand, xb: Operand, ybase: Operand) -> None:
    """An output row whose taps along the rows are all inside: each column folds all its
    taps and is stored once (the general row loads and stores it once per tap row).
    Averages sum in the general order (0, then tap rows, then columns), so they are the same
    bits; interior columns divide by the window size, border columns by their count
    (`count`: real taps, or with count_include_pad those inside the padding too). Maxima
    fold with select(v > acc, v, acc) per tap (x86 `vmaxps`, which keeps acc on ties, as the
    general row does with signed zeros), NaN taps by `pooling.max_rule`, so the results are
    the general rows' bits. The interior columns' windows: `fold_window`."""
    b, g = pool.b, pool.g
    (s0, s1), (d0, d1), (p0, p1) = g.strides, g.dilations, g.pb
    k0, k1, n = g.kernel[0], g.kernel[1], pool.spatial[1]
    ow_n = int(g.out[1])
    r0 = b.op("sub", b.imul(o0, s0), i64(p0))
    rows = [b.iadd(xb, b.imul(b.iadd(r0, i64(t * d0)), n)) for t in range(k0)]
    first, stop = pool.interior()
    dt = pool.y.dtype

    def col(o: Operand, t: Operand) -> Operand:
        return b.iadd(b.op("sub", b.imul(o, s1), i64(p1)), b.imul(t, d1))

    def add(acc: Operand, xi: Operand) -> Operand:
        return b.op("add", acc, b.load(pool.x, xi))

    def border(lo: int, hi: int) -> None:
        if lo >= hi:
            return
        with b.loop(lo, hi, hint="w") as o:
            t_lo, t_hi = pool.tap_range(1, o, n)
            if pool.mode == "max":
                _max_border(pool, rows, col, ybase, o, t_lo, t_hi)
                return
            acc = b.var(const(0, dt), hint="acc")
            for xrow in rows:
                with b.loop(t_lo, t_hi, hint="tw") as t:
                    b.assign(acc, "copy", add(acc, b.iadd(xrow, col(o, t))))
            cnt = b.cast(b.op("mul", i64(k0), pool.count(1, o)), dt)
            b.store(pool.y, b.iadd(ybase, o), b.op("div", acc, cnt))

    border(0, first)
    for lo, hi in _pieces(pool, first, stop):
        with b.loop(lo, hi, hint="w") as o:
            taps = [b.iadd(xrow, col(o, i64(t))) for xrow in rows for t in range(k1)]
            b.store(pool.y, b.iadd(ybase, o), fold_window(pool, b, taps))
    border(stop, ow_n)


def _pieces(pool, first: int, stop: int) -> list[tuple[int, int]]:
    """The fused rows' interior columns [first, stop) as loops: at stride 1 in whole
    vectors, the last one overlapping its neighbour (`conv.blocking.whole_vectors`; a
    column is a pure function of x, so the overlap recomputes the same values)."""
    if first >= stop:
        return []
    if not OVERLAP:
        return [(first, stop)]
    return whole_vectors(first, stop, pool.y.dtype.itemsize, pool.g.strides[1])


def _max_border(pool, rows: list[Operand], col, ybase: Operand, o: Operand, t_lo: Operand,
                t_hi: Operand) -> None:
    """A border column of a fused MaxPool row: the maximum over its taps in [t_lo, t_hi) of
    every row, by `pooling.max_rule` (FIRST starts at the first real tap, DROP at -inf with an
    all-NaN flag)."""
    b = pool.b
    drop = max_rule.drops_nan(pool.g) and pool.x.dtype.is_float
    n = pool.spatial[1]
    first = b.load(pool.x, b.iadd(rows[0], b.op("max", i64(0), b.op("min", col(o, t_lo),
                                                                       i64(n - 1)))))
    start = b.op("select", b.op("lt", t_lo, t_hi), first, pool.identity())
    acc = b.var(pool.identity() if drop else start, hint="acc")
    all_nan = b.var(const(True, DType.BOOL), hint="nan") if drop else None
    for xrow in rows:
        with b.loop(t_lo, t_hi, hint="tw") as t:
            v = b.load(pool.x, b.iadd(xrow, col(o, t)))
            b.assign(acc, "select", b.op("gt", v, acc), v, acc)
            if all_nan is not None:
                b.assign(all_nan, "and", all_nan, b.op("isnan", v))
    res: Operand = acc
    if all_nan is not None:
        res = b.op("select", all_nan, const(math.nan, acc.dtype), acc)
    b.store(pool.y, b.iadd(ybase, o), res)


def fold_window(pool, b: Builder, taps: list[Operand]) -> Operand:
    """The pooled value of a window whose taps all lie inside, at the flat input indices `taps`
    in tap order: the maximum (`max_rule.fold_taps`) or the sum from 0 in that order over
    the window size. The fused rows' interior and `pooling.flat` share it."""
    if pool.mode == "max":
        return max_rule.fold_taps(b, [b.load(pool.x, i) for i in taps],
                                  max_rule.drops_nan(pool.g), pool.identity())
    acc = const(0, pool.y.dtype)
    for i in taps:
        acc = b.op("add", acc, b.load(pool.x, i))
    return b.op("div", acc, const(len(taps), pool.y.dtype))
