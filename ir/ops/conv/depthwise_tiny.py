"""Depthwise 2-D Conv over tiny planes (4x4 outputs or fewer), vectorized across channels.

On planes of 4x4 and less (the last stage of a MobileNet at 96x96 or 128x128) the per-plane
forms (`conv.depthwise_direct`, `conv.depthwise_phased`) spend most of their time in loops of one to
four iterations: a 3x3 output is one partial vector per tap. This lowering runs
LANES channels (one vector) at a time instead, for X (N, C, H, W), one group per channel
(multiplier 1), kernel (kh, kw), strides (sh, sw), dilation 1, Y (N, C, oh, ow):

1) the block's LANES input planes are copied into a zero-padded scratch laid out
   S[R][Cp][lane] (input (r, c) at R = r + pad_top, Cp = c + pad_left), so one position of
   all LANES channels is one contiguous vector; only interior positions are written, so the
   padding, zeroed once per parallel chunk, stays zero;
2) for each output position (oy, ox), `bias + sum_t w_t * S[oy*sh + ty][ox*sw + tx]` over
   the lanes (the tap order of the direct nest), the weights repacked at compile time as
   Wp[block][tap][lane] (zero lanes past the last channel), into Z[position][lane];
3) Z copied, transposed, into the block's rows of Y, then the epilogue (if any) on those
   rows (rows = the block's channels, cols = the plane's positions).
Steps 1 and 2 are loop nests, not one loop per position: unrolled per position they gave LLVM
thousands of scalar copies (2.3 s of optimisation for one 40-channel conv, now 0.4 s) for no
run-time gain (measured 0.92-1.12x, within noise, on the MobileNet shapes below).
The work is parallel over CHUNKS groups of (image, block of channels), each with its own
slot of S and Z; the last block of channels may be partial (`conv.blocking.for_chunk`: a
copy of the block's code with its own width).
Used for float types that accumulate in their own type with constant weights and at most
MAX_POSITIONS output positions; other depthwise convs keep their forms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.narrow import accumulator
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.blocking import for_chunk, host_tile

if TYPE_CHECKING:  # conv.conv imports this module when it lowers
    from onnxjit.ir.ops.conv.geometry import EpilogueHook, Geometry

#: False keeps tiny planes on the per-plane forms. Measured against the phased form, 3x3
#: kernels: 960 channels at 3x3 31.8 -> 11.1 us on one thread (20.4 -> 6.0 on two), 576 at
#: 6x6 stride 2 13.0 -> 9.8, 320 at 4x4 11.0 -> 6.8; MobileNetV2 at 96x96 1.04-1.07x
TINY = True
#: most output positions of a plane taken (4x4): at 6x6 and 7x7 this form ran as fast as the
#: phased one, at 12x12 stride 2 (6x6 out) 1.3x slower (its copies grow with the plane)
MAX_POSITIONS = 16
#: largest kernel (taps) and padded scratch plane (bytes) taken
MAX_TAPS, MAX_SCRATCH_BYTES = 25, 64 << 10
#: parallel chunks of (image, block of channels)
CHUNKS = 16


def _padded(gm: Geometry) -> tuple[int, int]:
    (oh, ow), (kh, kw), (sh, sw) = gm.out, gm.k, gm.a.strides
    return (oh - 1) * sh + kh, (ow - 1) * sw + kw


def tiny_applies(gm: Geometry, w: Buffer, y: Buffer) -> bool:
    """Whether `lower_depthwise_tiny` handles this geometry, weight and dtype."""
    a = gm.a
    if not (TINY and len(gm.out) == 2 and gm.mg == 1 and gm.cg == 1 and gm.p <= MAX_POSITIONS
            and all(d == 1 for d in a.dilations) and gm.kprod <= MAX_TAPS
            and y.dtype.is_float and accumulator(y.dtype) == y.dtype and w.data is not None):
        return False
    lanes = host_tile(y.dtype.itemsize)[0]
    hp, wp = _padded(gm)
    return gm.m >= lanes and hp * wp * lanes * y.dtype.itemsize <= MAX_SCRATCH_BYTES


def lower_depthwise_tiny(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                         bias: Buffer | None, epilogue: EpilogueHook | None = None) -> None:
    """Depthwise conv of geometry `gm` as in the module docstring (`tiny_applies` holds);
    `epilogue(b, off, ld, rows, cols, row0)` as in `conv.depthwise_direct.lower_depthwise`."""
    (ih, iw), (pt, pl) = gm.ins, gm.begin
    lanes = host_tile(y.dtype.itemsize)[0]
    hp, wp = _padded(gm)
    nblk = -(-gm.m // lanes)
    packed = np.zeros((nblk * lanes, gm.kprod), y.dtype.numpy)
    packed[:gm.m] = np.asarray(w.data).reshape(gm.m, gm.kprod)
    wk = ctx.constant("w_dw_lanes", np.ascontiguousarray(
        packed.reshape(nblk, lanes, gm.kprod).transpose(0, 2, 1)).reshape(-1))
    tasks = gm.n * nblk
    per = -(-tasks // min(tasks, CHUNKS))
    nch = -(-tasks // per)
    splane, zplane = hp * wp * lanes, gm.p * lanes
    s = ctx.scratch("dw_lanes_in", y.dtype, (nch, splane))
    z = ctx.scratch("dw_lanes_out", y.dtype, (nch, zplane))
    # the input rows and columns that land inside the padded plane
    rows = (max(0, -pt), min(ih, hp - pt))
    cols = (max(0, -pl), min(iw, wp - pl))
    b = Builder()
    with b.loop(0, nch, parallel=True, hint="u") as u:
        sbase, zbase = b.imul(u, splane), b.imul(u, zplane)
        with b.loop(0, splane, hint="z") as j:
            b.store(s, b.iadd(sbase, j), const(0, y.dtype))
        t0 = b.imul(u, per)
        with b.loop(t0, b.op("min", b.iadd(t0, i64(per)), i64(tasks)), hint="t") as t:
            n, blk = ((b.op("div", t, i64(nblk)), b.op("rem", t, i64(nblk))) if gm.n > 1
                      else (i64(0), t))
            # the last block may be partial: for_chunk gives it its own copy and width
            for_chunk(b, blk, nblk, lanes, gm.m, lambda m0, width, n=n: _block(
                b, gm, x, y, s, z, wk, bias, epilogue, (n, m0, width, sbase, zbase),
                (rows, cols, hp, wp, lanes)))
    from onnxjit.ir.ops.conv.geometry import CONTRACT

    ctx.kernel("conv_depthwise_lanes", b.body, contract=CONTRACT)


def _block(b: Builder, gm: Geometry, x: Buffer, y: Buffer, s: Buffer, z: Buffer, wk: Buffer,
           bias: Buffer | None, epilogue: EpilogueHook | None, at: tuple, shape: tuple) -> None:
    """Steps 1-3 of the module docstring for one block of channels m0 .. m0+width (width
    fixed at compile time), then the epilogue on the block's rows."""
    n, m0, width, sbase, zbase = at
    rows, cols, hp, wp, lanes = shape
    (oh, ow), (kh, kw), (sh, sw) = gm.out, gm.k, gm.a.strides
    iw, (pt, pl) = gm.ins[1], gm.begin
    xbase = b.imul(b.iadd(b.imul(n, gm.c), m0), gm.in_plane)  # multiplier 1: channel m
    (r0, r1), (c0, c1) = rows, cols
    with b.loop(0, width, hint="g") as g:  # 1) the interior, channel-minor; rolled: the
        xrow = b.iadd(xbase, b.imul(g, gm.in_plane))  # copy is cheap, its unrolled IR is not
        with b.loop(r0, r1, hint="r") as r:
            srow = b.iadd(b.iadd(sbase, g), b.imul(b.iadd(r, i64(pt)), wp * lanes))
            xr = b.iadd(xrow, b.imul(r, iw))
            with b.loop(c0, c1, hint="c") as c:
                dst = b.iadd(srow, b.imul(b.iadd(c, i64(pl)), lanes))
                b.store(s, dst, b.load(x, b.iadd(xr, c)))
    wbase = b.imul(m0, gm.kprod)  # block m0 / lanes of Wp[block][tap][lane]
    with b.loop(0, oh, hint="oy") as oy:  # 2) every position, one vector of lanes
        with b.loop(0, ow, hint="ox") as ox:
            at_s = b.iadd(sbase, b.imul(b.iadd(b.imul(oy, sh * wp), b.imul(ox, sw)), lanes))
            at_z = b.iadd(zbase, b.imul(b.iadd(b.imul(oy, ow), ox), lanes))
            with b.loop(0, lanes, hint="g") as g:
                acc: Operand = const(0, y.dtype) if bias is None else b.load(
                    bias, b.op("min", b.iadd(m0, g), i64(gm.m - 1)))
                for ty in range(kh):
                    for tx in range(kw):
                        xv = b.load(s, b.iadd(at_s, b.iadd(g, i64((ty * wp + tx) * lanes))))
                        wv = b.load(wk, b.iadd(wbase, b.iadd(g, i64((ty * kw + tx) * lanes))))
                        acc = b.op("add", acc, b.op("mul", wv, xv))
                b.store(z, b.iadd(at_z, g), acc)
    ybase = b.imul(b.iadd(b.imul(n, gm.m), m0), gm.p)
    with b.loop(0, width, hint="g") as g:  # 3) transposed into the block's rows of Y
        yrow, zcol = b.iadd(ybase, b.imul(g, gm.p)), b.iadd(zbase, g)
        with b.loop(0, gm.p, hint="p") as p:
            b.store(y, b.iadd(yrow, p), b.load(z, b.iadd(zcol, b.imul(p, lanes))))
    if epilogue is not None:
        epilogue(b, ybase, gm.p, width, gm.p, m0)
