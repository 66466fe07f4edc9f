"""Conv: N-D convolution as im2col + `Matmul`, or a direct depthwise nest.

Shapes and attributes: `ops_conv_utils` (one geometry for every op of the family).
Lowering of a node with X (N, C, *in), W (M, C/G, *k), Y (N, M, *out); K = C/G * prod(k) and
P = prod(out):
1) 1x1 kernel, stride 1, no padding: X's image (C, P) already is the im2col panel, so per
   image and group one `Matmul` W_g (M/G, K) x X_g (K, P) -> Y_g (M/G, P) reads X directly.
2) other group convs with C/G > 1, one kernel parallel over (image, group, block of rows of
   the first output dim): build the block's im2col panel (K, cols) in scratch, then one
   `Matmul` W_g (M/G, K) x panel -> the block's columns of Y_g (ldc = P). A block is the
   largest divisor of the first output dim whose panel fits `BLOCK_BYTES`, so the Matmul reads
   the panel from cache. The panel row of a kernel tap is built without per-element branches:
   the innermost kernel dim is unrolled (up to `MAX_UNROLL` taps; wider kernels loop and
   compute the ranges at run time), so the valid output range [lo, hi) of each tap (where
   the input position is inside the image) is a compile-time pair, and an outer-dim position
   in the padding turns the range empty (a `select` on the loop bounds); the zero padding is
   written by two plain loops around the copy loop. Every block has its own panel (the
   blocks run in parallel); batches whose panels exceed `PANEL_BYTES` run in chunks of images.
   Float panels are written in the GEMM's packed-B layout (`ops_conv_packed`, `PACKED_PANELS`).
3) C/G == 1 (depthwise, any channel multiplier): a direct nest, parallel over (image, output
   channel), per output row; the innermost loops run along the contiguous output row, which
   the code generator vectorizes. Rows whose taps all stay inside the image along the outer
   dims sum every tap in one pass over their interior columns (`bias + sum w_t * x_t`, the
   weights hoisted per channel); other rows store the bias, then add `w * x[row slice]` per
   tap over its valid range (see `lower_depthwise`).
Bias: Y is first filled with B (per channel), and the `Matmul`s accumulate onto it.
Epilogue hook (used by `ops_fused_linear.FusedConv`): `lower_gemm_conv` / `lower_depthwise`
take an optional callback run on each block of Y right after it is computed, inside the same
parallel iteration (a pointwise conv is then split into blocks of positions).
The integer convolutions (`ops_conv_integer`) reuse the im2col + `Matmul` path.
Float16/bfloat16 raise UnsupportedError (not a compute dtype yet).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from onnxjit.ir.elementwise_utils import tensor
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const, row_major_strides
from onnxjit.ir.loops import Buffer, Matmul, Operand, i64
from onnxjit.ir.narrow import accumulator
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops_conv_packed import emit_packed_panel, packed_width
from onnxjit.ir.ops_conv_utils import (
    PANEL_BYTES,
    ConvAttrs,
    Nest,
    conv_numpy,
    conv_pads,
    fill_channels,
    for_each_block,
    infer_conv_shape,
    operand,
    outer_positions,
    tap_bounds,
    tap_edges,
    tap_row,
    tap_shift,
    taps,
    valid_range,
)
from onnxjit.ir.ops_elementwise import BF16, FLOATS, Types, accept_same, arity
from onnxjit.ir.shape_utils import tensor_input
from onnxjit.ir.types import DType

_TYPES: Types = ((1, FLOATS), (22, FLOATS | BF16))

# --------------------------------------------------------------------------- im2col + Matmul

Load = Callable[[Builder, Operand], Operand]


class Geometry:
    """Concrete geometry of one conv node (see the module docstring for the names)."""

    def __init__(self, a: ConvAttrs, x: Sequence[int], w: Sequence[int], y: Sequence[int]):
        self.a = a
        self.n, self.c = x[0], x[1]
        self.m = y[1]
        self.ins, self.k, self.out = list(x[2:]), list(w[2:]), list(y[2:])
        self.begin, _ = conv_pads(a, self.ins)
        self.g = a.group
        self.cg, self.mg = self.c // self.g, self.m // self.g
        self.kprod, self.p = math.prod(self.k), math.prod(self.out)
        self.kk = self.cg * self.kprod
        self.in_plane = math.prod(self.ins)
        self.pointwise = all(k == 1 for k in self.k) and all(s == 1 for s in a.strides) \
            and all(p == 0 for p in self.begin) and self.ins == self.out


def emit_panel(b: Builder, col: Buffer, colbase: Operand, x: Buffer, gm: Geometry,
               img: Operand, g: Operand, o0: Operand, rows: int, cols: int, load: Load) -> None:
    """The im2col panel (C/G * prod(k), cols) of image `img`, group `g` and output rows
    [o0, o0 + rows) of the first spatial dim (all of them for 1-D): panel row
    (c*prod(k) + tap) holds x at the tap's input position per output position, 0 in the
    padding."""
    a, zero = gm.a, const(0, col.dtype)
    ow, kw, sw, dw = gm.out[-1], gm.k[-1], a.strides[-1], a.dilations[-1]
    pw, iw = gm.begin[-1], gm.ins[-1]
    sub = ([rows] + gm.out[1:-1]) if len(gm.out) > 1 else []
    with b.loop(0, gm.cg, hint="c") as c:
        ch = b.iadd(b.imul(img, gm.c), b.iadd(b.imul(g, gm.cg), c))
        xbase = b.imul(ch, gm.in_plane)
        with Nest(b, gm.k[:-1], "t") as t, Nest(b, sub, "o") as ol:
            o = [b.iadd(ol[0], o0)] + ol[1:] if ol else []
            valid, off = outer_positions(b, o, t, a, gm.begin, gm.ins, gm.out, gm.k)
            xrow = b.iadd(xbase, off)
            tap = b.iadd(b.imul(c, gm.kprod), b.imul(b.linear(t, row_major_strides(gm.k[:-1])),
                                                     kw))
            orow = b.imul(b.linear(ol, row_major_strides(sub)), ow)
            for tw in taps(b, kw):
                shift = tap_shift(b, tw, dw, pw)
                row = b.iadd(colbase, b.iadd(b.imul(b.iadd(tap, operand(tw)), cols), orow))
                lo, hi = tap_bounds(b, valid, shift, sw, iw, ow)
                tap_row(b, col, row, load, b.iadd(xrow, operand(shift)), sw, zero, (0, ow),
                        (lo, hi), tap_edges(lo, hi, ow))


def _block_rows(gm: Geometry, itemsize: int) -> int:
    """Rows of the first output dim per panel: the largest divisor of it whose panel fits
    `BLOCK_BYTES` (so the panel is still in cache when the Matmul reads it)."""
    if len(gm.out) < 2:
        return 1
    row = gm.kk * (gm.p // gm.out[0]) * itemsize
    fits = [r for r in range(1, gm.out[0] + 1) if gm.out[0] % r == 0 and r * row <= BLOCK_BYTES]
    return max(fits, default=1)


#: Target size of one im2col panel (about half of a core's L2).
BLOCK_BYTES = 512 << 10
#: Float panels are built in the tiled GEMM's packed-B layout (`ops_conv_packed`); False
#: restores row-major panels that the GEMM packs again on every call.
PACKED_PANELS = True


def lower_gemm_conv(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                    accumulate: bool, col_dtype: DType, load: Load,
                    epilogue: EpilogueHook | None = None) -> None:
    """Per (image, group, block of output rows), parallel: build the block's im2col panel and
    multiply it; pointwise convs skip the panel and multiply X's channels directly.

    `epilogue(b, off, ld, rows, cols, row0)`, when given, runs right after each block's Matmul
    in the same parallel iteration, on the block's window of Y (rows = the group's channels
    from row0, cols = the block's positions); pointwise convs are then split into blocks of
    positions (`_pointwise_blocks`) so each block is still in cache."""
    if gm.pointwise and epilogue is not None:
        _pointwise_with_epilogue(ctx, gm, x, w, y, accumulate, epilogue)
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
    rows = _block_rows(gm, col_dtype.itemsize)
    nblk = gm.out[0] // rows if len(gm.out) > 1 else 1
    cols = gm.p // nblk
    nr = packed_width(col_dtype, gm.mg, cols, gm.kk) if PACKED_PANELS else None
    panel = gm.kk * cols
    per_image = gm.g * nblk * panel * col_dtype.itemsize
    chunk = max(1, min(gm.n, PANEL_BYTES // max(1, per_image)))
    col = ctx.scratch("col", col_dtype, (chunk * gm.g * nblk, panel))  # type: ignore
    for n0 in range(0, gm.n, chunk):
        nimg = min(chunk, gm.n - n0)
        b = Builder()
        with b.loop(0, nimg * gm.g * nblk, parallel=True, hint="u") as u:
            blk = b.op("rem", u, i64(nblk)) if nblk > 1 else i64(0)
            rest = b.op("div", u, i64(nblk)) if nblk > 1 else u
            g = b.op("rem", rest, i64(gm.g)) if gm.g > 1 else i64(0)
            img = b.iadd(b.op("div", rest, i64(gm.g)) if gm.g > 1 else rest, i64(n0))
            o0 = b.imul(blk, rows)
            colbase = b.imul(u, panel)
            if nr is None:
                emit_panel(b, col, colbase, x, gm, img, g, o0, rows, cols, load)
            else:
                emit_packed_panel(b, col, colbase, x, gm, img, g, b.imul(blk, cols), cols, nr,
                                  load)
            c_off = b.iadd(b.iadd(b.imul(img, gm.m * gm.p), b.imul(g, gm.mg * gm.p)),
                           b.imul(blk, cols))
            b.emit(Matmul(y, c_off, gm.p, w, b.imul(g, gm.mg * gm.kk), gm.kk, col, colbase,
                          cols if nr is None else nr, gm.mg, cols, gm.kk, accumulate=accumulate,
                          b_packed=nr is not None))
            if epilogue is not None:
                epilogue(b, c_off, gm.p, gm.mg, cols, b.imul(g, gm.mg))
        ctx.kernel("conv_im2col_gemm", b.body)


#: `epilogue(b, off, ld, rows, cols, row0)`: see `lower_gemm_conv`.
EpilogueHook = Callable[[Builder, Operand, int, int, int, Operand], None]


def _pointwise_blocks(gm: Geometry, itemsize: int) -> int:
    """Positions per block of a pointwise conv with an epilogue: the largest divisor of P
    whose (M/G, cols) output block fits `BLOCK_BYTES` (all of P when P is small)."""
    if gm.p <= 256:
        return gm.p
    fits = [d for d in range(1, gm.p + 1)
            if gm.p % d == 0 and gm.mg * d * itemsize <= BLOCK_BYTES // 2]
    best = max(fits, default=1)
    return best if best >= 64 else gm.p


def _pointwise_with_epilogue(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                             accumulate: bool, epilogue: EpilogueHook) -> None:
    """Pointwise conv, parallel over (image, group, block of positions): one Matmul on the
    block's columns of X (ldb = P), then the epilogue on the same columns of Y."""
    cols = _pointwise_blocks(gm, y.dtype.itemsize)
    nblk = gm.p // cols
    b = Builder()
    with b.loop(0, gm.n * gm.g * nblk, parallel=True, hint="u") as u:
        blk = b.op("rem", u, i64(nblk)) if nblk > 1 else i64(0)
        rest = b.op("div", u, i64(nblk)) if nblk > 1 else u
        g = b.op("rem", rest, i64(gm.g)) if gm.g > 1 else i64(0)
        img = b.op("div", rest, i64(gm.g)) if gm.g > 1 else rest
        col0 = b.imul(blk, cols)
        c_off = b.iadd(b.iadd(b.imul(img, gm.m * gm.p), b.imul(g, gm.mg * gm.p)), col0)
        x_off = b.iadd(b.iadd(b.imul(img, gm.c * gm.p), b.imul(g, gm.kk * gm.p)), col0)
        b.emit(Matmul(y, c_off, gm.p, w, b.imul(g, gm.mg * gm.kk), gm.kk, x, x_off, gm.p,
                      gm.mg, cols, gm.kk, accumulate=accumulate))
        epilogue(b, c_off, gm.p, gm.mg, cols, b.imul(g, gm.mg))
    ctx.kernel("conv_gemm", b.body)


