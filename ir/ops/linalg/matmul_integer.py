"""MatMulInteger: int32 products of 8-bit matrices minus their zero points.

Y = (A - a_zero_point) @ (B - b_zero_point) in int32 (numpy.matmul broadcasting), the zero
points per tensor, per row of A or per column of B.

Lowering on the VNNI kernel (`codegen.int8_gemm`), when the host has it and B is a 2-D
constant (weights) with a constant zero point, A's batch folding into its rows (a per-row
zero point only without batch):
1) The kernel computes S = A @ B for u8 A and i8 B. Other signs are shifted by 128: an i8 A
   becomes A + 128 (u8, in a scratch copy) with zero point za + 128, a u8 B becomes B - 128
   (i8, at compile time) with zero point zb - 128; (a - za) and (b - zb) are unchanged, so
   are the results, bit for bit.
2) sum_k (a - za_i)(b - zb_j) = S_ij - za_i * colsum_j + zb_j * (K * za_i - rowsum_i): B's
   column sums (of the shifted B) are computed here, -za_i and (only when some zb_j is not
   zero) w_i = K * za_i - rowsum_i in a kernel before the product; the product adds both
   terms in its stores (`loops.Rank1`; int32 wrap-around makes the identity exact whatever
   the sums).
3) B is packed in quads (`ir.quad_panels`, panels of `INT8_PANEL` columns) at compile time.
   One parallel loop runs blocks of MB rows by one panel (rows-block major: consecutive
   blocks share A's rows), each a `Matmul` (u8 x i8 -> i32). m may be symbolic (run-time
   blocks, the last shorter). A correction pass over C after the product cost 25%: the rows
   of C 8 KB apart (n = 2048) fell into a few cache sets and went out to L3 in between.
Otherwise (no VNNI, B not constant, a batched B...) a scalar nest: i, then k, with the
contiguous column loop innermost.
"""

from __future__ import annotations

import numpy as np

from onnxjit.codegen.kernel_shapes import INT8_PANEL, has_vnni
from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import (
    Builder,
    broadcast_strides,
    coalesce,
    const,
    row_major_strides,
)
from onnxjit.ir.loops import Buffer, Matmul, Operand, Rank1, i64, size_operand
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import Types, accept, arity
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.linalg.matmul import _mismatch, _shape_text, matmul_shape
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.quad_panels import pack_quads, padded_depth
from onnxjit.ir.types import Dim, DType, sym_add, sym_floordiv, sym_mul

_BYTE_TYPES: Types = ((10, frozenset({DType.INT8, DType.UINT8})),)
I32, U8 = DType.INT32, DType.UINT8
#: rows of A per block of the parallel loop: A's block (MB x K bytes) stays in L2 while the
#: blocks of its rows sweep B's panels
MB = 192


def _zero_point(node: Node, i: int, size: Dim) -> None:
    """A zero point must be a scalar (per tensor) or a vector of the M rows of A / N columns
    of B; other layouts are valid ONNX but not implemented."""
    if node.input(i) is None:
        return
    accept(node, i, _BYTE_TYPES)
    if tensor_input(node, i).dtype != tensor_input(node, i - 2).dtype:
        raise ModelError(f"input {i} (zero point) must have the element type of input {i - 2}",
                         where=node)
    s = tensor_input(node, i).shape
    if s is None or all(d == 1 for d in s) or (len(s) == 1 and not _mismatch(s[0], size)):
        return
    raise UnsupportedError(f"MatMulInteger zero point of shape {_shape_text(s)} (only a "
                           "scalar or a vector along M (A) / N (B) is supported)", where=node)


def _mmi_infer(node: Node) -> list:
    arity(node, 2, 4)
    accept(node, 0, _BYTE_TYPES)
    accept(node, 1, _BYTE_TYPES)
    a, b = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    out = matmul_shape(node, a, b)
    _zero_point(node, 2, None if a is None or len(a) < 2 else a[-2])
    _zero_point(node, 3, None if b is None or len(b) < 2 else b[-1])
    return tensor(DType.INT32, out)


def _mmi_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    a, b = (x.astype(np.int32) for x in inputs[:2])
    azp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else np.zeros(1, np.int8)
    bzp = inputs[3] if len(inputs) > 3 and inputs[3] is not None else np.zeros(1, np.int8)
    azp = azp.astype(np.int32).reshape(-1, 1) if azp.size > 1 else azp.astype(np.int32)
    bzp = bzp.astype(np.int32).reshape(-1)
    with np.errstate(all="ignore"):
        return [np.asarray(np.matmul(a - azp, b - bzp), dtype=np.int32)]


# --------------------------------------------------------------------------- VNNI lowering


