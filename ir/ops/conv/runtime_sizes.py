"""Conv with run-time sizes: one lowering for every batch, height and width of a symbolic program.

In a symbolic program (`ir.symbolic`) X's batch and spatial dims may be `Sym`s, so the
compile-time choices of `conv.conv` (blocks that divide the output, tap ranges as int pairs)
are not available. Channels, kernel and weights stay static (the weights are packed as ever);
only the position counts are run-time. Algorithm:

0) 3x3 stride-1 convs with enough channels and (by the hints) tiles: Winograd F(2x2, 3x3)
   over blocks of tiles of run-time count (`conv.winograd_runtime`); when only the batch is
   run-time, the specialised Winograd's code per image instead (`conv.winograd_batch`);
1) general convs (C/G > 1, not pointwise): the flat output positions P = prod(out) of each
   (image, group) are cut into blocks of `cols` positions, a compile-time multiple of the
   GEMM's packed panel width NR chosen from the size hints (`_block_cols`: a panel of about
   BLOCK_BYTES, as `conv.blocking.block_rows` does, the hinted positions in equal blocks); the
   number of blocks ceil(P / cols) and a block's width min(cols, P - q) are run-time. A block's
   im2col panel is written in the packed-B layout (`packed_panels.emit_panel_at`: whole NR-
   column panels, then an edge panel of run-time width), multiplied by one `Matmul` W_g (M/G x
   K) x panel -> Y[q, q + width) (run-time n, ldc = P), and the epilogue (bias, fused
   activation) runs on that block while it is in cache. Tap ranges are `Sym` expressions of the
   input sizes (`geometry.valid_range`), loaded once per kernel from the dims table.
   Scratch: the blocks are dealt to `parts` parallel iterations (PARTS_PER_THREAD per
   thread), each running its share in order in one panel of its own, so the scratch is a few
   panels whatever the image size. When the hints give fewer blocks than `blocking.MIN_TASKS`
   (a deep layer of a small image), every panel is built first (in parallel over blocks and
   chunks of input channels, `blocking.c_split`), then the products run in parallel over
   chunks of output channels (`blocking.m_split`), as the specialised lowering does.
   When only the batch is run-time and K is small (a stem), the specialised lowering's blocks
   of output rows per image instead (`conv.im2col_batch`).
2) pointwise convs (1x1, stride 1, no padding): X's channels already are the panel; per block
   of positions one `Matmul` reads X in place (ldb = P), then the epilogue. The blocks are
   ceil(P / cols) of equal width, chosen at run time (`_Blocks` with `even`): with the hinted
   P's blocks, a narrower image left a block of a few columns beside full ones, one thread
   idle for most of the conv (OCR recognizer, hint 448 wide, at 224: 15-80 us a conv).
3) depthwise (C/G == 1): the stride-phased flat loop per plane (`conv.depthwise_phased`, at
   rows up to PHASED_WIDTH by the hints), else the direct nest (`conv.depthwise_runtime`).
Bias: through the epilogue (`fused.epilogue.Epilogue`), so the products overwrite Y.

Static programs borrow step 0 (`wide_winograd`): the specialised Winograd (`conv.winograd`)
keeps a block's tiles within one row of tiles and wants products the size of a packed panel,
so it declines images more than a panel (NR) of tiles wide and convs of few channels, which
im2col would then take; the numbering of step 0 has neither limit, and with constant sizes
its bounds fold. Measured, two threads, Zen 3, against static im2col: 96->24 at 160x120 2.1x
(the PP-OCR-style detector's head), 32->32 at 56x112 2.2x, 128->128 at 14x120 1.9x, 48->48 at
32x320 2.3x, 16->16 at 24x24 1.9x, 16->24 at 28x28 2.3x.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Buffer, Matmul, Operand, i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv import im2col_batch, winograd
from onnxjit.ir.ops.conv.blocking import (
    BLOCK_BYTES,
    EVEN_BLOCKS,
    MIN_BLOCK_COLS,
    MIN_PANEL_COLS,
    MIN_TASKS,
    SPLIT_WORK,
    WEIGHT_BYTES,
    c_split,
    for_chunk,
    m_split,
)
from onnxjit.ir.ops.conv.geometry import EpilogueHook, Geometry, Load, operand, smin
from onnxjit.ir.ops.conv.input_phases import Source, input_source
from onnxjit.ir.ops.conv.packed_panels import emit_panel_at
from onnxjit.ir.ops.conv.winograd_batch import batch_only, lower_winograd_batch
from onnxjit.ir.ops.conv.winograd_runtime import applies as winograd_applies
from onnxjit.ir.ops.conv.winograd_runtime import lower_winograd_runtime
from onnxjit.ir.symbolic import hint
from onnxjit.ir.types import DType

if TYPE_CHECKING:
    from onnxjit.ir.ops.fused.epilogue import Epilogue

#: Depthwise convs whose output rows are at most this wide by the hints take the phased flat
#: loop (`depthwise_phased`), wider ones the direct nest (`depthwise_runtime`). Measured, one
#: thread, 3x3: phased at 56 and 112 columns 1.9-2.3x slower than the direct nest, at 28 as fast
#: as the specialised lowering (which takes the phased loop up to 32 columns).
PHASED_WIDTH = 32
#: Parallel iterations per thread the blocks of a conv are dealt to (each with its own panel).
PARTS_PER_THREAD = 2
#: static convs the specialised Winograd declines take step 0 (False: im2col, for tests)
WIDE_WINOGRAD = True
#: A pointwise conv of at most SMALL_P positions by the hints is one block of positions (its
#: output channels split over the threads, `blocking.m_split`), as `blocking.pointwise_blocks`
#: takes a static one: by the cache rule alone, 64->384 at 14x14 was two blocks of 112 and 84
#: positions. Measured, two threads, against the specialised program: that conv 0.85x ->
#: 0.97x; 384->64 at 14x14, 32->192 at 28x28 and 16->96 at 112x112 unchanged
SMALL_P = 256


def _nr(dtype: DType) -> int:
    from onnxjit.codegen.kernel_shapes import panel_width  # lazy: ir/ must not load llvmlite

    return panel_width(dtype.itemsize)


def _block_cols(gm: Geometry, itemsize: int, nr: int) -> int:
    """Positions per block: a panel of about BLOCK_BYTES, at least MIN_PANEL_COLS (or
    MIN_BLOCK_COLS with large weights), at most the hinted P, in whole NR panels; an odd
    number of a few blocks (3 to 15 in all) one more (`blocking.EVEN_BLOCKS`: on two threads
    the 224x224 stem's 3 blocks ran as 2 + 1. Measured, two threads, interleaved: 3->32 3x3
    stride 2 at 224x224 against the specialised program 0.75x -> 0.98x; at 320x320 and
    160x160, 48x320 and three deeper stride-2 convs unchanged)."""
    fits = BLOCK_BYTES // max(1, gm.kk * itemsize)
    need = MIN_BLOCK_COLS if gm.mg * gm.kk * itemsize > WEIGHT_BYTES else MIN_PANEL_COLS
    cols, p = max(fits, need), hint(gm.p)
    nblk = -(-p // max(1, cols))
    if EVEN_BLOCKS and nblk % 2 and 1 < nblk and hint(gm.n) * gm.g * nblk < 16:
        cols = -(-p // (nblk + 1))
    return _balanced(p, cols, nr)


def _balanced(p: int, cols: int, unit: int) -> int:
    """Block width for about p positions in blocks of at most `cols` (whole `unit`s): as many
    blocks as that takes, equally wide, so the last is not a sliver (196 positions in
    blocks of 192 would leave a product of 4 columns)."""
    nblk = max(1, -(-p // max(1, cols)))
    per = -(-p // nblk)
    return max(unit, -(-per // unit) * unit)


class _Blocks:
    """Block u = (image, group, block of `cols` positions) of a conv of run-time P. With
    `even`, `cols` is the widest block and the width is chosen at run time: ceil(P / cols)
    blocks of equal width in whole `even` units (the last one narrower by less than a unit),
    so that the blocks of every P take equal time, not only those of the hinted P."""

    def __init__(self, gm: Geometry, cols: int, even: int = 0):
        self.gm, self.cols, self.even = gm, cols, even
        self.nblk = (gm.p + (cols - 1)) // cols
        self.tasks = gm.n * gm.g * self.nblk

    def width(self, b: Builder) -> Operand:
        """Positions per block: `cols`, or with `even` the run-time equal width."""
        if not self.even:
            return i64(self.cols)
        nblk = operand(self.nblk)
        per = b.op("div", b.iadd(operand(self.gm.p), b.op("sub", nblk, i64(1))), nblk)
        return b.imul(b.op("div", b.iadd(per, i64(self.even - 1)), i64(self.even)), self.even)

    def split(self, b: Builder, u: Operand, cols: Operand | None = None
              ) -> tuple[Operand, Operand, Operand, Operand]:
        """(image, group, first position, width) of block u; `cols` from `width` (the
        compile-time width when None)."""
        gm = self.gm
        cols = i64(self.cols) if cols is None else cols
        nblk = operand(self.nblk)
        blk, rest = b.op("rem", u, nblk), b.op("div", u, nblk)
        g = b.op("rem", rest, i64(gm.g)) if gm.g > 1 else i64(0)
        img = b.op("div", rest, i64(gm.g)) if gm.g > 1 else rest
        q = b.op("mul", blk, cols)
        width = b.op("max", i64(0), b.op("min", cols, b.op("sub", operand(gm.p), q)))
        return img, g, q, width


def _panel(b: Builder, col: Buffer, colbase: Operand, x: Buffer, gm: Geometry, img: Operand,
           g: Operand, q: Operand, width: Operand, nr: int, src: Source,
           chans: tuple[Operand, Operand]) -> None:
    """The packed panel of positions [q, q + width): whole NR panels, then the edge one."""
    full = b.op("div", width, i64(nr))
    with b.loop(0, full, hint="pn") as pi:
        emit_panel_at(b, col, colbase, x, gm, img, g, q, pi, nr, nr, src, chans)
    rest = b.op("sub", width, b.imul(full, nr))
    has_rest = b.op("select", b.op("gt", rest, i64(0)), i64(1), i64(0))
    with b.loop(0, has_rest, hint="edge"):
        emit_panel_at(b, col, colbase, x, gm, img, g, q, full, nr, rest, src, chans)


def _product(b: Builder, gm: Geometry, y: Buffer, w: Buffer, bm: Buffer, b_off: Operand,
             ldb: object, img: Operand, g: Operand, q: Operand, width: Operand,
             m0: Operand, rows: int, packed: bool, epilogue: EpilogueHook | None) -> None:
    """Y[img, g*mg + m0 + (0..rows), q..q+width] = W rows x B, then the epilogue."""
    row0 = b.iadd(b.imul(g, gm.mg), m0)
    c_off = b.iadd(b.iadd(b.imul(img, gm.m * gm.p), b.imul(row0, gm.p)), q)
    b.emit(Matmul(y, c_off, gm.p, w, b.imul(row0, gm.kk), gm.kk, bm, b_off, ldb,  # type: ignore
                  rows, width, gm.kk, b_packed=packed))  # type: ignore[arg-type]
    if epilogue is not None:
        epilogue(b, c_off, gm.p, rows, width, row0)  # type: ignore[arg-type]


def lower_runtime_conv(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                       load: Load, epi: Epilogue | None) -> None:
    """Conv with C/G > 1 of run-time positions (see the module docstring, 0 to 2)."""
    isz = y.dtype.itemsize
    work = hint(gm.n) * gm.g * gm.mg * hint(gm.p) * gm.kk
    epilogue = None if epi is None else epi.emit
    if gm.pointwise:
        _pointwise(ctx, gm, x, w, y, epilogue, work)
        return
    nr = _nr(y.dtype)
    if ctx.fast_algorithms and winograd_applies(gm, w, y.dtype):
        lower_winograd_runtime(ctx, gm, x, w, y, nr, PARTS_PER_THREAD, epi)
        return
    cols = _block_cols(gm, isz, nr)
    blocks = _Blocks(gm, cols)
    panel = gm.kk * cols
    src = input_source(ctx, gm, x, load, y.dtype)
    tasks_hint = hint(blocks.tasks)
    ms, mc = m_split(gm, tasks_hint, work, isz)
    if ms > 1 and tasks_hint < MIN_TASKS and work >= SPLIT_WORK:
        _split_channels(ctx, gm, x, w, y, src, blocks, nr, ms, mc, epilogue, tasks_hint)
        return
    parts = smin(blocks.tasks, PARTS_PER_THREAD * ctx.num_threads)
    col = ctx.scratch("col", y.dtype, (PARTS_PER_THREAD * ctx.num_threads, panel))
    b = Builder()
    with b.loop(0, parts, parallel=True, hint="t") as t:
        u0 = b.op("div", b.op("mul", t, operand(blocks.tasks)), operand(parts))
        u1 = b.op("div", b.op("mul", b.iadd(t, i64(1)), operand(blocks.tasks)), operand(parts))
        colbase = b.imul(t, panel)
        with b.loop(u0, u1, hint="u") as u:
            img, g, q, width = blocks.split(b, u)
            _panel(b, col, colbase, x, gm, img, g, q, width, nr, src, (i64(0), i64(gm.cg)))
            _product(b, gm, y, w, col, colbase, nr, img, g, q, width, i64(0), gm.mg, True,
                     epilogue)
    ctx.kernel("conv_im2col_gemm", b.body)


def _split_channels(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                    src: Source, blocks: _Blocks, nr: int, ms: int, mc: int,
                    epilogue: EpilogueHook | None, tasks_hint: int) -> None:
    """Few blocks: every panel first (parallel over blocks and channel chunks), then the
    products parallel over (block, chunk of output channels)."""
    panel = gm.kk * blocks.cols
    col = ctx.scratch("col", y.dtype, (blocks.tasks, panel))
    cs = c_split(gm, tasks_hint)
    cc = gm.cg // cs
    b = Builder()
    with b.loop(0, b.imul(operand(blocks.tasks), cs) if cs > 1 else blocks.tasks,
                parallel=True, hint="v") as v:
        u, ci = (b.op("div", v, i64(cs)), b.op("rem", v, i64(cs))) if cs > 1 else (v, i64(0))
        img, g, q, width = blocks.split(b, u)
        c0 = b.imul(ci, cc)
        _panel(b, col, b.imul(u, panel), x, gm, img, g, q, width, nr, src,
               (c0, b.iadd(c0, i64(cc))))
    ctx.kernel("conv_im2col", b.body)
    b = Builder()
    with b.loop(0, blocks.tasks * ms, parallel=True, hint="v") as v:
        u, mi = b.op("div", v, i64(ms)), b.op("rem", v, i64(ms))
        img, g, q, width = blocks.split(b, u)
        for_chunk(b, mi, ms, mc, gm.mg, lambda m0, rows: _product(
            b, gm, y, w, col, b.imul(u, panel), nr, img, g, q, width, m0, rows, True,
            epilogue))
    ctx.kernel("conv_im2col_gemm", b.body)


def _pointwise(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
               epilogue: EpilogueHook | None, work: int) -> None:
    """1x1 stride-1 unpadded conv: per block of positions, W_g x X's columns in place."""
    isz = y.dtype.itemsize
    fits = (BLOCK_BYTES // 2) // max(1, gm.mg * isz)
    if isinstance(gm.p, int):
        blocks = _Blocks(gm, _balanced(gm.p, max(64, fits), 16))
    else:  # the hints' choice of blocks, their width balanced for each P
        cols = max(64, fits)
        if hint(gm.p) <= SMALL_P:  # a small image is one block, its channels split
            cols = max(cols, -(-hint(gm.p) // 16) * 16)
        blocks = _Blocks(gm, cols, even=16)
    tasks_hint = hint(blocks.tasks)
    ms, mc = m_split(gm, tasks_hint, work, isz)
    b = Builder()
    cols = blocks.width(b)
    with b.loop(0, blocks.tasks * ms if ms > 1 else blocks.tasks, parallel=True,
                hint="v") as v:
        u, mi = (b.op("div", v, i64(ms)), b.op("rem", v, i64(ms))) if ms > 1 else (v, i64(0))
        img, g, q, width = blocks.split(b, u, cols)
        x_off = b.iadd(b.iadd(b.imul(img, gm.c * gm.p), b.imul(g, gm.kk * gm.p)), q)
        for_chunk(b, mi, ms, mc, gm.mg, lambda m0, rows: _product(
            b, gm, y, w, x, x_off, gm.p, img, g, q, width, m0, rows, False, epilogue))
    ctx.kernel("conv_gemm", b.body)


def wide_winograd(ctx: LowerContext, node: object, x: Buffer, w: Buffer, y: Buffer,
                  bias: Buffer | None, gm: Geometry, extras: list) -> bool:
    """Lower by step 0 a static conv that the specialised Winograd declines (see the module
    docstring); False (nothing emitted) when step 0 does not apply either."""
    from onnxjit.ir.ops.fused.epilogue import Epilogue

    if not (WIDE_WINOGRAD and ctx.fast_algorithms and winograd_applies(gm, w, y.dtype)) \
            or winograd.applies(gm, w, y.dtype):
        return False
    epi = None
    if node.attr("epilogue") is not None or bias is not None:  # type: ignore[attr-defined]
        epi = Epilogue(ctx, node, extras, y, chan_axis=1, bias=bias)  # type: ignore[arg-type]
    lower_winograd_runtime(ctx, gm, x, w, y, _nr(y.dtype), PARTS_PER_THREAD, epi)
    return True


def lower_conv_node(ctx: LowerContext, node: object, x: Buffer, w: Buffer, y: Buffer,
                    bias: Buffer | None, gm: Geometry, extras: list) -> None:
    """A Conv or FusedConv (epilogue inputs `extras`) of a symbolic program."""
    from onnxjit.ir.ops.conv import pad_nan
    from onnxjit.ir.ops.conv.depthwise_phased import lower_depthwise_phased, symbolic_applies
    from onnxjit.ir.ops.conv.depthwise_runtime import lower_depthwise_runtime
    from onnxjit.ir.ops.conv.strided_windows import im2col_instead
    from onnxjit.ir.ops.fused.epilogue import Epilogue

    if y.dtype not in (DType.FLOAT, DType.DOUBLE) or gm.kk == 0 or len(gm.out) > 2:
        # a TypeError is how a lowering says "not for symbolic sizes" (`lower_to_loops`)
        raise TypeError(f"conv of {y.dtype.short} with K = {gm.kk} and {len(gm.out)} spatial "
                        "dims has no lowering for run-time sizes")
    has_body = node.attr("epilogue") is not None  # type: ignore[attr-defined]
    if gm.cg == 1 and not im2col_instead(gm):
        epi = Epilogue(ctx, node, extras, y, chan_axis=1) if has_body else None  # type: ignore
        fix = pad_nan.needed(gm, w)  # padded taps times non-finite weights: `conv.pad_nan`
        nest_epi = None if fix else epi
        if symbolic_applies(gm, y) and hint(gm.out[-1]) <= PHASED_WIDTH:
            lower_depthwise_phased(ctx, gm, x, w, y, bias, nest_epi)
        else:
            lower_depthwise_runtime(ctx, gm, x, w, y, bias, nest_epi)
        if fix:
            pad_nan.fix_up(ctx, gm, w, y, epi)
        return
    epi = None
    if has_body or bias is not None:
        epi = Epilogue(ctx, node, extras, y, chan_axis=1, bias=bias)  # type: ignore[arg-type]
    def load(bb: Builder, i: Operand) -> Operand:
        return bb.load(x, i)

    if ctx.fast_algorithms and batch_only(x, y) and winograd.applies(gm, w, y.dtype):
        lower_winograd_batch(ctx, gm, x, w, y, load, None if epi is None else epi.emit,
                             PARTS_PER_THREAD)
        return
    if batch_only(x, y) and im2col_batch.applies(gm, y.dtype.itemsize):
        im2col_batch.lower_im2col_batch(ctx, gm, x, w, y, load,
                                        None if epi is None else epi.emit, PARTS_PER_THREAD)
        return
    lower_runtime_conv(ctx, gm, x, w, y, load, epi)
