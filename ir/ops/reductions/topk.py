"""TopK (opsets 1, 10, 11, 24): the k best elements along an axis, sorted, with their indices.

TopK views x as (outer, n, inner) around `axis`. Each row keeps its best k elements sorted in
the output buffers themselves, by insertion: for element j, p = how many kept elements are at
least as good (ties keep the lower index first, as the spec requires), the kept elements from
p on shift one place (the last one falls off), and x[j] goes to position p. Once k elements
are kept, an x[j] that does not beat the last one is rejected at once: the bounds of the
inner loops become 0 (a loop bound is the only branch the loop IR has), so typical rows cost
O(n) and the worst case O(n * k). Every conditional write is a store of a `select`. Ties
never displace a kept element. A NaN ranks above every number, as in onnxruntime and numpy's
sort (first among the largest, last among the smallest). k comes from the `k` attribute
(opset 1) or the constant `K` input (opset 10+); an unknown K gives an unknown dim, which the
staged runtime resolves once K's value is known.
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Operand, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import (
    BF16,
    FLOATS,
    INTS,
    Types,
    accept,
    arity,
    int_attr,
)
from onnxjit.ir.ops.elementwise.inference import dims_of, tensor
from onnxjit.ir.ops.shape_utils import normalize_axis, tensor_input
from onnxjit.ir.types import DType

_TOPK_TYPES: Types = ((1, FLOATS), (10, FLOATS), (11, FLOATS | INTS), (24, FLOATS | INTS | BF16))


def _topk_k(node: Node) -> int | None:
    """k from the attribute (opset 1) or the K input when its value is known."""
    if node.version < 10:
        k = int_attr(node, "k", -1)
        if "k" not in node.attrs:
            raise ModelError("missing required attribute 'k'", where=node)
    else:
        arity(node, 2)
        kt = tensor_input(node, 1)
        if kt.dtype != DType.INT64:
            raise ModelError(f"input K must be int64, got {kt.dtype.short}", where=node)
        if kt.shape is not None and (len(kt.shape) != 1 or isinstance(kt.shape[0], int)
                                     and kt.shape[0] != 1):
            raise ModelError(f"input K must be a 1-D tensor of one element, got shape "
                             f"{list(kt.shape)}", where=node)
        dims = dims_of(node.inputs[1])
        if dims is None or not isinstance(dims[0], int):
            return None
        k = dims[0]
    if k < 0:
        raise ModelError(f"k must be non-negative, got {k}", where=node)
    return k


def _topk_attrs(node: Node) -> tuple[int, bool]:
    axis = int_attr(node, "axis", -1)
    largest = node.version < 11 or int_attr(node, "largest", 1, (0, 1)) == 1
    if node.version >= 11:
        int_attr(node, "sorted", 1, (0, 1))
    return axis, largest


def _topk_infer(node: Node) -> list:
    if node.version < 10:
        arity(node, 1)
    dt = accept(node, 0, _TOPK_TYPES)
    axis, _ = _topk_attrs(node)
    k = _topk_k(node)
    shape = tensor_input(node, 0).shape
    if shape is None:
        return [tensor(dt, None)[0], tensor(DType.INT64, None)[0]]
    ax = normalize_axis(axis, len(shape), node)
    n = shape[ax]
    if k is not None and isinstance(n, int) and k > n:
        raise ModelError(f"k = {k} exceeds the size {n} of axis {ax}", where=node)
    out = shape[:ax] + (k,) + shape[ax + 1:]
    return [tensor(dt, out)[0], tensor(DType.INT64, out)[0]]


def _topk_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    axis, largest = _topk_attrs(node)
    k = int(node.attr("k")) if node.version < 10 else int(np.asarray(inputs[1]).reshape(-1)[0])
    ax = normalize_axis(axis, x.ndim, node)
    xm = np.moveaxis(x, ax, -1)
    n = xm.shape[-1]
    if largest:
        # Descending values, ties by ascending index: stable ascending sort of the reversed row.
        order = (n - 1 - np.argsort(xm[..., ::-1], axis=-1, kind="stable"))[..., ::-1]
    else:
        order = np.argsort(xm, axis=-1, kind="stable")
    idx = order[..., :k]
    vals = np.take_along_axis(xm, idx, axis=-1)
    return [np.ascontiguousarray(np.moveaxis(vals, -1, ax)),
            np.ascontiguousarray(np.moveaxis(idx, -1, ax).astype(np.int64))]


def _topk_lower(ctx: LowerContext, node: Node) -> None:
    x, yv, yi = (ctx.buf(v) for v in (node.inputs[0], node.outputs[0], node.outputs[1]))
    _, largest = _topk_attrs(node)
    ax = normalize_axis(_topk_attrs(node)[0], len(x.shape), node)
    outer, n, inner = math.prod(x.shape[:ax]), x.shape[ax], math.prod(x.shape[ax + 1:])
    k = yv.shape[ax]
    if yv.numel == 0:
        return
    b = Builder()

    def beats(v: Operand, w: Operand) -> Operand:
        """v ranks before w: larger (smaller), a NaN counting as larger than any number."""
        if not x.dtype.is_float:
            return b.op("gt" if largest else "lt", v, w)
        nan_v, nan_w = b.op("isnan", v), b.op("isnan", w)
        if largest:
            return b.op("or", b.op("gt", v, w), b.op("and", nan_v, b.op("not", nan_w)))
        return b.op("or", b.op("lt", v, w), b.op("and", nan_w, b.op("not", nan_v)))

    with b.loop(0, outer, parallel=True, hint="o") as o:
        with b.loop(0, inner, hint="i") as i:
            xb = b.iadd(b.imul(o, n * inner), i)
            yb = b.iadd(b.imul(o, k * inner), i)

            def yat(t: Operand) -> Operand:
                return b.iadd(yb, b.imul(t, inner))

            cnt = b.var(i64(0), hint="cnt")
            with b.loop(0, n, hint="j") as j:
                v = b.load(x, b.iadd(xb, b.imul(j, inner)), hint="v")
                # Once k elements are kept, v enters only if it beats the last one; the loops
                # below then run 0 times (a loop bound is the only conditional the IR has).
                full = b.op("ge", cnt, i64(k))
                enters = b.op("or", b.op("not", full), beats(v, b.load(yv, yat(i64(k - 1)))))
                stop = b.op("select", enters, i64(k), i64(0))
                # p = number of kept elements at least as good as v (they stay ahead of it).
                p = b.var(b.op("select", enters, i64(0), i64(k)), hint="p")
                with b.loop(0, stop, hint="t") as t:
                    keep = b.op("and", b.op("lt", t, cnt),
                                b.op("not", beats(v, b.load(yv, yat(t)))))
                    b.assign(p, "add", p, b.op("select", keep, i64(1), i64(0)))
                # Shift kept[p..cnt) one place right (t runs k-1 down to 1), then insert at p.
                with b.loop(0, b.op("min", stop, i64(k - 1)), hint="u") as u:
                    t = b.op("sub", i64(k - 1), u)
                    move = b.op("and", b.op("gt", t, p), b.op("le", t, cnt))
                    prev = b.op("sub", t, i64(1))
                    b.store(yv, yat(t), b.op("select", move, b.load(yv, yat(prev)),
                                             b.load(yv, yat(t))))
                    b.store(yi, yat(t), b.op("select", move, b.load(yi, yat(prev)),
                                             b.load(yi, yat(t))))
                fits = b.op("lt", p, i64(k))
                at = yat(b.op("min", p, i64(k - 1)))
                b.store(yv, at, b.op("select", fits, v, b.load(yv, at)))
                b.store(yi, at, b.op("select", fits, j, b.load(yi, at)))
                b.assign(cnt, "min", b.op("add", cnt, i64(1)), i64(k))
    ctx.kernel("topk", b.body)


op("TopK", (1, 10, 11, 24), infer=_topk_infer, evaluate=_topk_evaluate, lower=_topk_lower,
   value_inputs=(1,),
   doc="the k largest (or smallest) elements along axis and their indices, sorted")
