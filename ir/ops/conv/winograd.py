"""Conv 3x3, stride 1, one group: Winograd F(2x2, 3x3) (Lavin & Gray, "Fast Algorithms for
Convolutional Neural Networks", 2016).

Each 2x2 block of outputs of a channel (a tile) needs a 4x4 patch d of every input channel.
With U = G g G^T (the 4x4 transform of the 3x3 kernel g, at compile time from the constant
weights) and V = B^T d B (the patch's transform), the tile is A^T (sum_c U_c * V_c) A, the
product elementwise: 16 multiply-adds per input channel for 4 outputs instead of 36. The sum
over channels, for the 16 positions xi of the 4x4 transforms, is 16 matrix products
M_xi (M x tiles) = U_xi (M x C) @ V_xi (C x tiles): the tiled GEMM does 2.25x fewer flops.

Lowering, one kernel parallel over blocks u = (image, R tile rows of the output):
1) input transform: per channel and tile of the block, load the 4x4 patch (zeros outside the
   image: a tile column whose 4 input columns are inside loads without checks, the edge
   columns clamp the index and select 0, rows select 0 per tile row), V = B^T d B (adds and
   subtracts only), store V_xi[c, t] into the block's scratch; the block has at most NR tiles
   (one packed panel of the GEMM: its packed layout is then plain rows of T);
2) 16 `Matmul`s M_xi = U_xi @ V_xi (U a constant laid out (16, M, C); V `b_packed`);
3) output transform: per channel and tile, Y = A^T M A (plus Y's old value when the caller
   filled it with the bias), storing only the outputs inside the image (odd output sizes);
4) the epilogue (bias, activation, residual of a FusedConv) on the block's output rows.
Every block has R tile rows (`block_tile_rows`), so one product code serves them all (a Matmul's
sizes are compile-time): the last block's rows past the image are transformed from zeros and
multiplied, but never stored; only its epilogue, over fewer output rows, is a second guarded
copy. The 16 products are one loop over xi around one Matmul. With fewer blocks than
`conv.blocking.MIN_TASKS` (batch-1 deep layers: a 14x14 output is one block), the input
transforms run first as a parallel kernel of their own over chunks of input channels
(`c_split`), then the products, output transforms and epilogue over chunks of output channels
(`m_split`), so both threads have work. A batch whose transforms would take more than
`PANEL_BYTES` of scratch runs in passes of fewer images.

Numerics: B and A hold 0 and +-1, G halves; the sums differ from im2col's in order and in
the rounding of U and V, within float tolerance (the tests compare against the reference at
1e-4 relative). `applies` keeps the im2col path for small convs, where the transforms cost
more than they save, and for shapes this lowering does not cover (other kernels, strides,
dilations, groups, outputs wider than 2 * NR).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Matmul, Operand, i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.blocking import c_split, for_chunk, m_split
from onnxjit.ir.ops.conv.geometry import PANEL_BYTES
from onnxjit.ir.ops.conv.packed_panels import packed_width
from onnxjit.ir.types import DType

if TYPE_CHECKING:  # conv.conv imports this module
    from onnxjit.ir.ops.conv.geometry import EpilogueHook, Geometry, Load

#: Use F(2x2, 3x3) where `applies`; False keeps every conv on im2col + GEMM.
WINOGRAD = True
#: Prefer an even number of blocks to an odd one of 3-15 when a block height scoring as well
#: gives one (28x28 outputs: 14 blocks of one tile row, not 7 of two): on two threads the
#: thread left with the odd block made the other wait a block's time. Measured against
#: False, two threads: ResNet-like 1.002-1.025x (the wait in its three 28x28 convs 190 ->
#: 0-5 us each), SqueezeNet 1.016-1.025x, ResNet-50 1.009x.
EVEN_TILE_ROWS = True
#: Fewest input and output channels and tiles per image for which the transforms pay off
#: (a 7x7 output is 16 tiles: 3x3 512->512 there 1.35x faster than im2col, one thread).
MIN_CHANNELS, MIN_TILES = 16, 16

_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
_KRON_G = np.kron(_G, _G)  # [4i + j, 3k + l] = G[i, k] * G[j, l]


def _tiles(gm: Geometry) -> tuple[int, int]:
    """(tile rows, tile columns) of the output."""
    return -(-gm.out[0] // 2), -(-gm.out[1] // 2)


def block_tile_rows(gm: Geometry, nr: int) -> int:
    """Tile rows per block (R): at most one packed panel (NR tiles) a block; of the R that
    fit, the one with the best product of lane use (T tiles in 16-lane vectors) and useful
    rows (the last block computes R rows even when fewer are left), then the widest; an odd
    number (3-15) of blocks is made even by an R scoring as well (`EVEN_TILE_ROWS`)."""
    th, tw = _tiles(gm)

    def score(r: int) -> tuple[float, int]:
        t = r * tw
        return th / (-(-th // r) * r) * t / (-(-t // 16) * 16), r

    fits = range(1, max(1, min(th, nr // tw)) + 1)
    best = max(fits, key=score)
    blocks, use = -(-th // best), score(best)[0]
    if EVEN_TILE_ROWS and blocks % 2 and 3 <= blocks <= 15:
        return max((r for r in fits if -(-th // r) % 2 == 0 and score(r)[0] >= use),
                   default=best)
    return best


def _panel_width(gm: Geometry, dtype: DType) -> int | None:
    """The GEMM's packed-panel width (NR) for this conv's products, None when they are too
    small for the tiled kernel (probed with at most one panel's worth of tiles)."""
    th, tw = _tiles(gm)
    return packed_width(dtype, gm.m, min(th * tw, 64), gm.c)


def plain_3x3(gm: Geometry, w: Buffer, dtype: DType, min_channels: int) -> bool:
    """A stride-1, undilated, ungrouped 3x3 conv of f32/f64 by constant finite weights, with at
    least `min_channels` in and out: what F(2x2, 3x3) can take (static or run-time sizes). An
    infinite or NaN weight goes to im2col, whose sums are the references' (0 * inf on the
    padding is NaN there; the transforms would spread it differently)."""
    a = gm.a
    return (WINOGRAD and len(gm.k) == 2 and list(gm.k) == [3, 3] and gm.g == 1
            and tuple(a.strides) == (1, 1) and tuple(a.dilations) == (1, 1)
            and dtype in (DType.FLOAT, DType.DOUBLE) and w.dtype == dtype
            and w.kind == "const" and w.data is not None and min(gm.c, gm.m) >= min_channels
            and bool(np.isfinite(w.data).all()))


def applies(gm: Geometry, w: Buffer, dtype: DType) -> bool:
    """True when F(2x2, 3x3) lowers this conv (see the module docstring)."""
    if not plain_3x3(gm, w, dtype, MIN_CHANNELS):
        return False
    th, tw = _tiles(gm)
    nr = _panel_width(gm, dtype)
    return nr is not None and tw <= nr and th * tw >= MIN_TILES


def xi_stride(elems: int, itemsize: int) -> int:
    """Elements from V_xi (or M_xi) of `elems` elements to V_xi+1: one cache line more, so
    that the 16 stores (or loads) of a tile's transform fall in different L1 sets (C x T
    floats is often a multiple of 4096 bytes: all 16 streams in one 8-way set). Measured in
    one process, two threads, Zen 3, both orders: this lowering 512->512 at 7x7 1.06x, 64->64
    at 28x28 1.07x, 256->256 at 14x14 1.00x; without it `winograd_runtime`'s blocks of two
    panels (96->24 at 160x120) were slower than one panel, with it faster."""
    return elems + 64 // itemsize


def weight_transform(w: np.ndarray) -> np.ndarray:
    """U laid out (16, M, C): U[4i + j, m, c] = (G w[m, c] G^T)[i, j], in float64 then
    rounded once to w's dtype. One product by kron(G, G) (U[4i+j] = sum over k, l of
    G[i,k] G[j,l] w[k,l]): 11 ms for 512 x 512 filters, where a three-operand einsum took
    92 ms (a third of ResNet-50's compile-time numpy work). The results are the einsum's:
    G's entries are 0, +-1/2 and 1, so the float64 sums are exact (in any order) unless a
    filter's nine weights span some 29 binary orders of magnitude."""
    m, c = w.shape[:2]
    u = _KRON_G @ w.reshape(m * c, 9).T.astype(np.float64)
    return u.astype(w.dtype).reshape(16, m, c)


def lower_winograd(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                   accumulate: bool, load: Load, epilogue: EpilogueHook | None) -> None:
    """The kernel of the module docstring (`applies` must hold); with fewer blocks than
    MIN_TASKS, two kernels split the work over threads as `conv.blocking.m_split` does:
    the input transforms in chunks of input channels, then the products, output transforms
    and epilogues in chunks of output channels."""
    dt = x.dtype
    th, tw = _tiles(gm)
    nr = _panel_width(gm, dt)
    assert nr is not None and w.data is not None
    rows = block_tile_rows(gm, nr)
    nblk = -(-th // rows)
    t = rows * tw
    # images per pass: the scratch of a pass stays under PANEL_BYTES (as im2col's panels do)
    per_image = nblk * 16 * (gm.c + gm.m) * t * dt.itemsize
    chunk = max(1, min(gm.n, PANEL_BYTES // per_image))
    tasks = chunk * nblk
    ms, mc = m_split(gm, tasks, gm.n * gm.m * gm.p * gm.c * 9, dt.itemsize)
    u_buf = ctx.constant("wino_u", weight_transform(w.data))
    v_buf = ctx.scratch("wino_v", dt, (tasks, 16 * xi_stride(gm.c * t, dt.itemsize)))
    m_buf = ctx.scratch("wino_m", dt, (tasks, 16 * xi_stride(gm.m * t, dt.itemsize)))
    for n0 in range(0, gm.n, chunk):
        plan = _Plan(gm, x, y, load, n0, nblk, rows, tw, nr, accumulate, epilogue, u_buf,
                     v_buf, m_buf)
        _kernels(ctx, plan, min(chunk, gm.n - n0) * nblk, ms, mc)


def _kernels(ctx: LowerContext, plan: _Plan, tasks: int, ms: int, mc: int) -> None:
    """The kernel(s) of one pass over `tasks` blocks (see `lower_winograd`)."""
    gm = plan.gm
    b = Builder()
    if ms == 1:
        with b.loop(0, tasks, parallel=True, hint="u") as u:
            block = plan.block(b, u)
            block.input(0, gm.c)
            block.product(0, gm.m)
        ctx.kernel("conv_winograd", b.body)
        return
    cs = c_split(gm, tasks)
    cc = gm.c // cs
    with b.loop(0, tasks * cs, parallel=True, hint="v") as v:
        block = plan.block(b, b.op("div", v, i64(cs)))
        c0 = b.imul(b.op("rem", v, i64(cs)), cc)
        block.input(c0, b.iadd(c0, i64(cc)))
    ctx.kernel("conv_winograd_in", b.body)
    b = Builder()
    with b.loop(0, tasks * ms, parallel=True, hint="v") as v:
        block = plan.block(b, b.op("div", v, i64(ms)))
        for_chunk(b, b.op("rem", v, i64(ms)), ms, mc, gm.m, block.product)
    ctx.kernel("conv_winograd", b.body)


class _Plan:
    """What every block shares: sizes, buffers and the caller's choices."""

    def __init__(self, gm: Geometry, x: Buffer, y: Buffer, load: Load, n0: int, nblk: int,
                 rows: int, tw: int, nr: int, accumulate: bool, epilogue: EpilogueHook | None,
                 u_buf: Buffer, v_buf: Buffer, m_buf: Buffer):
        self.gm, self.x, self.y, self.load, self.n0 = gm, x, y, load, n0
        self.nblk, self.rows, self.tw, self.nr, self.t = nblk, rows, tw, nr, rows * tw
        self.vx = xi_stride(gm.c * self.t, x.dtype.itemsize)
        self.mx = xi_stride(gm.m * self.t, x.dtype.itemsize)
        self.th = _tiles(gm)[0]
        self.accumulate, self.epilogue = accumulate, epilogue
        self.u_buf, self.v_buf, self.m_buf = u_buf, v_buf, m_buf

    def block(self, b: Builder, u: Operand, slot: Operand | None = None) -> _Block:
        """Block u, its V and M in scratch slot `slot` (default u)."""
        return _Block(b, self, u, u if slot is None else slot)


class _Block:
    """The code of block u = (image, R tile rows) (see `lower_winograd`)."""

    def __init__(self, b: Builder, plan: _Plan, u: Operand, slot: Operand):
        gm, nblk = plan.gm, plan.nblk
        self.b, self.p, self.gm = b, plan, gm
        img, self.blk = (b.op("div", u, i64(nblk)), b.op("rem", u, i64(nblk))) \
            if nblk > 1 else (u, i64(0))
        self.img = b.iadd(img, i64(plan.n0))
        self.tr0 = b.imul(self.blk, plan.rows)
        self.vbase = b.imul(slot, 16 * plan.vx)
        self.mbase = b.imul(slot, 16 * plan.mx)

    def product(self, m0: Operand | int, mrows: int) -> None:
        """Output channels [m0, m0 + mrows): the 16 products, the output transform, the
        epilogue."""
        b, gm, p = self.b, self.gm, self.p
        m0 = i64(m0) if isinstance(m0, int) else m0
        t, th = p.t, p.th
        with b.loop(0, 16, hint="xi") as xi:
            b.emit(Matmul(p.m_buf, b.iadd(self.mbase, b.iadd(b.imul(xi, p.mx),
                                                              b.imul(m0, t))), t,
                          p.u_buf, b.iadd(b.imul(xi, gm.m * gm.c), b.imul(m0, gm.c)), gm.c,
                          p.v_buf, b.iadd(self.vbase, b.imul(xi, p.vx)), p.nr,
                          mrows, t, gm.c, b_packed=True))
        # the last block's rows past the image are computed (on zeros) but never stored
        valid = b.op("min", i64(p.rows), b.op("sub", i64(th), self.tr0)) if th % p.rows \
            else i64(p.rows)
        self.output(valid, m0, b.iadd(m0, i64(mrows)))
        if p.epilogue is None:
            return
        oh, ow = gm.out
        off = b.iadd(b.iadd(b.imul(self.img, gm.m * gm.p), b.imul(m0, gm.p)),
                     b.imul(self.tr0, 2 * ow))
        last_rows = oh - 2 * (p.nblk - 1) * p.rows  # output rows of the last block
        if last_rows == 2 * p.rows:
            p.epilogue(b, off, gm.p, mrows, 2 * p.rows * ow, m0)
            return
        full = b.op("select", b.op("lt", self.blk, i64(p.nblk - 1)), i64(1), i64(0))
        with b.loop(0, full, hint="full"):
            p.epilogue(b, off, gm.p, mrows, 2 * p.rows * ow, m0)
        with b.loop(full, 1, hint="last"):
            p.epilogue(b, off, gm.p, mrows, last_rows * ow, m0)

    def input(self, c0: Operand | int, c1: Operand | int) -> None:
        """V_xi[c, r*tw + j] = (B^T d B)[xi] of tile (tr0 + r, j), channels [c0, c1)."""
        b, gm, p = self.b, self.gm, self.p
        tw, t = p.tw, p.t
        ih, iw = gm.ins
        pt, pl = gm.begin
        zero = const(0, p.x.dtype)
        # tile columns whose 4 input columns are all inside the image
        lo = min(tw, (pl + 1) // 2)
        hi = max(lo, min(tw, (iw - 4 + pl) // 2 + 1))
        with b.loop(c0, c1, hint="c") as c:
            plane = b.imul(b.iadd(b.imul(self.img, gm.c), c), ih * iw)
            with b.loop(0, p.rows, hint="r") as r:
                iy0 = b.iadd(b.imul(b.iadd(self.tr0, r), 2), i64(-pt))
                rowinfo = []
                for a in range(4):
                    iy = b.iadd(iy0, i64(a))
                    ok = b.op("and", b.op("ge", iy, i64(0)), b.op("lt", iy, i64(ih)))
                    yc = b.op("min", b.op("max", iy, i64(0)), i64(ih - 1))
                    rowinfo.append((ok, b.iadd(plane, b.imul(yc, iw))))
                for j0, j1, check in ((0, lo, True), (lo, hi, False), (hi, tw, True)):
                    if j0 >= j1:
                        continue
                    with b.loop(j0, j1, hint="j") as j:
                        ix0 = b.iadd(b.imul(j, 2), i64(-pl))
                        d = [[self._at(rowinfo[a], ix0, col, iw, check, zero)
                              for col in range(4)] for a in range(4)]
                        v = _bt_d_b(b, d)
                        at = b.iadd(b.iadd(self.vbase, b.imul(c, t)),
                                    b.iadd(b.imul(r, tw), j))
                        for xi in range(16):
                            b.store(p.v_buf, b.iadd(at, i64(xi * p.vx)), v[xi])

    def _at(self, row: tuple[Operand, Operand], ix0: Operand, col: int, iw: int, check: bool,
            zero: Operand) -> Operand:
        """x at (row, ix0 + col), 0 outside the image."""
        b = self.b
        ok, base = row
        ix = b.iadd(ix0, i64(col))
        if check:
            ok = b.op("and", ok, b.op("and", b.op("ge", ix, i64(0)), b.op("lt", ix, i64(iw))))
            ix = b.op("min", b.op("max", ix, i64(0)), i64(iw - 1))
        return b.op("select", ok, self.p.load(b, b.iadd(base, ix)), zero)

    def output(self, rows: Operand, m0: Operand, m1: Operand) -> None:
        """Y (+)= A^T M A per channel in [m0, m1) and tile of tile rows [tr0, tr0 + rows);
        a tile's second row or column is stored only where the image has it (odd sizes)."""
        b, gm = self.b, self.gm
        oh = gm.out[0]
        with b.loop(m0, m1, hint="m") as m:
            ybase = b.imul(b.iadd(b.imul(self.img, gm.m), m), gm.p)
            with b.loop(0, rows, hint="r") as r:
                oy = b.imul(b.iadd(self.tr0, r), 2)
                if oh % 2 == 0:
                    self._row(ybase, oy, r, m, 2)
                else:
                    both = b.op("select", b.op("lt", b.iadd(oy, i64(1)), i64(oh)), i64(1),
                                i64(0))
                    with b.loop(0, both, hint="rows2"):
                        self._row(ybase, oy, r, m, 2)
                    with b.loop(both, 1, hint="rows1"):
                        self._row(ybase, oy, r, m, 1)

    def _row(self, ybase: Operand, oy: Operand, r: Operand, m: Operand, out_rows: int) -> None:
        """The tiles of tile row r of channel m, storing `out_rows` output rows each."""
        b, gm, p = self.b, self.gm, self.p
        tw, t, y = p.tw, p.t, p.y
        ow = gm.out[1]
        segments = ((0, tw - 1, 2), (tw - 1, tw, 1)) if ow % 2 else ((0, tw, 2),)
        for j0, j1, out_cols in segments:
            if j0 >= j1:
                continue
            with b.loop(j0, j1, hint="j") as j:
                at = b.iadd(b.iadd(self.mbase, b.imul(m, t)), b.iadd(b.imul(r, tw), j))
                mt = [b.load(p.m_buf, b.iadd(at, i64(xi * p.mx))) for xi in range(16)]
                out = _at_m_a(b, mt)
                ox = b.imul(j, 2)
                for dy in range(out_rows):
                    for dx in range(out_cols):
                        yat = b.iadd(ybase, b.iadd(b.imul(b.iadd(oy, i64(dy)), ow),
                                                   b.iadd(ox, i64(dx))))
                        v = out[2 * dy + dx]
                        b.store(y, yat, b.op("add", b.load(y, yat), v) if p.accumulate else v)


def _bt_d_b(b: Builder, d: list[list[Operand]]) -> list[Operand]:
    """B^T d B of a 4x4 patch, row-major (16 values): rows then columns, each
    (d0 - d2, d1 + d2, d2 - d1, d1 - d3)."""
    def bt(v: list[Operand]) -> list[Operand]:
        return [b.op("sub", v[0], v[2]), b.op("add", v[1], v[2]), b.op("sub", v[2], v[1]),
                b.op("sub", v[1], v[3])]

    e = [bt([d[a][col] for a in range(4)]) for col in range(4)]  # e[col][i]
    rows = [bt([e[col][i] for col in range(4)]) for i in range(4)]
    return [rows[i][j] for i in range(4) for j in range(4)]


def _at_m_a(b: Builder, mt: list[Operand]) -> list[Operand]:
    """A^T m A of a 4x4 (row-major) -> 2x2 (row-major): rows then columns, each
    (m0 + m1 + m2, m1 - m2 - m3)."""
    def at(v: list[Operand]) -> list[Operand]:
        return [b.op("add", b.op("add", v[0], v[1]), v[2]),
                b.op("sub", b.op("sub", v[1], v[2]), v[3])]

    cols = [at([mt[4 * i + j] for i in range(4)]) for j in range(4)]  # cols[j][r]
    return [v for r in range(2) for v in at([cols[j][r] for j in range(4)])]