def lower_depthwise(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                    bias: Buffer | None, epilogue: EpilogueHook | None = None) -> None:
    """Direct nest for C/G == 1, parallel over (image, output channel), per output row.

    Rows whose every kernel tap lies inside the image along the outer dims (the interior)
    take the fused path: one pass over the row's interior columns sums every tap
    (`bias + sum w_t * x_t`, weights hoisted per channel), and the few edge columns get the
    taps whose input is inside. Other rows (top/bottom borders) store the bias, then add each
    tap over its valid range. Kernels with more than `MAX_FUSED_TAPS` taps always take the
    second path, with the outer kernel dims as loops. An `epilogue` (see `lower_gemm_conv`)
    runs on each (image, channel) plane right after it is computed (rows = 1, cols = P).
    Small 2-D images go through `ops_conv_depthwise` instead (one flat loop per plane).
    """
    from onnxjit.ir.ops_conv_depthwise import lower_depthwise_phased, phased_applies

    if phased_applies(gm, y):
        lower_depthwise_phased(ctx, gm, x, w, y, bias, epilogue)
        return
    a, b = gm.a, Builder()
    ow, kw, sw, pw, iw = gm.out[-1], gm.k[-1], a.strides[-1], gm.begin[-1], gm.ins[-1]
    fused = gm.kprod <= MAX_FUSED_TAPS
    with b.loop(0, gm.n * gm.m, parallel=True, hint="q") as q:
        n, m = (b.op("div", q, i64(gm.m)), b.op("rem", q, i64(gm.m))) if gm.n > 1 else (i64(0), q)
        ch = b.op("div", m, i64(gm.mg)) if gm.mg > 1 else m  # the input channel (group)
        xbase = b.imul(b.iadd(b.imul(n, gm.c), ch), gm.in_plane)
        init = const(0, y.dtype) if bias is None else b.load(bias, m)
        wbase = b.imul(m, gm.kprod)
        wv = [b.load(w, b.iadd(wbase, i64(t)), hint="w") for t in range(gm.kprod)] if fused \
            else []
        with Nest(b, gm.out[:-1], "o") as o:
            yrow = b.iadd(b.imul(q, gm.p), b.imul(b.linear(o, row_major_strides(gm.out[:-1])),
                                                  ow))
            inside = _rows_inside(b, o, gm) if fused else i64(0)
            if inside is None:
                _fused_row(b, gm, x, y, xbase, yrow, o, wv, init)
            else:
                if fused:
                    with b.loop(0, inside, hint="interior"):
                        _fused_row(b, gm, x, y, xbase, yrow, o, wv, init)
                with b.loop(inside, 1, hint="border"):
                    with b.loop(0, ow, hint="w") as i:
                        b.store(y, b.iadd(yrow, i), init)
                    with Nest(b, gm.k[:-1], "t") as t:
                        valid, off = outer_positions(b, o, t, a, gm.begin, gm.ins, gm.out, gm.k)
                        xrow = b.iadd(xbase, off)
                        tap = b.linear(t, row_major_strides(gm.k[:-1]))
                        for tw in taps(b, kw):
                            shift = tap_shift(b, tw, a.dilations[-1], pw)
                            wt = b.load(w, b.iadd(wbase, b.iadd(b.imul(tap, kw), operand(tw))))
                            lo, hi = tap_bounds(b, valid, shift, sw, iw, ow)
                            _axpy(b, y, x, yrow, b.iadd(xrow, operand(shift)), sw, wt, lo, hi)
        if epilogue is not None:
            epilogue(b, b.imul(q, gm.p), gm.p, 1, gm.p, m)
    ctx.kernel("conv_depthwise", b.body)


