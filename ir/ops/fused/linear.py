"""`onnxjit.FusedConv` and `onnxjit.FusedMatMul`: a Conv/MatMul/Gemm with an epilogue.

The fuse-epilogue pass builds them. The `epilogue` attribute is a graph of elementwise nodes
(the same form as a `Fused` body): its first input stands for the producer's result, the other
inputs for the node's extra inputs, and its one output is the node's output (same shape and
element type as the product). Inputs:
- FusedConv: X, W, B (optional, may be omitted), then the extra inputs; the Conv attributes
  are kept as they were;
- FusedMatMul: A, B, then the extra inputs; attributes `trans_a`, `trans_b` (A/B hold the
  operand transposed in their last two dims) and `alpha` (scales the product).
Every extra input is one of three kinds relative to the output (`extra_kind`): "full" (the
output's own shape), "chan" (one value per channel: dim 1 of a Conv output, the last dim of a
MatMul output) or "scalar" (one element).

Lowering: the producer's lowering (`conv.conv.lower_gemm_conv` / `lower_depthwise`, or the
batched Matmul below) writes its result into the output buffer block by block, and after each
block's Matmul (inside the same parallel iteration, while the block is still in cache) calls
`Epilogue.emit` on that 2-D window (offset, leading dim, rows, cols, channel of row 0): one
row loop (per-channel values loaded once per row for Conv) around a contiguous column loop
that loads the product, adds the conv bias, runs the members' scalar rules and stores the
result in place (code generation runs that nest in the tiled product's stores where it can:
`codegen/epilogue_fuse.py`). A batched MatMul splits its rows into blocks of about
`EPI_BLOCK_BYTES` of output so the epilogue still finds each block in cache.
"""

from __future__ import annotations

import math

from onnxjit.errors import CompileError, ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, broadcast_strides, coalesce, row_major_strides
from onnxjit.ir.loops import Matmul, Operand, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.fused.epilogue import Epilogue
from onnxjit.ir.ops.fused.region import FUSED_DOMAIN
from onnxjit.ir.ops.linalg import strassen as strassen
from onnxjit.ir.ops.linalg.matmul import batch_shape
from onnxjit.ir.ops.linalg.strided_views import has_views, lower_view_matmul, view_shape
from onnxjit.ir.ops.shape_utils import tensor_input

#: A FusedMatMul over folded rows is one Matmul and its epilogue nest, which code generation
#: splits over the threads (`codegen.split_matmul.split_matmul`: an even number of blocks, the
#: epilogue in each block's stores); False restores blocks of EPI_BLOCK_BYTES of output here,
#: whose count could be odd: 128 rows by 1536 as 3 blocks of 40 rows (two on one thread) and
#: 8 rows on one thread, 1.36x slower than the split product (a BERT's FFN at seq 128).
ONE_PRODUCT = True
#: Output bytes per row block of a matmul with an epilogue (about a quarter of a core's L2).
EPI_BLOCK_BYTES = 256 << 10


# --------------------------------------------------------------------------- FusedConv


def _fused_conv_infer(node: Node) -> list:
    from onnxjit.ir.ops.conv.attrs import infer_conv_shape

    x, w = tensor_input(node, 0), tensor_input(node, 1)
    bias = node.input(2)
    _, shape = infer_conv_shape(node, x.shape, w.shape,
                                None if bias is None else tensor_input(node, 2).shape)
    return tensor(x.dtype, shape)


def _fused_conv_lower(ctx: LowerContext, node: Node) -> None:
    from onnxjit.ir.ops.conv import strided_windows
    from onnxjit.ir.ops.conv.conv import conv_buffers, lower_depthwise, lower_gemm_conv
    from onnxjit.ir.ops.conv.runtime_sizes import wide_winograd

    x, w, y, bias, gm = conv_buffers(ctx, node)
    if not (x.is_static and y.is_static):
        from onnxjit.ir.ops.conv.runtime_sizes import lower_conv_node

        lower_conv_node(ctx, node, x, w, y, bias, gm, list(node.inputs[3:]))
        return
    if y.numel == 0:
        return
    if gm.kk == 0:
        raise CompileError("FusedConv with an empty kernel (the pass must not build it)",
                           where=node)
    extras = node.inputs[3:]
    if strided_windows.applies(gm, x, w, y):
        epi = Epilogue(ctx, node, extras, y, chan_axis=1, bias=bias)
        strided_windows.lower_windows(ctx, gm, x, w, y, None, epi.emit)
        return
    if gm.cg == 1 and not strided_windows.im2col_instead(gm):
        epi = Epilogue(ctx, node, extras, y, chan_axis=1)
        lower_depthwise(ctx, gm, x, w, y, bias, epilogue=epi)
        return
    if wide_winograd(ctx, node, x, w, y, bias, gm, list(extras)):
        return
    epi = Epilogue(ctx, node, extras, y, chan_axis=1, bias=bias)
    lower_gemm_conv(ctx, gm, x, w, y, False, x.dtype, lambda bb, i: bb.load(x, i),
                    epilogue=epi.emit)


op("FusedConv", (1,), domain=FUSED_DOMAIN, infer=_fused_conv_infer, lower=_fused_conv_lower,
   symbolic=True, doc="Conv whose bias/activation/residual epilogue runs on each output block")

# --------------------------------------------------------------------------- FusedMatMul


def logical_shape(shape: tuple, trans: bool) -> tuple:
    """The operand's shape as MatMul sees it (last two dims swapped when stored transposed)."""
    return (*shape[:-2], shape[-1], shape[-2]) if trans else tuple(shape)


