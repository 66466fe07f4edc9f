"""Conv im2col panels written straight in the tiled GEMM's packed-B layout.

The general conv path (`conv.conv.lower_gemm_conv`) multiplies W_g (M/G x K) by an im2col
panel (K x cols) per block of output positions. The tiled kernel (`codegen/matmul_kernel.py`)
would copy that panel again into column panels of NR columns before multiplying; here the
panel is built in that layout directly and the `Matmul` is marked `b_packed`
(`loops.pack_panels`: panel p holds columns [p*NR, min(cols, (p+1)*NR)) as a K x width
row-major block at p*NR*K), so the per-call packing disappears.

Algorithm, for the block of flat output positions [q, q + cols) of one image and group:
1) the block's columns split into cols // NR full panels (a loop; width NR) and one narrower
   edge panel (width cols % NR); each width is a compile-time constant;
2) per panel starting at flat position q0, per input channel and outer kernel tap, per output
   row r the panel touches (rows q0 // ow .. (q0 + width - 1) // ow; an output "row" is the
   innermost output dim, the outer dims unravelled from r), the row's segment [s0, s1) of
   columns inside the panel is computed once (run-time min/max, not per element);
3) per innermost kernel tap (unrolled up to `MAX_UNROLL`), the tap's valid range [lo, hi)
   (compile-time pair, emptied by a `select` when an outer dim is in the padding, as in
   `emit_panel`) is clamped to the segment: zeros on [s0, L), the strided copy on [L, H),
   zeros on [H, s1). Element (kk, r*ow + w - q0) of the panel is at
   panel_base + kk*width + r*ow + w - q0, so each copy loop is contiguous in the panel.
Only float32/float64 take this path (the types the tiled kernel packs); `packed_width` says
whether a product is one the tiled kernel runs, and with which panel width.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxjit.ir.loop_builder import Builder, const, row_major_strides
from onnxjit.ir.loops import Buffer, Matmul, Operand, i64
from onnxjit.ir.ops.conv.geometry import (
    Nest,
    operand,
    outer_positions,
    tap_bounds,
    tap_edges,
    tap_row,
    tap_shift,
    taps,
)
from onnxjit.ir.types import DType

if TYPE_CHECKING:  # conv.conv imports this module
    from onnxjit.ir.ops.conv.geometry import Geometry
    from onnxjit.ir.ops.conv.input_phases import Source


def packed_width(dtype: DType, m: int, n: int, k: int) -> int | None:
    """The host's packed-panel width (NR) for a product W (m x k) x panel (k x n) of `dtype`,
    or None when that product would not run on the tiled kernel (ints, tiny products)."""
    if dtype not in (DType.FLOAT, DType.DOUBLE) or min(m, n, k) < 1:
        return None
    # the tiled kernel is code generation's; its layout is the host's (imported lazily: ir/
    # must not load llvmlite at import time)
    from onnxjit.codegen.kernel_shapes import packs_b, panel_width

    buf = Buffer("probe", dtype, (1,), "temp")
    probe = Matmul(buf, i64(0), n, buf, i64(0), k, buf, i64(0), n, m, n, k)
    return panel_width(dtype.itemsize) if packs_b(probe) else None


def emit_packed_panel(b: Builder, col: Buffer, colbase: Operand, x: Buffer, gm: Geometry,
                      img: Operand, g: Operand, q: Operand, cols: int, nr: int,
                      src: Source, chans: tuple[Operand, Operand] | None = None) -> None:
    """The im2col panel (K, cols) of image `img`, group `g` and flat output positions
    [q, q + cols), written at `colbase` in packed panels of `nr` columns (see the module
    docstring), reading X through `src` (`conv.input_phases`); `chans` = [c0, c1) builds only
    the rows of those channels of the group."""
    full, rest = divmod(cols, nr)
    chans = chans or (i64(0), i64(gm.cg))
    if full:
        with b.loop(0, full, hint="pn") as pi:
            emit_panel_at(b, col, colbase, x, gm, img, g, q, pi, nr, nr, src, chans)
    if rest:
        emit_panel_at(b, col, colbase, x, gm, img, g, q, i64(full), nr, rest, src,
                      chans)


def emit_panel_at(b: Builder, col: Buffer, colbase: Operand, x: Buffer, gm: Geometry,
                  img: Operand, g: Operand, q: Operand, pi: Operand, nr: int,
                  width: int | Operand, src: Source, chans: tuple[Operand, Operand]) -> None:
    """Panel `pi` (of `width` columns: a compile-time int, or a run-time count for the edge
    panel of a block of a symbolic program) of the block starting at flat position q."""
    a, zero = gm.a, const(0, col.dtype)
    ow, kw, sw, dw = gm.out[-1], gm.k[-1], a.strides[-1], a.dilations[-1]
    pw, iw = gm.begin[-1], gm.ins[-1]
    outer = gm.out[:-1]
    base = b.iadd(colbase, b.imul(pi, nr * gm.kk))
    q0 = b.iadd(q, b.imul(pi, nr))
    ow_op = operand(ow)
    last = i64(width - 1) if isinstance(width, int) else b.op("sub", width, i64(1))
    r0 = b.op("div", q0, ow_op)
    r1 = b.iadd(b.op("div", b.iadd(q0, last), ow_op), i64(1))
    with b.loop(chans[0], chans[1], hint="c") as c:
        ch = b.iadd(b.imul(img, gm.c), b.iadd(b.imul(g, gm.cg), c))
        xbase = b.imul(ch, gm.in_plane)
        with Nest(b, gm.k[:-1], "t") as t, b.loop(r0, r1, hint="r") as r:
            o = [r if len(outer) == 1 else b.op("rem", b.op("div", r, operand(st)), operand(n))
                 for n, st in zip(outer, row_major_strides(outer))]
            valid, off = outer_positions(b, o, t, a, gm.begin, gm.ins, gm.out, gm.k)
            xrow = b.iadd(xbase, off)
            rstart = b.op("sub", b.imul(r, ow), q0)  # panel column of the row's pixel 0
            s0 = b.op("max", b.op("neg", rstart), i64(0))
            s1 = b.op("min", b.op("sub", operand(width), rstart), ow_op)
            tap = b.iadd(b.imul(c, gm.kprod),
                         b.imul(b.linear(t, row_major_strides(gm.k[:-1])), kw))
            for tw in taps(b, kw):
                shift = tap_shift(b, tw, dw, pw)
                tap_at = b.iadd(tap, operand(tw))
                row = b.iadd(base, b.iadd(b.imul(tap_at, width) if isinstance(width, int)
                                          else b.op("mul", tap_at, width), rstart))
                lo, hi = tap_bounds(b, valid, shift, sw, iw, ow)
                lo_c = b.op("min", b.op("max", lo, s0), s1)
                hi_c = b.op("min", b.op("max", hi, lo_c), s1)
                x_at, step = src.at(b, xrow, shift)
                tap_row(b, col, row, src.load, x_at, step, zero, (s0, s1),
                        (lo_c, hi_c), tap_edges(lo, hi, ow))
