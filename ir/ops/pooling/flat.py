"""Small 2-D max and average pools as one flat loop per plane.

The row loops of `pooling.lowering` vectorize along an output row; rows of a few outputs (13 in
SqueezeNet's last pool, 6 or 7 in AlexNet's and VGG's) are too short for that, and the
vectorizer leaves them scalar (a 3x3 s2 max over 512 planes of 27x27: 2.2x onnxruntime's time).
When every window lies inside the input (no padding reached, no ceil-mode overhang) and the
row stride sh*W is a multiple of the column stride sw, output (oy, ox) of a plane of width W
reads x[sw*j + ty*d0*W + tx*d1] with j = oy*V + ox, V = sh*W/sw: a fixed offset per tap from
sw*j. So, per plane:
1) one flat loop over j in [0, (oh-1)*V + ow) folds every tap of x at sw*j + offset into a
   scratch z[j]; the columns ox >= ow of each row are computed and thrown away (about sw times
   the useful work, in whole vectors; their reads stay inside the plane, since the last j is
   a real output);
2) z's first ow columns of each row are copied into y.
Parallel over at most CHUNKS blocks of planes, each block with its own slot of z. Each window
folds as the fused rows' interior does (`pooling.fused_rows.fold_window`: max as
select(v > acc, v, acc) with NaN taps by `pooling.max_rule`, averages summed in tap order and
divided by the window size), so the results are the same bits as the row loops'.
Used for windows at least 3 columns wide, column strides of 2 or more and rows of fewer than
MAX_COLS outputs. Measured, one thread, against the row loops: max 3x3 s2 from 27x27 (13
columns) 2.75x, from 13x13 1.44x, from 23x23 2.05x, from 11x11 1.25x; average 3x3 s2 from 13x13
1.27x. Not taken: 2x2 s2 rows (7 and 14 columns, max and average) vectorize as pairs of
adjacent loads and lost (0.84-0.94x); stride-1 rows were mixed (3x3 over 7, 8, 10 columns
1.42x, 1.05x, 1.16x; over 14 columns 0.84x); rows of 17 or more columns lost (3x3 s2 max over
17, 19, 27 columns 0.62-0.84x).
"""

from __future__ import annotations

from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.pooling.fused_rows import fold_window

#: Short rows of pools whose windows all lie inside take the flat loop; False: the row loops.
FLAT = True
#: Rows narrower than this take the flat loop (measured: see the module docstring).
MAX_COLS = 16
#: Blocks of planes run in parallel (each owns a slot of the scratch).
CHUNKS = 16


def applies(pool) -> bool:
    """Whether the `pooling.lowering._Pool` `pool` takes the flat loop."""
    g = pool.g
    if not (FLAT and pool.k == 2 and pool.ind is None and pool.mode in ("max", "avg")
            and all(isinstance(o, int) for o in g.out)):
        return False
    (_, w), (oh, ow) = pool.spatial, g.out
    if not 0 < ow < MAX_COLS or oh < 2 or g.kernel[1] < 3 or g.strides[1] < 2:
        return False
    for n, o, s, d, k, pb in zip(pool.spatial, g.out, g.strides, g.dilations, g.kernel, g.pb):
        if pb != 0 or (o - 1) * s + (k - 1) * d >= n:
            return False
    return g.strides[0] * w % g.strides[1] == 0


def lower_flat(ctx: LowerContext, pool) -> None:
    """The kernel of the module docstring for `pool` (`applies` must hold)."""
    g, x, y = pool.g, pool.x, pool.y
    (h, w), (oh, ow) = pool.spatial, (int(o) for o in g.out)
    (sh, sw), (d0, d1), (k0, k1) = g.strides, g.dilations, g.kernel
    v = sh * w // sw
    zlen = (oh - 1) * v + ow
    planes = x.shape[0] * x.shape[1]
    per = -(-planes // min(planes, CHUNKS))
    nch = -(-planes // per)
    z = ctx.scratch("pool_flat", y.dtype, (nch, zlen))
    offsets = [t0 * d0 * w + t1 * d1 for t0 in range(k0) for t1 in range(k1)]
    b = Builder()
    with b.loop(0, nch, parallel=True, hint="u") as u:
        zbase = b.imul(u, zlen)
        p0 = b.imul(u, per)
        with b.loop(p0, b.op("min", b.iadd(p0, i64(per)), i64(planes)), hint="p") as pl:
            xb = b.imul(pl, h * w)
            with b.loop(0, zlen, hint="j") as j:
                at = b.iadd(xb, b.imul(j, sw))
                taps = [b.iadd(at, i64(off)) for off in offsets]
                b.store(z, b.iadd(zbase, j), fold_window(pool, b, taps))
            yb = b.imul(pl, oh * ow)
            with b.loop(0, oh, hint="oy") as oy:
                yrow, zrow = b.iadd(yb, b.imul(oy, ow)), b.iadd(zbase, b.imul(oy, v))
                with b.loop(0, ow, hint="ox") as ox:
                    b.store(y, b.iadd(yrow, ox), b.load(z, b.iadd(zrow, ox)))
    ctx.kernel(f"{pool.node.op.lower()}_flat", b.body)
