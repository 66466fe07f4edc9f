"""Ops along one axis: Softmax, LogSoftmax, Hardmax, ArgMax, ArgMin.

Every op here views its input as (outer, n, inner) around the axis it works along: element
(o, j, i) is at flat index `(o * n + j) * inner + i`. Softmax, LogSoftmax and Hardmax before
opset 13 coerce the input to 2-D at `axis` (default 1): the row is every trailing dim flattened,
so n = prod(shape[axis:]) and inner = 1; from opset 13 they work along the single `axis`
(default -1). ArgMax/ArgMin always work along one `axis` (default 0).

Lowering, one kernel per node, a loop over `outer` (parallel) and one over `inner`, then per row:
- Softmax: max pass; pass storing e = exp(x - max) into y; sum pass over y; pass scaling y by
  1/sum (float16/bfloat16: dividing by the sum, accumulated as `narrow.accumulator` says and
  rounded once, so every step rounds where numpy's formula on f16 arrays does). The max and
  sum folds keep several partial accumulators (`reductions.lowering.Lanes`) so they vectorize
  without fast-math; exp runs in a plain loop of its own, which vectorizes like any
  elementwise loop (inside an unrolled fold it would not). Subtracting the max keeps exp
  from overflowing (numerically stable); a NaN anywhere in a row makes the row NaN, as
  numpy's formula does: the max fold is the ordered one (`Lanes` "fmax", one `maxps` a
  vector, where a NaN-propagating max takes four), which may drop the NaN, but exp(NaN - m)
  is NaN and so are the sum and every output.
- LogSoftmax: the same first three passes (y as scratch), then y = (x - max) - log(sum).
- Hardmax: an argmax pass (first occurrence), then a pass writing 1 there and 0 elsewhere.
- ArgMax/ArgMin: a running best value and index; ties keep the first index, or the last with
  `select_last_index`; a NaN counts as the extreme value (numpy.argmax's rule).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np

from onnxjit.errors import InputError, ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, Var, i64
from onnxjit.ir.narrow import accumulator
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, INTS, Types, accept, arity, int_attr
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.reductions.lowering import Lanes
from onnxjit.ir.ops.shape_utils import normalize_axis, tensor_input
from onnxjit.ir.types import NARROW_FLOATS, DType

_FLOAT_TYPES: Types = ((1, FLOATS), (13, FLOATS | BF16))
_ARG_TYPES: Types = ((1, FLOATS | INTS), (13, FLOATS | INTS | BF16))


def _coerces(node: Node) -> bool:
    """Softmax-family ops before opset 13 flatten the dims from `axis` on into one row."""
    return node.op != "ArgMax" and node.op != "ArgMin" and node.version < 13


def _axis(node: Node, rank: int) -> int:
    default = 0 if node.op in ("ArgMax", "ArgMin") else -1 if node.version >= 13 else 1
    axis = int_attr(node, "axis", default)
    if _coerces(node):
        # The 2-D coercion also accepts axis == rank (every dim in the batch, rows of length 1).
        if -rank <= axis <= rank:
            return axis + rank if axis < 0 else axis
        raise ModelError(f"axis {axis} is out of range for rank {rank}", where=node)
    return normalize_axis(axis, rank, node)


def split(node: Node, shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(outer, n, inner) of a static shape around the node's axis (see module docstring)."""
    ax = _axis(node, len(shape))
    outer = math.prod(shape[:ax])
    if _coerces(node):
        return outer, math.prod(shape[ax:]), 1
    return outer, shape[ax], math.prod(shape[ax + 1:])


# --------------------------------------------------------------------------- Softmax family


def _softmax_infer(node: Node) -> list:
    arity(node, 1)
    dt = accept(node, 0, _FLOAT_TYPES)
    shape = tensor_input(node, 0).shape
    if shape is not None:
        _axis(node, len(shape))
    else:
        int_attr(node, "axis", 0)
    return tensor(dt, shape)