class Int8Plan:
    """What the VNNI lowering needs of a node, or None from `of` when it does not apply.
    `w` is B (K x N, 8-bit), `zb` its zero point(s); A's zero point is the node's input 2
    (MatMulInteger's a_zero_point; ConvInteger's and QLinearConv's x_zero_point), A's sign
    its input 0's."""

    def __init__(self, node: Node, w: np.ndarray, zb: np.ndarray):
        self.node = node
        self.a_signed = tensor_input(node, 0).dtype == DType.INT8
        shift = 128 if w.dtype == np.uint8 else 0  # a u8 B becomes i8: B - 128, zb - 128
        self.w = (w.astype(np.int16) - shift).astype(np.int8)
        self.zb = np.broadcast_to(zb.astype(np.int32).reshape(-1) - shift,
                                  (w.shape[1],)).astype(np.int32)
        self.colsum = self.w.astype(np.int32).sum(axis=0, dtype=np.int32)

    @staticmethod
    def of(node: Node, a_shape: tuple) -> Int8Plan | None:
        wv, zv = node.inputs[1], node.input(3)
        w = wv.const
        if not has_vnni() or w is None or w.ndim != 2 or 0 in w.shape or len(a_shape) < 1:
            return None
        if zv is not None and zv.const is None:
            return None
        za = node.input(2)
        zshape = None if za is None else za.type.shape
        if za is not None and len(a_shape) > 2 and (zshape is None or any(d != 1 for d in zshape)):
            return None  # a per-row zero point repeats over the batch: the scalar nest
        zb = np.zeros(1, np.int32) if zv is None else np.asarray(zv.const)
        return Int8Plan(node, np.asarray(w), zb)


def _row_terms(ctx: LowerContext, plan: Int8Plan, a: Buffer, rows: Dim, k: int
               ) -> tuple[Buffer, Buffer | None, int]:
    """(A as u8, the per-row zero point buffer or None, its shift): an i8 A copied + 128."""
    zbuf = None if plan.node.input(2) is None else ctx.buf(plan.node.inputs[2])
    if not plan.a_signed:
        return a, zbuf, 0
    b = Builder()
    au = ctx.scratch("a_u8", U8, (sym_mul(rows, k),))
    with b.loop(0, sym_mul(rows, k), parallel=True) as i:
        b.store(au, i, b.cast(b.op("add", b.cast(b.load(a, i), I32), const(128, I32)), U8))
    ctx.kernel("matmulinteger_shift", b.body)
    return au, zbuf, 128


def _za(b: Builder, zbuf: Buffer | None, shift: int, row: Operand) -> Operand:
    """The (shifted) zero point of A's row `row` as i32."""
    if zbuf is None:
        return const(shift, I32)
    z = b.cast(b.load(zbuf, row if zbuf.numel != 1 else i64(0)), I32)
    return b.op("add", z, const(shift, I32)) if shift else z


def _terms(ctx: LowerContext, plan: Int8Plan, au: Buffer, zbuf: Buffer | None, shift: int,
           rows: Dim, k: int) -> list[tuple[Buffer, int, Buffer]]:
    """The rank-1 corrections as (row buffer, row step, column constant), with a kernel
    computing the row buffers: -za_i by B's column sums, w_i = K * za_i - rowsum_i by zb_j."""
    has_zb, has_za = bool(plan.zb.any()), zbuf is not None or shift != 0
    if not (has_za or has_zb):
        return []
    per_row = zbuf is not None and zbuf.numel != 1
    b = Builder()
    terms = []
    if has_za:
        negza = ctx.scratch("qnegza", I32, (rows,) if per_row else (1,))
        with b.loop(0, rows if per_row else 1, parallel=per_row, hint="r") as r:
            b.store(negza, r, b.op("neg", _za(b, zbuf, shift, r)))
        terms.append((negza, int(per_row), ctx.constant("qcolsum", plan.colsum)))
    if has_zb:
        wrow = ctx.scratch("qrow", I32, (rows,))
        with b.loop(0, rows, parallel=True, hint="r") as r:
            s = b.var(const(0, I32), hint="rowsum")
            base = b.op("mul", r, i64(k))
            with b.loop(0, k, hint="k") as kk:
                b.assign(s, "add", s, b.cast(b.load(au, b.op("add", base, kk)), I32))
            b.store(wrow, r, b.op("sub", b.op("mul", _za(b, zbuf, shift, r), const(k, I32)), s))
        terms.append((wrow, 1, ctx.constant("qzb", plan.zb)))
    ctx.kernel("matmulinteger_rows", b.body)
    return terms


