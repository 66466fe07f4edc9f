"""Winograd F(2x2, 3x3) with run-time sizes: `conv.winograd` for a symbolic program.

The transforms are `conv.winograd`'s (U = G g G^T at compile time, V = B^T d B, Y = A^T M A);
what changes is the blocking, since the output's tile grid (th x tw tiles of 2x2) is only
known at run time. Algorithm:
1) the tiles of an image are numbered row-major (t = row * tw + column) and cut into blocks of
   T = P * NR consecutive tiles (P packed panels of the GEMM's B, so V_xi of a block is P
   C x width row-major panels, the last of cnt - (P-1)*NR columns, cnt = min(T, th*tw - t0)
   at run time; `block_panels` picks P by the hinted sizes); a block touches a few tile
   rows and, in each, a run-time segment of columns, cut where a panel ends (the edge
   tiles of step 2 find their panel one by one instead: a second loop around each edge cost
   LLVM time, the symbolic OCR detector's compile +8%, for a tile or two);
2) input transform: per channel, tile row and segment, the tile columns split into those
   whose 4 input columns are inside the image (no checks; `Sym` bounds from the dims table)
   and the edge ones (clamped loads and a select), rows select 0 outside;
3) 16 `Matmul`s M_xi (M x cnt, ldc = T) = U_xi (M x C) @ V_xi (C x cnt, `b_packed`);
4) output transform, per output channel and tile: Y = A^T M A, the second row and column
   stored only where the image has them, each value through the epilogue (bias, activation,
   residual: `fused.epilogue.Epilogue.value`) before its store.
Blocks are dealt to `parts` parallel iterations, each with its own V and M slot (scratch
independent of the image size); with fewer blocks than `blocking.MIN_TASKS` by the hints, the
input transforms run first over (block, chunk of input channels), then the products and
output transforms over (block, chunk of output channels), as `conv.winograd` does.
`applies`: the conditions of `winograd.applies` (MIN_CHANNELS, MIN_TILES), tile counts
taken from the size hints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Matmul, Operand, i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.blocking import MIN_TASKS, c_split, for_chunk, m_split
from onnxjit.ir.ops.conv.geometry import Geometry, operand, smax, smin
from onnxjit.ir.ops.conv.winograd import (
    MIN_CHANNELS,
    MIN_TILES,
    _at_m_a,
    _bt_d_b,
    plain_3x3,
    weight_transform,
    xi_stride,
)
from onnxjit.ir.symbolic import hint
from onnxjit.ir.types import DType

if TYPE_CHECKING:
    from onnxjit.ir.ops.fused.epilogue import Epilogue

#: It takes every conv `winograd.applies` would by the hints: against the symbolic im2col
#: lowering (`conv.runtime_sizes`), two threads, Intel AVX-512 host, one conv with run-time
#: H and W: 96->24 at 160x160 1.76x, at 60x60 1.99x, 24->96 at 40x40 1.43x, 16->32 at 16x50
#: 1.52x, 32->32 at 56x56 1.61x, 48->48 at 32x320 1.56x, 64->64 at 8x25 (52 tiles) 1.44x,
#: 128->128 at 6x40 1.75x, 256->256 at 8x8 1.33x, 16->16 at 128x128 1.00x; static wide
#: images (`runtime_sizes.wide_winograd`) 16->20 at 13x29 1.74x, 16->16 at 64x256 1.82x,
#: 32->32 at 32x320 1.88x, 24->24 at 40x300 2.13x; the bench's OCR detector stream (five
#: 96->24 convs in its head) 1.24x. (Floors of 64 channels and 128 tiles on 16-lane hosts,
#: set from earlier measurements, kept those convs on im2col.)
#: A block is up to MAX_PANELS packed panels of NR tiles while its V (16 x C x tiles) stays
#: within BLOCK_V_BYTES and the hinted tiles make BLOCKS_PER_THREAD blocks a thread: each
#: channel's input rows are then read in longer runs and the products are wider. Measured in
#: one process against one panel, two threads, Zen 3, both compile orders (the program compiled
#: second ran 5-20% faster whatever it was), with V_xi a cache line apart (`_Plan.vx`):
#: symbolic 96->24 at 160x120 1.12x, 32->32 at 56x112 1.12x, 64->64 at 12x160 1.25x; static
#: 96->24 at 160x120 1.11x, 48->48 at 32x320 1.24x, 64->64 at 56x56 1.00x.
MAX_PANELS, BLOCK_V_BYTES, BLOCKS_PER_THREAD = 4, 256 * 1024, 4


def applies(gm: Geometry, w: Buffer, dtype: DType) -> bool:
    """True when this lowering takes the conv (see the module docstring)."""
    if not plain_3x3(gm, w, dtype, MIN_CHANNELS):
        return False
    th, tw = (hint(gm.out[0]) + 1) // 2, (hint(gm.out[1]) + 1) // 2
    return th * tw >= MIN_TILES


def lower_winograd_runtime(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                           nr: int, parts_per_thread: int, epilogue: Epilogue | None) -> None:
    """The kernels of the module docstring (`applies` must hold)."""
    dt = x.dtype
    assert w.data is not None
    plan = _Plan(gm, x, y, nr, block_panels(gm, nr, dt.itemsize, ctx.num_threads), epilogue)
    u_buf = ctx.constant("wino_u", weight_transform(w.data))
    tasks = gm.n * plan.nblk
    tasks_hint = hint(tasks)
    ms, mc = m_split(gm, tasks_hint, hint(gm.n) * gm.m * hint(gm.p) * gm.c * 9, dt.itemsize) \
        if tasks_hint < MIN_TASKS else (1, gm.m)
    vsize, msize = 16 * plan.vx, 16 * plan.mx
    if ms == 1:
        slots = parts_per_thread * ctx.num_threads
        parts = smin(tasks, slots)
        v_buf = ctx.scratch("wino_v", dt, (slots, vsize))
        m_buf = ctx.scratch("wino_m", dt, (slots, msize))
        b = Builder()
        with b.loop(0, parts, parallel=True, hint="t") as t:
            u0 = b.op("div", b.op("mul", t, operand(tasks)), operand(parts))
            u1 = b.op("div", b.op("mul", b.iadd(t, i64(1)), operand(tasks)), operand(parts))
            with b.loop(u0, u1, hint="u") as u:
                blk = _Block(b, plan, u, b.imul(t, vsize), b.imul(t, msize), u_buf, v_buf, m_buf)
                blk.input(i64(0), i64(gm.c))
                blk.product(i64(0), gm.m)
        ctx.kernel("conv_winograd", b.body)
        return
    v_buf = ctx.scratch("wino_v", dt, (tasks, vsize))
    m_buf = ctx.scratch("wino_m", dt, (tasks, msize))
    cs = c_split(gm, tasks_hint)
    cc = gm.c // cs
    b = Builder()
    with b.loop(0, b.imul(operand(tasks), cs), parallel=True, hint="v") as v:
        u = b.op("div", v, i64(cs))
        blk = _Block(b, plan, u, b.imul(u, vsize), b.imul(u, msize), u_buf, v_buf, m_buf)
        c0 = b.imul(b.op("rem", v, i64(cs)), cc)
        blk.input(c0, b.iadd(c0, i64(cc)))
    ctx.kernel("conv_winograd_in", b.body)
    b = Builder()
    with b.loop(0, b.imul(operand(tasks), ms), parallel=True, hint="v") as v:
        u = b.op("div", v, i64(ms))
        blk = _Block(b, plan, u, b.imul(u, vsize), b.imul(u, msize), u_buf, v_buf, m_buf)
        for_chunk(b, b.op("rem", v, i64(ms)), ms, mc, gm.m, blk.product)
    ctx.kernel("conv_winograd", b.body)


def block_panels(gm: Geometry, nr: int, itemsize: int, threads: int) -> int:
    """Packed panels (of NR tiles) a block: as many as MAX_PANELS while a block's V stays
    within BLOCK_V_BYTES and the (hinted) tiles still make BLOCKS_PER_THREAD blocks a
    thread."""
    per_panel = 16 * gm.c * nr * itemsize
    tiles = hint(gm.n) * ((hint(gm.out[0]) + 1) // 2) * ((hint(gm.out[1]) + 1) // 2)
    by_tasks = tiles // (nr * BLOCKS_PER_THREAD * max(1, threads))
    return max(1, min(MAX_PANELS, BLOCK_V_BYTES // per_panel, by_tasks))


class _Plan:
    """Sizes every block shares (`Sym`s where the image's are)."""

    def __init__(self, gm: Geometry, x: Buffer, y: Buffer, nr: int, panels: int,
                 epilogue: Epilogue | None):
        self.gm, self.x, self.y, self.epilogue = gm, x, y, epilogue
        self.nr, self.panels = nr, panels
        self.t = nr * panels  # tiles per block
        # elements from V_xi to V_xi+1 and from M_xi to M_xi+1 (a cache line apart)
        self.vx = xi_stride(gm.c * self.t, x.dtype.itemsize)
        self.mx = xi_stride(gm.m * self.t, x.dtype.itemsize)
        self.th, self.tw = (gm.out[0] + 1) // 2, (gm.out[1] + 1) // 2
        self.tiles = self.th * self.tw
        self.nblk = (self.tiles + (self.t - 1)) // self.t
        ih, iw = gm.ins
        pl = gm.begin[1]
        # tile columns whose 4 input columns are all inside the image
        self.lo = smin(self.tw, (pl + 1) // 2)
        self.hi = smax(self.lo, smin(self.tw, (iw + (pl - 4)) // 2 + 1))


class _Block:
    """The code of block u = (image, block of T tiles)."""

    def __init__(self, b: Builder, plan: _Plan, u: Operand, vbase: Operand, mbase: Operand,
                 u_buf: Buffer, v_buf: Buffer, m_buf: Buffer):
        self.b, self.p, self.gm = b, plan, plan.gm
        nblk = operand(plan.nblk)
        self.img, blk = b.op("div", u, nblk), b.op("rem", u, nblk)
        self.t0 = b.imul(blk, plan.t)
        self.cnt = b.op("min", i64(plan.t), b.op("sub", operand(plan.tiles), self.t0))
        self.vbase, self.mbase = vbase, mbase
        self.u_buf, self.v_buf, self.m_buf = u_buf, v_buf, m_buf

    def _rows(self, fn) -> None:
        """fn(r, j0, j1, i0) for each tile row r the block touches: its columns [j0, j1),
        the block's tile index of column 0 being i0 (may be negative)."""
        b, tw = self.b, operand(self.p.tw)
        t1 = b.iadd(self.t0, self.cnt)
        r0 = b.op("div", self.t0, tw)
        r1 = b.iadd(b.op("div", b.op("sub", t1, i64(1)), tw), i64(1))
        with b.loop(r0, r1, hint="r") as r:
            i0 = b.op("sub", b.op("mul", r, tw), self.t0)
            j0 = b.op("max", b.op("neg", i0), i64(0))
            j1 = b.op("min", b.op("sub", self.cnt, i0), tw)
            fn(r, j0, j1, i0)

    def input(self, c0: Operand, c1: Operand) -> None:
        """V_xi[c, i] = (B^T d B)[xi] of the block's tile i, channels [c0, c1)."""
        b, gm, p = self.b, self.gm, self.p
        ih, iw = gm.ins
        pt, pl = gm.begin
        zero = const(0, p.x.dtype)
        lo, hi = operand(p.lo), operand(p.hi)
        with b.loop(c0, c1, hint="c") as c:
            plane = b.imul(b.iadd(b.imul(self.img, gm.c), c), gm.in_plane)

            def row(r: Operand, j0: Operand, j1: Operand, i0: Operand) -> None:
                iy0 = b.iadd(b.imul(r, 2), operand(0 - pt))
                rowinfo = []
                for a in range(4):
                    iy = b.iadd(iy0, i64(a))
                    ok = b.op("and", b.op("ge", iy, i64(0)), b.op("lt", iy, operand(ih)))
                    yc = b.op("min", b.op("max", iy, i64(0)), operand(ih + -1))
                    rowinfo.append((ok, b.iadd(plane, b.imul(yc, iw))))
                m0, m1 = b.op("max", j0, lo), b.op("min", j1, hi)
                for s0, s1, check in ((j0, b.op("min", j1, lo), True), (m0, m1, False),
                                      (b.op("max", j0, hi), j1, True)):
                    if check:  # an edge: a tile or two, each finds its panel
                        self._transform(rowinfo, lambda j: self._tile_at(c, b.iadd(i0, j)),
                                        s0, s1, True, zero)
                        continue
                    self._panel_runs(c, i0, s0, s1, lambda vrow, ja, jb: self._transform(
                        rowinfo, lambda j: b.iadd(vrow, b.iadd(i0, j)), ja, jb, False, zero))

            self._rows(row)

    def _panel_runs(self, c: Operand, i0: Operand, s0: Operand, s1: Operand, fn) -> None:
        """fn(vrow, ja, jb) for the runs of tile columns [s0, s1) of a row (block tile index
        i0 + j) that lie in one packed panel of V: vrow is V_0's row c of that panel, minus
        the panel's first tile index (so tile i is at vrow + i)."""
        b, p = self.b, self.p
        if p.panels == 1:  # one panel of cnt columns
            fn(b.iadd(self.vbase, b.op("mul", c, self.cnt)), s0, s1)
            return
        nr = p.nr
        pa = b.op("div", b.iadd(i0, s0), i64(nr))
        pb = b.op("div", b.iadd(b.iadd(i0, s1), i64(nr - 1)), i64(nr))
        with b.loop(pa, pb, hint="pn") as pn:
            first = b.imul(pn, nr)
            ja = b.op("max", s0, b.op("sub", first, i0))
            jb = b.op("min", s1, b.op("sub", b.iadd(first, i64(nr)), i0))
            fn(self._vrow(c, first), ja, jb)

    def _vrow(self, c: Operand, first: Operand) -> Operand:
        """V_0's row c of the packed panel whose first tile is `first` (of width min(NR,
        cnt - first)), minus `first`: tile i of the panel is at the result + i."""
        b, p = self.b, self.p
        width = b.op("min", i64(p.nr), b.op("sub", self.cnt, first))
        base = b.iadd(self.vbase, b.iadd(b.imul(first, p.gm.c), b.op("mul", c, width)))
        return b.op("sub", base, first)

    def _tile_at(self, c: Operand, i: Operand) -> Operand:
        """Where V_0[c, tile i of the block] is: in panel i // NR (`_vrow`)."""
        b, p = self.b, self.p
        if p.panels == 1:
            return b.iadd(self.vbase, b.iadd(b.op("mul", c, self.cnt), i))
        return b.iadd(self._vrow(c, b.imul(b.op("div", i, i64(p.nr)), p.nr)), i)

    def _transform(self, rowinfo: list, at_of, s0: Operand, s1: Operand, check: bool,
                   zero: Operand) -> None:
        """The input transform of the tile columns [s0, s1) of a row into V, tile j's V_0
        element at at_of(j) (see `input`)."""
        b, gm, p = self.b, self.gm, self.p
        pl = gm.begin[1]
        iw = gm.ins[1]
        with b.loop(s0, s1, hint="j", few=check) as j:  # the edges: a tile or two
            ix0 = b.iadd(b.imul(j, 2), operand(0 - pl))
            d = [[self._at(rowinfo[a], ix0, col, iw, check, zero)
                  for col in range(4)] for a in range(4)]
            v = _bt_d_b(b, d)
            at = at_of(j)
            for xi in range(16):
                b.store(self.v_buf, b.iadd(at, i64(xi * p.vx)), v[xi])

    def _at(self, row: tuple[Operand, Operand], ix0: Operand, col: int, iw: object,
            check: bool, zero: Operand) -> Operand:
        """x at (row, ix0 + col), 0 outside the image."""
        b = self.b
        ok, base = row
        ix = b.iadd(ix0, i64(col))
        if check:
            ok = b.op("and", ok, b.op("and", b.op("ge", ix, i64(0)),
                                      b.op("lt", ix, operand(iw))))  # type: ignore[arg-type]
            ix = b.op("min", b.op("max", ix, i64(0)), operand(iw + -1))  # type: ignore
        return b.op("select", ok, b.load(self.p.x, b.iadd(base, ix)), zero)

    def product(self, m0: Operand | int, mrows: int) -> None:
        """Output channels [m0, m0 + mrows): the 16 products, then the output transform."""
        b, gm, p = self.b, self.gm, self.p
        m0 = i64(m0) if isinstance(m0, int) else m0
        t = p.t
        with b.loop(0, 16, hint="xi") as xi:
            b.emit(Matmul(self.m_buf, b.iadd(self.mbase, b.iadd(b.imul(xi, p.mx),
                                                                 b.imul(m0, t))), t,
                          self.u_buf, b.iadd(b.imul(xi, gm.m * gm.c), b.imul(m0, gm.c)), gm.c,
                          self.v_buf, b.iadd(self.vbase, b.imul(xi, p.vx)), p.nr,
                          mrows, self.cnt, gm.c, b_packed=True))  # type: ignore[arg-type]
        self.output(m0, b.iadd(m0, i64(mrows)))

    def output(self, m0: Operand, m1: Operand) -> None:
        """Y = A^T M A per channel in [m0, m1) and tile of the block."""
        b, gm, p = self.b, self.gm, self.p
        oh, ow = gm.out
        half = operand(ow // 2)  # tiles with both output columns
        with b.loop(m0, m1, hint="m") as m:
            ybase = b.imul(b.iadd(b.imul(self.img, gm.m), m), gm.p)
            per_row = p.epilogue.per_row(b, m) if p.epilogue is not None else {}

            def row(r: Operand, j0: Operand, j1: Operand, i0: Operand) -> None:
                oy = b.imul(r, 2)
                both = b.op("select", b.op("lt", b.iadd(oy, i64(1)), operand(oh)), i64(1),
                            i64(0))
                for lo, hi, rows in ((i64(0), both, 2), (both, i64(1), 1)):
                    with b.loop(lo, hi, hint=f"rows{rows}"):
                        for s0, s1, cols in ((j0, b.op("min", j1, half), 2),
                                             (b.op("max", j0, half), j1, 1)):
                            self._tiles(m, ybase, oy, i0, s0, s1, rows, cols, per_row)

            self._rows(row)

    def _tiles(self, m: Operand, ybase: Operand, oy: Operand, i0: Operand, j0: Operand,
               j1: Operand, rows: int, cols: int, per_row: dict) -> None:
        b, gm, p = self.b, self.gm, self.p
        ow = gm.out[1]
        with b.loop(j0, j1, hint="j", few=cols == 1) as j:  # one column: the last tile alone
            at = b.iadd(b.iadd(self.mbase, b.imul(m, p.t)), b.iadd(i0, j))
            mt = [b.load(self.m_buf, b.iadd(at, i64(xi * p.mx))) for xi in range(16)]
            out = _at_m_a(b, mt)
            ox = b.imul(j, 2)
            for dy in range(rows):
                for dx in range(cols):
                    yat = b.iadd(ybase, b.iadd(b.imul(b.iadd(oy, i64(dy)), ow),
                                               b.iadd(ox, i64(dx))))
                    v = out[2 * dy + dx]
                    if p.epilogue is not None:
                        v = p.epilogue.value(b, v, yat, yat, per_row)
                    b.store(p.y, yat, v)