def _softmax_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    outer, n, inner = split(node, x.shape)
    r = x.reshape(outer, n, inner)
    with np.errstate(all="ignore"):
        m = r.max(axis=1, keepdims=True) if n else r
        if node.op == "Hardmax":
            y = np.zeros_like(r)
            if n:
                np.put_along_axis(y, np.argmax(r, axis=1)[:, None, :], 1, axis=1)
        elif node.op == "Softmax":
            e = np.exp(r - m)
            y = e / e.sum(axis=1, keepdims=True)
        else:
            d = r - m
            y = d - np.log(np.exp(d).sum(axis=1, keepdims=True))
    return [np.asarray(y, dtype=x.dtype).reshape(x.shape)]


@contextlib.contextmanager
def _rows(b: Builder, outer: int, n: int, inner: int) -> Iterator[tuple[Operand, Operand]]:
    """Open the loops over (outer, inner) (parallel outside); yields each row's base index
    (where j = 0) and its index in an output without the axis (o * inner + i)."""
    with b.loop(0, outer, parallel=True, hint="o") as o:
        if inner == 1:  # the common case (last axis): no loop of one iteration
            yield b.imul(o, n), o
            return
        with b.loop(0, inner, hint="i") as i:
            yield b.iadd(b.imul(o, n * inner), i), b.iadd(b.imul(o, inner), i)


def _argbest(b: Builder, x: Buffer, base: Operand, n: int, inner: int, cmp: str,
             last: bool = False) -> Var:
    """Index (i64 var) of the best element of a row by `cmp` ("gt" max, "lt" min)."""
    best = b.var(b.load(x, base), hint="best")
    at = b.var(i64(0), hint="at")
    with b.loop(1, n, hint="j") as j:
        v = b.load(x, b.iadd(base, b.imul(j, inner)))
        take = b.op(cmp if not last else cmp[0] + "e", v, best)
        if x.dtype.is_float:
            # A NaN is the extreme value (numpy.argmax); the first one wins unless `last`.
            nan = b.op("isnan", v)
            if not last:
                nan = b.op("and", nan, b.op("not", b.op("isnan", best)))
            take = b.op("or", take, nan)
        b.assign(best, "select", take, v, best)
        b.assign(at, "select", take, j, at)
    return at


def _softmax_lower(ctx: LowerContext, node: Node) -> None:
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    if x.numel == 0:
        return
    outer, n, inner = split(node, x.shape)
    dt = x.dtype
    b = Builder()
    with _rows(b, outer, n, inner) as (base, _):
        def at(j: Operand) -> Operand:
            return b.iadd(base, b.imul(j, inner))

        if node.op == "Hardmax":
            best = _argbest(b, x, base, n, inner, "gt")
            with b.loop(0, n, hint="j") as j:
                b.store(y, at(j), b.op("select", b.op("eq", j, best), const(1, dt),
                                       const(0, dt)))
            ctx.kernel("hardmax", b.body)
            return
        # Max and sum folds use Lanes: L independent chains the vectorizer can widen.
        mx = Lanes(b, const(-math.inf, dt), "fmax", n, hint="max")
        mx.run(n, lambda j: b.load(x, at(j)))
        m = mx.result()
        acc = accumulator(dt)
        sm = Lanes(b, const(0, acc), "add", n, hint="sum", terms_signed=False)

        def exp_at(j: Operand) -> Operand:  # exp(x - max) into y
            e = b.op("exp", b.op("sub", b.load(x, at(j)), m))
            b.store(y, at(j), e)
            return e

        if sm.fold and dt == acc:  # exp into y and its sum in one loop (a fold loop: vector)
            sm.run(n, exp_at)
        else:
            # exp into y in a plain loop (it vectorizes like any elementwise loop), then sum y
            with b.loop(0, n, hint="j") as j:
                exp_at(j)
            sm.run(n, lambda j: b.cast(b.load(y, at(j)), acc))
        s = b.cast(sm.result(), dt)  # the sum is a tensor of dt in the reference: round once
        if node.op == "Softmax" and dt in NARROW_FLOATS:
            # Divide: a rounded reciprocal would add a rounding of 2^-11 (f16) per element.
            with b.loop(0, n, hint="j") as j:
                b.store(y, at(j), b.op("div", b.load(y, at(j)), s))
        elif node.op == "Softmax":
            r = b.op("div", const(1, dt), s)
            with b.loop(0, n, hint="j") as j:
                b.store(y, at(j), b.op("mul", b.load(y, at(j)), r))
        else:
            ls = b.op("log", s)
            with b.loop(0, n, hint="j") as j:
                b.store(y, at(j), b.op("sub", b.op("sub", b.load(x, at(j)), m), ls))
    ctx.kernel(node.op.lower(), b.body)


