"""`onnxjit.NBitsMatMul`: a product by 4-bit block-quantized constant weights (MatMulNBits).

onnxruntime's MatMulNBits (com.microsoft) holds W [K, N] as 4-bit values q in blocks of
`block_size` along K, each block with a float scale and a zero point: w = (q - zp) * scale.
`expand-contrib` (`passes.contrib_quant`) rewrites it into this op, whose inputs are
A [..., K], W dequantized to float at compile time (for many rows), and the 4-bit weights
repacked here (`pack_nbits`) for few rows.

Few rows (decode: at most MAX_ROWS rows of A) are memory bound: a float W is 8 bytes per
4-bit weight more than the quantized one. So, per chunk of NB output columns (in parallel)
and per block of K, per row r of A:

    t[n] = sum_{k in block} a[r, k] * q[k, n]               (q from its nibble, in float)
    y[r, n] += scale[blk, n] * t[n] - (scale * zp)[blk, n] * asum[r, blk]

with asum[r, blk] = sum_{k in block} a[r, k] computed first. The 4-bit weights are laid out
[chunk, block, k/2, NB] bytes, k even in the low nibble and k+1 in the high one, so the inner
loop runs over NB contiguous bytes (vectors along n: two FMAs per byte, no reductions), and a
block's 16 * NB bytes serve every row from L1. onnxruntime computes in float too (accuracy
level 0 dequantizes to float); the sums differ by rounding only.
More rows take MatMul's lowering (`linalg.matmul.lower_matmul`) with the float W prepacked.
Rows known only at run time (a symbolic program: decode steps after a prefill) run both
kernels, the float one over big = rows * min(1, rows // (MAX_ROWS + 1)) rows (all or none),
the 4-bit one over the rows - big others.
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Matmul, Operand, Size, i64, size_operand
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.fused.region import FUSED_DOMAIN
from onnxjit.ir.ops.linalg.matmul import lower_matmul
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType, sym_min

#: Output columns a chunk (the parallel unit; 4 vectors of 16 floats).
NB = 64
#: Most rows of A on the 4-bit kernel; more take the float product (compute bound).
#: Measured, two threads, 2048x2048 weights: 8 rows 7x faster than the float product, 16
#: rows about even, 64 rows 20x slower.
MAX_ROWS = 8


def pack_nbits(q: np.ndarray, zp: np.ndarray, scales: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(QW, SC, SZ) for 4-bit values q [N, blocks, block] (block even), zero points and
    scales [N, blocks]: QW u8 [chunks, blocks, block/2, NB] (k even low nibble, k+1 high),
    SC and SZ = scale * zp f32 [chunks, blocks, NB]; columns past N padded with zeros."""
    n, blocks, bs = q.shape
    chunks = -(-n // NB)
    qp = np.zeros((chunks * NB, blocks, bs), np.uint8)
    qp[:n] = q
    byte = qp[..., 0::2] | (qp[..., 1::2] << 4)
    qw = byte.reshape(chunks, NB, blocks, bs // 2).transpose(0, 2, 3, 1)

    def per_chunk(v: np.ndarray) -> np.ndarray:
        out = np.zeros((chunks * NB, blocks), np.float32)
        out[:n] = v
        return np.ascontiguousarray(out.reshape(chunks, NB, blocks).transpose(0, 2, 1))

    return np.ascontiguousarray(qw), per_chunk(scales), per_chunk(scales * zp)


def _infer(node: Node) -> list:
    a = tensor_input(node, 0)
    if a.dtype != DType.FLOAT:
        raise ModelError(f"NBitsMatMul needs a float32 A, got {a.dtype.short}", where=node)
    n = int(node.attr("N", 0))
    return tensor(a.dtype, None if a.shape is None else (*a.shape[:-1], n))


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [np.asarray(np.matmul(inputs[0], inputs[1]), dtype=np.float32)]


def _lower(ctx: LowerContext, node: Node) -> None:
    a, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    rows = math.prod(a.shape[:-1])
    if isinstance(rows, int) and (rows > MAX_ROWS or y.numel == 0):
        lower_matmul(ctx, node)  # inputs 0 and 1 are A and the float W, as MatMul's
        return
    k, n, bs = int(node.attr("K", 0)), int(node.attr("N", 0)), int(node.attr("block_size", 0))
    if not isinstance(rows, int):
        # run-time rows: the float product over `big` rows (all of them, or none when they
        # are few), then the 4-bit kernel over the others (none, or all of them)
        big = rows * sym_min(1, rows // (MAX_ROWS + 1))
        wf = ctx.buf(node.inputs[1])
        ctx.kernel("matmul", [Matmul(y, i64(0), n, a, i64(0), k, wf, i64(0), n, big, n, k)])
        rows = rows - big
    qw, sc, sz = (ctx.buf(node.inputs[i]) for i in (2, 3, 4))
    asum = _block_sums(ctx, a, rows, k, bs)
    _product(ctx, a, qw, sc, sz, y, asum, rows, k, n, bs)


def _block_sums(ctx: LowerContext, a: Buffer, rows: Size, k: int, bs: int) -> Buffer:
    """asum[r, blk] = sum of A's row r over block blk."""
    blocks = k // bs
    asum = ctx.scratch("nbits_asum", DType.FLOAT, (min(rows, MAX_ROWS) if isinstance(
        rows, int) else MAX_ROWS, blocks))
    b = Builder()
    with b.loop(0, b.imul(size_operand(rows), blocks), hint="rb") as rb:
        b.store(asum, rb, const(0.0, DType.FLOAT))
        with b.loop(0, bs, hint="j") as j:
            b.store(asum, rb, b.op("add", b.load(asum, rb),
                                   b.load(a, b.iadd(b.imul(rb, bs), j))))
    ctx.kernel("nbits_block_sums", b.body)
    return asum


def _product(ctx: LowerContext, a: Buffer, qw: Buffer, sc: Buffer, sz: Buffer, y: Buffer,
             asum: Buffer, rows: Size, k: int, n: int, bs: int) -> None:
    """The chunked kernel of the module docstring (`rows` at most MAX_ROWS)."""
    f32 = DType.FLOAT
    blocks, half, chunks = k // bs, bs // 2, -(-n // NB)
    most = rows if isinstance(rows, int) else MAX_ROWS
    nrows = size_operand(rows)
    acc = ctx.scratch("nbits_acc", f32, (chunks, most * NB))
    t = ctx.scratch("nbits_t", f32, (chunks, NB))
    zero = const(0.0, f32)
    b = Builder()
    with b.loop(0, chunks, parallel=True, hint="c") as c:
        acc0, t0 = b.imul(c, most * NB), b.imul(c, NB)
        with b.loop(0, b.imul(nrows, NB), hint="i") as i:
            b.store(acc, b.iadd(acc0, i), zero)
        with b.loop(0, blocks, hint="blk") as blk:
            cb = b.iadd(b.imul(c, blocks), blk)
            with b.loop(0, nrows, hint="r") as r:
                _block_dot(b, a, qw, t, t0, cb, r, blk, k, bs, half)
                s = b.load(asum, b.iadd(b.imul(r, blocks), blk))
                arow = b.iadd(acc0, b.imul(r, NB))
                with b.loop(0, NB, hint="n") as j:
                    at = b.iadd(arow, j)
                    w = b.iadd(b.imul(cb, NB), j)
                    v = b.op("sub", b.op("mul", b.load(sc, w), b.load(t, b.iadd(t0, j))),
                             b.op("mul", b.load(sz, w), s))
                    b.store(acc, at, b.op("add", b.load(acc, at), v))
        valid = b.op("min", i64(NB), b.op("sub", i64(n), t0))
        with b.loop(0, nrows, hint="r") as r:
            with b.loop(0, valid, hint="n") as j:
                b.store(y, b.iadd(b.imul(r, n), b.iadd(t0, j)),
                        b.load(acc, b.iadd(acc0, b.iadd(b.imul(r, NB), j))))
    ctx.kernel("nbits_gemv", b.body, contract=True)


def _block_dot(b: Builder, a: Buffer, qw: Buffer, t: Buffer, t0: Operand, cb: Operand,
               r: Operand, blk: Operand, k: int, bs: int, half: int) -> None:
    """t[n] = sum over block blk of a[r, k] * q[k, n], two k a byte."""
    f32, u8 = DType.FLOAT, DType.UINT8
    with b.loop(0, NB, hint="n") as j:
        b.store(t, b.iadd(t0, j), const(0.0, f32))
    abase = b.iadd(b.imul(r, k), b.imul(blk, bs))
    with b.loop(0, half, hint="kp") as kp:
        a0 = b.load(a, b.iadd(abase, b.imul(kp, 2)))
        a1 = b.load(a, b.iadd(abase, b.iadd(b.imul(kp, 2), i64(1))))
        qrow = b.imul(b.iadd(b.imul(cb, half), kp), NB)
        with b.loop(0, NB, hint="n") as j:
            byte = b.load(qw, b.iadd(qrow, j))
            lo = b.cast(b.op("and", byte, const(15, u8)), f32)
            hi = b.cast(b.op("div", byte, const(16, u8)), f32)
            at = b.iadd(t0, j)
            s = b.op("add", b.load(t, at), b.op("mul", a0, lo))
            b.store(t, at, b.op("add", s, b.op("mul", a1, hi)))


op("NBitsMatMul", (1,), domain=FUSED_DOMAIN, infer=_infer, evaluate=_evaluate, lower=_lower,
   symbolic=True, doc="A @ W by 4-bit block-quantized constant weights (MatMulNBits): a "
                      "4-bit kernel for few rows, the float product for more")
