"""Loop nests of the pooling ops (the lowering half of `pooling.semantics`).

Windowed pools (MaxPool, AveragePool, LpPool), one kernel per node. Algorithm:
1) a parallel loop over the N*C planes, then loops over the output's outer spatial dims (all but
   the last, the width); for each, the range of taps that land inside the input is computed once
   per output row: lo = max(0, ceil((pb - o*s) / d)), hi = min(K, ceil((D + pb - o*s) / d));
2) the output row is set to the fold's identity (0; for max, each window's first real tap and
   its index, as the NaN rule of `pooling.max_rule` needs), then the outer taps run in their
   ranges and, for each, the width is folded straight into the output row (and the Indices
   row): the innermost loop runs over the output width, so it is contiguous in the output and
   strided by s in the input. The width splits at compile time into a left
   border, an interior where every tap is inside the input (no range arithmetic, taps unrolled
   when the kernel is narrow) and a right border, which computes its tap range per element;
   2-D max and average pools fuse the rows whose window rows all lie inside the input
   (`_fused_row`, see FUSED_ROWS): each column folds every tap and is stored once instead of
   being loaded and stored once per window row (at stride 1 in whole vectors, see OVERLAP);
   short rows of pools whose windows all lie inside run as one flat loop per plane instead
   (`pooling.flat`);
3) AveragePool divides by the per-window count (real taps, or taps inside [-pb, D + pe) with
   count_include_pad), a product of per-dim counts from the same range formulas; LpPool takes
   the p-th root. For float16/bfloat16 both run on f32 copies of X and Y and round once, as
   onnxruntime does (a window sum of float16 values overflows long before their mean).
Integer division in the loop IR truncates toward zero, so a ceil of a possibly negative
numerator is taken as max(0, (n + d - 1) / d) for lo (which only needs n >= 0 exact) and
min(K, ...) for hi, where a non-positive result correctly means an empty range.

Global pools are reductions over the spatial dims: they reuse `reductions.lowering.emit_reduce`
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
from onnxjit.ir.loops import Buffer, Operand, Size, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.conv.geometry import operand, smax, smin
from onnxjit.ir.ops.elementwise.arithmetic import int_attr
from onnxjit.ir.ops.normalization.lowering import Lanes
from onnxjit.ir.ops.pooling import fused_rows as fused
from onnxjit.ir.ops.pooling import max_rule
from onnxjit.ir.ops.pooling.flat import applies as flat_applies
from onnxjit.ir.ops.pooling.flat import lower_flat
from onnxjit.ir.ops.pooling.semantics import (
    Geometry,
    _lp_p,
    geometry,
    global_evaluate,
    global_infer,
    pool_evaluate,
    pool_infer,
    unpool_evaluate,
    unpool_infer,
    unpool_shape,
)
from onnxjit.ir.ops.reductions.lowering import emit_reduce
from onnxjit.ir.types import NARROW_FLOATS, DType

#: Kernel widths up to this are unrolled inside the loop over the output width.
UNROLL_TAPS = 8


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
        self.symbolic = not (x.is_static and y.is_static)  # run-time sizes: general rows
        self.drop = max_rule.drops_nan(g)  # MaxPool's rule for NaN taps

    # tap ranges ------------------------------------------------------------------------------
    def tap_range(self, i: int, o: Operand, end: int) -> tuple[Operand, Operand]:
        """[lo, hi) of the taps of dim i at output index o landing in [-pb, end - pb)."""
        b, g = self.b, self.g
        s, d, pb, kk = g.strides[i], g.dilations[i], g.pb[i], g.kernel[i]
        start = b.op("sub", b.imul(o, s), operand(pb))  # o*s - pb
        lo = b.op("max", i64(0), b.op("div", b.op("sub", i64(d - 1), start), i64(d)))
        hi = b.op("min", i64(kk), b.op("div", b.op("sub", operand(end + (d - 1)), start),
                                          i64(d)))
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
        take = max_rule.take(b, v, acc, self.drop, index=self.ind is not None)
        if self.ind is None:
            return b.op("select", take, v, acc)
        if self.colmajor:
            assert pos is not None
            flat = b.iadd(b.imul(plane, math.prod(self.spatial)), b.linear(pos, self.cs))
        else:
            flat = xi  # the flat input index is the row-major Indices value
        b.store(self.ind, at, b.op("select", take, flat, b.load(self.ind, at)))
        return b.op("select", take, v, acc)

    # the nest ----------------------------------------------------------------------------------
    def emit(self) -> None:
        b, g, x = self.b, self.g, self.x
        out = list(g.out)
        os_ = row_major_strides(out)
        xplane, oplane = math.prod(self.spatial), math.prod(out)
        planes = x.shape[0] * x.shape[1]
        fusable = not self.symbolic and fused.fusable(self)
        with b.loop(0, planes, parallel=True, hint="p") as pl:
            xb, yb = b.imul(pl, xplane), b.imul(pl, oplane)
            with b.nest(out[:-1]) as oo:
                ybase = b.iadd(yb, b.linear(oo, os_[:-1]))
                inside = fused.row_inside(self, oo[0]) if fusable else i64(0)
                if inside is None:  # no row's window reaches past the input's rows
                    fused.fused_row(self, oo[0], xb, ybase)
                elif fusable:
                    with b.loop(0, inside, hint="interior"):
                        fused.fused_row(self, oo[0], xb, ybase)
                    with b.loop(inside, 1, hint="border"):
                        self._general_row(oo, xb, ybase, pl)
                else:
                    self._general_row(oo, xb, ybase, pl)

    def _general_row(self, oo: list, xb: Operand, ybase: Operand, pl: Operand) -> None:
        """One output row, any geometry: the identity (max: the first real tap), then each
        outer tap folded in."""
        b, y = self.b, self.y
        ranges = [self.tap_range(i, oo[i], self.spatial[i]) for i in range(self.k - 1)]
        with b.loop(0, self.g.out[-1], hint="w") as w:
            if self.mode == "max":
                self._first_tap(oo + [w], ranges, xb, b.iadd(ybase, w), pl)
            else:
                b.store(y, b.iadd(ybase, w), self.identity())
        self._outer_taps(0, ranges, oo, [], [], xb, ybase, pl)
        if self.mode != "max":
            self._finish(oo, ybase)

    def _first_tap(self, o: list, ranges: list, xb: Operand, at: Operand, pl: Operand) -> None:
        """Starts output `at` (window `o`) at its first real tap, and its Indices there (the
        start `pooling.max_rule` needs); a window of padding only at -inf and index 0. The
        position is clamped into the input, so the load is safe either way."""
        b, g = self.b, self.g
        lo, hi = self.tap_range(self.k - 1, o[-1], self.spatial[-1])
        pos, real = [], b.op("lt", lo, hi)
        for i, (lo_i, hi_i) in enumerate(ranges + [(lo, hi)]):
            p = b.iadd(b.op("sub", b.imul(o[i], g.strides[i]), operand(g.pb[i])),
                       b.imul(lo_i, g.dilations[i]))
            pos.append(b.op("max", i64(0), b.op("min", p, operand(self.spatial[i] - 1))))
            if i < len(ranges):
                real = b.op("and", real, b.op("lt", lo_i, hi_i))
        xi = b.iadd(xb, b.linear(pos, self.xs))
        b.store(self.y, at, b.op("select", real, b.load(self.x, xi), self.identity()))
        if self.ind is not None:
            flat = xi
            if self.colmajor:
                flat = b.iadd(b.imul(pl, math.prod(self.spatial)), b.linear(pos, self.cs))
            b.store(self.ind, at, b.op("select", real, flat, i64(0)))

    def interior(self) -> tuple[Size, Size]:
        """[first, stop): the output columns whose taps all lie inside the input row
        (o*s - pb >= 0 and o*s - pb + (K-1)*d <= n - 1); `Sym`s in a symbolic program."""
        g = self.g
        s, d, pb, kk, n = g.strides[-1], g.dilations[-1], g.pb[-1], g.kernel[-1], self.spatial[-1]
        if self.symbolic:
            first = smin(g.out[-1], (pb + (s - 1)) // s)
            return first, smax(first, smin(g.out[-1], (n - 1 - (kk - 1) * d + pb) // s + 1))
        ow_n = int(g.out[-1])
        first = min(ow_n, -(-pb // s))
        last_num = n - 1 - (kk - 1) * d + pb
        return first, max(first, min(ow_n, last_num // s + 1 if last_num >= 0 else 0))

    def _outer_taps(self, i: int, ranges: list, oo: list, taps: list, pos: list,
                    xrow: Operand, ybase: Operand, pl: Operand) -> None:
        b, g = self.b, self.g
        if i == self.k - 1:
            self._width(xrow, ybase, pos, pl)
            return
        lo, hi = ranges[i]
        with b.loop(lo, hi, hint=f"t{i}") as t:
            p = b.iadd(b.op("sub", b.imul(oo[i], g.strides[i]), operand(g.pb[i])),
                       b.imul(t, g.dilations[i]))
            self._outer_taps(i + 1, ranges, oo, taps + [t], pos + [p],
                             b.iadd(xrow, b.imul(p, self.xs[i])), ybase, pl)

    def _width(self, xrow: Operand, ybase: Operand, pos: list, pl: Operand) -> None:
        b, g, k = self.b, self.g, self.k - 1
        s, d, pb, kk, n = g.strides[k], g.dilations[k], g.pb[k], g.kernel[k], self.spatial[k]
        ow_n = g.out[k]
        first, stop = self.interior()

        def col(o: Operand, t: Operand) -> tuple[Operand, Operand]:
            c = b.iadd(b.op("sub", b.imul(o, s), operand(pb)), b.imul(t, d))
            return c, b.iadd(xrow, c)

        def border(lo_o: Size, hi_o: Size) -> None:
            if not self.symbolic and lo_o >= hi_o:
                return
            # the edge columns and their taps in the window: a few each, at run-time bounds
            with b.loop(lo_o, hi_o, hint="w", few=self.symbolic) as o:
                at = b.iadd(ybase, o)
                t_lo, t_hi = self.tap_range(k, o, n)
                acc = b.var(b.load(self.y, at), hint="acc")
                with b.loop(t_lo, t_hi, hint="tw", few=self.symbolic) as t:
                    c, xi = col(o, t)
                    b.assign(acc, "copy", self.fold(acc, at, xi, pos + [c], pl))
                b.store(self.y, at, acc)

        border(0, first)
        if self.symbolic or first < stop:
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
            with b.loop(0, self.g.out[k], hint="w") as o:
                at = b.iadd(ybase, o)
                cnt = b.cast(b.op("mul", rows, self.count(k, o)), dt)
                b.store(y, at, b.op("div", b.load(y, at), cnt))
            return
        if self.p == 1:
            return
        with b.loop(0, self.g.out[k], hint="w") as o:
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
    if _whole_window(node, x, g):
        b = Builder()
        emit_reduce(b, "ReduceMean", x, y, list(range(2, len(x.shape))))
        ctx.kernel("averagepool_whole", b.body)
        return
    wide = node.op != "MaxPool" and x.dtype in NARROW_FLOATS
    if wide:  # sum in f32, round once: a float16 window sum overflows long before its mean
        x, y = _widened(ctx, x), ctx.scratch("pool_f32", DType.FLOAT, y.shape)
    b = Builder()
    pool = _Pool(b, node, x, y, ind, g)
    if pool.symbolic and any(p is None for p in g.pb + g.pe):
        raise TypeError("pads that depend on symbolic sizes")  # `lower_to_loops`: NotSymbolic
    if not pool.symbolic and flat_applies(pool):  # rows too short to vectorize: `pooling.flat`
        lower_flat(ctx, pool)
    else:
        pool.emit()
        ctx.kernel(node.op.lower(), b.body)
    if wide:
        _copy_cast(ctx, y, ctx.buf(node.outputs[0]))


#: Lower whole-window AveragePools as ReduceMean (`_whole_window`); False: the window path.
#: Measured on ResNet-50 (cold, fresh processes, Zen 3): the head's kernel 0.35 -> 0.02 s of
#: LLVM, compile + first call 4.90 -> 4.64 s (medians of 4); steady the same.
WHOLE = True


def _whole_window(node: Node, x: Buffer, g: Geometry) -> bool:
    """An AveragePool whose one window is the whole unpadded image (ResNet-50's, Inception's
    and DenseNet's 7x7 heads): the mean over the spatial axes, lowered as ReduceMean. The
    window path accumulated each window row into the output and LLVM vectorized its channel
    loop across channels (strided loads, 0.25-0.4 s of LoopLoadElimination for a kernel that
    runs microseconds); a reduction's rows are contiguous."""
    return (WHOLE and node.op == "AveragePool" and x.is_static
            and x.dtype in (DType.FLOAT, DType.DOUBLE)
            and all(o == 1 for o in g.out) and all(p == 0 for p in g.pb + g.pe)
            and tuple(g.kernel) == tuple(x.shape[2:]) and all(d == 1 for d in g.dilations))


def _widened(ctx: LowerContext, x: Buffer) -> Buffer:
    """An f32 copy of the narrow-float buffer x."""
    w = ctx.scratch("pool_in_f32", DType.FLOAT, x.shape)
    _copy_cast(ctx, x, w)
    return w


def _copy_cast(ctx: LowerContext, src: Buffer, dst: Buffer) -> None:
    b = Builder()
    with b.loop(0, src.numel, parallel=True, hint="i") as i:
        b.store(dst, i, b.cast(b.load(src, i), dst.dtype))
    ctx.kernel("pool_cast", b.body)


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
    elif not x.is_static:
        raise TypeError("GlobalLpPool of p other than 1 and 2 on run-time sizes")
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


# --------------------------------------------------------------------------- registration


op("MaxUnpool", (9, 11, 22), infer=unpool_infer, evaluate=unpool_evaluate,
   lower=unpool_lower, doc="scatter X into zeros at the flat indices I")

op("MaxPool", (1, 8, 10, 11, 12, 22), infer=pool_infer, evaluate=pool_evaluate,
   lower=pool_lower, symbolic=True, doc="maximum over each window (optional Indices output)")
op("AveragePool", (1, 7, 10, 11, 19, 22), infer=pool_infer, evaluate=pool_evaluate,
   lower=pool_lower, symbolic=True, doc="mean over each window (count_include_pad, ceil_mode)")
op("LpPool", (1, 2, 11, 18, 22), infer=pool_infer, evaluate=pool_evaluate,
   lower=pool_lower, symbolic=True, doc="(sum |x|^p)^(1/p) over each window")
op("GlobalAveragePool", (1, 22), infer=global_infer, evaluate=global_evaluate,
   lower=global_lower, symbolic=True, doc="mean over all spatial dims")
op("GlobalMaxPool", (1, 22), infer=global_infer, evaluate=global_evaluate,
   lower=global_lower, symbolic=True, doc="maximum over all spatial dims")
op("GlobalLpPool", (1, 2, 22), infer=global_infer, evaluate=global_evaluate,
   lower=global_lower, symbolic=True, doc="(sum |x|^p)^(1/p) over all spatial dims")
