"""Where the im2col panels of a conv read its input: X itself, or X's rows split into phases.

A panel row of kernel tap `shift` (innermost dim) copies `x[row + shift + w*s]` for the output
columns w of its valid range. With a stride s > 1 that is a strided load, which the code
generator vectorizes as a gather (about one element a cycle), and every input pixel is
gathered again by each of the kw taps that read it (a 7x7 stride-2 stem: 3-4 times per row
and by 3-4 output rows). When `DEINTERLEAVE` is set and kw > s, a first kernel writes each
input row's s phases contiguously,

    xs[R, p, j] = x[R*iw + j*s + p]     (R: flat index of the row, p < s, j < ceil(iw/s)),

reading X once with contiguous loads (an interleave group the vectorizer turns into wide loads
and shuffles), and the panel rows copy contiguous runs `xs[R, shift mod s, shift div s + w]`.
The values copied are the same, so the result is bit-identical. Positions past the row's end
(j*s + p >= iw) are never read (the tap's valid range excludes them) and are not written.
1x1 strided convs (kw <= s) keep reading X: every pixel is read at most once there.
The sizes may be `Sym`s (a symbolic program: the row's partial group is then a run-time loop).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Buffer, Operand, Size, i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.geometry import MAX_UNROLL, is_static, operand
from onnxjit.ir.types import DType

if TYPE_CHECKING:  # conv.conv imports this module
    from onnxjit.ir.ops.conv.geometry import Geometry

Load = Callable[[Builder, Operand], Operand]

#: Split strided inputs into phase rows first (see the module docstring); False restores
#: strided reads of X.
DEINTERLEAVE = True


class Source:
    """X read in place: the tap `shift` of the row at `xrow` starts at xrow + shift, stride s."""

    def __init__(self, load: Load, s: int):
        self.load, self.s = load, s

    def at(self, b: Builder, xrow: Operand, shift: int | Operand) -> tuple[Operand, int]:
        """(index of the tap's first pixel, stride) for the input row starting at `xrow`."""
        return b.iadd(xrow, operand(shift)), self.s


class PhaseSource(Source):
    """X's rows split into phases (`xs`, see the module docstring)."""

    def __init__(self, xs: Buffer, iw: Size, s: int):
        super().__init__(lambda bb, i: bb.load(xs, i), 1)
        self.iw, self.stride, self.wp = iw, s, _ceil(iw, s)

    def at(self, b: Builder, xrow: Operand, shift: int | Operand) -> tuple[Operand, int]:
        assert isinstance(shift, int)  # phases are used for unrolled taps only
        s, wp = self.stride, self.wp
        p = shift % s
        q = (shift - p) // s
        row = b.op("div", xrow, operand(self.iw))
        return b.iadd(b.imul(row, s * wp), operand(p * wp + q)), 1


def input_source(ctx: LowerContext, gm: Geometry, x: Buffer, load: Load,
                 dtype: DType) -> Source:
    """The source the panels of `gm` read (emitting the phase-splitting kernel when used)."""
    s, kw, iw = gm.a.strides[-1], gm.k[-1], gm.ins[-1]
    if not DEINTERLEAVE or s == 1 or kw <= s or kw > MAX_UNROLL or not is_static(gm.begin[-1]):
        return Source(load, s)
    wp, full = _ceil(iw, s), iw // s
    rows = gm.n * gm.c * math.prod(gm.ins[:-1])
    xs = ctx.scratch("phases", dtype, (rows, s * wp))
    b = Builder()
    with b.loop(0, rows, parallel=True, hint="R") as r:
        src, dst = b.imul(r, iw), b.imul(r, s * wp)
        with b.loop(0, full, hint="j") as j:
            at = b.iadd(src, b.imul(j, s))
            for p in range(s):
                b.store(xs, b.iadd(dst, b.iadd(j, operand(p * wp))), load(b, b.iadd(at, i64(p))))
        if is_static(iw):
            for p in range(iw - full * s):  # the last, partial group of the row
                b.store(xs, b.iadd(dst, i64(p * wp + full)),
                        load(b, b.iadd(src, i64(full * s + p))))
        else:
            with b.loop(0, iw - full * s, hint="p") as p:
                b.store(xs, b.iadd(dst, b.iadd(b.imul(p, wp), operand(full))),
                        load(b, b.iadd(src, b.iadd(p, operand(full * s)))))
    ctx.kernel("conv_phases", b.body)
    return PhaseSource(xs, iw, s)


def _ceil(a: Size, s: int) -> Size:
    return -(-a // s) if is_static(a) else (a + (s - 1)) // s