def _fused_matmul_infer(node: Node) -> list:
    from onnxjit.ir.ops.linalg.matmul import matmul_shape

    a, b = tensor_input(node, 0), tensor_input(node, 1)
    ta, tb = bool(node.attr("trans_a", 0)), bool(node.attr("trans_b", 0))
    if a.shape is None or b.shape is None:
        return tensor(a.dtype, None)
    if (ta and len(a.shape) < 2) or (tb and len(b.shape) < 2):
        raise ModelError("a transposed operand must have rank >= 2", where=node)
    if has_views(node):
        return tensor(a.dtype, view_shape(node, a.shape, b.shape))
    return tensor(a.dtype, matmul_shape(node, logical_shape(a.shape, ta),
                                        logical_shape(b.shape, tb)))


def _row_block(m: int, n: int, itemsize: int) -> int:
    rows = max(16, EPI_BLOCK_BYTES // max(1, n * itemsize)) // 8 * 8
    return m if m <= 2 * rows else rows


def _fused_matmul_lower(ctx: LowerContext, node: Node) -> None:
    a, bm, y = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.outputs[0])
    ta, tb = bool(node.attr("trans_a", 0)), bool(node.attr("trans_b", 0))
    alpha = float(node.attr("alpha", 1.0))
    epi = Epilogue(ctx, node, node.inputs[2:], y, chan_axis=-1) \
        if node.attr("epilogue") is not None else None
    if has_views(node):  # batch-dim transposes read/written in place
        if y.numel:
            b = Builder()
            lower_view_matmul(b, node, y, a, bm, epi)
            ctx.kernel("fused_matmul", b.body)
        return
    la, lb = logical_shape(a.shape, ta), logical_shape(bm.shape, tb)
    a2 = (1, *la) if len(la) == 1 else tuple(la)
    b2 = (*lb, 1) if len(lb) == 1 else tuple(lb)
    m, k, n = a2[-2], a2[-1], b2[-1]
    if y.numel == 0:
        return
    if k == 0:  # (a symbolic k may be 0 for a call: the Matmul zero-fills, then the epilogue)
        raise CompileError("FusedMatMul with K = 0 (the pass must not build it)", where=node)
    lda, ldb = (m if ta else k), (k if tb else n)
    batch = batch_shape(a2[:-2], b2[:-2])
    sc = [s * m * n for s in row_major_strides(batch)]
    sa = [s * m * k for s in broadcast_strides(a2[:-2], batch)]
    sb = [s * k * n for s in broadcast_strides(b2[:-2], batch)]
    b = Builder()
    # a size-1 batch dim's strides do not matter (A (1, S, K) gets stride 0 there)
    keep = [i for i, d in enumerate(batch) if d != 1]
    folds = all(sb[i] == 0 for i in keep) and not ta and \
        [sa[i] for i in keep] == [sc[i] // n * k for i in keep]
    if folds and y.is_static and a.is_static and strassen.lower_if_applies(
            ctx, b, y, a, bm, tb, math.prod(batch) * m, "fused_matmul_strassen", alpha, epi):
        return

    def mm(c_off: Operand, a_off: Operand, b_off: Operand, rows: int) -> Matmul:
        return Matmul(y, c_off, n, a, a_off, lda, bm, b_off, ldb, rows, n, k,
                      a_trans=ta, b_trans=tb, alpha=alpha)

    if all(s == 0 for s in sb) and not ta and sa == [s // n * k for s in sc]:
        # Shared B, contiguous A: the batch folds into the rows; blocks of rows run in
        # parallel, each Matmul followed by the epilogue on its still-hot block.
        total = math.prod(batch) * m
        if epi is None or ONE_PRODUCT or not isinstance(total, int) or not isinstance(n, int):
            rows = total
        else:
            rows = _row_block(total, n, y.dtype.itemsize)
        nfull = total // rows if isinstance(rows, int) else 1
        if epi is None or nfull == 1 and total == rows or ONE_PRODUCT:
            b.emit(mm(i64(0), i64(0), i64(0), total))
            if epi is not None:
                epi.emit(b, i64(0), n, total, n, i64(0), parallel=True)
        else:
            with b.loop(0, nfull, parallel=True, hint="rb") as rb:
                r0 = b.imul(rb, rows)
                b.emit(mm(b.imul(r0, n), b.imul(r0, k), i64(0), rows))
                epi.emit(b, b.imul(r0, n), n, rows, n, i64(0))
            tail = total - nfull * rows
            if tail:
                r0 = i64(nfull * rows)
                b.emit(mm(i64(r0.value * n), i64(r0.value * k), i64(0), tail))
                epi.emit(b, i64(r0.value * n), n, tail, n, i64(0))
    else:
        shape, (cs, as_, bs) = coalesce(batch, [sc, sa, sb])
        with b.nest(shape, parallel_outer=True) as idx:
            c_off, a_off, b_off = (b.linear(idx, st) for st in (cs, as_, bs))
            b.emit(mm(c_off, a_off, b_off, m))
            if epi is not None:
                epi.emit(b, c_off, n, m, n, i64(0))
    ctx.kernel("fused_matmul", b.body)


op("FusedMatMul", (1,), domain=FUSED_DOMAIN, infer=_fused_matmul_infer,
   lower=_fused_matmul_lower, symbolic=True,
   doc="MatMul with folded transposes, alpha and an elementwise epilogue on each block")
