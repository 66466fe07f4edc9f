"""Conv: N-D convolution as im2col + `Matmul`, or a direct depthwise nest.

Shapes and attributes: `conv.geometry` (one geometry for every op of the family).
Lowering of a node with X (N, C, *in), W (M, C/G, *k), Y (N, M, *out); K = C/G * prod(k) and
P = prod(out):
0) 3x3 kernel, stride 1, one group, constant float weights, enough channels and positions:
   Winograd F(2x2, 3x3) (`conv.winograd`), 2.25x fewer multiply-adds than im2col.
1) 1x1 kernel, stride 1, no padding: X's image (C, P) already is the im2col panel, so per
   image and group one `Matmul` W_g (M/G, K) x X_g (K, P) -> Y_g (M/G, P) reads X directly;
   with few positions (7x7: vectors along P would waste a quarter of their lanes) and constant
   weights, transposed: T = X^T W^T, then T copied into Y (`conv.few_positions`; im2col
   convs over few positions too, from whole plain panels). With strides (and no padding) X
   is first subsampled into a scratch (`conv.strided_pointwise`).
2) other group convs with C/G > 1, one kernel parallel over (image, group, block of rows of
   the first output dim): build the block's im2col panel (K, cols) in scratch, then one
   `Matmul` W_g (M/G, K) x panel -> the block's columns of Y_g (ldc = P). Block sizes, and
   the split of too few blocks over output channels (a panel kernel, then a product kernel
   parallel over chunks of channels), are chosen in `conv.blocking`. The panel row of a
   kernel tap is built without per-element branches:
   the innermost kernel dim is unrolled (up to `MAX_UNROLL` taps; wider kernels loop and
   compute the ranges at run time), so the valid output range [lo, hi) of each tap (where
   the input position is inside the image) is a compile-time pair, and an outer-dim position
   in the padding turns the range empty (a `select` on the loop bounds); the zero padding is
   written by two plain loops around the copy loop. Every block has its own panel (the
   blocks run in parallel); batches whose panels exceed `PANEL_BYTES` run in chunks of images.
   Float panels are written in the GEMM's packed-B layout (`conv.packed_panels`,
   `im2col_blocks.PACKED_PANELS`); the panels and their blocks live in `conv.im2col_blocks`.
   Strided convs read X split into phase rows (`conv.input_phases`), not with strided loads.
3) 1-D convs of one group with long kernels (at least `strided_windows.MIN_TAPS` taps) and
   few input channels: products over windows of X read in place (`conv.strided_windows`).
4) C/G == 1 (depthwise, any channel multiplier): a direct nest (`conv.depthwise_direct`), or
   stride-phased plane copies for small images (`conv.depthwise_phased`).
A symbolic program's conv (run-time batch or spatial sizes) lowers through
`conv.runtime_sizes` instead (blocks of positions of run-time count and width).
Bias: Y is first filled with B (per channel), and the `Matmul`s accumulate onto it.
Epilogue hook (used by `fused.linear.FusedConv`): `lower_gemm_conv` / `lower_depthwise`
take an optional callback run on each block of Y right after it is computed, inside the same
parallel iteration (a pointwise conv is then split into blocks of positions).
The integer convolutions (`conv.integer`) reuse the im2col + `Matmul` path.
Float16/bfloat16 raise UnsupportedError (not a compute dtype yet).
"""

from __future__ import annotations

import numpy as np

from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Buffer, Matmul, Operand, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.conv import im2col_blocks, strided_windows
from onnxjit.ir.ops.conv.attrs import ConvAttrs, conv_numpy, infer_conv_shape
from onnxjit.ir.ops.conv.blocking import (
    block_rows,
    c_split,
    for_chunk,
    m_split,
    pointwise_blocks,
)
from onnxjit.ir.ops.conv.depthwise_direct import lower_depthwise
from onnxjit.ir.ops.conv.few_positions import applies as transposed_applies
from onnxjit.ir.ops.conv.few_positions import lower_transposed
from onnxjit.ir.ops.conv.geometry import (
    PANEL_BYTES,
    EpilogueHook,
    Geometry,
    Load,
    fill_channels,
    for_each_block,
)
from onnxjit.ir.ops.conv.im2col_blocks import ImageBlocks
from onnxjit.ir.ops.conv.input_phases import input_source
from onnxjit.ir.ops.conv.packed_panels import packed_width
from onnxjit.ir.ops.conv.runtime_sizes import lower_conv_node, wide_winograd
from onnxjit.ir.ops.conv.strided_pointwise import strided_pointwise
from onnxjit.ir.ops.conv.winograd import applies as winograd_applies
from onnxjit.ir.ops.conv.winograd import lower_winograd
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, Types, accept_same, arity
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType

_TYPES: Types = ((1, FLOATS), (22, FLOATS | BF16))

# --------------------------------------------------------------------------- im2col + Matmul