_VERSIONS = (1, 11, 13)
op("Softmax", _VERSIONS, infer=_softmax_infer, evaluate=_softmax_evaluate, lower=_softmax_lower,
   doc="exp(x - max) / sum(exp(x - max)) along axis (2-D coerced before opset 13)",
   symbolic=True)
op("LogSoftmax", _VERSIONS, infer=_softmax_infer, evaluate=_softmax_evaluate,
   lower=_softmax_lower, doc="(x - max) - log(sum(exp(x - max))) along axis",
   symbolic=True)
op("Hardmax", _VERSIONS, infer=_softmax_infer, evaluate=_softmax_evaluate, lower=_softmax_lower,
   doc="1 at the first maximum along axis, 0 elsewhere",
   symbolic=True)

# --------------------------------------------------------------------------- ArgMax / ArgMin


def _arg_attrs(node: Node) -> tuple[bool, bool]:
    keep = int_attr(node, "keepdims", 1) != 0
    last = node.version >= 12 and int_attr(node, "select_last_index", 0, (0, 1)) == 1
    return keep, last


def _arg_infer(node: Node) -> list:
    arity(node, 1)
    accept(node, 0, _ARG_TYPES)
    keep, _ = _arg_attrs(node)
    shape = tensor_input(node, 0).shape
    if shape is None:
        int_attr(node, "axis", 0)
        return tensor(DType.INT64, None)
    ax = _axis(node, len(shape))
    out = shape[:ax] + ((1,) if keep else ()) + shape[ax + 1:]
    return tensor(DType.INT64, out)


def _arg_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    keep, last = _arg_attrs(node)
    ax = _axis(node, x.ndim)
    fn = np.argmax if node.op == "ArgMax" else np.argmin
    if x.shape[ax] == 0:
        raise ModelError(f"{node.op} along axis {ax} of size 0 (constant input of shape "
                         f"{list(x.shape)}) has no answer", where=node)
    if last:
        idx = x.shape[ax] - 1 - fn(np.flip(x, axis=ax), axis=ax)
    else:
        idx = fn(x, axis=ax)
    if keep:
        idx = np.expand_dims(idx, ax)
    return [np.asarray(idx, dtype=np.int64)]


def _arg_lower(ctx: LowerContext, node: Node) -> None:
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    if y.numel == 0:
        return
    _, last = _arg_attrs(node)
    outer, n, inner = split(node, x.shape)
    if not isinstance(n, int):  # an empty axis has no best element: its size must be known
        raise TypeError("ArgMax/ArgMin along a symbolic axis")
    if n == 0:
        raise InputError(f"{node.op} along an axis of size 0 (input shape {list(x.shape)})",
                         where=node)
    b = Builder()
    with _rows(b, outer, n, inner) as (base, out):
        best = _argbest(b, x, base, n, inner, "gt" if node.op == "ArgMax" else "lt", last)
        b.store(y, out, best)
    ctx.kernel(node.op.lower(), b.body)


_ARG_VERSIONS = (1, 11, 12, 13)
op("ArgMax", _ARG_VERSIONS, infer=_arg_infer, evaluate=_arg_evaluate, lower=_arg_lower,
   doc="index of the maximum along axis (first, or last with select_last_index)",
   symbolic=True)
op("ArgMin", _ARG_VERSIONS, infer=_arg_infer, evaluate=_arg_evaluate, lower=_arg_lower,
   doc="index of the minimum along axis (first, or last with select_last_index)",
   symbolic=True)
