"""Matrix products: MatMul and Gemm (MatMulInteger: `matmul_integer`).

MatMul follows numpy.matmul: a 1-D A is promoted to a row (1, K) and a 1-D B to a column (K, 1),
the added dim is dropped from the result; the leading (batch) dims broadcast numpy-style.
Gemm is `Y = alpha * A' @ B' + beta * C` on 2-D A and B (A' = A.T with transA, B' likewise) with
C unidirectionally broadcast to (M, N); C is optional from opset 11. Before opset 7 Gemm has a
`broadcast` attribute; the broadcast it enables is the same unidirectional rule, which we apply
whatever the attribute says (as onnxruntime does).

Lowering, both ops through the `loops.Matmul` statement (2-D row-major windows):
1) MatMul: the batch dims get broadcast strides (0 on a broadcast dim) for A, B and Y, adjacent
   batch dims are coalesced; when B has no batch (or is broadcast over all of it) and A is not
   broadcast, the batch folds into M and one Matmul covers everything (the common "activations
   @ weight" case); otherwise a loop nest over the batch computes each operand's window offset
   from the loop indexes and runs one Matmul per batch element.
2) Gemm: one Matmul writes A' @ B' into Y, then (with alpha != 1 or a C) an elementwise nest
   makes it Y * alpha + C * beta, C broadcast: the reference's order of roundings. Summing
   into beta * C, or folding alpha into A', differs from it (and from onnxruntime) in the last
   bits, which a later op (Exp, a Cast to double) can expose.
3) K == 0 gives an empty sum: Y is zero (MatMul) or beta*C (Gemm); no Matmul is emitted.
MatMulInteger lives in `linalg.matmul_integer`.
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir import symbolic
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import (
    Builder,
    broadcast_strides,
    coalesce,
    const,
    elementwise,
    row_major_strides,
)
from onnxjit.ir.loops import Buffer, Matmul, Operand, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import (
    BF16,
    FLOATS,
    WIDE_INTS,
    Types,
    accept_same,
    arity,
    float_attr,
    int_attr,
)
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.linalg import strassen as strassen
from onnxjit.ir.ops.shape_utils import broadcast_shapes, tensor_input
from onnxjit.ir.types import Dim

_TYPES: Types = ((1, FLOATS), (9, FLOATS | WIDE_INTS), (13, FLOATS | WIDE_INTS | BF16))
_GEMM_TYPES: Types = ((1, FLOATS), (9, FLOATS | WIDE_INTS), (13, FLOATS | WIDE_INTS | BF16))


def _shape_text(shape: tuple) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _mismatch(a: Dim, b: Dim) -> bool:
    """Two sizes that must agree and do not; a symbolic one is assumed to (`ir.symbolic`)."""
    if isinstance(a, int) and isinstance(b, int):
        return a != b
    if a is not None and b is not None and symbolic.active():
        symbolic.assume_equal(a, b, "the inner dims of a matrix product")
    return False


# --------------------------------------------------------------------------- MatMul


def matmul_shape(node: Node, a: tuple | None, b: tuple | None) -> tuple[Dim, ...] | None:
    """numpy.matmul's result shape; ModelError on scalars or unequal inner dims."""
    if a is None or b is None:
        return None
    if len(a) == 0 or len(b) == 0:
        raise ModelError(f"{node.op} inputs must have rank >= 1, got shapes {_shape_text(a)} "
                         f"and {_shape_text(b)}", where=node)
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if _mismatch(a2[-1], b2[-2]):
        raise ModelError(f"{node.op} inner dims differ: A {_shape_text(a)} has K={a2[-1]} but "
                         f"B {_shape_text(b)} has K={b2[-2]}", where=node)
    batch = broadcast_shapes([a2[:-2], b2[:-2]], node)
    assert batch is not None
    rows = () if len(a) == 1 else (a2[-2],)
    cols = () if len(b) == 1 else (b2[-1],)
    return (*batch, *rows, *cols)


def _matmul_infer(node: Node) -> list:
    arity(node, 2)
    dt = accept_same(node, (0, 1), _TYPES)
    return tensor(dt, matmul_shape(node, tensor_input(node, 0).shape,
                                   tensor_input(node, 1).shape))


def _matmul_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    a, b = inputs
    with np.errstate(all="ignore"):
        return [np.asarray(np.matmul(a, b), dtype=a.dtype)]


