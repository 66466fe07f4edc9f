"""Convs over few positions as T = X^T W^T: the positions become the product's rows.

A conv is, per image, the product Y[M, P] = W[M, K] @ X[K, P], X being the input itself for a
1x1 conv and its im2col panel otherwise. The tiled GEMM kernel (`codegen/matmul_kernel.py`)
runs along the product's columns in vectors of VL lanes, so P positions cost ceil(P / VL)
vectors a row: at 7x7 (P = 49) four vectors do the work of 3.06, and a quarter of every
multiply-add is wasted (ResNet-50's last stage; Inception's 7x7 modules). Transposed,

    T[P, M] = X^T @ W^T    (A' = X read transposed, B' = W^T packed at compile time)

runs its vectors along the M output channels (whole panels in real networks), and its P rows
go in tiles of MR rows, where the edge tile costs only its own rows (49 = 8 * 6 + 1).

Kernel, parallel over (image, chunk of output channels): the chunks are whole packed panels,
at least `MIN_TASKS` of them over the batch where that keeps two threads balanced
(`panel_chunk`), so each thread reads its share of W; when whole panels cannot balance two
threads (5 panels), each chunk also in two halves of its positions; with fewer panels than
`MIN_TASKS`, equal chunks of positions instead (`conv.blocking.split_rows`):
1) one Matmul into the chunk's columns of the scratch T (B offset = the chunk's first panel:
   W^T is packed here, with `loops.pack_panels`, so the offset may vary at run time);
2) the chunk's columns of T copied, transposed, into its rows of Y, in blocks of COPY_BLOCK
   channels (T's rows padded by PAD elements);
3) the epilogue (bias, activation, residual: `conv.geometry.EpilogueHook`) on those rows of Y.
The copy's and the epilogue's loops are kept rolled (`KEEP_ROLLED`): glue whose unrolled
forms cost compile time, not speed.
Convs that need a panel first build every image's whole panel (K, P), row-major, in one
kernel parallel over chunks of input channels (`conv.conv._plain_panels`).
`conv.strided_windows` reuses the kernel with its own products (`Product`: 1-D convs whose
im2col panel is a window of X itself) and the bias added by the copy.
Used for float convs of one group with constant weights and a depth of at least MIN_DEPTH
(the copy is then small next to the product), when the lanes wasted by the usual form,
ceil(P/VL)*VL/P - 1, are at least MIN_WASTE, or for deep pointwise products over small
images (`DEEP`: the usual form re-packs X for each of its chunks of few output channels);
other convs keep `conv.conv`'s forms.
Measured against the usual form, one thread: 1x1 2048->512 at 7x7 1.18x, 768->128 1.31x;
3x3 s2 512->512 to 7x7 1.14x, 5x5 128->256 at 7x7 1.21x; two threads: 1024->256 at 14x14
1.06x, 384->96 at 14x14 1.27x, 512->128 at 28x28 1.09x; whole models, two threads:
ResNet-50 1.02x (one thread 1.04x), DenseNet-121 1.04x, Inception-v2 1.03x, MobileNetV2-like
1.03x.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Buffer, Matmul, Operand, i64, pack_panels
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.blocking import MIN_TASKS, for_chunk, host_tile, split_rows
from onnxjit.ir.ops.conv.geometry import PANEL_BYTES
from onnxjit.ir.ops.conv.packed_panels import packed_width
from onnxjit.ir.types import DType

if TYPE_CHECKING:  # conv.conv imports this module
    from onnxjit.ir.ops.conv.geometry import EpilogueHook, Geometry

#: Lower eligible pointwise convs transposed; False keeps them on Y = W @ X.
TRANSPOSED = True
#: Chunks of output channels balanced for two threads (`panel_chunk`); False restores
#: ceil(panels / MIN_TASKS) panels a chunk. Measured, two threads: MobileNetV2 at 96x96
#: (384, 576 and 320 channels: 3 chunks each) 1.02x; at 160 1.008x; Inception-v1 1.012x;
#: DenseNet-121, Inception-v2, ResNet-50, SqueezeNet, MobileNetV2-like unchanged
EVEN_CHUNKS = True
#: ... and when whole panels still leave one thread more than SPAN_SLACK times its half of the
#: work, each chunk is also cut into two halves of its positions. Measured, two threads:
#: 960->320 at 7x7 (5 panels) 171 -> 140 us; MobileNetV2 at 224x224 1.005-1.012x
SPAN_SLACK = 1.1
#: Fewest lanes wasted by Y = W @ X (fraction of the useful ones) for the transposed form.
MIN_WASTE = 0.15
#: Fewest input channels (the product's depth) for the transposed form.
MIN_DEPTH = 64
#: Deep products over small images take the transposed form whatever the lanes: at least DEEP
#: input channels, at most DEEP_MAX_P positions and DEEP_MAX_M output channels. The usual
#: form splits their few output channels into chunks that each pack X again (one thread:
#: 1024->256 at 14x14 1.11x, 512->128 at 28x28 1.05x, 384->96 at 14x14 1.14x transposed;
#: 512->1000 at 13x13 0.98x, 256->64 at 56x56 0.98x, so not those). At most 128 output
#: channels (was 512): with 256 the usual form, prefetching its streamed panels, is now the
#: faster one. Measured, two threads, three builds each interleaved, 512 -> 128: PP-LCNet-like
#: (five 256->256 at 14x14) 1.07x, ResNet-50 (1024->256 at 14x14) 1.02x, Inception-v2 1.02x,
#: MobileNetV2-like 1.01x, DenseNet-121 and SqueezeNet unchanged. Pointwise convs only:
#: an im2col conv's usual form builds its panel once, already packed (`conv.packed_panels`),
#: and the transposed form reads that panel's columns one cache line a depth step (one
#: thread, against the usual form: a 1-D 5-tap 256->512 conv over 512 positions, magika's,
#: 0.61x; 5x5 64->128 at 28x28 0.79x, 3-tap 128->256 over 256 positions 0.83x, 5-tap
#: 256->256 over 128 0.91x, 3-tap 512->256 over 64 1.03x).
DEEP, DEEP_MAX_P, DEEP_MAX_M = 256, 1024, 128
#: Elements of padding after each row of T: unpadded, M = 2048 puts the rows 8 KB apart, all in
#: one L1 set, and the copy's column reads miss (measured 512->2048 at 7x7: 1.045x with it).
PAD = 16
#: Output channels a step of the copy (one cache line of T's row, 16 rows of Y).
COPY_BLOCK = 16
#: The copy's loop over positions and the epilogue's loops are `rolled` (kept loops by LLVM).
#: Unrolled, the copy of a few rows (a 7x7 image in chunks of 13 rows) became 16 x 13 scalar
#: copies, and the epilogue's short rows were unrolled and then vectorized across channels
#: with gathers: 55% of DenseNet-121's optimised IR. Rolled, each row is still 16 copies and
#: the epilogue runs along its contiguous positions. Measured: DenseNet-121's compile 23-27 ->
#: 14 CPU seconds; two threads, interleaved, DenseNet-121 1.00x (bit-identical outputs)
KEEP_ROLLED = True


def applies(gm: Geometry, x: Buffer, w: Buffer, y: Buffer, accumulate: bool,
            col_dtype: DType) -> bool:
    """True when `lower_transposed` handles this conv (see the module docstring): pointwise,
    or im2col with one panel per image of at most PANEL_BYTES over the batch."""
    dt = y.dtype
    if not (TRANSPOSED and gm.g == 1 and not accumulate and col_dtype == dt
            and dt in (DType.FLOAT, DType.DOUBLE) and x.dtype == dt and w.dtype == dt
            and w.kind == "const" and w.data is not None and gm.kk >= MIN_DEPTH
            and (gm.pointwise or gm.n * gm.kk * gm.p * dt.itemsize <= PANEL_BYTES)):
        return False
    return pays(gm, dt)


def pays(gm: Geometry, dt: DType, deep: bool = True) -> bool:
    """Whether T = X^T W^T beats Y = W X for this geometry: the channels fill a packed panel,
    and Y's vectors along the positions waste MIN_WASTE of their lanes, or (with `deep`) a
    pointwise product is deep over few positions (`DEEP`)."""
    nr = packed_width(dt, gm.p, gm.m, gm.kk)
    if nr is None or gm.m < nr:
        return False
    vl = host_tile(dt.itemsize)[0]
    if -(-gm.p // vl) * vl >= (1 + MIN_WASTE) * gm.p:
        return True
    return (deep and gm.pointwise and gm.kk >= DEEP and gm.p <= DEEP_MAX_P
            and gm.m <= DEEP_MAX_M)


def two_thread_span(panels: int, per: int, images: int) -> int:
    """Panels' time two threads take for `images` images of `panels` panels in chunks of
    `per`, each taking the next-largest chunk when it is free (the pool's parts and stealing
    come close to that)."""
    n = -(-panels // per)
    loads = sorted([per] * (n - 1) * images + [panels - per * (n - 1)] * images, reverse=True)
    two = [0, 0]
    for x in loads:
        two[two[1] < two[0]] += x
    return max(two)


def panel_chunk(panels: int, want: int, images: int) -> int:
    """Panels per chunk of an image's output channels: the split two threads finish soonest
    (`two_thread_span`); among equals, at least `want` chunks, and as close to it as
    possible. 9 panels at `want` 4 were 3 chunks of 3, two of them on one thread (6 panels'
    time); now 5 chunks of 2, 2, 2, 2, 1 (5 panels' time)."""
    if not EVEN_CHUNKS:
        return -(-panels // want)
    keys = {per: (two_thread_span(panels, per, images), -(-panels // per) < want,
                  abs(-(-panels // per) - want)) for per in range(1, panels + 1)}
    return min(keys, key=lambda per: (keys[per], per))


#: `product(b, t, t_off, ldt, img, p0, rows, c0, cols)`: emit T[p0:p0+rows, c0:c0+cols] of
#: image `img` at `t_off` of the scratch `t` (leading dim ldt); `c0` is a multiple of NR.
Product = Callable[[Builder, Buffer, Operand, int, Operand, Operand, int, Operand, int], None]


def lower_transposed(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                     epilogue: EpilogueHook | None, product: Product | None = None,
                     bias: Buffer | None = None) -> None:
    """The kernel of the module docstring (`applies` must hold); `x` holds each image's
    (K, P) matrix at image * K * P: X itself for a pointwise conv, else the im2col panels.
    `product`, when given, computes the blocks of T instead (`conv.strided_windows`: x is
    then unused); `bias` (per channel) is added by the copy into Y."""
    dt, p, k, m = y.dtype, gm.p, gm.kk, gm.m
    nr = packed_width(dt, p, m, k)
    assert nr is not None and w.data is not None
    if product is None:
        wt = ctx.constant("w_t", pack_panels(np.ascontiguousarray(w.data.reshape(m, k).T), nr))

        def product(b: Builder, t: Buffer, t_off: Operand, ldt: int, img: Operand,
                    p0: Operand, nrows: int, c0: Operand, ncols: int) -> None:
            b.emit(Matmul(t, t_off, ldt, x, b.iadd(b.imul(img, k * p), p0), p, wt,
                          b.imul(c0, k), nr, nrows, ncols, k, a_trans=True, b_packed=True))
    want = -(-MIN_TASKS // gm.n)  # chunks an image
    panels = -(-m // nr)
    mr = host_tile(dt.itemsize)[1]
    if panels >= want:  # chunks of whole panels of channels
        per = panel_chunk(panels, want, gm.n)
        cols, (pchunks, rows) = per * nr, (1, p)
        if EVEN_CHUNKS and p >= 4 * mr and \
                two_thread_span(panels, per, gm.n) * 2 > SPAN_SLACK * panels * gm.n:
            # whole panels leave one thread of two much more (5 panels: 3 + 2): each chunk
            # of channels in two halves of its positions (the halves of a chunk are
            # neighbours in the loop, so mostly one thread reads a panel of W)
            pchunks, rows = split_rows(p, 2, mr)
    else:  # too few panels: chunks of positions (`split_rows`)
        cols, (pchunks, rows) = m, split_rows(p, want, mr)
    cchunks = -(-m // cols)
    chunks = cchunks * pchunks
    ldt = m + PAD
    t = ctx.scratch("conv_t", dt, (gm.n, p, ldt))
    b = Builder()
    with b.loop(0, gm.n * chunks, parallel=True, hint="u") as u:
        img, ci = (b.op("div", u, i64(chunks)), b.op("rem", u, i64(chunks))) if chunks > 1 \
            else (u, i64(0))

        def block(c0: Operand, ncols: int, p0: Operand, nrows: int) -> None:
            t_off = b.iadd(b.imul(img, p * ldt), b.iadd(b.imul(p0, ldt), c0))
            product(b, t, t_off, ldt, img, p0, nrows, c0, ncols)
            y_off = b.iadd(b.imul(img, m * p), b.iadd(b.imul(c0, p), p0))
            # in blocks of COPY_BLOCK channels: the block's rows of Y and the line of each row
            # of T it reads stay in L1 (a plain double loop ran ~4 cycles an element: LLVM
            # vectorizes it with scatters, microcoded on Zen 4)
            whole = ncols - ncols % COPY_BLOCK
            for lo, hi, step in ((0, whole, COPY_BLOCK), (whole, ncols, ncols - whole)):
                if lo == hi:
                    continue
                with b.loop(lo, hi, step, hint="cb") as cb:
                    with b.loop(0, nrows, hint="q", rolled=KEEP_ROLLED) as q:
                        with b.loop(0, step, hint="co") as j:
                            co = b.iadd(cb, j)
                            v = b.load(t, b.iadd(t_off, b.iadd(b.imul(q, ldt), co)))
                            if bias is not None:
                                v = b.op("add", v, b.load(bias, b.iadd(c0, co)))
                            b.store(y, b.iadd(y_off, b.iadd(b.imul(co, p), q)), v)
            if epilogue is not None:
                with b.keep_rolled(KEEP_ROLLED):
                    epilogue(b, y_off, p, ncols, nrows, c0)

        if pchunks == 1:
            for_chunk(b, ci, cchunks, cols, m, lambda c0, n: block(c0, n, i64(0), p))
        elif cchunks == 1:
            for_chunk(b, ci, pchunks, rows, p, lambda p0, n: block(i64(0), m, p0, n))
        else:  # chunk ci: channels ci // pchunks, positions ci % pchunks
            cj, pj = b.op("div", ci, i64(pchunks)), b.op("rem", ci, i64(pchunks))
            for_chunk(b, cj, cchunks, cols, m, lambda c0, n: for_chunk(
                b, pj, pchunks, rows, p, lambda p0, r: block(c0, n, p0, r)))
    ctx.kernel("conv_gemm_t", b.body)
