"""Depthwise 2-D Conv through a zero-padded, stride-phased copy of each input plane.

The direct depthwise nest (`conv.depthwise_direct.lower_depthwise`) runs its vector loops along one
output row: on small images (14 or 28 columns) and with strides (strided loads) most of its time
goes to loop overhead, remainders and the border taps. This lowering gives the vectorizer one long
contiguous loop per plane instead. For X (N, C, H, W), kernel (kh, kw), strides (sh, sw), dilation
1, Y (N, M, oh, ow):

1) The input plane, zero-padded, is split into sh*sw phase planes:
   P[py, px][R, C] = Xpad[R*sh + py, C*sw + px], each of Rp = oh + (kh-1)//sh rows of
   Wp = ow + (kw-1)//sw columns (plus (kw-1)//sw zero slack so the flat loop below stays in
   bounds). Output (oy, ox) then reads tap (ty, tx) at P[ty%sh, tx%sw][oy + ty//sh,
   ox + tx//sw]: for every tap a fixed offset from the flat index oy*Wp + ox.
2) One flat loop over i in [0, oh*Wp) sums `bias + sum_t w_t * P_t[i + off_t]` (the tap
   order of the direct nest) into a scratch Z (oh, Wp); the columns ox >= ow of each row are
   computed and thrown away.
3) Z's first ow columns of each row are copied to Y's plane, each through the fused conv's
   epilogue (if any) on its way (`FUSED_COPY`; at a run-time width in whole vectors).
The work is parallel over `CHUNKS` blocks of (image, channel) planes; each block owns one
slot of the phase scratch, zeroed once (every plane writes the same interior positions, so
the padding stays zero), and one of Z (a buffer of its own, so no aliasing is left to check).
Used for 2-D outputs at most `MAX_WIDTH` wide, dilation 1, kernels of at most `MAX_TAPS` taps,
and types that accumulate in their own type (f32, f64); the caller keeps the direct nest
otherwise. Wider rows lose (measured on MobileNetV2 shapes, see `MAX_WIDTH`): there the copy
passes cost more than the short-row overheads they remove, also when the planes are processed
in bands of rows that fit the L1 cache (tried: 0.85-0.99x of the direct nest at ow 56-112).
Sizes may be `Sym`s (a symbolic program, `conv.runtime_sizes`): every size above is then an
expression of the input dims and the loops run to run-time bounds; a symbolic program takes
this lowering at every width (`symbolic_applies`), since its direct nest would pay for the
edge taps' run-time ranges on every row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, Size, i64
from onnxjit.ir.narrow import accumulator
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.blocking import host_tile, runtime_vectors
from onnxjit.ir.ops.conv.geometry import is_static, operand, smax, smin

if TYPE_CHECKING:  # conv.conv imports this module when it lowers
    from onnxjit.ir.ops.conv.geometry import Geometry
    from onnxjit.ir.ops.fused.epilogue import Epilogue

#: blocks of planes run in parallel (each owns a slot of the scratch buffers)
CHUNKS = 16
#: largest kernel (taps) summed in one flat pass
MAX_TAPS = 64
#: widest output row taken: single-thread interleaved timings of Conv+Clip (MobileNetV2
#: shapes, 3x3) against the direct nest: ow 14 s2 3.9x, ow 14 s1 2.2x, ow 28 s1 1.28x,
#: ow 28 s2 1.03x, ow 56 s1 0.96x, ow 112 s1 0.82x (the extra copy passes no longer pay)
MAX_WIDTH = 32
#: largest scratch (phase planes and Z) of one plane: tall images keep the direct nest
#: rather than stream a plane's copy through memory
MAX_SCRATCH_BYTES = 256 << 10
#: A fused conv's epilogue runs in the copy of Z's rows to Y, not as a pass over Y after it.
#: Measured, two threads, 3x3 + Clip against the pass: 384ch at 14x14 1.2x, 192ch at 28x28
#: stride 2 1.1x (the specialised program), whole MobileNetV2-like within noise.
FUSED_COPY = True
#: A symbolic program copies Z's rows (of a width only a call knows) in whole vectors
#: (`blocking.runtime_vectors`): as a loop of run-time trip count each 14-column row was a call
#: of memcpy (then a pass for the epilogue), or with the epilogue fused, scalar remainders.
#: Measured, one thread, 384ch at 14x14 + Clip: 54 -> 50 us (unfused: a memcpy a row); the
#: scatter's rows and the flat sum in whole vectors gained nothing (the scatter's memcpy calls
#: are as fast), so they keep their loops.
RUNTIME_VECTORS = True


def _ceil_div(a: Size, b: Size) -> Size:
    return -(-a // b) if is_static(a, b) else (a + (b - 1)) // b


def _sizes(gm: Geometry) -> tuple[Size, Size, Size]:
    """(Wp, elements of one phase plane, elements of all phase planes)."""
    (oh, ow), (kh, kw), (sh, sw) = gm.out, gm.k, gm.a.strides
    wp = ow + (kw - 1) // sw
    plane = (oh + (kh - 1) // sh) * wp + (kw - 1) // sw
    return wp, plane, sh * sw * plane


def phased_applies(gm: Geometry, y: Buffer) -> bool:
    """Whether `lower_depthwise_phased` handles this geometry and dtype."""
    a = gm.a
    if not (len(gm.out) == 2 and gm.out[-1] <= MAX_WIDTH and all(d == 1 for d in a.dilations)
            and gm.kprod <= MAX_TAPS and accumulator(y.dtype) == y.dtype and y.dtype.is_float):
        return False
    wp, _, phases = _sizes(gm)
    return (phases + gm.out[0] * wp) * y.dtype.itemsize <= MAX_SCRATCH_BYTES


def symbolic_applies(gm: Geometry, y: Buffer) -> bool:
    """Whether a symbolic program's depthwise conv takes this lowering (any width)."""
    return (len(gm.out) == 2 and all(d == 1 for d in gm.a.dilations) and gm.kprod <= MAX_TAPS
            and accumulator(y.dtype) == y.dtype and y.dtype.is_float)


