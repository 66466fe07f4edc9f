"""1-D convs with long kernels as products over overlapping windows of X (no im2col).

A 1-D conv of one group and dilation 1 computes, per image,

    Y[m, p] = bias[m] + sum_c sum_t W[m, c, t] * X[c, p*s + t]      (X zero-padded)

For one input channel c, the matrix A_c[p, t] = X[c, p*s + t] (P x k) is a window of X itself:
row p starts s elements after row p-1, so it is a row-major window with leading dimension s
(its rows overlap when s < k). An audio front end computing a spectrogram as a convolution (1
input channel, 257 outputs, 512 taps, stride 160) is then one product per image,

    T[P, M] = sum_c A_c (P x k, lda = s) @ W_c^T (k x M, packed at compile time)

with no im2col panel at all. The direct depthwise nest (`conv.depthwise_direct`, where C/G == 1
sends such a conv) made it a dot product of 512 taps per output element, 0.01-0.05x
onnxruntime; the im2col form gathers its panel at stride s and runs P (97 for one second of
16 kHz audio) along the vector lanes. Here the vectors run along the output channels, and
`conv.few_positions.lower_transposed` supplies the rest: chunks of channels or positions for
the threads, T's transposed copy into Y (adding the bias), the epilogue of a FusedConv.
Padding: X is first copied into a zero-padded scratch, (P-1)*s + k elements a channel (the
reach of the windows), by one kernel parallel over its rows.
Applies (`applies`) to float/double 1-D convs of one group, dilation 1, constant weights, at
least MIN_TAPS taps and at most MAX_CHANNELS input channels, over positions few enough that
vectors along them would waste lanes (`few_positions.pays`, without its DEEP rule); others
keep their forms (the im2col panel of many short-kernel channels costs little next to its
product; over many positions Y = W @ panel ran faster: 4 x 48000 samples 2.3x onnxruntime
against 1.1x here, its vectors along 297 positions instead of 257 channels, no copy of T).
Convs of one input channel that the windows do not take, with at least MIN_TAPS taps, go
through the im2col product (`im2col_instead`), not the depthwise nest.
"""

from __future__ import annotations

import numpy as np

from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Matmul, Operand, i64, pack_panels
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.few_positions import lower_transposed, pays
from onnxjit.ir.ops.conv.geometry import EpilogueHook, Geometry
from onnxjit.ir.ops.conv.packed_panels import packed_width
from onnxjit.ir.types import DType

#: Lower eligible convs through the windows; False restores the depthwise nest / im2col.
WINDOWS = True
#: Fewest kernel taps for the window form.
MIN_TAPS = 32
#: Convs of one input channel and long kernels that the windows do not take go through the
#: im2col product (`im2col_instead`); False leaves them to the depthwise nest.
ONE_CHANNEL_IM2COL = True
#: Most input channels (one product of depth k per channel).
MAX_CHANNELS = 8


def applies(gm: Geometry, x: Buffer, w: Buffer, y: Buffer) -> bool:
    """True when `lower_windows` handles this conv (see the module docstring)."""
    dt = y.dtype
    a = gm.a
    return (WINDOWS and len(gm.out) == 1 and gm.g == 1 and a.dilations[0] == 1
            and dt in (DType.FLOAT, DType.DOUBLE) and x.dtype == dt and w.dtype == dt
            and w.kind == "const" and w.data is not None and gm.k[0] >= MIN_TAPS
            and gm.c <= MAX_CHANNELS and x.is_static and y.is_static
            and pays(gm, dt, deep=False))


def im2col_instead(gm: Geometry) -> bool:
    """True for a conv of one input channel with at least MIN_TAPS taps that the windows do
    not take (dilated, 2-D, ...): its im2col product beats the depthwise nest (`conv.conv`
    sends C/G == 1 there), whose every output is a dot product of all its taps."""
    return ONE_CHANNEL_IM2COL and gm.g == 1 and gm.cg == 1 and gm.kk >= MIN_TAPS


def lower_windows(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                  bias: Buffer | None, epilogue: EpilogueHook | None) -> None:
    """The products of the module docstring; `bias` is added by the copy into Y, then the
    `epilogue` (see `conv.geometry.EpilogueHook`) runs on each block of Y."""
    dt, k, m, s, c = y.dtype, gm.k[0], gm.m, gm.a.strides[0], gm.c
    nr = packed_width(dt, gm.p, m, gm.kk)
    assert nr is not None and w.data is not None
    # channel c's W_c^T (k x M) packed, the channels one after the other
    wt = ctx.constant("w_t", np.concatenate([
        pack_panels(np.ascontiguousarray(w.data[:, ci, :].T), nr) for ci in range(c)]))
    src, row = _padded(ctx, gm, x)

    def product(b: Builder, t: Buffer, t_off: Operand, ldt: int, img: Operand, p0: Operand,
                nrows: int, c0: Operand, ncols: int) -> None:
        for ci in range(c):  # few channels (MAX_CHANNELS): unrolled, the first one stores
            a_off = b.iadd(b.imul(img, c * row), b.iadd(i64(ci * row), b.imul(p0, s)))
            b.emit(Matmul(t, t_off, ldt, src, a_off, s, wt, b.iadd(i64(ci * k * m),
                                                                  b.imul(c0, k)),
                          nr, nrows, ncols, k, accumulate=ci > 0, b_packed=True))

    lower_transposed(ctx, gm, x, w, y, epilogue, product, bias)


def _padded(ctx: LowerContext, gm: Geometry, x: Buffer) -> tuple[Buffer, int]:
    """X itself and its row length when unpadded, else a zero-padded copy of the (P-1)*s + k
    elements of each row the windows reach, built in a kernel parallel over the rows."""
    ins, pb = gm.ins[0], gm.begin[0]
    reach = (gm.p - 1) * gm.a.strides[0] + gm.k[0]
    if pb == 0 and reach <= ins:
        return x, ins
    xp = ctx.scratch("x_pad", x.dtype, (gm.n * gm.c, reach))
    zero = const(0, x.dtype)
    lo, hi = min(pb, reach), min(pb + ins, reach)
    b = Builder()
    with b.loop(0, gm.n * gm.c, parallel=True, hint="r") as r:
        base = b.imul(r, reach)
        with b.loop(0, lo, hint="z") as j:
            b.store(xp, b.iadd(base, j), zero)
        with b.loop(lo, hi, hint="j") as j:
            b.store(xp, b.iadd(base, j), b.load(x, b.iadd(b.imul(r, ins), b.op(
                "sub", j, i64(pb)))))
        with b.loop(hi, reach, hint="z") as j:
            b.store(xp, b.iadd(base, j), zero)
    ctx.kernel("conv_pad_rows", b.body)
    return xp, reach