def lower_gemm_conv(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                    accumulate: bool, col_dtype: DType, load: Load,
                    epilogue: EpilogueHook | None = None) -> None:
    """Per (image, group, block of output rows), parallel: build the block's im2col panel and
    multiply it; pointwise convs skip the panel and multiply X's channels directly.

    `epilogue(b, off, ld, rows, cols, row0)`, when given, runs right after each block's Matmul
    in the same parallel iteration, on the block's window of Y (rows = the group's channels
    from row0, cols = the block's positions); pointwise convs are then split into blocks of
    positions (`conv.blocking.pointwise_blocks`) so each block is still in cache; blocks
    too few to keep the threads busy are split over output channels (`m_split`)."""
    work = gm.n * gm.g * gm.mg * gm.p * gm.kk
    if ctx.fast_algorithms and winograd_applies(gm, w, col_dtype):
        lower_winograd(ctx, gm, x, w, y, accumulate, load, epilogue)
        return
    if strided_pointwise(ctx, gm, x, w, y, accumulate, col_dtype, epilogue, lower_gemm_conv):
        return
    if transposed_applies(gm, x, w, y, accumulate, col_dtype):
        if not gm.pointwise:  # one plain panel per image, in parallel over channel chunks
            x = _plain_panels(ctx, gm, x, load, col_dtype)
        lower_transposed(ctx, gm, x, w, y, epilogue)
        return
    if gm.pointwise and epilogue is not None:
        _pointwise_with_epilogue(ctx, gm, x, w, y, accumulate, epilogue, work)
        return
    if gm.pointwise:
        b = Builder()

        def product(bb: Builder, n: Operand, g: Operand) -> None:
            bb.emit(Matmul(y, bb.iadd(bb.imul(n, gm.m * gm.p), bb.imul(g, gm.mg * gm.p)), gm.p,
                           w, bb.imul(g, gm.mg * gm.kk), gm.kk, x,
                           bb.iadd(bb.imul(n, gm.c * gm.p), bb.imul(g, gm.kk * gm.p)), gm.p,
                           gm.mg, gm.p, gm.kk, accumulate=accumulate))

        for_each_block(b, gm.n, gm.g, product)
        ctx.kernel("conv_gemm", b.body)
        return
    rows = block_rows(gm, col_dtype.itemsize)
    nblk = gm.out[0] // rows if len(gm.out) > 1 else 1
    cols = gm.p // nblk
    nr = packed_width(col_dtype, gm.mg, cols, gm.kk) if im2col_blocks.PACKED_PANELS else None
    panel = gm.kk * cols
    per_image = gm.g * nblk * panel * col_dtype.itemsize
    chunk = max(1, min(gm.n, PANEL_BYTES // max(1, per_image)))
    col = ctx.scratch("col", col_dtype, (chunk * gm.g * nblk, panel))  # type: ignore
    src = input_source(ctx, gm, x, load, col_dtype)
    for n0 in range(0, gm.n, chunk):
        nimg = min(chunk, gm.n - n0)
        tasks = nimg * gm.g * nblk
        ms, mc = m_split(gm, tasks, work, col_dtype.itemsize)
        blocks = ImageBlocks(gm, n0, nblk, rows, cols, panel, nr)
        if ms == 1:
            b = Builder()
            with b.loop(0, tasks, parallel=True, hint="u") as u:
                blocks.build(b, u, col, x, src, None)
                blocks.multiply(b, u, y, w, col, accumulate, epilogue, 0, gm.mg)
            ctx.kernel("conv_im2col_gemm", b.body)
            continue
        # few blocks: build the panels in parallel over chunks of input channels, then
        # multiply in parallel over chunks of output channels (see `conv.blocking`)
        cs = c_split(gm, tasks)
        cc = gm.cg // cs
        b = Builder()
        with b.loop(0, tasks * cs, parallel=True, hint="v") as v:
            u, ci = (b.op("div", v, i64(cs)), b.op("rem", v, i64(cs))) if cs > 1 else (v, i64(0))
            c0 = b.imul(ci, cc)
            blocks.build(b, u, col, x, src, (c0, b.iadd(c0, i64(cc))))
        ctx.kernel("conv_im2col", b.body)
        b = Builder()
        with b.loop(0, tasks * ms, parallel=True, hint="v") as v:
            u, mi = b.op("div", v, i64(ms)), b.op("rem", v, i64(ms))
            for_chunk(b, mi, ms, mc, gm.mg, lambda m0, rows, b=b, u=u, blk=blocks: blk.multiply(
                b, u, y, w, col, accumulate, epilogue, m0, rows))
        ctx.kernel("conv_im2col_gemm", b.body)


def _plain_panels(ctx: LowerContext, gm: Geometry, x: Buffer, load: Load,
                  col_dtype: DType) -> Buffer:
    """Every image's whole im2col panel (K, P), row-major at image * K * P in a scratch, built
    by one kernel parallel over (image, chunk of input channels)."""
    col = ctx.scratch("col", col_dtype, (gm.n, gm.kk * gm.p))
    src = input_source(ctx, gm, x, load, col_dtype)
    rows = gm.out[0] if len(gm.out) > 1 else 1
    blocks = ImageBlocks(gm, 0, 1, rows, gm.p, gm.kk * gm.p, None)
    cs = c_split(gm, gm.n)
    cc = gm.cg // cs
    b = Builder()
    with b.loop(0, gm.n * cs, parallel=True, hint="v") as v:
        u, ci = (b.op("div", v, i64(cs)), b.op("rem", v, i64(cs))) if cs > 1 else (v, i64(0))
        c0 = b.imul(ci, cc)
        blocks.build(b, u, col, x, src, (c0, b.iadd(c0, i64(cc))))
    ctx.kernel("conv_im2col", b.body)
    return col


def _pointwise_with_epilogue(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                             accumulate: bool, epilogue: EpilogueHook, work: int) -> None:
    """Pointwise conv, parallel over (image, group, block of positions, chunk of output
    channels): one Matmul on the block's columns of X (ldb = P; the product packs them per
    call), then the epilogue on the same window of Y. Chunks as in `m_split` (a packed copy of
    X shared by the chunks measured 15% slower: 800 KB of panel evicted by the weights)."""
    cols = pointwise_blocks(gm, y.dtype.itemsize, work)
    nblk = gm.p // cols
    tasks = gm.n * gm.g * nblk
    ms, mc = m_split(gm, tasks, work, y.dtype.itemsize)
    b = Builder()
    with b.loop(0, tasks * ms, parallel=True, hint="u") as v:
        u, mi = (b.op("div", v, i64(ms)), b.op("rem", v, i64(ms))) if ms > 1 else (v, i64(0))
        blk = b.op("rem", u, i64(nblk)) if nblk > 1 else i64(0)
        rest = b.op("div", u, i64(nblk)) if nblk > 1 else u
        g = b.op("rem", rest, i64(gm.g)) if gm.g > 1 else i64(0)
        img = b.op("div", rest, i64(gm.g)) if gm.g > 1 else rest
        col0 = b.imul(blk, cols)
        x_off = b.iadd(b.iadd(b.imul(img, gm.c * gm.p), b.imul(g, gm.kk * gm.p)), col0)

        def product(m0: Operand, rows: int) -> None:
            row0 = b.iadd(b.imul(g, gm.mg), m0)
            c_off = b.iadd(b.iadd(b.imul(img, gm.m * gm.p), b.imul(row0, gm.p)), col0)
            b.emit(Matmul(y, c_off, gm.p, w, b.imul(row0, gm.kk), gm.kk, x, x_off, gm.p,
                          rows, cols, gm.kk, accumulate=accumulate))
            epilogue(b, c_off, gm.p, rows, cols, row0)

        for_chunk(b, mi, ms, mc, gm.mg, product)
    ctx.kernel("conv_gemm", b.body)


# --------------------------------------------------------------------------- Conv


def _conv_infer(node: Node) -> list:
    idx = arity(node, 2, 3)
    dt = accept_same(node, idx, _TYPES)
    b = tensor_input(node, 2).shape if node.input(2) is not None else None
    _, shape = infer_conv_shape(node, tensor_input(node, 0).shape, tensor_input(node, 1).shape, b)
    return tensor(dt, shape)


def conv_attrs_of(node: Node, x: np.ndarray | Buffer, w: np.ndarray | Buffer) -> ConvAttrs:
    a, _ = infer_conv_shape(node, tuple(x.shape), tuple(w.shape), None,
                            transpose=node.op == "ConvTranspose")
    assert a is not None
    return a


def _conv_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    return [conv_numpy(x, w, bias, conv_attrs_of(node, x, w))]


def conv_buffers(ctx: LowerContext, node: Node
                 ) -> tuple[Buffer, Buffer, Buffer, Buffer | None, Geometry]:
    """x, w, y, the optional bias and the geometry of a Conv-like node being lowered."""
    x, w, y = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.outputs[0])
    bias = ctx.buf(node.inputs[2]) if node.input(2) is not None else None
    return x, w, y, bias, Geometry(conv_attrs_of(node, x, w), x.shape, w.shape, y.shape)


def _conv_lower(ctx: LowerContext, node: Node) -> None:
    x, w, y, bias, gm = conv_buffers(ctx, node)
    if not (x.is_static and y.is_static):  # a symbolic program's run-time batch and sizes
        lower_conv_node(ctx, node, x, w, y, bias, gm, [])
        return
    if y.numel == 0:
        return
    if strided_windows.applies(gm, x, w, y):
        strided_windows.lower_windows(ctx, gm, x, w, y, bias, None)
        return
    if gm.cg == 1 and gm.kk > 0 and not strided_windows.im2col_instead(gm):
        lower_depthwise(ctx, gm, x, w, y, bias)
        return
    if wide_winograd(ctx, node, x, w, y, bias, gm, []):
        return
    b = Builder()
    if bias is not None or gm.kk == 0:
        fill_channels(b, y, bias, gm.m, gm.p)
        ctx.kernel("conv_bias", b.body)
    if gm.kk > 0:
        lower_gemm_conv(ctx, gm, x, w, y, bias is not None, x.dtype, lambda bb, i: bb.load(x, i))


op("Conv", (1, 11, 22), infer=_conv_infer, evaluate=_conv_evaluate, lower=_conv_lower,
   symbolic=True,
   doc="N-D convolution with groups, strides, dilations, pads/auto_pad and optional bias")