def fill(b: Builder, out: Buffer, value: float | int) -> None:
    """Emit `out[:] = value` (one flat parallel loop)."""
    if out.numel == 0:
        return
    with b.loop(0, out.numel, parallel=True) as i:
        b.store(out, i, const(value, out.dtype))


def batch_shape(a: tuple, b: tuple) -> tuple:
    """numpy broadcasting of two batch shapes whose sizes may be symbolic (a symbolic size
    against another size is assumed equal to it: `ir.symbolic`)."""
    r = max(len(a), len(b))
    a, b = (1,) * (r - len(a)) + tuple(a), (1,) * (r - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == 1 or x == y:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif isinstance(x, int) and isinstance(y, int):
            raise ValueError(f"batch dims {x} and {y} do not broadcast")
        else:
            symbolic.assume_equal(x, y, "broadcast batch dims of a matrix product")
            out.append(x if isinstance(x, int) else y)
    return tuple(out)


def batched_matmul(b: Builder, y: Buffer, a: Buffer, bm: Buffer, a_shape: tuple, b_shape: tuple,
                   ) -> None:
    """Emit Y = A @ B with numpy.matmul semantics (shapes are the operands' shapes; symbolic
    sizes go into the Matmul statements, an empty sum into their run-time zero fill)."""
    a2 = (1, *a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b2 = (*b_shape, 1) if len(b_shape) == 1 else tuple(b_shape)
    m, k, n = a2[-2], a2[-1], b2[-1]
    batch = batch_shape(a2[:-2], b2[:-2])
    if y.numel == 0:
        return
    if k == 0:
        fill(b, y, 0)
        return
    sc = [s * m * n for s in row_major_strides(batch)]
    sa = [s * m * k for s in broadcast_strides(a2[:-2], batch)]
    sb = [s * k * n for s in broadcast_strides(b2[:-2], batch)]
    nbatch = math.prod(batch)
    if all(s == 0 for s in sb) and sa == [s // n * k for s in sc]:
        # A's batch is contiguous and B is shared: fold the batch into A's rows.
        b.emit(Matmul(y, i64(0), n, a, i64(0), k, bm, i64(0), n, nbatch * m, n, k))
        return
    shape, (cs, as_, bs) = coalesce(batch, [sc, sa, sb])
    with b.nest(shape, parallel_outer=True) as idx:
        c_off, a_off, b_off = (b.linear(idx, st) for st in (cs, as_, bs))
        b.emit(Matmul(y, c_off, n, a, a_off, k, bm, b_off, n, m, n, k))


def lower_matmul(ctx: LowerContext, node: Node) -> None:
    """MatMul's lowering: Y = inputs[0] @ inputs[1] (also `linalg.nbits`' float path)."""
    a, bm, y = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.outputs[0])
    b = Builder()
    if len(a.shape) >= 2 and y.is_static and a.is_static and y.numel and \
            strassen.lower_if_applies(ctx, b, y, a, bm, False, math.prod(a.shape[:-1]),
                                      "matmul_strassen"):
        return
    batched_matmul(b, y, a, bm, a.shape, bm.shape)
    if b.body:
        ctx.kernel("matmul", b.body)


op("MatMul", (1, 9, 13), infer=_matmul_infer, evaluate=_matmul_evaluate, lower=lower_matmul,
   doc="numpy.matmul: 1-D operands promoted, batch dims broadcast", symbolic=True)

# --------------------------------------------------------------------------- Gemm


class _GemmAttrs:
    def __init__(self, node: Node):
        self.trans_a = int_attr(node, "transA", 0) != 0
        self.trans_b = int_attr(node, "transB", 0) != 0
        self.alpha = float_attr(node, "alpha", 1.0)
        self.beta = float_attr(node, "beta", 1.0)
        if node.version < 7:
            int_attr(node, "broadcast", 0, (0, 1))


def _gemm_dims(node: Node, a: tuple | None, bsh: tuple | None, at: _GemmAttrs
               ) -> tuple[Dim, Dim]:
    """(M, N) of a Gemm, checking ranks and the inner dims."""
    for i, s in ((0, a), (1, bsh)):
        if s is not None and len(s) != 2:
            raise ModelError(f"Gemm input {i} ({'AB'[i]}) must be 2-D, got shape "
                             f"{_shape_text(s)}", where=node)
    m = None if a is None else a[1] if at.trans_a else a[0]
    ka = None if a is None else a[0] if at.trans_a else a[1]
    kb = None if bsh is None else bsh[1] if at.trans_b else bsh[0]
    n = None if bsh is None else bsh[0] if at.trans_b else bsh[1]
    if _mismatch(ka, kb):
        raise ModelError(f"Gemm inner dims differ: A' has K={ka} (A {_shape_text(a or ())}, "
                         f"transA={int(at.trans_a)}) but B' has K={kb} (B "
                         f"{_shape_text(bsh or ())}, transB={int(at.trans_b)})", where=node)
    return m, n


def _gemm_infer(node: Node) -> list:
    idx = arity(node, 2 if node.version >= 11 else 3, 3)
    dt = accept_same(node, idx, _GEMM_TYPES)
    at = _GemmAttrs(node)
    m, n = _gemm_dims(node, tensor_input(node, 0).shape, tensor_input(node, 1).shape, at)
    if node.input(2) is not None:
        c = tensor_input(node, 2).shape
        if c is not None:
            if len(c) > 2 or any(d != 1 and _mismatch(d, t) for d, t in zip(c[::-1], (n, m))):
                raise ModelError(f"Gemm input C {_shape_text(c)} does not broadcast to (M, N) = "
                                 f"({m}, {n})", where=node)
    if dt.is_int and (not at.alpha.is_integer() or not at.beta.is_integer()):
        raise UnsupportedError(f"Gemm on {dt.short} with non-integer alpha={at.alpha} or "
                               f"beta={at.beta} is not supported", where=node)
    return tensor(dt, (m, n))


def _gemm_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    at = _GemmAttrs(node)
    a, bm = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    dt = a.dtype
    a = a.T if at.trans_a else a
    bm = bm.T if at.trans_b else bm
    with np.errstate(all="ignore"):
        y = np.matmul(a, bm)
        if at.alpha != 1.0:
            y = y * np.asarray(at.alpha, dtype=dt)
        if c is not None and at.beta != 0.0:
            y = y + np.asarray(at.beta, dtype=dt) * c
        return [np.ascontiguousarray(np.broadcast_to(y, (a.shape[0], bm.shape[1])), dtype=dt)]


def _gemm_lower(ctx: LowerContext, node: Node) -> None:
    at = _GemmAttrs(node)
    a, bm, y = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.outputs[0])
    c = ctx.buf(node.inputs[2]) if node.input(2) is not None else None
    m, n = y.shape
    k = a.shape[0] if at.trans_a else a.shape[1]
    dt = y.dtype
    b = Builder()
    if y.numel == 0:
        return
    use_c = c is not None and at.beta != 0.0
    some_k = not isinstance(k, int) or k > 0  # a symbolic k may be 0: Matmul zero-fills then
    scale = at.alpha != 1.0
    if not some_k:
        fill(b, y, 0)
    elif not (y.is_static and a.is_static and not at.trans_a and strassen.lower_if_applies(
            ctx, b, y, a, bm, at.trans_b, m, "gemm_strassen", 1.0, accumulate=False)):
        b.emit(Matmul(y, i64(0), n, a, i64(0), a.shape[1], bm, i64(0), bm.shape[1], m, n, k,
                      a_trans=at.trans_a, b_trans=at.trans_b))
    if scale or use_c:
        # (A' @ B') * alpha + C * beta, each rounded, as the reference (and onnxruntime, up
        # to its fused multiply-add) does: C added after the sum, not summed into it.
        alpha, beta = const(at.alpha, dt), const(at.beta, dt)
        ins = [y] + ([c] if use_c else [])

        def epilogue(bb: Builder, args: list[Operand]) -> Operand:
            r = bb.op("mul", args[0], alpha) if scale and some_k else args[0]
            if use_c:
                t = args[1] if at.beta == 1.0 else bb.op("mul", args[1], beta)
                r = bb.op("add", r, t)
            return r

        # its own kernel: a Matmul alone in one is emitted as MatMul's is (a Matmul followed
        # by a loop in one kernel took another variant, summing in another order)
        ctx.kernel("gemm", b.body)
        b = Builder()
        elementwise(b, y, ins, epilogue)  # type: ignore[arg-type]
        ctx.kernel("gemm_epilogue", b.body)
        return
    ctx.kernel("gemm", b.body)


op("Gemm", (1, 6, 7, 9, 11, 13), infer=_gemm_infer, evaluate=_gemm_evaluate, lower=_gemm_lower,
   doc="alpha * A' @ B' + beta * C, C unidirectionally broadcast to (M, N)", symbolic=True)