def lower_int8(ctx: LowerContext, plan: Int8Plan, a: Buffer, y: Buffer) -> None:
    rows: Dim = 1
    for d in a.shape[:-1]:
        rows = sym_mul(rows, d)
    k, n = plan.w.shape
    au, zbuf, shift = _row_terms(ctx, plan, a, rows, k)
    packed = ctx.constant("qweight", pack_quads(plan.w, INT8_PANEL))
    terms = _terms(ctx, plan, au, zbuf, shift, rows, k)
    b = Builder()
    npanels = -(-n // INT8_PANEL)
    total = sym_mul(sym_floordiv(sym_add(rows, MB - 1), MB), npanels)
    with b.loop(0, total, parallel=True, hint="t") as t:
        rb, p = b.op("div", t, i64(npanels)), b.op("rem", t, i64(npanels))
        row0, col = b.op("mul", rb, i64(MB)), b.op("mul", p, i64(INT8_PANEL))
        m = b.op("min", i64(MB), b.op("sub", size_operand(rows), row0), hint="m")
        nc = b.op("min", i64(INT8_PANEL), b.op("sub", i64(n), col), hint="n")
        c_off = b.op("add", b.op("mul", row0, i64(n)), col)
        rank1 = tuple(Rank1(rbuf, b.op("mul", row0, i64(step)), step, cbuf, col)
                      for rbuf, step, cbuf in terms)
        b.emit(Matmul(y, c_off, n, au, b.op("mul", row0, i64(k)), k, packed,
                      b.op("mul", col, i64(padded_depth(k))), INT8_PANEL, m, nc, k,
                      b_packed=True, rank1=rank1))
    ctx.kernel("matmulinteger", b.body)


# --------------------------------------------------------------------------- scalar lowering


def _lower_loops(ctx: LowerContext, node: Node, a: Buffer, bm: Buffer, y: Buffer) -> None:
    zps = [None if node.input(i) is None else ctx.buf(node.inputs[i]) for i in (2, 3)]
    a2 = (1, *a.shape) if len(a.shape) == 1 else a.shape
    b2 = (*bm.shape, 1) if len(bm.shape) == 1 else bm.shape
    m, k, n = a2[-2], a2[-1], b2[-1]
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    shape, (cs, as_, bs) = coalesce(batch, [[s * m * n for s in row_major_strides(batch)],
                                            [s * m * k for s in broadcast_strides(a2[:-2], batch)],
                                            [s * k * n for s in broadcast_strides(b2[:-2], batch)]])
    b = Builder()

    def zero_point(zp: Buffer | None, idx: Operand) -> Operand:
        if zp is None:
            return const(0, I32)
        return b.cast(b.load(zp, idx if zp.numel > 1 else i64(0)), I32)

    with b.nest(shape, parallel_outer=True) as idx:
        c_off, a_off, b_off = (b.linear(idx, st) for st in (cs, as_, bs))
        with b.loop(0, m, parallel=not shape, hint="i") as i:
            row = b.iadd(c_off, b.imul(i, n))
            with b.loop(0, n, hint="j") as j:
                b.store(y, b.iadd(row, j), const(0, I32))
            azp = zero_point(zps[0], i)
            with b.loop(0, k, hint="k") as kk:
                av = b.cast(b.load(a, b.iadd(a_off, b.iadd(b.imul(i, k), kk))), I32)
                av = b.op("sub", av, azp)
                brow = b.iadd(b_off, b.imul(kk, n))
                with b.loop(0, n, hint="j") as j:
                    bv = b.op("sub", b.cast(b.load(bm, b.iadd(brow, j)), I32),
                              zero_point(zps[1], j))
                    at = b.iadd(row, j)
                    b.store(y, at, b.op("add", b.load(y, at), b.op("mul", av, bv)))
    ctx.kernel("matmulinteger", b.body)


def _mmi_lower(ctx: LowerContext, node: Node) -> None:
    a, bm, y = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.outputs[0])
    if not y.is_static or not a.is_static:
        plan = Int8Plan.of(node, a.shape)
        if plan is None:
            raise TypeError("MatMulInteger with symbolic sizes runs on the VNNI kernel only")
        lower_int8(ctx, plan, a, y)
        return
    if y.numel == 0:
        return
    plan = Int8Plan.of(node, a.shape)
    if plan is not None:
        lower_int8(ctx, plan, a, y)
    else:
        _lower_loops(ctx, node, a, bm, y)


op("MatMulInteger", (10,), infer=_mmi_infer, evaluate=_mmi_evaluate, lower=_mmi_lower,
   doc="int32 matmul of (A - a_zero_point) and (B - b_zero_point), 8-bit inputs",
   symbolic=True)
