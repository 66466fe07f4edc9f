"""Loop nests of the pooling ops (the lowering half of `ops_pool`).

Windowed pools (MaxPool, AveragePool, LpPool), one kernel per node. Algorithm:
1) a parallel loop over the N*C planes, then loops over the output's outer spatial dims (all but
   the last, the width); for each, the range of taps that land inside the input is computed once
   per output row: lo = max(0, ceil((pb - o*s) / d)), hi = min(K, ceil((D + pb - o*s) / d));
2) the output row is set to the fold's identity (-inf / the int minimum, or 0), then the outer
   taps run in their ranges and, for each, the width is folded straight into the output row
   (and the Indices row): the innermost loop runs over the output width, so it is contiguous in
   the output and strided by s in the input. The width splits at compile time into a left
   border, an interior where every tap is inside the input (no range arithmetic, taps unrolled
   when the kernel is narrow) and a right border, which computes its tap range per element;
   2-D max and average pools fuse the rows whose window rows all lie inside the input
   (`_fused_row`, see FUSED_ROWS): each column folds every tap and is stored once instead of
   being loaded and stored once per window row;
3) AveragePool divides by the per-window count (real taps, or taps inside [-pb, D + pe) with
   count_include_pad), a product of per-dim counts from the same range formulas; LpPool takes
   the p-th root.
Integer division in the loop IR truncates toward zero, so a ceil of a possibly negative
numerator is taken as max(0, (n + d - 1) / d) for lo (which only needs n >= 0 exact) and
min(K, ...) for hi, where a non-positive result correctly means an empty range.

Global pools are reductions over the spatial dims: they reuse `ops_reduce_loops.emit_reduce`
(ReduceMean, ReduceMax, ReduceL1, ReduceL2), and a per-plane fold for other p.

MaxUnpool zeroes its output, then scatters x[j] to the flat index I[j] (checked to be in range:
a bad index is an InputError at run time, never a wild store) in one serial loop, so a
repeated index keeps the last value. The indices address the default unpooled shape; a larger
`output_shape` holds that shape in its leading corner (as onnx.reference does).
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const, row_major_strides
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops_elementwise import int_attr
from onnxjit.ir.ops_norm_loops import Lanes
from onnxjit.ir.ops_pool import Geometry, _lp_p, geometry, unpool_shape
from onnxjit.ir.ops_reduce_loops import emit_reduce
from onnxjit.ir.types import DType

#: Kernel widths up to this are unrolled inside the loop over the output width.
UNROLL_TAPS = 8
#: 2-D max and average pools fold a row's taps in one pass where its window rows are all
#: inside (`_fused_row`), for kernels of at most FUSED_TAPS taps; False: every row the general
#: way. Measured, one thread, against False: average 3x3 s1 at 28x28 2.2x, at 14x14 1.13x, 2x2
#: s2 over 56, 28 and 14 columns 1.9x, 3.7x, 1.1x (a 20-column one 3.4x, with
#: `target.TUNING`); average rows with border columns and fewer than FUSED_MIN_COLS interior
#: ones lost (10 columns 0.83x, 7 0.92x) and keep the general rows. Max 3x3 s2 at 111x111 1.9x,
#: 3x3 s1 at 28x28 2.3x, at 14x14 2.6x, at 7x7 1.29x (`_fused_max`: 3 instructions a tap, not
#: 4); SqueezeNet 1.014x, Inception-v1 1.020x (two threads).
FUSED_ROWS, FUSED_TAPS, FUSED_MIN_COLS = True, 25, 12


class _Pool:
    """State of one windowed-pool lowering (see module docstring)."""

    def __init__(self, b: Builder, node: Node, x: Buffer, y: Buffer, ind: Buffer | None,
                 g: Geometry):
        self.b, self.node, self.x, self.y, self.ind, self.g = b, node, x, y, ind, g
        self.mode = {"MaxPool": "max", "AveragePool": "avg", "LpPool": "lp"}[node.op]
        self.spatial = x.shape[2:]
        self.k = len(self.spatial)
        self.xs = row_major_strides(self.spatial)
        self.p = _lp_p(node)
        self.include_pad = node.op == "AveragePool" and int_attr(
            node, "count_include_pad", 0) == 1
        # Column-major strides of the spatial dims, for Indices with storage_order=1.
        cs = [1] * self.k
        for i in range(1, self.k):
            cs[i] = cs[i - 1] * self.spatial[i - 1]
        self.colmajor = ind is not None and int_attr(node, "storage_order", 0) == 1
        self.cs = cs

    # tap ranges ------------------------------------------------------------------------------
    def tap_range(self, i: int, o: Operand, end: int) -> tuple[Operand, Operand]:
        """[lo, hi) of the taps of dim i at output index o landing in [-pb, end - pb)."""
        b, g = self.b, self.g
        s, d, pb, kk = g.strides[i], g.dilations[i], g.pb[i], g.kernel[i]
        start = b.op("sub", b.imul(o, s), i64(pb))  # o*s - pb
        lo = b.op("max", i64(0), b.op("div", b.op("sub", i64(d - 1), start), i64(d)))
        hi = b.op("min", i64(kk), b.op("div", b.op("sub", i64(end + d - 1), start), i64(d)))
        return lo, hi

    def count(self, i: int, o: Operand) -> Operand:
        """Number of taps averaged over in dim i at output index o (>= 0)."""
        b = self.b
        if self.include_pad:
            _, hi = self.tap_range(i, o, self.spatial[i] + self.g.pe[i])
            return b.op("max", i64(0), hi)
        lo, hi = self.tap_range(i, o, self.spatial[i])
        return b.op("max", i64(0), b.op("sub", hi, lo))

    # folding ---------------------------------------------------------------------------------
    def identity(self) -> Operand:
        dt = self.x.dtype
        if self.mode != "max":
            return const(0, dt)
        if dt.is_float:
            return const(-math.inf, dt)
        return const(int(np.iinfo(dt.numpy).min), dt)

    def fold(self, acc: Operand, at: Operand, xi: Operand, pos: list[Operand] | None,
             plane: Operand) -> Operand:
        """acc combined with x[xi]; updates Indices[at] when there is one (max only)."""
        b = self.b
        v = b.load(self.x, xi)
        if self.mode == "avg":
            return b.op("add", acc, v)
        if self.mode == "lp":
            if self.p == 1:
                e = b.op("abs", v)
            elif self.p == 2:
                e = b.op("mul", v, v)
            else:
                e = b.op("pow", b.op("abs", v), const(self.p, v.dtype))
            return b.op("add", acc, e)
        if self.ind is None:
            return b.op("max", acc, v)
        take = b.op("gt", v, acc)
        if self.colmajor:
            assert pos is not None
            flat = b.iadd(b.imul(plane, self.x.numel // self.x.shape[0] // self.x.shape[1]),
                          b.linear(pos, self.cs))
        else:
            flat = xi  # the flat input index is the row-major Indices value
        b.store(self.ind, at, b.op("select", take, flat, b.load(self.ind, at)))
        return b.op("select", take, v, acc)

    # the nest ----------------------------------------------------------------------------------
    def emit(self) -> None:
        b, g, x = self.b, self.g, self.x
        out = [int(o) for o in g.out]
        os_ = row_major_strides(out)
        xplane, oplane = math.prod(self.spatial), math.prod(out)
        planes = x.shape[0] * x.shape[1]
        fusable = self._fusable()
        with b.loop(0, planes, parallel=True, hint="p") as pl:
            xb, yb = b.imul(pl, xplane), b.imul(pl, oplane)
            with b.nest(out[:-1]) as oo:
                ybase = b.iadd(yb, b.linear(oo, os_[:-1]))
                inside = self._row_inside(oo[0]) if fusable else i64(0)
                if inside is None:  # no row's window reaches past the input's rows
                    self._fused_row(oo[0], xb, ybase)
                elif fusable:
                    with b.loop(0, inside, hint="interior"):
                        self._fused_row(oo[0], xb, ybase)
                    with b.loop(inside, 1, hint="border"):
                        self._general_row(oo, xb, ybase, pl)
                else:
                    self._general_row(oo, xb, ybase, pl)

    def _general_row(self, oo: list, xb: Operand, ybase: Operand, pl: Operand) -> None:
        """One output row, any geometry: identity, then each outer tap folded in."""
        b, y = self.b, self.y
        with b.loop(0, int(self.g.out[-1]), hint="w") as w:
            b.store(y, b.iadd(ybase, w), self.identity())
            if self.ind is not None:
                b.store(self.ind, b.iadd(ybase, w), i64(0))
        ranges = [self.tap_range(i, oo[i], self.spatial[i]) for i in range(self.k - 1)]
        self._outer_taps(0, ranges, oo, [], [], xb, ybase, pl)
        if self.mode != "max":
            self._finish(oo, ybase)

    # fused rows ------------------------------------------------------------------------------
    def _interior(self) -> tuple[int, int]:
        """[first, stop): the output columns whose taps all lie inside the input row
        (o*s - pb >= 0 and o*s - pb + (K-1)*d <= n - 1)."""
        g = self.g
        s, d, pb, kk, n = g.strides[-1], g.dilations[-1], g.pb[-1], g.kernel[-1], self.spatial[-1]
        ow_n = int(g.out[-1])
        first = min(ow_n, -(-pb // s))
        last_num = n - 1 - (kk - 1) * d + pb
        return first, max(first, min(ow_n, last_num // s + 1 if last_num >= 0 else 0))

    def _fusable(self) -> bool:
        """2-D max (without Indices) and average pools of at most FUSED_TAPS taps; average
        pools also need rows of all interior columns or at least FUSED_MIN_COLS of them."""
        if not (FUSED_ROWS and self.k == 2 and self.ind is None and self.mode in ("max", "avg")
                and self.g.kernel[0] * self.g.kernel[1] <= FUSED_TAPS):
            return False
        first, stop = self._interior()
        return (self.mode == "max" or stop - first >= FUSED_MIN_COLS
                or first == 0 and stop == int(self.g.out[-1]))

    def _row_inside(self, o: Operand) -> Operand | None:
        """i64 1 when every tap of output row `o` lies inside the input rows, else 0; None
        when that holds for every row."""
        b, g = self.b, self.g
        s, d, pb, kk, n = g.strides[0], g.dilations[0], g.pb[0], g.kernel[0], self.spatial[0]
        reach = (kk - 1) * d
        if pb <= 0 and (int(g.out[0]) - 1) * s + reach - pb < n:
            return None
        r0 = b.op("sub", b.imul(o, s), i64(pb))
        ok = b.op("and", b.op("ge", r0, i64(0)), b.op("lt", b.iadd(r0, i64(reach)), i64(n)))
        return b.op("select", ok, i64(1), i64(0))

    def _fused_row(self, o0: Operand, xb: Operand, ybase: Operand) -> None:
        """An output row whose taps along the rows are all inside: each column folds all its
        taps and is stored once (the general row loads and stores it once per tap row).
        Averages sum in the general order (0, then tap rows, then columns), so they are the same
        bits; interior columns divide by the window size, border columns by their count
        (`count`: real taps, or with count_include_pad those inside the padding too). Maxima:
        `_fused_max`."""
        b, g = self.b, self.g
        (s0, s1), (d0, d1), (p0, p1) = g.strides, g.dilations, g.pb
        k0, k1, n = g.kernel[0], g.kernel[1], self.spatial[1]
        ow_n = int(g.out[1])
        r0 = b.op("sub", b.imul(o0, s0), i64(p0))
        rows = [b.iadd(xb, b.imul(b.iadd(r0, i64(t * d0)), n)) for t in range(k0)]
        first, stop = self._interior()
        dt = self.y.dtype

        def col(o: Operand, t: Operand) -> Operand:
            return b.iadd(b.op("sub", b.imul(o, s1), i64(p1)), b.imul(t, d1))

        def add(acc: Operand, xi: Operand) -> Operand:
            return b.op("add", acc, b.load(self.x, xi))

        if self.mode == "max":
            self._fused_max(rows, col, ybase, first, stop)
            return

        def border(lo: int, hi: int) -> None:
            if lo >= hi:
                return
            with b.loop(lo, hi, hint="w") as o:
                t_lo, t_hi = self.tap_range(1, o, n)
                acc = b.var(const(0, dt), hint="acc")
                for xrow in rows:
                    with b.loop(t_lo, t_hi, hint="tw") as t:
                        b.assign(acc, "copy", add(acc, b.iadd(xrow, col(o, t))))
                cnt = b.cast(b.op("mul", i64(k0), self.count(1, o)), dt)
                b.store(self.y, b.iadd(ybase, o), b.op("div", acc, cnt))

        border(0, first)
        if first < stop:
            with b.loop(first, stop, hint="w") as o:
                acc: Operand = const(0, dt)
                for xrow in rows:
                    for t in range(k1):
                        acc = add(acc, b.iadd(xrow, col(o, i64(t))))
                b.store(self.y, b.iadd(ybase, o), b.op("div", acc, const(k0 * k1, dt)))
        border(stop, ow_n)

    def _fused_max(self, rows: list[Operand], col, ybase: Operand, first: int,
                   stop: int) -> None:
        """`_fused_row` for MaxPool: acc = select(acc > v, acc, v) per tap (x86 `vmaxps`, which
        keeps v on ties, as the general row's max does with signed zeros) and, for floats, a
        sticky isnan(v): a window holding a NaN gives NaN, as the general row's NaN-propagating
        max (a compare, a NaN test and a blend a tap) does."""
        b, g = self.b, self.g
        k1, n, ow_n = g.kernel[1], self.spatial[1], int(g.out[1])
        dt = self.y.dtype
        floats = dt.is_float

        def fold(acc: Operand, nan: Operand, xi: Operand) -> tuple[Operand, Operand]:
            v = b.load(self.x, xi)
            acc = b.op("select", b.op("gt", acc, v), acc, v)
            return acc, b.op("or", nan, b.op("isnan", v)) if floats else nan

        def result(acc: Operand, nan: Operand) -> Operand:
            return b.op("select", nan, const(math.nan, dt), acc) if floats else acc

        def border(lo: int, hi: int) -> None:
            if lo >= hi:
                return
            with b.loop(lo, hi, hint="w") as o:
                t_lo, t_hi = self.tap_range(1, o, n)
                acc = b.var(self.identity(), hint="acc")
                nan = b.var(const(False, DType.BOOL), hint="nan")
                for xrow in rows:
                    with b.loop(t_lo, t_hi, hint="tw") as t:
                        a, f = fold(acc, nan, b.iadd(xrow, col(o, t)))
                        b.assign(acc, "copy", a)
                        b.assign(nan, "copy", f)
                b.store(self.y, b.iadd(ybase, o), result(acc, nan))

        border(0, first)
        if first < stop:
            with b.loop(first, stop, hint="w") as o:
                acc, nan = self.identity(), const(False, DType.BOOL)
                for xrow in rows:
                    for t in range(k1):
                        acc, nan = fold(acc, nan, b.iadd(xrow, col(o, i64(t))))
                b.store(self.y, b.iadd(ybase, o), result(acc, nan))
        border(stop, ow_n)

    def _outer_taps(self, i: int, ranges: list, oo: list, taps: list, pos: list,
                    xrow: Operand, ybase: Operand, pl: Operand) -> None:
        b, g = self.b, self.g
        if i == self.k - 1:
            self._width(xrow, ybase, pos, pl)
            return
        lo, hi = ranges[i]
        with b.loop(lo, hi, hint=f"t{i}") as t:
            p = b.iadd(b.op("sub", b.imul(oo[i], g.strides[i]), i64(g.pb[i])),
                       b.imul(t, g.dilations[i]))
            self._outer_taps(i + 1, ranges, oo, taps + [t], pos + [p],
                             b.iadd(xrow, b.imul(p, self.xs[i])), ybase, pl)

    def _width(self, xrow: Operand, ybase: Operand, pos: list, pl: Operand) -> None:
        b, g, k = self.b, self.g, self.k - 1
        s, d, pb, kk, n = g.strides[k], g.dilations[k], g.pb[k], g.kernel[k], self.spatial[k]
        ow_n = int(g.out[k])
        first, stop = self._interior()

        def col(o: Operand, t: Operand) -> tuple[Operand, Operand]:
            c = b.iadd(b.op("sub", b.imul(o, s), i64(pb)), b.imul(t, d))
            return c, b.iadd(xrow, c)

        def border(lo_o: int, hi_o: int) -> None:
            if lo_o >= hi_o:
                return
            with b.loop(lo_o, hi_o, hint="w") as o:
                at = b.iadd(ybase, o)
                t_lo, t_hi = self.tap_range(k, o, n)
                acc = b.var(b.load(self.y, at), hint="acc")
                with b.loop(t_lo, t_hi, hint="tw") as t:
                    c, xi = col(o, t)
                    b.assign(acc, "copy", self.fold(acc, at, xi, pos + [c], pl))
                b.store(self.y, at, acc)

        border(0, first)
        if first < stop:
            if kk <= UNROLL_TAPS:
                with b.loop(first, stop, hint="w") as o:
                    at = b.iadd(ybase, o)
                    acc: Operand = b.load(self.y, at)
                    for t in range(kk):
                        c, xi = col(o, i64(t))
                        acc = self.fold(acc, at, xi, pos + [c], pl)
                    b.store(self.y, at, acc)
            else:
                with b.loop(0, kk, hint="tw") as t:
                    with b.loop(first, stop, hint="w") as o:
                        at = b.iadd(ybase, o)
                        c, xi = col(o, t)
                        b.store(self.y, at, self.fold(b.load(self.y, at), at, xi, pos + [c], pl))
        border(stop, ow_n)

    def _finish(self, oo: list, ybase: Operand) -> None:
        b, y = self.b, self.y
        dt = y.dtype
        k = self.k - 1
        if self.mode == "avg":
            rows = i64(1)
            for i in range(k):
                rows = b.op("mul", rows, self.count(i, oo[i]))
            with b.loop(0, int(self.g.out[k]), hint="w") as o:
                at = b.iadd(ybase, o)
                cnt = b.cast(b.op("mul", rows, self.count(k, o)), dt)
                b.store(y, at, b.op("div", b.load(y, at), cnt))
            return
        if self.p == 1:
            return
        with b.loop(0, int(self.g.out[k]), hint="w") as o:
            at = b.iadd(ybase, o)
            v = b.load(y, at)
            r = b.op("sqrt", v) if self.p == 2 else b.op("pow", v, const(1.0 / self.p, dt))
            b.store(y, at, r)


def pool_lower(ctx: LowerContext, node: Node) -> None:
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    ind = ctx.buf(node.outputs[1]) if len(node.outputs) > 1 and node.outputs[1] is not None \
        else None
    if y.numel == 0:
        return
    g = geometry(node, x.shape[2:])
    b = Builder()
    _Pool(b, node, x, y, ind, g).emit()
    ctx.kernel(node.op.lower(), b.body)


def global_lower(ctx: LowerContext, node: Node) -> None:
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    if y.numel == 0:
        return
    axes = list(range(2, len(x.shape)))
    b = Builder()
    p = _lp_p(node)
    name = {"GlobalAveragePool": "ReduceMean", "GlobalMaxPool": "ReduceMax"}.get(node.op)
    if name is None and p in (1.0, 2.0):
        name = "ReduceL1" if p == 1 else "ReduceL2"
    if name is not None:
        emit_reduce(b, name, x, y, axes)
    else:
        n = math.prod(x.shape[2:])
        dt = x.dtype
        with b.loop(0, y.numel, parallel=True, hint="p") as pl:
            base = b.imul(pl, n)
            acc = Lanes(b, const(0, dt), "add", n, hint="sum")
            acc.run(n, lambda j: b.op("pow", b.op("abs", b.load(x, b.iadd(base, j))),
                                      const(p, dt)))
            b.store(y, pl, b.op("pow", acc.result(), const(1.0 / p, dt)))
    ctx.kernel(node.op.lower(), b.body)


def unpool_lower(ctx: LowerContext, node: Node) -> None:
    """MaxUnpool: zero the output (parallel), then scatter x[j] to y[I[j]] in order (serial,
    so that a repeated index keeps the last value, as onnxruntime does)."""
    x, ind, y = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.outputs[0])
    if y.numel == 0:
        return
    base = [int(d) for d in unpool_shape(node, inferred=True)]  # type: ignore[union-attr]
    total = math.prod(base)
    b = Builder()
    with b.loop(0, y.numel, parallel=True, hint="i") as i:
        b.store(y, i, const(0, y.dtype))
    with b.loop(0, x.numel, hint="j") as j:
        at: Operand = b.load(ind, j)
        ok = b.op("and", b.op("ge", at, i64(0)), b.op("lt", at, i64(total)))
        b.check(ok, f"MaxUnpool: an index in I is outside the {total} elements of the "
                f"unpooled tensor (node {node.describe()})")
        if tuple(base) != y.shape:
            # The index addresses the unpooled shape, which sits in the output's corner.
            coords, rest = [], at
            for d in reversed(base):
                coords.append(b.op("rem", rest, i64(d)))
                rest = b.op("div", rest, i64(d))
            at = b.linear(coords[::-1], row_major_strides(y.shape))
        b.store(y, at, b.load(x, j))
    ctx.kernel("maxunpool", b.body)
