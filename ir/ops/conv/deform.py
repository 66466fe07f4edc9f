"""DeformConv (opsets 19, 22): 2-D convolution whose kernel taps are displaced by learned offsets.

Output position (oh, ow) and tap (i, j) read input channel c at the real-valued position
`(oh*sh - ph + i*dh + off_h, ow*sw - pw + j*dw + off_w)`, where (off_h, off_w) come from
`offset[n, (g*kH*kW + tap)*2 + {0, 1}, oh, ow]` for the channel's offset group
g = c // (C / offset_group); the value is bilinearly interpolated from the four neighbouring
pixels (a pixel outside the image counts as 0, like GridSample with zero padding and
align_corners) and multiplied by `mask[n, g*kH*kW + tap, oh, ow]` (1 without a mask).

Lowering: (1) Y is filled with the bias (or zeros); (2) a sampling kernel, parallel over
(image, channel), writes those values into an im2col panel (C/G * kH*kW, oH*oW) per image and
group: the corner loads use clamped indexes and a `select` zeroes the corners outside the image,
so there is no branch; (3) one `Matmul` per image and group accumulates W_g x panel into Y, as
Conv does. Panels of several images share one scratch below `PANEL_BYTES`, else the batch runs
in chunks. Only 2-D inputs are implemented (as in the reference).
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Matmul, Operand, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.conv.attrs import ConvAttrs, infer_conv_shape
from onnxjit.ir.ops.conv.geometry import PANEL_BYTES, fill_channels, for_each_block
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, Types, accept_same, arity, int_attr
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType

_TYPES: Types = ((19, FLOATS), (22, FLOATS | BF16))


def _check(node: Node) -> tuple[ConvAttrs | None, tuple | None, int]:
    x, w = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    a, out = infer_conv_shape(node, x, w, None if node.input(3) is None
                              else tensor_input(node, 3).shape)
    og = int_attr(node, "offset_group", 1)
    if og < 1:
        raise ModelError(f"attribute 'offset_group' must be >= 1, got {og}", where=node)
    if a is not None and a.rank != 2:
        raise UnsupportedError(f"DeformConv with {a.rank} spatial dims (only 2-D is "
                               "implemented)", where=node)
    if x is not None and isinstance(x[1], int) and x[1] % og:
        raise ModelError(f"X has {x[1]} channels, not divisible by offset_group={og}",
                         where=node)
    if a is not None and out is not None and all(isinstance(k, int) for k in a.kernel):
        taps = math.prod(a.kernel)  # type: ignore[arg-type]
        for i, per in ((2, 2 * taps), (4, taps)):
            s = tensor_input(node, i).shape if node.input(i) is not None else None
            want = (out[0], og * per, *out[2:])
            if s is not None and (len(s) != 4 or any(
                    isinstance(p, int) and isinstance(q, int) and p != q for p, q in zip(s, want))):
                name = "offset" if i == 2 else "mask"
                raise ModelError(f"{name} must have shape {list(want)}, got {list(s)}",
                                 where=node)
    return a, out, og


def _infer(node: Node) -> list:
    idx = arity(node, 3, 5)
    dt = accept_same(node, idx, _TYPES)
    _, out, _ = _check(node)
    return tensor(dt, out)


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, w, off = inputs[:3]
    bias = inputs[3] if len(inputs) > 3 else None
    mask = inputs[4] if len(inputs) > 4 else None
    a, out, og = _check(node)
    assert a is not None and out is not None
    n, c, ih, iw = x.shape
    kh, kw = w.shape[2:]
    oh, ow = int(out[2]), int(out[3])  # type: ignore[arg-type]
    taps = kh * kw
    off = off.reshape(n, og, taps, 2, oh, ow).astype(np.float64)
    mask = np.ones((n, og, taps, oh, ow)) if mask is None else mask.reshape(n, og, taps, oh, ow)
    ti, tj = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
    base_h = (np.arange(oh) * a.strides[0] - a.pads[0])[None, :, None] \
        + (ti.reshape(-1) * a.dilations[0])[:, None, None]
    base_w = (np.arange(ow) * a.strides[1] - a.pads[1])[None, None, :] \
        + (tj.reshape(-1) * a.dilations[1])[:, None, None]
    cols = np.zeros((n, c, taps, oh, ow))
    xp = np.zeros((n, c, ih + 2, iw + 2))
    xp[:, :, 1:-1, 1:-1] = x  # a zero border: corners outside read 0
    cg = c // og
    for g in range(og):
        h = base_h[None] + off[:, g, :, 0]
        v = base_w[None] + off[:, g, :, 1]
        h0, w0 = np.floor(h), np.floor(v)
        lh, lw = h - h0, v - w0
        for dh_, wh in ((0, 1 - lh), (1, lh)):
            for dw_, ww in ((0, 1 - lw), (1, lw)):
                hi = np.clip(h0 + dh_, -1, ih).astype(np.int64) + 1
                wi = np.clip(w0 + dw_, -1, iw).astype(np.int64) + 1
                vals = xp[np.arange(n)[:, None, None, None, None],
                          np.arange(g * cg, (g + 1) * cg)[None, :, None, None, None],
                          hi[:, None], wi[:, None]]
                cols[:, g * cg:(g + 1) * cg] += (wh * ww)[:, None] * vals
        cols[:, g * cg:(g + 1) * cg] *= mask[:, g][:, None]
    grp = a.group
    m = w.shape[0]
    y = np.einsum("gmk,ngkp->ngmp",
                  w.reshape(grp, m // grp, (c // grp) * taps).astype(np.float64),
                  cols.reshape(n, grp, (c // grp) * taps, oh * ow)).reshape(n, m, oh, ow)
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1)
    return [np.asarray(y, dtype=x.dtype)]


def _sample(b: Builder, x: Buffer, plane: Operand, h: Operand, w: Operand, ih: int, iw: int
            ) -> Operand:
    """Bilinear sample of one channel plane at real (h, w); 0 outside the image."""
    dt = x.dtype
    h0, w0 = b.op("floor", h), b.op("floor", w)
    lh, lw = b.op("sub", h, h0), b.op("sub", w, w0)
    hi0, wi0 = b.cast(h0, DType.INT64), b.cast(w0, DType.INT64)
    one = const(1, dt)
    acc: Operand = const(0, dt)
    for dh, wh in ((0, b.op("sub", one, lh)), (1, lh)):
        r = b.iadd(hi0, i64(dh))
        rin = b.op("and", b.op("ge", r, i64(0)), b.op("lt", r, i64(ih)))
        rc = b.op("min", b.op("max", r, i64(0)), i64(ih - 1))
        for dw, ww in ((0, b.op("sub", one, lw)), (1, lw)):
            q = b.iadd(wi0, i64(dw))
            inside = b.op("and", rin, b.op("and", b.op("ge", q, i64(0)), b.op("lt", q, i64(iw))))
            qc = b.op("min", b.op("max", q, i64(0)), i64(iw - 1))
            v = b.load(x, b.iadd(plane, b.iadd(b.imul(rc, iw), qc)))
            v = b.op("select", inside, v, const(0, dt))
            acc = b.op("add", acc, b.op("mul", b.op("mul", wh, ww), v))
    return acc


def _lower(ctx: LowerContext, node: Node) -> None:
    x, w, off = (ctx.buf(node.inputs[i]) for i in (0, 1, 2))
    y = ctx.buf(node.outputs[0])
    bias = ctx.buf(node.inputs[3]) if node.input(3) is not None else None
    mask = ctx.buf(node.inputs[4]) if node.input(4) is not None else None
    if y.numel == 0:
        return
    a, _, og = _check(node)
    assert a is not None
    n, c, ih, iw = x.shape
    m, (kh, kw), (oh, ow) = y.shape[1], w.shape[2:], y.shape[2:]
    taps, p, grp = kh * kw, oh * ow, a.group
    mg, kk = m // grp, (c // grp) * kh * kw
    dt = y.dtype
    b = Builder()
    fill_channels(b, y, bias, m, p)
    ctx.kernel("deformconv_bias", b.body)
    if kk == 0:
        return
    chunk = max(1, min(n, PANEL_BYTES // max(1, c * taps * p * dt.itemsize)))
    col = ctx.scratch("col", dt, (chunk * c * taps, p))
    for n0 in range(0, n, chunk):
        nimg = min(chunk, n - n0)
        b = Builder()
        with b.loop(0, nimg * c, parallel=True, hint="q") as q:
            img = b.iadd(b.op("div", q, i64(c)), i64(n0))
            ch = b.op("rem", q, i64(c))
            g = b.op("div", ch, i64(c // og))
            plane = b.imul(b.iadd(q, i64(n0 * c)), ih * iw)
            with b.loop(0, kh, hint="i") as ti, b.loop(0, kw, hint="j") as tj:
                tap = b.iadd(b.imul(ti, kw), tj)
                mrow = b.iadd(b.imul(img, og * taps), b.iadd(b.imul(g, taps), tap))
                orow = b.imul(mrow, 2)
                row = b.imul(b.iadd(b.imul(q, taps), tap), p)
                with b.loop(0, oh, hint="oh") as yh, b.loop(0, ow, hint="ow") as yw:
                    at = b.iadd(b.imul(yh, ow), yw)
                    hoff = b.load(off, b.iadd(b.imul(orow, p), at))
                    woff = b.load(off, b.iadd(b.imul(b.iadd(orow, i64(1)), p), at))
                    hpos = b.iadd(b.imul(yh, a.strides[0]),
                                  b.iadd(b.imul(ti, a.dilations[0]), i64(-a.pads[0])))
                    wpos = b.iadd(b.imul(yw, a.strides[1]),
                                  b.iadd(b.imul(tj, a.dilations[1]), i64(-a.pads[1])))
                    h = b.op("add", b.cast(hpos, dt), hoff)
                    wv = b.op("add", b.cast(wpos, dt), woff)
                    v = _sample(b, x, plane, h, wv, ih, iw)
                    if mask is not None:
                        v = b.op("mul", v, b.load(mask, b.iadd(b.imul(mrow, p), at)))
                    b.store(col, b.iadd(row, at), v)
        ctx.kernel("deformconv_sample", b.body)
        b = Builder()

        def product(bb: Builder, img: Operand, gi: Operand, n0: int = n0) -> None:
            c_off = bb.iadd(bb.imul(bb.iadd(img, i64(n0)), m * p), bb.imul(gi, mg * p))
            b_off = bb.iadd(bb.imul(img, c * taps * p), bb.imul(gi, kk * p))
            bb.emit(Matmul(y, c_off, p, w, bb.imul(gi, mg * kk), kk, col, b_off, p, mg, p, kk,
                           accumulate=True))

        for_each_block(b, nimg, grp, product)
        ctx.kernel("deformconv_gemm", b.body)


op("DeformConv", (19, 22), infer=_infer, evaluate=_evaluate, lower=_lower,
   doc="2-D convolution sampling the input at offset (bilinear) positions, optional mask")
