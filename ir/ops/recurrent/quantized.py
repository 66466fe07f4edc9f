"""QuantizedLSTM (domain onnxjit): onnxruntime's DynamicQuantizeLSTM, its activations quantized
at every product as onnxruntime quantizes them.

`expand-contrib` (`passes.contrib_quant`) turns DynamicQuantizeLSTM into the input projections
(X quantized once, one int8 MatMulInteger per direction, scaled) and this op:

    QuantizedLSTM(XW [D, S, N, 4H] f32, R [D, H, 4H] i8/u8, R_scale [D, 1 or 4H],
                  R_zero_point [D, 1], B, sequence_lens, initial_h, initial_c, P)
        -> Y, Y_h, Y_c as LSTM's (attributes: LSTM's, layout 0)

Semantics (onnxruntime's deep_cpu LSTM on quantized weights: `rnn_helpers` ComputeGemm): per
direction d and step t, the previous state h (all N*H values) is quantized as
DynamicQuantizeLinear does (range min(0, min h) .. max(0, max h), scale = range / 255,
zp = rint(clamp(-min / scale, 0, 255)), q = sat_u8(rint(h / scale) + zp)); the recurrent
product acc = sum_k (q - zp) * (R[d, k, col] - R_zero_point[d]) is exact in int32; each gate
is then (XW + float(acc) * (h_scale * R_scale[d, col])) + (Wb + Rb), in that order, and the
float LSTM cell (`recurrent.cells`) follows.

Lowering (`recurrent.lowering` with `_Plan.quant`, `recurrent.steps`): XW is the projection
buffer itself; at each step, before the parallel loop over blocks of hidden units, one serial
pass (`QuantR.quantize`: N*H values, few) finds h's range (per chunk of rows as onnxruntime
splits a batch over threads: `chunk_rows`) in RANGE_LANES partial maxima and minima, quantizes
h into a u8 buffer and stores per row the scale, -zp (and K*zp - rowsum when R's zero point is
not 0) for the product's rank-1 zero-point corrections (`loops.Rank1`); each block's
product is the VNNI Matmul (u8 x i8 -> i32, `codegen.int8_gemm`) over the block's columns of
R, packed in quads at compile time (`QuantR`); the cell reads the int32 sums back scaled.

With sequence_lens, as onnxruntime: an entry past its length quantizes as zeros (onnxruntime
zeroes its state row), and the reverse direction runs each entry from its own last step.
Differences from onnxruntime: with sequence_lens, onnxruntime quantizes X over the first
max(sequence_lens) steps only (the range here is all of X); the chunks of a batch follow
onnxjit's thread count (onnxruntime's own may differ).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxjit.codegen.kernel_shapes import INT8_PANEL
from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, Rank1, Size, i64, size_operand
from onnxjit.ir.ops.quantization.quantize_linear import rint, saturate
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.quad_panels import pack_quads, padded_depth
from onnxjit.ir.types import DType, TensorType, sym_mul

F, I32, U8 = DType.FLOAT, DType.INT32, DType.UINT8
#: partial maxima and minima of h's range pass (a chain of dependent compares otherwise)
RANGE_LANES = 16


def quantized_lstm_infer(node: Node) -> list:
    """Shapes: Y [S, D, N, H], Y_h and Y_c [D, N, H] (layout 0) from XW and R."""
    from onnxjit.ir.ops.recurrent.cells import attrs_of

    a = attrs_of(node)
    xw, r = tensor_input(node, 0), tensor_input(node, 1)
    if xw.dtype != F or len(xw.shape) != 4 or len(r.shape) != 3:
        raise ModelError("QuantizedLSTM needs f32 projections [D, S, N, 4H] and R [D, H, 4H]",
                         where=node)
    if r.dtype not in (DType.INT8, U8):
        raise UnsupportedError(f"QuantizedLSTM with R of type {r.dtype.short}", where=node)
    if any(node.input(i) is None or node.inputs[i].const is None for i in (1, 2, 3)):
        raise UnsupportedError("QuantizedLSTM needs a constant R, R_scale and R_zero_point "
                               "(inputs 1-3)", where=node)
    d, s, n, _ = xw.shape
    hid = r.shape[1]
    if a.hidden is not None and isinstance(hid, int) and hid != a.hidden:
        raise ModelError(f"R has hidden size {hid} but hidden_size is {a.hidden}", where=node)
    types = [TensorType(F, (s, d, n, hid)), TensorType(F, (d, n, hid)),
             TensorType(F, (d, n, hid))]
    return types[:len(node.outputs)]


class QuantR:
    """R of one node, ready for the steps: per direction and block of hidden units j0 .. j0+w
    (`lowering.block_width`), the block's gate columns g*H + j0 + jj (gate after gate) of R[d]
    as signed bytes in quads (`ir.quad_panels`, a u8 R shifted by -128 with its zero point), and
    in that same block-column order B's column sums and zero points (the rank-1 terms) and
    R's scales by gate column."""

    def __init__(self, ctx, node: Node, hidden: int, jb: int):
        r = np.asarray(node.inputs[1].const)
        dirs, hid = r.shape[0], hidden
        gh = 4 * hid
        shift = 128 if r.dtype == np.uint8 else 0
        w = (r.astype(np.int16) - shift).astype(np.int8)
        zp = np.asarray(node.inputs[3].const).reshape(dirs, -1)[:, 0].astype(np.int32) - shift
        scale = np.asarray(node.inputs[2].const, np.float32).reshape(dirs, -1)
        self.kp = padded_depth(hid)
        self.jb, self.nfull, self.tail = jb, hid // jb, hid % jb
        order = np.asarray([g * hid + j0 + jj for j0 in range(0, hid, jb) for g in range(4)
                            for jj in range(min(jb, hid - j0))])
        colsum = w.astype(np.int32).sum(axis=1, dtype=np.int32)  # [D, 4H]
        parts = [pack_quads(w[d][:, order[c0:c0 + 4 * min(jb, hid - j0)]], INT8_PANEL)
                 for d in range(dirs) for c0, j0 in ((4 * j0, j0) for j0 in range(0, hid, jb))]
        self.dir_stride = sum(p.size for p in parts[:len(parts) // dirs])
        self.packed = ctx.constant("lstm_rq_packed", np.concatenate(parts))
        self.colsum = ctx.constant("lstm_rq_colsum",
                                   np.ascontiguousarray(colsum[:, order]).reshape(-1))
        self.zb = None
        if zp.any():
            self.zb = ctx.constant("lstm_rq_zb", np.repeat(zp, gh).astype(np.int32))
        self.scale = ctx.constant("lstm_rq_scale", np.ascontiguousarray(
            np.broadcast_to(scale, (dirs, gh)), np.float32).reshape(-1))
        n = node.inputs[0].type.shape[2]
        self.chunk = chunk_rows(n, hid, ctx.num_threads)
        self.hq = ctx.scratch("lstm_hq", U8, (sym_mul(n, hid),))
        self.h_scale = ctx.scratch("lstm_hq_scale", F, (n,))
        self.negzp = ctx.scratch("lstm_hq_negzp", I32, (n,))
        self.rows = ctx.scratch("lstm_hq_rows", I32, (n,)) if self.zb is not None else None
        self.part = ctx.scratch("lstm_hq_range", F, (2 * RANGE_LANES,))

    def block_offset(self, b: Builder, d: int, j0: Operand) -> Operand:
        """Where the block starting at unit j0 starts in the packed R (full blocks before a
        tail block, so j0 / jb full blocks precede any block)."""
        width = -(-4 * self.jb // INT8_PANEL) * INT8_PANEL
        return b.iadd(i64(d * self.dir_stride), b.imul(b.op("div", j0, i64(self.jb)),
                                                       width * self.kp))

    def rank1(self, b: Builder, d: int, col0: Operand, gh: int) -> tuple[Rank1, ...]:
        """The zero-point corrections of a block whose first rec column is col0."""
        col = b.iadd(i64(d * gh), col0)
        terms = [Rank1(self.negzp, i64(0), 1, self.colsum, col)]
        if self.zb is not None and self.rows is not None:
            terms.append(Rank1(self.rows, i64(0), 1, self.zb, col))
        return tuple(terms)

    def quantize(self, b: Builder, h: Buffer, off: Operand, n: Size, hid: int,
                 live: Callable[[Operand], Operand | None]) -> None:
        """Quantize h[off : off + n*hid] into `hq` (DynamicQuantizeLinear's rules), chunk by
        chunk of rows (`chunk_rows`), storing each row's scale in `h_scale` and the rank-1
        row terms; a row r whose `live(r)` is false counts as zeros."""

        def value(r: Operand, i: Operand) -> Operand:
            v = b.load(h, i)
            ok = live(r)
            return v if ok is None else b.op("select", ok, v, const(0, F))

        w = RANGE_LANES
        nchunks = b.op("div", b.iadd(size_operand(n), i64(self.chunk - 1)), i64(self.chunk))
        with b.loop(0, nchunks, hint="chunk") as c:
            r0 = b.imul(c, self.chunk)
            r1 = b.op("min", b.iadd(r0, i64(self.chunk)), size_operand(n))
            with b.loop(0, 2 * w, hint="k") as k:
                b.store(self.part, k, const(0, F))
            mx, mn = b.var(const(0, F), hint="max"), b.var(const(0, F), hint="min")
            with b.loop(r0, r1, hint="r") as r:
                base = b.iadd(off, b.imul(r, hid))
                with b.loop(0, hid // w, hint="iq") as t:
                    i0 = b.iadd(base, b.imul(t, w))
                    for k in range(w):
                        v = value(r, b.iadd(i0, i64(k)))
                        for at, kind in ((k, "max"), (w + k, "min")):
                            b.store(self.part, i64(at),
                                    b.op(kind, b.load(self.part, i64(at)), v))
                for i in range(hid - hid % w, hid):
                    v = value(r, b.iadd(base, i64(i)))
                    b.assign(mx, "max", mx, v)
                    b.assign(mn, "min", mn, v)
            with b.loop(0, w, hint="k") as k:
                b.assign(mx, "max", mx, b.load(self.part, k))
                b.assign(mn, "min", mn, b.load(self.part, b.iadd(k, i64(w))))
            rng = b.op("select", b.op("eq", mx, mn), const(1, F), b.op("sub", mx, mn))
            scale = b.op("div", rng, const(255, F))
            zp = rint(b, b.op("min", b.op("max", b.op("neg", b.op("div", mn, scale)),
                                          const(0, F)), const(255, F)))
            zpi = b.cast(zp, I32)
            with b.loop(r0, r1, hint="r") as r:
                b.store(self.h_scale, r, scale)
                b.store(self.negzp, r, b.op("neg", zpi))
                base = b.imul(r, hid)
                s = b.var(const(0, I32), hint="rowsum")
                with b.loop(0, hid, hint="i") as i:
                    v = b.op("add", rint(b, b.op("div", value(r, b.iadd(off, b.iadd(base, i))),
                                                 scale)), zp)
                    qv = saturate(b, v, U8)
                    b.store(self.hq, b.iadd(base, i), qv)
                    if self.rows is not None:
                        b.assign(s, "add", s, b.cast(qv, I32))
                if self.rows is not None:
                    b.store(self.rows, r, b.op("sub", b.op("mul", zpi, const(hid, I32)), s))


def chunk_rows(batch: Size, hidden: int, threads: int) -> int:
    """Rows of h quantized together: onnxruntime splits the batch over its threads in chunks
    of ceil(N / threads) rows, each quantizing its own, when N > 4 or (N >= 2 and H <= 256)
    (`UniDirectionalLstm::SetNumThreads`); onnxjit's thread count stands for onnxruntime's."""
    if not isinstance(batch, int):
        return 1 << 30  # a run-time batch: one chunk (the row loops stop at N)
    if batch > 4 or (batch >= 2 and hidden <= 256):
        return max(1, -(-batch // max(1, threads)))
    return max(1, batch)
