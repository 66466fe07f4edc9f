"""Det (opsets 11, 22): the determinant of each square matrix of the last two dims.

LU decomposition with partial pivoting on a scratch copy of each matrix; det is the product of
the pivots, negated per row swap. A zero pivot makes the determinant 0 (the elimination step is
skipped then instead of dividing by zero).
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Operand, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import (
    BF16,
    FLOATS,
    Types,
    accept,
    arity,
)
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import tensor_input

_DET_TYPES: Types = ((11, FLOATS | BF16),)


def _det_infer(node: Node) -> list:
    arity(node, 1)
    dt = accept(node, 0, _DET_TYPES)
    shape = tensor_input(node, 0).shape
    if shape is None:
        return tensor(dt, None)
    if len(shape) < 2:
        raise ModelError(f"Det input must have rank >= 2, got shape {list(shape)}", where=node)
    a, c = shape[-2], shape[-1]
    if isinstance(a, int) and isinstance(c, int) and a != c:
        raise ModelError(f"Det needs square matrices, got shape {list(shape)}", where=node)
    return tensor(dt, shape[:-2])


def _det_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    return [np.asarray(np.linalg.det(x), dtype=x.dtype)]


def _det_lower(ctx: LowerContext, node: Node) -> None:
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    n = x.shape[-1]
    batch = y.numel
    if batch == 0:
        return
    dt = x.dtype
    work = ctx.scratch("lu", dt, (batch, n, n))
    b = Builder()
    zero, one = const(0, dt), const(1, dt)
    with b.loop(0, batch, parallel=True, hint="m") as m:
        base = b.imul(m, n * n)
        with b.loop(0, n * n, hint="e") as e:
            at = b.iadd(base, e)
            b.store(work, at, b.load(x, at))

        def a(r: Operand, c: Operand) -> Operand:
            return b.iadd(base, b.iadd(b.imul(r, n), c))

        det = b.var(one, hint="det")
        with b.loop(0, n, hint="c") as c:
            # Partial pivoting: the row (at or below c) with the largest |a[r, c]|.
            piv_row = b.var(c, hint="pr")
            best = b.var(b.op("abs", b.load(work, a(c, c))), hint="best")
            c1 = b.iadd(c, i64(1))
            with b.loop(c1, i64(n), hint="r") as r:
                v = b.op("abs", b.load(work, a(r, c)))
                take = b.op("gt", v, best)
                b.assign(best, "select", take, v, best)
                b.assign(piv_row, "select", take, r, piv_row)
            with b.loop(0, n, hint="cc") as cc:
                u, w = a(c, cc), a(piv_row, cc)
                vu, vw = b.load(work, u), b.load(work, w)
                b.store(work, w, vu)
                b.store(work, u, vw)
            swapped = b.op("ne", piv_row, c)
            b.assign(det, "select", swapped, b.op("neg", det), det)
            piv = b.load(work, a(c, c), hint="piv")
            b.assign(det, "mul", det, piv)
            singular = b.op("eq", piv, zero)
            with b.loop(c1, i64(n), hint="r") as r:
                f = b.op("select", singular, zero, b.op("div", b.load(work, a(r, c)), piv))
                with b.loop(c1, i64(n), hint="cc") as cc:
                    at = a(r, cc)
                    b.store(work, at, b.op("sub", b.load(work, at),
                                           b.op("mul", f, b.load(work, a(c, cc)))))
        b.store(y, m, det)
    ctx.kernel("det", b.body)


op("Det", (11, 22), infer=_det_infer, evaluate=_det_evaluate, lower=_det_lower,
   doc="determinant of each square matrix in the last two dims")