#: Largest kernel (taps) whose depthwise rows are summed in one fused pass.
MAX_FUSED_TAPS = 64


def _axpy(b: Builder, y: Buffer, x: Buffer, yrow: Operand, xrow: Operand, s: int,
          wt: Operand, lo: Operand, hi: Operand) -> None:
    """y[yrow + i] += wt * x[xrow + i*s] for i in [lo, hi)."""
    with b.loop(lo, hi, hint="w") as i:
        at = b.iadd(yrow, i)
        xv = b.load(x, b.iadd(xrow, b.imul(i, s)))
        b.store(y, at, b.op("add", b.load(y, at), b.op("mul", wt, xv)))


def _rows_inside(b: Builder, o: list, gm: Geometry) -> Operand | None:
    """i64 1 when every outer kernel tap of output position `o` is inside the input, else 0;
    None when that holds for every position (no outer dim can reach the padding)."""
    a = gm.a
    cond: Operand | None = None
    for j, oj in enumerate(o):
        s, dl, pb, size = a.strides[j], a.dilations[j], gm.begin[j], gm.ins[j]
        reach = (gm.k[j] - 1) * dl
        if pb <= 0 and (gm.out[j] - 1) * s + reach - pb < size:
            continue
        first = b.iadd(b.imul(oj, s), i64(-pb))
        c = b.op("and", b.op("ge", first, i64(0)), b.op("lt", b.iadd(first, i64(reach)),
                                                       i64(size)))
        cond = c if cond is None else b.op("and", cond, c)
    return None if cond is None else b.op("select", cond, i64(1), i64(0))


