"""The im2col panels of a conv's blocks, and the products that consume them.

Shared by the shape-specialised lowering (`conv.conv`) and the batch-symbolic one
(`conv.im2col_batch`). `emit_panel` writes the row-major im2col panel (C/G * prod(k), cols) of
one block (image, group, rows of the first output dim); its innermost kernel dim is unrolled
so each tap's valid output range is a compile-time pair, padding rows are written by plain
loops, and X is read through a `Source` (`conv.input_phases`: strided convs read phase rows).
`ImageBlocks` numbers the blocks of a chunk of images (block u = (image, group, block of
rows)) and emits, per block, the panel (row-major, or the GEMM's packed-B layout of
`conv.packed_panels` when `PACKED_PANELS`) and the one `Matmul` W_g x panel -> Y, then the
epilogue on the block while it is in cache; a `slot` puts the panel in a scratch slot other
than the block's own (a few slots shared by a run-time number of blocks).
"""

from __future__ import annotations

from onnxjit.ir.loop_builder import Builder, const, row_major_strides
from onnxjit.ir.loops import Buffer, Matmul, Operand, i64
from onnxjit.ir.ops.conv.geometry import (
    EpilogueHook,
    Geometry,
    Nest,
    operand,
    outer_positions,
    tap_bounds,
    tap_edges,
    tap_row,
    tap_shift,
    taps,
)
from onnxjit.ir.ops.conv.input_phases import Source
from onnxjit.ir.ops.conv.packed_panels import emit_packed_panel


def emit_panel(b: Builder, col: Buffer, colbase: Operand, x: Buffer, gm: Geometry,
               img: Operand, g: Operand, o0: Operand, rows: int, cols: int, src: Source,
               chans: tuple[Operand, Operand] | None = None) -> None:
    """The im2col panel (C/G * prod(k), cols) of image `img`, group `g` and output rows
    [o0, o0 + rows) of the first spatial dim (all of them for 1-D): panel row
    (c*prod(k) + tap) holds x at the tap's input position per output position, 0 in the
    padding, reading X through `src` (`conv.input_phases`). `chans` = [c0, c1) builds only
    the rows of those channels of the group."""
    a, zero = gm.a, const(0, col.dtype)
    ow, kw, sw, dw = gm.out[-1], gm.k[-1], a.strides[-1], a.dilations[-1]
    pw, iw = gm.begin[-1], gm.ins[-1]
    sub = ([rows] + gm.out[1:-1]) if len(gm.out) > 1 else []
    c0, c1 = chans or (i64(0), i64(gm.cg))
    with b.loop(c0, c1, hint="c") as c:
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
                x_at, step = src.at(b, xrow, shift)
                tap_row(b, col, row, src.load, x_at, step, zero, (0, ow),
                        (lo, hi), tap_edges(lo, hi, ow))


#: Float panels are built in the tiled GEMM's packed-B layout (`conv.packed_panels`); False
#: restores row-major panels that the GEMM packs again on every call.
PACKED_PANELS = True


class ImageBlocks:
    """Index arithmetic of the blocks of one chunk of images: block u is (image, group,
    block of output rows), its panel at u * panel in the scratch."""

    def __init__(self, gm: Geometry, n0: int, nblk: int, rows: int, cols: int, panel: int,
                 nr: int | None):
        self.gm, self.n0, self.nblk, self.rows, self.cols = gm, n0, nblk, rows, cols
        self.panel, self.nr = panel, nr

    def split(self, b: Builder, u: Operand) -> tuple[Operand, Operand, Operand]:
        """(image, group, block) of block u."""
        gm, nblk = self.gm, self.nblk
        blk = b.op("rem", u, i64(nblk)) if nblk > 1 else i64(0)
        rest = b.op("div", u, i64(nblk)) if nblk > 1 else u
        g = b.op("rem", rest, i64(gm.g)) if gm.g > 1 else i64(0)
        img = b.iadd(b.op("div", rest, i64(gm.g)) if gm.g > 1 else rest, i64(self.n0))
        return img, g, blk

    def build(self, b: Builder, u: Operand, col: Buffer, x: Buffer, src: Source,
              chans: tuple[Operand, Operand] | None, slot: Operand | None = None) -> None:
        """Panel u (the rows of channels `chans` of it, or all) in panel slot `slot` (u)."""
        img, g, blk = self.split(b, u)
        colbase = b.imul(u if slot is None else slot, self.panel)
        if self.nr is None:
            emit_panel(b, col, colbase, x, self.gm, img, g, b.imul(blk, self.rows), self.rows,
                       self.cols, src, chans)
        else:
            emit_packed_panel(b, col, colbase, x, self.gm, img, g, b.imul(blk, self.cols),
                              self.cols, self.nr, src, chans)

    def multiply(self, b: Builder, u: Operand, y: Buffer, w: Buffer, col: Buffer,
                 accumulate: bool, epilogue: EpilogueHook | None, m0: Operand | int,
                 mrows: int, slot: Operand | None = None) -> None:
        """Output channels [m0, m0 + mrows) of the group of block u = W rows x panel `slot`
        (u), then the epilogue on them."""
        gm, cols, nr = self.gm, self.cols, self.nr
        img, g, blk = self.split(b, u)
        m0 = operand(m0)
        row0 = b.iadd(b.imul(g, gm.mg), m0)
        c_off = b.iadd(b.iadd(b.imul(img, gm.m * gm.p), b.imul(row0, gm.p)), b.imul(blk, cols))
        b_off = b.imul(u if slot is None else slot, self.panel)
        b.emit(Matmul(y, c_off, gm.p, w, b.imul(row0, gm.kk), gm.kk, col, b_off,
                      cols if nr is None else nr, mrows, cols, gm.kk, accumulate=accumulate,
                      b_packed=nr is not None))
        if epilogue is not None:
            epilogue(b, c_off, gm.p, mrows, cols, row0)
