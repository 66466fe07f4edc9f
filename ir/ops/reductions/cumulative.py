"""Running folds along one axis: CumSum (opsets 11, 14) and CumProd (opset 26).

The input is viewed as (outer, n, inner) around `axis` (element (o, j, i) at flat index
`(o * n + j) * inner + i`). Position p = 0..n-1 walks the axis forwards, or backwards with
`reverse` (j = n-1-p). Lowering, one kernel: a parallel loop over `outer`; for the first position
the output row is the input row (or the identity, 0 or 1, when `exclusive`); each later position
p combines the previous output row with the input row at p (at p-1 when `exclusive`). The inner
loop runs over `inner` contiguous elements, so it vectorizes; rows are computed in order because
each depends on the previous one.

`axis` is a 0-D (or one-element) int tensor. A constant axis gives constant loop bounds; a
run-time axis is loaded, wrapped and range-checked (InputError), and (outer, n, inner) are picked
from the static dims by select chains, so the same nest runs with run-time bounds.
Integer sums wrap around like numpy's.
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Const, Operand, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, Types, accept, arity, int_attr
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import normalize_axis, tensor_input
from onnxjit.ir.ops.tensor.indexing import PARALLEL_MIN
from onnxjit.ir.ops.tensor.pad_tables import static_ints
from onnxjit.ir.types import DType, ValueType

_NUM = frozenset({DType.FLOAT, DType.DOUBLE, DType.INT32, DType.INT64, DType.UINT32,
                  DType.UINT64})
_TYPES: Types = ((11, FLOATS | _NUM), (14, FLOATS | _NUM | BF16))


def _flags(node: Node) -> tuple[bool, bool]:
    return (int_attr(node, "exclusive", 0, (0, 1)) == 1,
            int_attr(node, "reverse", 0, (0, 1)) == 1)


def _axis(node: Node, rank: int) -> int | None:
    vals = static_ints(node, 1, "axis")
    if vals is None:
        return None
    if len(vals) != 1:
        raise ModelError(f"axis must hold one value, got {len(vals)}", where=node)
    return normalize_axis(vals[0], rank, node)


def _infer(node: Node) -> list[ValueType | None]:
    arity(node, 2)
    dt = accept(node, 0, _TYPES)
    t = tensor_input(node, 1, "axis")
    if t.dtype not in (DType.INT32, DType.INT64):
        raise ModelError(f"axis must be i32 or i64, got {t.dtype.short}", where=node)
    if t.shape is not None and len(t.shape) > 1:
        raise ModelError(f"axis must be a scalar, got shape {t}", where=node)
    _flags(node)
    shape = tensor_input(node, 0).shape
    if shape is not None:
        if len(shape) == 0:
            raise ModelError(f"{node.op} needs an input of rank >= 1", where=node)
        _axis(node, len(shape))
    return tensor(dt, shape)


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    ax = _axis(node, x.ndim)
    assert ax is not None
    exclusive, reverse = _flags(node)
    fn = np.cumsum if node.op == "CumSum" else np.cumprod
    y = np.flip(x, ax) if reverse else x
    with np.errstate(all="ignore"):
        r = fn(y, axis=ax, dtype=x.dtype)
        if exclusive:  # shift by one along the axis, the identity first (the axis may be empty)
            ident = np.full(r.shape[:ax] + (1,) + r.shape[ax + 1:],
                            0 if node.op == "CumSum" else 1, dtype=r.dtype)
            r = np.take(np.concatenate([ident, r], axis=ax), range(x.shape[ax]), axis=ax)
    return [np.flip(r, ax) if reverse else r]


def _mul(b: Builder, x: Operand, y: Operand) -> Operand:
    if isinstance(x, Const) and isinstance(y, Const):
        return i64(x.value * y.value)
    if isinstance(y, Const):
        return b.imul(x, int(y.value))
    if isinstance(x, Const):
        return b.imul(y, int(x.value))
    return b.op("mul", x, y)


def _split(b: Builder, ctx: LowerContext, node: Node, shape: tuple[int, ...]
           ) -> tuple[Operand, Operand, Operand]:
    """(outer, n, inner) as operands: constants for a constant axis, else computed at run time
    from the loaded axis (wrapped, range-checked) by select chains over the static dims."""
    rank = len(shape)
    ax = _axis(node, rank)
    if ax is not None:
        return (i64(math.prod(shape[:ax])), i64(shape[ax]), i64(math.prod(shape[ax + 1:])))
    a = b.cast(b.load(ctx.buf(node.inputs[1]), i64(0)), DType.INT64)  # type: ignore[arg-type]
    a = b.op("select", b.op("lt", a, i64(0)), b.iadd(a, i64(rank)), a)
    b.check(b.op("and", b.op("ge", a, i64(0)), b.op("lt", a, i64(rank))),
            f"{node.describe()}: axis is out of range for an input of rank {rank}")
    n: Operand = i64(shape[-1])
    inner: Operand = i64(1)
    for k in range(rank - 2, -1, -1):
        is_k = b.op("eq", a, i64(k))
        n = b.op("select", is_k, i64(shape[k]), n)
        inner = b.op("select", is_k, i64(math.prod(shape[k + 1:])), inner)
    outer = b.op("div", i64(math.prod(shape)), b.op("mul", n, inner))
    return outer, n, inner


def _lower(ctx: LowerContext, node: Node) -> None:
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])  # type: ignore[arg-type]
    if x.numel == 0:
        return
    exclusive, reverse = _flags(node)
    fold = "add" if node.op == "CumSum" else "mul"
    ident = const(0 if fold == "add" else 1, x.dtype)
    b = Builder()
    outer, n, inner = _split(b, ctx, node, x.shape)
    n_inner = _mul(b, n, inner)
    one = i64(1)

    def row(o: Operand, p: Operand) -> Operand:  # flat index of element 0 of the row at p
        j = b.op("sub", b.op("sub", n, one), p) if reverse else p
        return b.iadd(_mul(b, o, n_inner), _mul(b, j, inner))

    with b.loop(0, outer, parallel=x.numel >= PARALLEL_MIN, hint="o") as o:
        first = row(o, i64(0))
        with b.loop(0, inner, hint="i") as i:
            at = b.iadd(first, i)
            b.store(y, at, ident if exclusive else b.load(x, at))
        with b.loop(1, n, hint="p") as p:
            cur = row(o, p)
            prev = row(o, b.op("sub", p, one))
            src = prev if exclusive else cur
            with b.loop(0, inner, hint="i") as i:
                acc = b.load(y, b.iadd(prev, i))
                b.store(y, b.iadd(cur, i), b.op(fold, acc, b.load(x, b.iadd(src, i))))
    ctx.kernel(node.op.lower(), b.body)


op("CumSum", (11, 14), infer=_infer, evaluate=_evaluate, lower=_lower,
   doc="running sum along axis (exclusive, reverse)")
op("CumProd", (26,), infer=_infer, evaluate=_evaluate, lower=_lower,
   doc="running product along axis (exclusive, reverse)")
