"""ConvInteger / QLinearConv's integer product on the 8-bit kernel (`codegen.int8_gemm`).

For one group, 1-D or 2-D, constant weights with a constant zero point, x's zero point a scalar
(or absent), static sizes, and a host with AVX-512 VNNI:
1) im2col into a u8/i8 panel P[row, col] (row = image * positions + output position, col =
   input channel * taps + tap), x's own bytes; a tap in the padding takes x's zero point, so
   (value - zero point) is 0 there as the spec's zero padding of (x - x_zero_point) wants;
2) C = (P - x_zp) @ (W2 - w_zp), W2 = W reshaped to [Cout, K] and transposed (K x Cout), by
   MatMulInteger's VNNI lowering (`linalg.matmul_integer.lower_int8`): its sign shifts, packed
   weights and zero-point terms, so the sums are exact int32 as the scalar form's;
3) y[n, co, pos] = C[n * positions + pos, co] (a transposing copy).
The scalar i32 panel form (`conv.integer.integer_conv`) stays for the rest.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.codegen.kernel_shapes import has_vnni
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.geometry import Geometry
from onnxjit.ir.types import DType

#: panels larger than this stay on the scalar form (the panel is a scratch of the program)
MAX_PANEL_BYTES = 64 << 20


def vnni_applies(gm: Geometry, node: Node, ins: tuple, y: Buffer) -> bool:
    w, xzp, wzp = ins[1], ins[2], ins[3]
    sizes = [gm.n, gm.c, gm.m, *gm.ins, *gm.out]
    return (has_vnni() and gm.g == 1 and len(gm.out) in (1, 2) and w.const is not None
            and (wzp is None or wzp.const is not None)
            and (xzp is None or (xzp.type is not None and xzp.type.is_static
                                 and xzp.type.numel() == 1))
            and all(isinstance(s, int) for s in sizes) and y.numel > 0 and gm.kk > 0
            and gm.n * gm.p * gm.kk <= MAX_PANEL_BYTES)


def lower_vnni_conv(ctx: LowerContext, node: Node, gm: Geometry, ins: tuple, y: Buffer) -> None:
    """Steps 1-3 of the module docstring (`vnni_applies` holds)."""
    from onnxjit.ir.ops.linalg.matmul_integer import Int8Plan, lower_int8

    x = ctx.buf(ins[0])
    xzp = None if ins[2] is None else ctx.buf(ins[2])
    w = np.asarray(ins[1].const)
    w2 = np.ascontiguousarray(w.reshape(gm.m, gm.kk).T)  # K x Cout
    zb = np.zeros(1, np.int32) if ins[3] is None else np.asarray(ins[3].const)
    rows = gm.n * gm.p
    panel = ctx.scratch("conv_panel8", x.dtype, (rows, gm.kk))
    _im2col(ctx, gm, x, xzp, panel)
    c = ctx.scratch("conv_acc8", DType.INT32, (rows, gm.m))
    lower_int8(ctx, Int8Plan(node, w2, zb), panel, c)
    b = Builder()
    with b.loop(0, gm.n * gm.m, parallel=True, hint="q") as q:
        n, co = b.op("div", q, i64(gm.m)), b.op("rem", q, i64(gm.m))
        src = b.iadd(b.imul(b.imul(n, gm.p), gm.m), co)
        with b.loop(0, gm.p, hint="p") as p:
            b.store(y, b.iadd(b.imul(q, gm.p), p), b.load(c, b.iadd(src, b.imul(p, gm.m))))
    ctx.kernel("convinteger_transpose", b.body)


def _im2col(ctx: LowerContext, gm: Geometry, x: Buffer, xzp: Buffer | None, panel: Buffer
            ) -> None:
    """Step 1: one parallel loop over the panel's rows."""
    two = len(gm.out) == 2
    (ih, iw) = gm.ins if two else (1, gm.ins[0])
    (oh, ow) = gm.out if two else (1, gm.out[0])
    (kh, kw) = gm.k if two else (1, gm.k[0])
    (sh, sw) = gm.a.strides if two else (1, gm.a.strides[0])
    (dh, dw) = gm.a.dilations if two else (1, gm.a.dilations[0])
    (pt, pl) = gm.begin if two else (0, gm.begin[0])
    b = Builder()
    pad: Operand = const(0, x.dtype) if xzp is None else b.load(xzp, i64(0))
    with b.loop(0, gm.n * gm.p, parallel=True, hint="r") as r:
        n, pos = b.op("div", r, i64(gm.p)), b.op("rem", r, i64(gm.p))
        oy, ox = b.op("div", pos, i64(ow)), b.op("rem", pos, i64(ow))
        y0 = b.op("sub", b.imul(oy, sh), i64(pt))
        x0 = b.op("sub", b.imul(ox, sw), i64(pl))
        row = b.imul(r, gm.kk)
        with b.loop(0, gm.c, hint="c") as ch:
            plane = b.imul(b.iadd(b.imul(n, gm.c), ch), ih * iw)
            col0 = b.iadd(row, b.imul(ch, kh * kw))
            with b.loop(0, kh, hint="ky") as ky:
                iy = b.iadd(y0, b.imul(ky, dh))
                y_in = _inside(b, iy, ih)
                with b.loop(0, kw, hint="kx") as kx:
                    ix = b.iadd(x0, b.imul(kx, dw))
                    ok = b.op("and", y_in, _inside(b, ix, iw))
                    at = b.iadd(plane, b.iadd(b.imul(iy, iw), ix))
                    v = b.load(x, b.op("select", ok, at, i64(0)))
                    b.store(panel, b.iadd(col0, b.iadd(b.imul(ky, kw), kx)),
                            b.op("select", ok, v, pad))
    ctx.kernel("convinteger_im2col", b.body)


def _inside(b: Builder, i: Any, size: int) -> Operand:
    return b.op("and", b.op("ge", i, i64(0)), b.op("lt", i, i64(size)))
