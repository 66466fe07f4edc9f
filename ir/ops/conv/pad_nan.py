"""Non-finite depthwise weights next to padding: the padded taps' 0 * w.

onnxruntime's and onnx.reference's convs run over the zero-padded input, so a tap on the
padding adds 0 * w: nothing for a finite w, NaN for an infinite or NaN one. onnxjit's
depthwise nests (`conv.depthwise_direct`, `_phased`, `_tiny`, `_runtime`) skip the padded taps
(the GEMM path's im2col panels hold the zeros, so it needs nothing). Algorithm:
1) `needed`: some window reaches the padding and the weights are not a constant known to be
   finite at compile time, so the usual case (constant finite weights) keeps its nests as
   they were;
2) `emit`, after the nest: per (image, channel) and kernel tap, the flag isnan(w - w) (true
   for +-inf and NaN) bounds a pass over the output plane that stores NaN where the tap lies
   on the padding. With finite run-time weights that is M * prod(kernel) loads and tests per
   image, no pass;
3) a fused conv's epilogue then runs as a pass after the fix-up (`fix_up`), not inside the
   nest, so that it sees the NaN as the references' separate ops do.
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.ir.loop_builder import Builder, const, row_major_strides
from onnxjit.ir.loops import Buffer, i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.geometry import Geometry, operand


def reaches_padding(gm: Geometry) -> bool:
    """Whether some output's window has a tap outside the input (True when sizes or pads
    are symbolic)."""
    for i, (n, k, o, pb) in enumerate(zip(gm.ins, gm.k, gm.out, gm.begin)):
        if not all(isinstance(v, int) for v in (n, o, pb)):
            return True
        last = (o - 1) * gm.a.strides[i] - pb + (k - 1) * gm.a.dilations[i]
        if o > 0 and (pb > 0 or last > n - 1):
            return True
    return False


def needed(gm: Geometry, w: Buffer) -> bool:
    """Whether a depthwise conv needs the fix-up (see the module docstring)."""
    if not (w.dtype.is_float and gm.kprod > 0 and reaches_padding(gm)):
        return False
    if w.kind == "const" and w.data is not None:
        return not bool(np.isfinite(np.asarray(w.data, np.float64)).all())
    return True


def emit(ctx: LowerContext, gm: Geometry, w: Buffer, y: Buffer) -> None:
    """NaN in y wherever a tap with a non-finite weight lies on the padding (depthwise W of
    shape (M, 1, *k); y of shape (N, M, *out))."""
    b = Builder()
    nd = len(gm.k)
    kstr, ostr = row_major_strides(gm.k), row_major_strides(gm.out)
    nan = const(math.nan, y.dtype)
    with b.loop(0, gm.n, parallel=True, hint="img") as img:
        with b.loop(0, gm.m, hint="m") as m:
            ybase = b.imul(b.iadd(b.imul(img, gm.m), m), gm.p)
            with b.nest(gm.k) as t:
                wv = b.load(w, b.iadd(b.imul(m, gm.kprod), b.linear(t, kstr)))
                bad = b.op("isnan", b.op("sub", wv, wv))
                with b.loop(0, b.op("select", bad, operand(gm.out[0]), i64(0)), hint="o0") as o0:
                    with b.nest(gm.out[1:]) as rest:
                        o = [o0, *rest]
                        pad = None
                        for i in range(nd):
                            p = b.iadd(b.op("sub", b.imul(o[i], gm.a.strides[i]),
                                            operand(gm.begin[i])),
                                       b.imul(t[i], gm.a.dilations[i]))
                            off = b.op("or", b.op("lt", p, i64(0)),
                                       b.op("ge", p, operand(gm.ins[i])))
                            pad = off if pad is None else b.op("or", pad, off)
                        at = b.iadd(ybase, b.linear(o, ostr))
                        b.store(y, at, b.op("select", pad, nan, b.load(y, at)))
    ctx.kernel("conv_pad_nan", b.body)


def fix_up(ctx: LowerContext, gm: Geometry, w: Buffer, y: Buffer, epilogue) -> None:
    """After a depthwise nest run without its epilogue: the NaN of `emit`, then the
    epilogue (a `fused.epilogue.Epilogue`, or None) as a pass over y."""
    emit(ctx, gm, w, y)
    if epilogue is None:
        return
    b = Builder()
    with b.loop(0, gm.n, parallel=True, hint="img") as img:
        epilogue.emit(b, b.imul(img, gm.m * gm.p), gm.p, gm.m, gm.p, i64(0))
    ctx.kernel("conv_epilogue", b.body)
