"""Loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Both view the input as (N, C, D) with D = prod(d1..dk) and the target as (N, D). For each (n, d)
with t = target[n, d]: an element whose t equals `ignore_index` is ignored (loss 0, weight 0);
otherwise t must lie in [0, C) (a run-time Check raises InputError), w = weight[t] (1 without
weights) and loss = -input[n, t, d] * w. Reductions: "none" gives the (N, d1..dk) losses, "sum"
their sum, "mean" sum(loss) / sum(w) (so an all-ignored batch is 0/0 = NaN, as in the
reference). The sums are kept in float64 whatever the input type: in the input's own type a
run of large finite losses could overflow to -inf before a +inf loss arrives, giving NaN where
the sum is +inf (the references' pairwise float32 sums happened to give inf there). Each sum
is rounded to the input type before "mean" divides, as the references' sums are: weights
whose sum passes float max make it inf, and inf / inf = NaN, as they give (a float64 sum of
the weights stayed finite and made the mean inf: fuzz seed 9341026).

SoftmaxCrossEntropyLoss first computes log_prob = LogSoftmax(scores) along axis 1 (max pass,
exp pass, sum pass, then x - max - log(sum)), into its optional second output or a scratch buffer,
then applies the NLL rule to log_prob.

Lowering: one kernel per step. The "none" loss loop is parallel over N; the reductions run
serially (one accumulator pair) so the result is deterministic.
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import InputError, ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, Types, accept, arity
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.reductions.lowering import Lanes
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import Dim, DType

_FLOAT_TYPES: Types = ((12, FLOATS), (13, FLOATS | BF16))
_INDEX_TYPES: Types = ((12, frozenset({DType.INT32, DType.INT64})),)
_REDUCTIONS = ("none", "sum", "mean")


def _reduction(node: Node) -> str:
    r = node.attr("reduction", "mean")
    r = r.decode() if isinstance(r, bytes) else r
    if r not in _REDUCTIONS:
        raise ModelError(f"attribute 'reduction' must be one of {list(_REDUCTIONS)}, got {r!r}",
                         where=node)
    return r


def _ignore_index(node: Node) -> int | None:
    v = node.attr("ignore_index")
    if v is not None and (not isinstance(v, (int, np.integer)) or isinstance(v, bool)):
        raise ModelError(f"attribute 'ignore_index' must be an int, got {v!r}", where=node)
    return None if v is None else int(v)


def _mismatch(a: Dim, b: Dim) -> bool:
    return isinstance(a, int) and isinstance(b, int) and a != b


def _infer(node: Node) -> list:
    arity(node, 2, 3)
    dt = accept(node, 0, _FLOAT_TYPES)
    accept(node, 1, _INDEX_TYPES)
    if node.input(2) is not None and accept(node, 2, _FLOAT_TYPES) != dt:
        raise ModelError(f"input 2 (weights) must be {dt.short} like input 0", where=node)
    red = _reduction(node)
    _ignore_index(node)
    x, t = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if x is not None and len(x) < 2:
        raise ModelError(f"input 0 must have shape (N, C, d1, ...), got {list(x)}", where=node)
    if x is not None and t is not None and (len(t) != len(x) - 1 or any(
            _mismatch(a, b) for a, b in zip(t, x[:1] + x[2:]))):
        raise ModelError(f"target shape {list(t)} does not match input shape {list(x)} "
                         "(expected (N, d1, ...))", where=node)
    if node.input(2) is not None:
        w = tensor_input(node, 2).shape
        if w is not None and (len(w) != 1 or (x is not None and _mismatch(w[0], x[1]))):
            raise ModelError(f"weights must have shape (C,), got {list(w)}", where=node)
    loss_shape = (t if t is not None else (x[:1] + x[2:] if x is not None else None)) \
        if red == "none" else ()
    out = tensor(dt, loss_shape)
    if node.op == "SoftmaxCrossEntropyLoss" and len(node.outputs) > 1:
        out += tensor(dt, x)
    return out


# --------------------------------------------------------------------------- numpy semantics


def _log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=1, keepdims=True)
    d = x - m
    return d - np.log(np.exp(d).sum(axis=1, keepdims=True))


def nll(node: Node, x: np.ndarray, target: np.ndarray, weight: np.ndarray | None
        ) -> np.ndarray:
    """The NLL rule of the module docstring in numpy."""
    red, ii = _reduction(node), _ignore_index(node)
    n, c = x.shape[:2]
    x3 = x.reshape(n, c, math.prod(x.shape[2:]))  # sizes spelled out: n may be 0
    t2 = target.reshape(n, math.prod(target.shape[1:])).astype(np.int64)
    ignored = t2 == ii if ii is not None else np.zeros(t2.shape, bool)
    bad = ~ignored & ((t2 < 0) | (t2 >= c))
    if bad.any():
        raise InputError(f"target value {int(t2[bad][0])} is out of range [0, {c})", where=node)
    tc = np.where(ignored, 0, t2)
    picked = np.take_along_axis(x3, tc[:, None, :], axis=1)[:, 0, :]
    w = np.ones(t2.shape, x.dtype) if weight is None else weight[tc]
    w = np.where(ignored, 0, w).astype(x.dtype)
    with np.errstate(all="ignore"):
        loss = np.where(ignored, 0, -picked * w).astype(x.dtype)
        if red == "none":
            return loss.reshape(target.shape)
        total = loss.sum(dtype=np.float64)
        if red == "sum":
            return np.asarray(total, x.dtype)
        # each sum rounded to the input type first (module docstring)
        return np.asarray(x.dtype.type(total) / x.dtype.type(w.sum(dtype=np.float64)))


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, target = inputs[0], inputs[1]
    weight = inputs[2] if len(inputs) > 2 else None
    if node.op == "NegativeLogLikelihoodLoss":
        return [nll(node, x, target, weight)]
    with np.errstate(all="ignore"):
        lp = _log_softmax(x).astype(x.dtype)
    return [nll(node, lp, target, weight), lp][:len(node.outputs)]


# --------------------------------------------------------------------------- lowering


def _log_softmax_lower(b: Builder, x: Buffer, y: Buffer, n: int, c: int, d: int) -> None:
    dt = x.dtype
    with b.loop(0, n, parallel=True, hint="n") as ni:
        with b.loop(0, d, hint="d") as di:
            base = b.iadd(b.imul(ni, c * d), di)

            def at(j: Operand) -> Operand:
                return b.iadd(base, b.imul(j, d))

            # As in reductions.along_axis: Lanes folds (vectorizable without fast-math) and the exp
            # in a plain loop of its own, stored in y and summed back.
            mx = Lanes(b, const(-math.inf, dt), "max", c, hint="max")
            mx.run(c, lambda j: b.load(x, at(j)))
            m = mx.result()
            with b.loop(0, c, hint="c") as j:
                b.store(y, at(j), b.op("exp", b.op("sub", b.load(x, at(j)), m)))
            sm = Lanes(b, const(0, dt), "add", c, hint="sum", terms_signed=False)
            sm.run(c, lambda j: b.load(y, at(j)))
            ls = b.op("log", sm.result())
            with b.loop(0, c, hint="c") as j:
                b.store(y, at(j), b.op("sub", b.op("sub", b.load(x, at(j)), m), ls))


def _nll_lower(b: Builder, node: Node, x: Buffer, t: Buffer, w: Buffer | None, y: Buffer
               ) -> None:
    red, ii = _reduction(node), _ignore_index(node)
    n, c = x.shape[0], x.shape[1]
    d = math.prod(x.shape[2:])
    dt = x.dtype
    zero, one = const(0, dt), const(1, dt)
    msg = f"{node.describe()}: a target value is out of range [0, {c})"

    def element(ni: Operand, di: Operand) -> tuple[Operand, Operand]:
        tv = b.cast(b.load(t, b.iadd(b.imul(ni, d), di), hint="t"), DType.INT64)
        valid = b.op("and", b.op("ge", tv, i64(0)), b.op("lt", tv, i64(c)))
        ign = b.op("eq", tv, i64(ii)) if ii is not None else None
        b.check(valid if ign is None else b.op("or", ign, valid), msg)
        tc = tv if ign is None else b.op("select", ign, i64(0), tv)
        v = b.load(x, b.iadd(b.imul(ni, c * d), b.iadd(b.imul(tc, d), di)))
        wv: Operand = one if w is None else b.load(w, tc)
        loss = b.op("neg", b.op("mul", v, wv))
        if ign is not None:  # zero, not x * 0: an ignored NaN or inf stays out of the sum
            wv = b.op("select", ign, zero, wv)
            loss = b.op("select", ign, zero, loss)
        return loss, wv

    if red == "none":
        with b.loop(0, n, parallel=True, hint="n") as ni:
            with b.loop(0, d, hint="d") as di:
                loss, _ = element(ni, di)
                b.store(y, b.iadd(b.imul(ni, d), di), loss)
        return
    wide = DType.DOUBLE  # the sums' type (see the module docstring)
    sl, sw = b.var(const(0, wide), hint="sl"), b.var(const(0, wide), hint="sw")
    with b.loop(0, n, hint="n") as ni:
        with b.loop(0, d, hint="d") as di:
            loss, wv = element(ni, di)
            b.assign(sl, "add", sl, b.cast(loss, wide))
            b.assign(sw, "add", sw, b.cast(wv, wide))
    total = b.cast(sl, dt)
    b.store(y, i64(0), total if red == "sum" else b.op("div", total, b.cast(sw, dt)))


def _lower(ctx: LowerContext, node: Node) -> None:
    x, t, y = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.outputs[0])
    w = ctx.buf(node.inputs[2]) if node.input(2) is not None else None
    n, c = x.shape[0], x.shape[1]
    d = math.prod(x.shape[2:])
    if node.op == "SoftmaxCrossEntropyLoss":
        lp = ctx.buf(node.outputs[1]) if len(node.outputs) > 1 else \
            ctx.scratch("log_prob", x.dtype, x.shape)
        if x.numel:
            b = Builder()
            _log_softmax_lower(b, x, lp, n, c, d)
            ctx.kernel("log_softmax", b.body)
        x = lp
    b = Builder()
    _nll_lower(b, node, x, t, w, y)
    ctx.kernel("nll_loss", b.body)


op("NegativeLogLikelihoodLoss", (12, 13, 22), infer=_infer, evaluate=_evaluate, lower=_lower,
   doc="-input[n, target[n, d], d] * weight[target], reduced by none/sum/mean")
op("SoftmaxCrossEntropyLoss", (12, 13), infer=_infer, evaluate=_evaluate, lower=_lower,
   doc="NLL of LogSoftmax(scores) along axis 1; optional log_prob output")
