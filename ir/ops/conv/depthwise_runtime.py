"""Depthwise conv (C/G == 1) with run-time sizes: the direct nest of a symbolic program.

The form of `conv.depthwise_direct` with the image sizes as `Sym`s: parallel over (image,
output channel), per output row. Algorithm:
1) per plane: the weights are hoisted; the interior columns [L, H) where every tap of the
   innermost kernel dim is inside the row are the intersection of the taps' valid ranges
   (`geometry.valid_range`: `Sym` bounds from the dims table); when it is empty, L = H = ow
   (every column is an edge);
2) rows whose outer taps are all inside the image (a run-time test per row, `_inside`), when
   the pads are `Sym`s (else 5): the
   interior columns sum every tap in one pass (`bias + sum w_t * x_t`, one store a column);
   the edge columns [0, L) and [H, ow) sum every tap too, each read through a `select` (0
   where the tap is outside the row): a loop per tap and edge, as the compile-time form has,
   would cost more in loop overhead at run-time bounds than a narrow row's interior;
3) other rows (top and bottom borders): the bias, then each tap over its valid range
   (`geometry.tap_bounds`, emptied when an outer tap is outside);
4) a fused conv's epilogue runs in the interior loop on the value in a register, and as a
   pass over the edge columns and the border rows.
5) static-edge rows (`static_edges`, when the row's pads are ints): when the image is wide
   enough (`_edges_hold`, a run-time test once per call; else every row takes the border
   path of 3), a fused row is its L left columns with the taps on the left padding dropped at
   compile time, the interior [L, ow - R), and the last R columns (R bounds the right edge
   columns) with a `pos < width` test per tap, row-invariant and so hoisted: no clamps or
   run-time-bounded edge loops per row. At stride 1 that interior runs as loops of one vector
   of constant trip count (`_in_vectors`), so LLVM adds no remainder loops and run-time
   trip-count checks; a strided interior carries the taps an earlier column read
   (`_carry_loop`); a 2-D nest runs its border rows and its fused rows as separate row loops
   (`_row_split`). Measured, one thread, 3x3 + Clip against the specialised program: 144ch
   at 56x56 0.61x -> 0.86x, 32ch at 112x112 0.68x -> 0.88x, 96ch at 112x112 stride 2
   0.40x -> 0.93x.
At stride 1 the interior runs in whole vectors of the host's lanes, the last one overlapping
its neighbour (`_pieces`: a column is a pure function of x, so the overlap recomputes the same
values), as `depthwise_direct` does with compile-time bounds: a run-time remainder would run
scalar (54 columns: 3 vectors and 6 scalar columns of 9 taps each, half the row's time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from onnxjit.ir.loop_builder import Builder, const, row_major_strides
from onnxjit.ir.loops import Buffer, Const, Operand, Size, i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.attrs import conv_pads
from onnxjit.ir.ops.conv.blocking import host_tile, runtime_vectors
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
#: Stride-1 interiors of the static-edge rows as loops of one vector each (`_in_vectors`).
VECTOR_LOOPS = True
#: 2-D static-edge nests as three row loops (border rows, the rows whose outer taps are all
#: inside, border rows: `_row_split`), so the middle loop holds only the fused row's code and
#: LLVM keeps its few row pointers in registers (one loop with both paths: ~20 pointer
#: increments spilled per row).
SPLIT_ROWS = True
#: Strided interiors read a tap that an earlier column read already from a loop-carried value
#: (`_carry_loop`). Measured, one thread, 3x3 stride 2 + Clip, 96ch at 112x112 against the
#: specialised program: 0.34x -> 0.93x (LLVM gathered one tap per row lane by lane: taps 0
#: and 2 of a stride-2 row have one parity, so one of them is a lone interleave-group member).
CARRY_TAPS = True
#: The one-vector loops of `_in_vectors` are kept rolled (`Loop.rolled`), so LLVM vectorizes
#: each as the vector it is. Unrolled (AVX2: 8 lanes, small enough to unroll fully), the loop
#: vectorizer took the loop over vectors instead, in interleave groups of stride 8: shuffles and
#: spills. Measured, one thread, Zen 3, 3x3 + Relu, 32ch at 112x112 against the specialised
#: program: 0.43x -> 0.94x; MobileNetV2-like symbolic 0.74x -> 0.91-1.18x of the specialised.
ROLLED_VECTORS = True


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
    edges = static_edges(gm) if fused else None
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
        fast = None if edges is None else _edges_hold(b, gm, edges, lo_all, hi_all)
        def emit_row(o: list, inside: Operand) -> None:
            yrow = b.iadd(b.imul(q, gm.p), b.imul(b.linear(o, row_major_strides(gm.out[:-1])),
                                                  ow))

            def fused_row() -> None:
                value = None if epilogue is None else (
                    lambda acc, at, c: epilogue.value(b, acc, at, c, per_row))
                if edges is not None:
                    _static_row(b, gm, x, y, xbase, o, yrow, wv, init, edges, value)
                else:
                    _fused_row(b, gm, x, y, xbase, yrow, o, wv, init, lo_c, hi_c, value)

            def border_row() -> None:
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

            if isinstance(inside, Const):  # a row loop of one kind (`_row_split`)
                (fused_row if inside.value else border_row)()
                return
            if fused:
                with b.loop(0, inside, hint="interior"):
                    fused_row()
            with b.loop(inside, 1, hint="border"):
                border_row()

        if fast is not None and len(gm.out) == 2 and SPLIT_ROWS:
            r0, r1 = _row_split(b, gm, fast)
            for lo, hi, inside in ((i64(0), r0, i64(0)), (r0, r1, i64(1)),
                                   (r1, operand(gm.out[0]), i64(0))):
                with b.loop(lo, hi, hint="o0") as o0:
                    emit_row([o0], inside)
        else:
            with Nest(b, gm.out[:-1], "o") as o:
                inside = _inside(b, o, gm) if fused else i64(0)
                if fast is not None:  # other sizes: every row through the border path
                    inside = b.op("select", fast, inside, i64(0))
                emit_row(o, inside)
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
    rows = _tap_rows(b, gm, xbase, o)
    for lo, hi in ((i64(0), lo_c), (hi_c, operand(ow))):  # the edge columns
        with b.loop(lo, hi, hint="e", few=True) as i:  # at most the pads' columns

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


def _tap_rows(b: Builder, gm: Geometry, xbase: Operand, o: list) -> list[Operand]:
    """The x row offset of each outer kernel tap at output position `o`."""
    a, in_str = gm.a, row_major_strides(gm.ins)
    rows = []
    for t in np.ndindex(*gm.k[:-1]):
        off: Operand = xbase
        for j, (oj, tj) in enumerate(zip(o, t)):
            pos = b.iadd(b.imul(oj, a.strides[j]), operand(tj * a.dilations[j] - gm.begin[j]))
            off = b.iadd(off, b.imul(pos, in_str[j]))
        rows.append(off)
    return rows


def static_edges(gm: Geometry) -> tuple[int, int] | None:
    """(L, R) of the static-edge rows (see the module docstring), None when the row's pads
    are `Sym`s (SAME padding at a stride > 1). L: the columns with a tap left of the row,
    whatever its width; R: a bound on those with a tap right of it, ceil(end pad / stride)
    (the last column o has o*s + (k-1)*d - pad_begin <= width - 1 + pad_end)."""
    a = gm.a
    kw, sw, dw = gm.k[-1], a.strides[-1], a.dilations[-1]
    pw, pe = gm.begin[-1], conv_pads(a, gm.ins)[1][-1]
    if not (isinstance(pw, int) and isinstance(pe, int)):
        return None
    left = max(max(0, -(-(pw - tw * dw) // sw)) for tw in range(kw))
    return left, max(0, -(-pe // sw))


def _edges_hold(b: Builder, gm: Geometry, edges: tuple[int, int], lo_all: Size, hi_all: Size
                ) -> Operand:
    """bool: the row's interior is [L, ow - R) or wider (lo_all == L < hi_all and
    L <= ow - R <= hi_all), so the static-edge row (`_static_row`) is exact."""
    left, right = edges
    start = b.op("sub", operand(gm.out[-1]), i64(right))
    ok = b.op("and", b.op("eq", operand(lo_all), i64(left)),
              b.op("lt", operand(lo_all), operand(hi_all)))
    ok = b.op("and", ok, b.op("le", i64(left), start))
    return b.op("and", ok, b.op("le", start, operand(hi_all)))


def _static_row(b: Builder, gm: Geometry, x: Buffer, y: Buffer, xbase: Operand, o: list,
                yrow: Operand, wv: list, init: Operand, edges: tuple[int, int], value=None
                ) -> None:
    """A row whose outer taps are inside, of a width where `_edges_hold`: the L left columns
    with their taps left of the row dropped at compile time, the interior [L, ow - R) in one
    pass, the last R columns with a run-time test per tap (`pos < width`: row-invariant, so
    hoisted out of the rows)."""
    a = gm.a
    ow, kw, sw, dw, pw, iw = (gm.out[-1], gm.k[-1], a.strides[-1], a.dilations[-1],
                              gm.begin[-1], gm.ins[-1])
    left, right = edges
    rows = _tap_rows(b, gm, xbase, o)
    for i in range(left):
        store_column(b, y, yrow, i64(i), rows, wv, kw, init, value,
                     lambda xrow, tw, i=i: None if i * sw + tw * dw - pw < 0 else
                     b.load(x, b.iadd(xrow, i64(i * sw + tw * dw - pw))))
    stop = b.op("sub", operand(ow), i64(right))

    def column(i: Operand) -> None:
        store_column(b, y, yrow, i, rows, wv, kw, init, value,
                     lambda xrow, tw: b.load(x, b.iadd(b.iadd(xrow, i64(tw * dw - pw)),
                                                       b.imul(i, sw))))

    if sw == 1 and VECTOR_LOOPS:
        _in_vectors(b, i64(left), stop, host_tile(y.dtype.itemsize)[0], column)
    elif CARRY_TAPS and _carried(kw, sw, dw):
        _carry_loop(b, gm, x, y, yrow, rows, wv, init, value, left, stop)
    else:
        for lo, hi in _pieces(b, i64(left), stop, host_tile(y.dtype.itemsize)[0], sw):
            with b.loop(lo, hi, hint="w") as i:
                column(i)
    last = b.op("sub", operand(iw), i64(1))
    for j in range(right):
        col = b.iadd(stop, i64(j))

        def edge_tap(xrow: Operand, tw: int, col: Operand = col) -> Operand:
            pos = b.iadd(b.imul(col, sw), i64(tw * dw - pw))
            xv = b.load(x, b.iadd(xrow, b.op("min", pos, last)))
            return b.op("select", b.op("lt", pos, operand(iw)), xv, const(0, x.dtype))

        store_column(b, y, yrow, col, rows, wv, kw, init, value, edge_tap)


def _in_vectors(b: Builder, lo: Operand, hi: Operand, lanes: int, column) -> None:
    """column(i) for i in [lo, hi) as loops of `lanes` columns (constant trip counts: one
    vector each, no run-time remainder), the last one overlapping its neighbour; a plain
    loop when there are fewer than `lanes` columns (`blocking.runtime_vectors`)."""
    runtime_vectors(b, lo, hi, lanes, column, smallest=lanes, rolled=ROLLED_VECTORS)


def _row_split(b: Builder, gm: Geometry, fast: Operand) -> tuple[Operand, Operand]:
    """[r0, r1): the output rows whose outer kernel taps are all inside the image (as
    `_inside`), empty (r0 = r1 = oh) when they are none or `fast` is false."""
    a = gm.a
    s, dl, pb, size, oh = a.strides[0], a.dilations[0], gm.begin[0], gm.ins[0], gm.out[0]
    lo_a, hi_a = valid_range(0 - pb, s, size, oh)
    lo_b, hi_b = valid_range((gm.k[0] - 1) * dl - pb, s, size, oh)
    lo, hi = smax(lo_a, lo_b), smin(hi_a, hi_b)
    ok = b.op("and", fast, b.op("lt", operand(lo), operand(hi)))
    return (b.op("select", ok, operand(lo), operand(oh)),
            b.op("select", ok, operand(hi), operand(oh)))


def _carried(kw: int, sw: int, dw: int) -> dict[int, int]:
    """{tw: tw2}: the taps whose value at column i is tap tw2's at column i - 1
    (tw*dw + sw == tw2*dw)."""
    if sw % dw:
        return {}
    return {tw: tw + sw // dw for tw in range(kw) if tw + sw // dw < kw}


def _carry_loop(b: Builder, gm: Geometry, x: Buffer, y: Buffer, yrow: Operand, rows: list,
                wv: list, init: Operand, value, lo: int, hi: Operand) -> None:
    """The interior columns [lo, hi) of a strided static-edge row, each carried tap
    (`_carried`) a variable holding what the previous column loaded: LLVM vectorizes that
    as a recurrence (a lane shift of the previous vector), where a stride-2 row's taps 0 and
    2 would otherwise be two accesses of one parity, one of them gathered lane by lane."""
    a = gm.a
    kw, sw, dw, pw = gm.k[-1], a.strides[-1], a.dilations[-1], gm.begin[-1]
    carried = _carried(kw, sw, dw)
    # column lo is inside the row (`_edges_hold`), so its taps may be read before the loop
    carry = {(r, tw): b.var(b.load(x, b.iadd(xrow, i64(lo * sw + tw * dw - pw))), "carry")
             for r, xrow in enumerate(rows) for tw in carried}
    with b.loop(i64(lo), hi, hint="w") as i:
        seen: dict[tuple[int, int], Operand] = {}

        def tap(xrow: Operand, tw: int) -> Operand:
            r = next(k for k, v in enumerate(rows) if v is xrow)
            v = carry.get((r, tw))
            if v is None:
                v = b.load(x, b.iadd(b.iadd(xrow, i64(tw * dw - pw)), b.imul(i, sw)))
            seen[r, tw] = v
            return v

        store_column(b, y, yrow, i, rows, wv, kw, init, value, tap)
        for (r, tw) in sorted(carry, key=lambda k: k[1]):  # tw ascending: read, then update
            b.assign(carry[r, tw], "copy", seen[r, carried[tw]])
