"""Sequences and optionals: values that are Python lists of arrays, or an array/list/None.

These ops run on the host only (`control.if_loop_scan.HOST`): a sequence's length and its elements'
shapes are data, so the run-time shape phase (`onnxjit.staged`) evaluates them between native
stages. Their OpDefs carry the type rules (a sequence's element type joins the types of what
was put in; an empty sequence or optional takes its dtype from an attribute) and no `evaluate`,
so constant folding never turns a list into an array.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node, TypeAttr
from onnxjit.ir.host_eval import host_op, run_graph
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.control.if_loop_scan import join
from onnxjit.ir.types import DType, OptionalType, SequenceType, TensorType, ValueType

_V = (11, 25)


def _t(node: Node, i: int) -> ValueType | None:
    v = node.input(i)
    return None if v is None else v.type


def _elem(t: ValueType | None) -> ValueType | None:
    return t.elem if isinstance(t, (SequenceType, OptionalType)) else None


def _pos(node: Node, seq: list, p: Any, insert: bool = False) -> int:
    n = len(seq)
    i = int(np.asarray(p).reshape(-1)[0])
    hi = n if insert else n - 1
    if not -n <= i <= hi:
        raise ModelError(f"sequence position {i} is out of range for a sequence of {n}",
                         where=node)
    return i + n if i < 0 else i


# ------------------------------------------------------------------------------ sequences


def _infer_construct(node: Node) -> list:
    elem: ValueType | None = _t(node, 0)
    for i in range(1, len(node.inputs)):
        elem = join(elem, _t(node, i))
    return [SequenceType(elem)]


op("SequenceConstruct", _V, infer=_infer_construct)
host_op("SequenceConstruct")(lambda node, ins, lookup: [list(ins)])


def _dtype_attr(node: Node, default: DType = DType.FLOAT) -> DType:
    d = node.attr("dtype")
    return default if d is None else DType(int(d))


op("SequenceEmpty", _V,
   infer=lambda node: [SequenceType(TensorType(_dtype_attr(node), None))])
host_op("SequenceEmpty")(lambda node, ins, lookup: [[]])

op("SequenceAt", _V, infer=lambda node: [_elem(_t(node, 0))])
host_op("SequenceAt")(lambda node, ins, lookup: [ins[0][_pos(node, ins[0], ins[1])]])


def _infer_same_seq(node: Node) -> list:
    t = _t(node, 0)
    if node.op == "SequenceInsert" and isinstance(t, SequenceType):
        return [SequenceType(join(t.elem, _t(node, 1)))]
    return [t]


def _insert(node: Node, ins: list, lookup: Any) -> list:
    seq = list(ins[0])
    p = ins[2] if len(ins) > 2 else None
    at = len(seq) if p is None else _pos(node, seq, p, insert=True)
    seq.insert(at, ins[1])
    return [seq]


def _erase(node: Node, ins: list, lookup: Any) -> list:
    seq = list(ins[0])
    p = ins[1] if len(ins) > 1 else None
    at = len(seq) - 1 if p is None else _pos(node, seq, p)
    del seq[at]
    return [seq]


op("SequenceInsert", _V, infer=_infer_same_seq)
host_op("SequenceInsert")(_insert)
op("SequenceErase", _V, infer=_infer_same_seq)
host_op("SequenceErase")(_erase)
op("SequenceLength", _V, infer=lambda node: [TensorType(DType.INT64, ())])
host_op("SequenceLength")(lambda node, ins, lookup: [np.array(len(ins[0]), np.int64)])


def _infer_split(node: Node) -> list:
    t = _t(node, 0)
    return [SequenceType(TensorType(t.dtype, None) if isinstance(t, TensorType) else None)]


def _split(node: Node, ins: list, lookup: Any) -> list:
    x = np.asarray(ins[0])
    axis = int(node.attr("axis", 0))
    if not -x.ndim <= axis < x.ndim:
        raise ModelError(f"axis {axis} is out of range for rank {x.ndim}", where=node)
    axis %= x.ndim
    split = ins[1] if len(ins) > 1 else None
    n = x.shape[axis]
    if split is None:
        parts = [np.take(x, [i], axis=axis) for i in range(n)]
        if not int(node.attr("keepdims", 1)):
            parts = [np.squeeze(p, axis) for p in parts]
        return [parts]
    split = np.asarray(split).astype(np.int64)
    if split.ndim == 0:
        step = int(split)
        bounds = list(range(step, n, step))
    else:
        if int(split.sum()) > n or (split < 0).any():
            raise ModelError(f"split sizes {split.tolist()} do not fit in {n}", where=node)
        bounds = list(np.cumsum(split))
        return [[np.ascontiguousarray(p)
                 for p in np.split(x, bounds, axis=axis)[:len(split)]]]
    return [[np.ascontiguousarray(p) for p in np.split(x, bounds, axis=axis)]]


op("SplitToSequence", _V, infer=_infer_split)
host_op("SplitToSequence")(_split)


def _infer_concat(node: Node) -> list:
    e = _elem(_t(node, 0))
    return [TensorType(e.dtype, None) if isinstance(e, TensorType) else None]


def _concat(node: Node, ins: list, lookup: Any) -> list:
    seq = [np.asarray(a) for a in ins[0]]
    axis = int(node.attr("axis"))
    if not seq:
        raise ModelError("ConcatFromSequence of an empty sequence", where=node)
    if int(node.attr("new_axis", 0)):
        return [np.stack(seq, axis=axis if axis >= 0 else axis + seq[0].ndim + 1)]
    return [np.concatenate(seq, axis=axis)]


op("ConcatFromSequence", _V, infer=_infer_concat)
host_op("ConcatFromSequence")(_concat)


def _infer_map(node: Node) -> list:
    from onnxjit.ir.ops.control.if_loop_scan import infer_graph

    body = node.attr("body")
    types = [_elem(t) if isinstance(t, SequenceType) else t
             for t in (_t(node, i) for i in range(len(node.inputs)))]
    return [SequenceType(t) for t in infer_graph(body, types)]


def _map(node: Node, ins: list, lookup: Any) -> list:
    n = len(ins[0])
    outs: list[list] = [[] for _ in node.outputs]
    for i in range(n):
        args = [a[i] if isinstance(a, list) else a for a in ins]
        for k, y in enumerate(run_graph(node.attr("body"), args, lookup)):
            outs[k].append(y)
    return outs


op("SequenceMap", (17, 25), infer=_infer_map)
host_op("SequenceMap")(_map)


# ------------------------------------------------------------------------------ optionals


def _infer_optional(node: Node) -> list:
    t = _t(node, 0)
    a = node.attr("type")
    if t is None and isinstance(a, TypeAttr):
        t = a.type
    return [OptionalType(t)]


op("Optional", (15, 25), infer=_infer_optional)
host_op("Optional")(lambda node, ins, lookup: [ins[0] if ins else None])


op("OptionalHasElement", (15, 18, 25), infer=lambda node: [TensorType(DType.BOOL, ())])
host_op("OptionalHasElement")(
    lambda node, ins, lookup: [np.array(bool(ins) and ins[0] is not None)])


def _infer_get(node: Node) -> list:
    t = _t(node, 0)
    return [t.elem if isinstance(t, OptionalType) else t]


def _get(node: Node, ins: list, lookup: Any) -> list:
    if ins[0] is None:
        raise ModelError("OptionalGetElement of an empty optional", where=node)
    return [ins[0]]


op("OptionalGetElement", (15, 18, 25), infer=_infer_get)
host_op("OptionalGetElement")(_get)