def lower_depthwise_phased(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                           bias: Buffer | None, epilogue: Epilogue | None = None) -> None:
    """Depthwise conv of geometry `gm` (`geometry.Geometry`) as described in the module
    docstring; a fused conv's `epilogue` (`fused.epilogue.Epilogue`) runs in the copy to Y
    (FUSED_COPY) or as a pass over each plane."""
    a = gm.a
    lanes = host_tile(y.dtype.itemsize)[0]
    # rows only a call knows run as whole vectors (`blocking.runtime_vectors`)
    vectors = RUNTIME_VECTORS and not is_static(gm.out[-1], gm.ins[-1])
    (oh, ow), (kh, kw), (sh, sw) = gm.out, gm.k, a.strides
    rp = oh + (kh - 1) // sh
    wp, plane, phases = _sizes(gm)
    zlen = oh * wp
    nq = gm.n * gm.m
    per = _ceil_div(nq, smin(nq, CHUNKS))
    nch = _ceil_div(nq, per)
    s = ctx.scratch("dw_phases", y.dtype, (nch, phases))
    z = ctx.scratch("dw_rows", y.dtype, (nch, zlen))  # apart from `s`: no aliasing to check
    zero = const(0, y.dtype)
    b = Builder()
    with b.loop(0, nch, parallel=True, hint="u") as u:
        sbase, zbase = b.imul(u, phases), b.imul(u, zlen)
        with b.loop(0, phases, hint="z") as j:
            b.store(s, b.iadd(sbase, j), zero)
        q0 = b.imul(u, per)
        q1 = b.op("min", b.iadd(q0, operand(per)), operand(nq))
        with b.loop(q0, q1, hint="q") as q:
            n, m = ((b.op("div", q, i64(gm.m)), b.op("rem", q, i64(gm.m)))
                    if not is_static(gm.n) or gm.n > 1 else (i64(0), q))
            ch = b.op("div", m, i64(gm.mg)) if gm.mg > 1 else m
            xbase = b.imul(b.iadd(b.imul(n, gm.c), ch), gm.in_plane)
            _scatter(b, gm, x, s, xbase, sbase, rp, wp, plane)
            init = zero if bias is None else b.load(bias, m)
            wbase = b.imul(m, gm.kprod)
            wv = [b.load(w, b.iadd(wbase, i64(t)), hint="w") for t in range(gm.kprod)]
            with b.loop(0, zlen, hint="i") as i:
                acc: Operand = init
                for ty in range(kh):
                    for tx in range(kw):
                        off = ((ty % sh) * sw + tx % sw) * plane + (ty // sh) * wp + tx // sw
                        xv = b.load(s, b.iadd(b.iadd(sbase, operand(off)), i))
                        acc = b.op("add", acc, b.op("mul", wv[ty * kw + tx], xv))
                b.store(z, b.iadd(zbase, i), acc)
            ybase = b.imul(q, gm.p)
            fuse = epilogue is not None and FUSED_COPY
            per_row = epilogue.per_row(b, m) if fuse else {}  # type: ignore[union-attr]
            with b.loop(0, oh, hint="oy") as oy:
                yrow, zrow = b.iadd(ybase, b.imul(oy, ow)), b.iadd(zbase, b.imul(oy, wp))

                def copy(ox: Operand, yrow: Operand = yrow, zrow: Operand = zrow,
                         oy: Operand = oy) -> None:
                    v, at = b.load(z, b.iadd(zrow, ox)), b.iadd(yrow, ox)
                    if fuse:
                        v = epilogue.value(b, v, at, b.iadd(b.imul(oy, ow), ox), per_row)
                    b.store(y, at, v)

                _columns(b, i64(0), operand(ow), lanes if vectors else 0, copy, "ox")
            if epilogue is not None and not fuse:
                epilogue.emit(b, ybase, gm.p, 1, gm.p, m)
    from onnxjit.ir.ops.conv.geometry import CONTRACT

    ctx.kernel("conv_depthwise_phased", b.body, contract=CONTRACT)


def _columns(b: Builder, lo: Operand, hi: Operand, lanes: int,
             column: Callable[[Operand], None], hint: str) -> None:
    """column(i) for i in [lo, hi): in whole vectors of `lanes` (`blocking.runtime_vectors`),
    or one loop when `lanes` is 0."""
    if lanes:
        runtime_vectors(b, lo, hi, lanes, column)
        return
    with b.loop(lo, hi, hint=hint) as i:
        column(i)


def _scatter(b: Builder, gm: Geometry, x: Buffer, s: Buffer, xbase: Operand, sbase: Operand,
             rp: Size, wp: Size, plane: Size) -> None:
    """Copy the input plane at `xbase` into its phase planes (positions fixed at compile
    time: input row R*sh + py - pt, column C*sw + px - pl). The column phases of one row are
    written by one loop over the columns every phase has (sw adjacent loads per iteration,
    which the vectorizer turns into wide loads and shuffles), plus edge loops per phase
    (`few` loops in a symbolic program: a column or two each, kept scalar)."""
    (ih, iw), (sh, sw), (pt, pl) = gm.ins, gm.a.strides, gm.begin
    cols = []
    for px in range(sw):
        c0 = smax(0, _ceil_div(pl - px, sw))
        cols.append((px, c0, smax(c0, smin(wp, _ceil_div(iw + pl - px, sw)))))
    lo = cols[0][1]
    for c in cols[1:]:
        lo = smax(lo, c[1])
    hi = cols[0][2]
    for c in cols[1:]:
        hi = smin(hi, c[2])
    hi = smax(lo, hi)
    for py in range(sh):
        r0 = smax(0, _ceil_div(pt - py, sh))
        r1 = smin(rp, _ceil_div(ih + pt - py, sh))
        if is_static(r0, r1) and r0 >= r1:
            continue
        with b.loop(r0, r1, hint="r") as r:
            xrow = b.iadd(xbase, b.iadd(b.imul(r, sh * iw), operand((py - pt) * iw - pl)))
            srow = b.iadd(sbase, b.iadd(b.imul(r, wp), operand(py * sw * plane)))
            pieces = [(lo, hi, cols)] + [(a, z, [c]) for c in cols
                                          for a, z in ((c[1], smin(c[2], lo)),
                                                       (smax(c[1], hi), c[2]))]
            for a, z, which in pieces:
                if is_static(a, z) and a >= z:
                    continue
                # a phase's edge columns: a column or two, at run-time bounds when symbolic
                edge = which is not cols and not is_static(a, z)
                with b.loop(a, z, hint="c", few=edge) as c:
                    for px, _, _ in which:
                        v = b.load(x, b.iadd(xrow, b.iadd(b.imul(c, sw), i64(px))))
                        b.store(s, b.iadd(srow, b.iadd(c, operand(px * plane))), v)
