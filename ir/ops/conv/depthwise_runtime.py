"""Depthwise conv (C/G == 1) with run-time sizes: the direct nest of a symbolic program.

The form of `conv.depthwise_direct` with the image sizes as `Sym`s: parallel over (image,
output channel), per output row. Algorithm:
1) per plane: the weights are hoisted; the interior columns [L, H) where every tap of the
   innermost kernel dim is inside the row are the intersection of the taps' valid ranges
   (`geometry.valid_range`: `Sym` bounds from the dims table); when it is empty, L = H = ow
   (every column is an edge);
2) rows whose outer taps are all inside the image (a run-time test per row, `_inside`): the
   interior columns sum every tap in one pass (`bias + sum w_t * x_t`, one store a column);
   the edge columns [0, L) and [H, ow) sum every tap too, each read through a `select` (0
   where the tap is outside the row): a loop per tap and edge, as the compile-time form has,
   would cost more in loop overhead at run-time bounds than a narrow row's interior;
3) other rows (top and bottom borders): the bias, then each tap over its valid range
   (`geometry.tap_bounds`, emptied when an outer tap is outside);
4) a fused conv's epilogue runs in the interior loop on the value in a register, and as a
   pass over the edge columns and the border rows.
At stride 1 the interior runs in whole vectors of the host's lanes, the last one overlapping
its neighbour (`_pieces`: a column is a pure function of x, so the overlap recomputes the same
values), as `depthwise_direct` does with compile-time bounds: a run-time remainder would run
scalar (54 columns: 3 vectors and 6 scalar columns of 9 taps each, half the row's time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from onnxjit.ir.loop_builder import Builder, const, row_major_strides
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.blocking import host_tile
from onnxjit.ir.ops.conv.depthwise_direct import store_column
from onnxjit.ir.ops.conv.geometry import (
    CONTRACT,
    Geometry,
    Nest,
    operand,
    outer_positions,
    smax,
    smin,
    tap_bounds,
    tap_shift,
    valid_range,
)

if TYPE_CHECKING:
    from onnxjit.ir.ops.fused.epilogue import Epilogue

#: Largest kernel (taps) whose rows are summed in one pass (as `depthwise_direct`).
MAX_FUSED_TAPS = 64
#: Stride-1 interiors in whole vectors (`_pieces`); False: one loop with a scalar remainder.
OVERLAP = True


def lower_depthwise_runtime(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                            bias: Buffer | None, epilogue: Epilogue | None = None) -> None:
    """Direct depthwise nest of run-time sizes (see the module docstring)."""
    a, b = gm.a, Builder()
    ow, kw, sw, dw, pw, iw = (gm.out[-1], gm.k[-1], a.strides[-1], a.dilations[-1],
                              gm.begin[-1], gm.ins[-1])
    fused = gm.kprod <= MAX_FUSED_TAPS
    ranges = [valid_range(tw * dw - pw, sw, iw, ow) for tw in range(kw)]
    lo_all, hi_all = ranges[0]
    for lo, hi in ranges[1:]:
        lo_all, hi_all = smax(lo_all, lo), smin(hi_all, hi)
    with b.loop(0, gm.n * gm.m, parallel=True, hint="q") as q:
        n, m = b.op("div", q, i64(gm.m)), b.op("rem", q, i64(gm.m))
        ch = b.op("div", m, i64(gm.mg)) if gm.mg > 1 else m
        xbase = b.imul(b.iadd(b.imul(n, gm.c), ch), gm.in_plane)
        init = const(0, y.dtype) if bias is None else b.load(bias, m)
        wbase = b.imul(m, gm.kprod)
        wv = [b.load(w, b.iadd(wbase, i64(t)), hint="w") for t in range(gm.kprod)]
        some = b.op("lt", operand(lo_all), operand(hi_all))
        lo_c = b.op("select", some, operand(lo_all), operand(ow))
        hi_c = b.op("select", some, operand(hi_all), operand(ow))
        per_row = epilogue.per_row(b, m) if epilogue is not None else {}
        with Nest(b, gm.out[:-1], "o") as o:
            yrow = b.iadd(b.imul(q, gm.p), b.imul(b.linear(o, row_major_strides(gm.out[:-1])),
                                                  ow))
            inside = _inside(b, o, gm) if fused else i64(0)
            if fused:
                with b.loop(0, inside, hint="interior"):
                    value = None if epilogue is None else (
                        lambda acc, at, c: epilogue.value(b, acc, at, c, per_row))
                    _fused_row(b, gm, x, y, xbase, yrow, o, wv, init, lo_c, hi_c, value)
            with b.loop(inside, 1, hint="border"):
                _fill(b, y, yrow, i64(0), operand(ow), init)
                with Nest(b, gm.k[:-1], "t") as t:
                    valid, off = outer_positions(b, o, t, a, gm.begin, gm.ins, gm.out, gm.k)
                    xrow = b.iadd(xbase, off)
                    tap = b.linear(t, row_major_strides(gm.k[:-1]))
                    for tw in range(kw):
                        shift = tap_shift(b, tw, dw, pw)
                        wt = b.load(w, b.iadd(wbase, b.iadd(b.imul(tap, kw), i64(tw))))
                        lo, hi = tap_bounds(b, valid, shift, sw, iw, ow)
                        _axpy(b, y, x, yrow, b.iadd(xrow, operand(shift)), sw, wt, lo, hi)
                if epilogue is not None:
                    epilogue.emit(b, yrow, ow, 1, ow, m)
    ctx.kernel("conv_depthwise", b.body, contract=CONTRACT)


def _fill(b: Builder, y: Buffer, yrow: Operand, lo: Operand, hi: Operand, v: Operand) -> None:
    with b.loop(lo, hi, hint="w") as i:
        b.store(y, b.iadd(yrow, i), v)


def _axpy(b: Builder, y: Buffer, x: Buffer, yrow: Operand, xrow: Operand, s: int,
          wt: Operand, lo: Operand, hi: Operand) -> None:
    """y[yrow + i] += wt * x[xrow + i*s] for i in [lo, hi)."""
    with b.loop(lo, hi, hint="w") as i:
        at = b.iadd(yrow, i)
        xv = b.load(x, b.iadd(xrow, b.imul(i, s)))
        b.store(y, at, b.op("add", b.load(y, at), b.op("mul", wt, xv)))


def _inside(b: Builder, o: list, gm: Geometry) -> Operand:
    """i64 1 when every outer kernel tap of output position `o` is inside the input, else 0."""
    a = gm.a
    cond: Operand | None = None
    for j, oj in enumerate(o):
        s, dl = a.strides[j], a.dilations[j]
        first = b.iadd(b.imul(oj, s), operand(0 - gm.begin[j]))
        last = b.iadd(first, i64((gm.k[j] - 1) * dl))
        c = b.op("and", b.op("ge", first, i64(0)), b.op("lt", last, operand(gm.ins[j])))
        cond = c if cond is None else b.op("and", cond, c)
    return i64(1) if cond is None else b.op("select", cond, i64(1), i64(0))


def _pieces(b: Builder, lo: Operand, hi: Operand, lanes: int, stride: int
            ) -> list[tuple[Operand, Operand]]:
    """[lo, hi) as whole vectors then one overlapping the last (see the module docstring):
    [lo, hi - n % lanes) and [hi - lanes, hi) when n = hi - lo >= lanes, else [lo, hi)."""
    if stride != 1 or not OVERLAP:
        return [(lo, hi)]
    n = b.op("sub", hi, lo)
    rest = b.op("rem", n, i64(lanes))
    big = b.op("ge", n, i64(lanes))
    main_end = b.op("select", big, b.op("sub", hi, rest), hi)
    tail = b.op("and", big, b.op("gt", rest, i64(0)))
    return [(lo, main_end), (b.op("select", tail, b.op("sub", hi, i64(lanes)), hi), hi)]


def _fused_row(b: Builder, gm: Geometry, x: Buffer, y: Buffer, xbase: Operand, yrow: Operand,
               o: list, wv: list, init: Operand, lo_c: Operand, hi_c: Operand,
               value=None) -> None:
    """A row whose outer taps are all inside: interior columns [lo_c, hi_c) in one pass
    (stored through `value(acc, at, column)` when given), the edge columns tap by tap."""
    a = gm.a
    ow, kw, sw, dw, pw, iw = (gm.out[-1], gm.k[-1], a.strides[-1], a.dilations[-1],
                              gm.begin[-1], gm.ins[-1])
    in_str = row_major_strides(gm.ins)
    rows = []  # x row offset of each outer tap
    for t in np.ndindex(*gm.k[:-1]):
        off: Operand = xbase
        for j, (oj, tj) in enumerate(zip(o, t)):
            pos = b.iadd(b.imul(oj, a.strides[j]), operand(tj * a.dilations[j] - gm.begin[j]))
            off = b.iadd(off, b.imul(pos, in_str[j]))
        rows.append(off)
    for lo, hi in ((i64(0), lo_c), (hi_c, operand(ow))):  # the edge columns
        with b.loop(lo, hi, hint="e") as i:

            def edge_tap(xrow: Operand, tw: int, i: Operand = i) -> Operand:
                pos = b.iadd(b.imul(i, sw), operand(tw * dw - pw))
                ok = b.op("and", b.op("ge", pos, i64(0)), b.op("lt", pos, operand(iw)))
                clamped = b.op("min", b.op("max", pos, i64(0)), b.op("sub", operand(iw),
                                                                     i64(1)))
                return b.op("select", ok, b.load(x, b.iadd(xrow, clamped)), const(0, x.dtype))

            store_column(b, y, yrow, i, rows, wv, kw, init, value, edge_tap)
    for lo, hi in _pieces(b, lo_c, hi_c, host_tile(y.dtype.itemsize)[0], sw):
        with b.loop(lo, hi, hint="w") as i:
            store_column(b, y, yrow, i, rows, wv, kw, init, value,
                         lambda xrow, tw, i=i: b.load(x, b.iadd(b.iadd(
                             xrow, operand(tw * dw - pw)), b.imul(i, sw))))