def _fused_row(b: Builder, gm: Geometry, x: Buffer, y: Buffer, xbase: Operand, yrow: Operand,
               o: list, wv: list, init: Operand) -> None:
    """One output row whose outer taps are all inside: interior columns in one pass."""
    a = gm.a
    ow, kw, sw, dw, pw, iw = (gm.out[-1], gm.k[-1], a.strides[-1], a.dilations[-1],
                              gm.begin[-1], gm.ins[-1])
    ranges = [valid_range(tw * dw - pw, sw, iw, ow) for tw in range(kw)]
    lo_all, hi_all = max(r[0] for r in ranges), min(r[1] for r in ranges)
    if lo_all >= hi_all:  # no column sees every tap: all columns are edges
        lo_all = hi_all = ow
    in_str = row_major_strides(gm.ins)
    rows = []  # x row offset of each outer tap
    for t in np.ndindex(*gm.k[:-1]):
        off: Operand = xbase
        for j, (oj, tj) in enumerate(zip(o, t)):
            pos = b.iadd(b.imul(oj, a.strides[j]), i64(tj * a.dilations[j] - gm.begin[j]))
            off = b.iadd(off, b.imul(pos, in_str[j]))
        rows.append(off)
    for lo, hi in ((0, lo_all), (hi_all, ow)):
        if lo < hi:
            with b.loop(lo, hi, hint="w") as i:
                b.store(y, b.iadd(yrow, i), init)
    if lo_all < hi_all:
        # f16 sums in f32 and rounds once, then adds the bias, as the reference's matmul
        # does (`narrow.accumulator`); bf16 and wide types accumulate in their own type
        at = accumulator(y.dtype)
        with b.loop(lo_all, hi_all, hint="w") as i:
            acc: Operand = init if at == y.dtype else const(0, at)
            for r, xrow in enumerate(rows):
                for tw in range(kw):
                    xv = b.load(x, b.iadd(b.iadd(xrow, i64(tw * dw - pw)), b.imul(i, sw)))
                    acc = b.op("add", acc, b.op("mul", b.cast(wv[r * kw + tw], at),
                                                b.cast(xv, at)))
            if at != y.dtype:
                acc = b.op("add", b.cast(acc, y.dtype), init)
            b.store(y, b.iadd(yrow, i), acc)
    for r, xrow in enumerate(rows):
        for tw, (lo, hi) in enumerate(ranges):
            for a_, b_ in ((lo, min(lo_all, hi)), (max(hi_all, lo), hi)):
                if a_ < b_:
                    _axpy(b, y, x, yrow, b.iadd(xrow, i64(tw * dw - pw)), sw, wv[r * kw + tw],
                          i64(a_), i64(b_))


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
    if y.numel == 0:
        return
    if gm.cg == 1 and gm.kk > 0:
        lower_depthwise(ctx, gm, x, w, y, bias)
        return
    b = Builder()
    if bias is not None or gm.kk == 0:
        fill_channels(b, y, bias, gm.m, gm.p)
        ctx.kernel("conv_bias", b.body)
    if gm.kk > 0:
        lower_gemm_conv(ctx, gm, x, w, y, bias is not None, x.dtype, lambda bb, i: bb.load(x, i))


op("Conv", (1, 11, 22), infer=_conv_infer, evaluate=_conv_evaluate, lower=_conv_lower,
   doc="N-D convolution with groups, strides, dilations, pads/auto_pad and optional bias")
