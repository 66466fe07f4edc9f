"""sink-reshape: a Squeeze/Reshape that only drops unit dims moves below the elementwise ops
after a Conv/MatMul/Gemm, so that fuse-epilogue sees them as the producer's epilogue.

tf2onnx exports a Conv1d as Unsqueeze -> Conv (2-D) -> Squeeze -> Add (bias) -> activation;
the Squeeze between the Conv and its Add keeps the Add and the activation out of the conv's
epilogue. Dropping unit dims changes no element's position in memory, so the elementwise ops
can run on the producer's shape and the reshape can follow them instead (a reshape aliases
its input's storage: moving it costs nothing).

Requires concrete shapes (it runs per signature, just before fuse-epilogue). For each
Squeeze/Reshape R whose input p (shape P) is a producer's output (`fuse_epilogue.
producer_kind`) read by R alone and not a graph output, and whose output q (shape Q) is P
with some 1s removed (`unit_drop`: which axis of P each axis of Q is):
1) members: sweeping forward from R, an elementwise node (OpDef scalar rule, one output of
   shape Q and q's element type) joins when it reads q or a member's output and every other
   input ("extra") has a static shape that broadcasts to Q; the longest prefix whose values
   (q and the members' outputs but the last) are read only by members and are not graph
   outputs is taken (the closed region fuse-epilogue takes too);
2) the members then read p and compute values of shape P: each extra is rewritten to the
   rank of P (right-aligned to Q, then a 1 at every dropped axis): a constant is reshaped,
   any other value gets a Reshape node before the member reading it; R is dropped and a
   Reshape of the last member's new output to Q takes the last member's old output value.
"""

from __future__ import annotations

import numpy as np

from onnxjit.ir.graph import Graph, Model, Node, Value
from onnxjit.ir.symbolic import known_shape
from onnxjit.ir.types import DType, TensorType
from onnxjit.passes import PassContext, PassResult
from onnxjit.passes.fuse_epilogue import elementwise_chain, producer_kind

name = "sink-reshape"
level = "graph"


def unit_drop(big: tuple, small: tuple) -> list[int] | None:
    """For `small` equal to `big` with some 1s removed (and rank lower), the axis of `big`
    each axis of `small` is; else None. Greedy matching is exact: matching a 1 of `big` to a
    1 of `small` never prevents a later match, as any later 1 could be dropped instead."""
    if len(small) >= len(big):
        return None
    kept: list[int] = []
    for i, d in enumerate(big):
        if len(kept) < len(small) and d == small[len(kept)]:
            kept.append(i)
        elif d != 1:
            return None
    return kept if len(kept) == len(small) else None


def _lifted(shape: tuple, small: tuple, big: tuple, kept: list[int]) -> tuple | None:
    """An extra's shape (broadcasting to `small`) at the rank of `big`, or None when it does
    not broadcast to `small`."""
    if len(shape) > len(small):
        return None
    full = (1,) * (len(small) - len(shape)) + tuple(shape)
    if any(e not in (1, s) for e, s in zip(full, small)):
        return None
    out = [1] * len(big)
    for j, i in enumerate(kept):
        out[i] = full[j]
    return tuple(out)


def _members(graph: Graph, start: int, q: Value, readers: dict[Value, list[Node]]
             ) -> list[Node]:
    return elementwise_chain(graph, start, q, lambda v: known_shape(v.tensor_type),
                             lambda v: True, readers)


def _shape_const(graph: Graph, shape: tuple) -> Value:
    arr = np.asarray(shape, np.int64)
    v = Value(TensorType(DType.INT64, arr.shape), "unit_shape", const=arr)
    graph.initializers.append(v)
    return v


def _lift_extra(graph: Graph, v: Value, small: tuple, big: tuple, kept: list[int],
                before: list[Node]) -> Value | None:
    """`v` at the rank of `big` (None when it cannot be), adding a Reshape node to `before`
    for a non-constant value."""
    shape = known_shape(v.tensor_type)
    new = _lifted(shape, small, big, kept)
    if new is None:
        return None
    if new == shape:
        return v
    if v.const is not None:
        arr = np.ascontiguousarray(v.const.reshape(new))
        out = Value(TensorType(v.dtype, new), v.name, const=arr)
        graph.initializers.append(out)
        return out
    out = Value(TensorType(v.dtype, new), v.name)
    before.append(Node("Reshape", [v, _shape_const(graph, new)], [out], {}, "", 14))
    return out


def _sink(graph: Graph, r: Node, members: list[Node], kept: list[int]) -> list[Node] | None:
    """Rewrite the members to shape P (see the module docstring, step 2); returns the nodes
    that replace [r, *members] in order, or None when an extra does not fit."""
    p, q = r.inputs[0], r.outputs[0]
    big, small = known_shape(p.tensor_type), known_shape(q.tensor_type)
    remap: dict[Value, Value] = {q: p}
    lifted: dict[Value, Value] = {}
    nodes: list[Node] = []
    for n in members:
        before: list[Node] = []
        ins: list[Value | None] = []
        for v in n.inputs:
            if v is None or v in remap:
                ins.append(None if v is None else remap[v])
                continue
            if v not in lifted:
                new = _lift_extra(graph, v, small, big, kept, before)
                if new is None:
                    return None
                lifted[v] = new
            ins.append(lifted[v])
        out = Value(TensorType(n.outputs[0].dtype, big), n.outputs[0].name)
        remap[n.outputs[0]] = out
        nodes += before
        nodes.append(Node(n.op, ins, [out], dict(n.attrs), n.domain, n.version, n.name))
    final = members[-1].outputs[0]
    nodes.append(Node("Reshape", [remap[final], _shape_const(graph, small)], [final], {}, "",
                      14, name=r.name))
    return nodes


def _candidate(graph: Graph, r: Node, readers: dict[Value, list[Node]],
               producers: dict[Value, Node]) -> list[int] | None:
    """The kept axes when `r` is a unit-dropping reshape of a lone producer's output."""
    if r.domain not in ("", "ai.onnx") or r.op not in ("Squeeze", "Reshape") or \
            len(r.outputs) != 1:
        return None
    p, q = r.inputs[0], r.outputs[0]
    big, small = known_shape(p.tensor_type), known_shape(q.tensor_type)
    prod = producers.get(p)
    if big is None or small is None or prod is None or producer_kind(prod) is None or \
            readers.get(p, []) != [r] or p in graph.outputs:
        return None
    return unit_drop(big, small)


def run(model: Model, ctx: PassContext) -> PassResult:
    graph = model.graph
    readers = graph.users(captures=True)  # a read from a subgraph: a reader outside
    producers = {o: n for n in graph.nodes for o in n.outputs if o is not None}
    taken: set[Node] = set()
    replaced: dict[Node, list[Node]] = {}
    for i, r in enumerate(graph.nodes):
        if r in taken:
            continue
        kept = _candidate(graph, r, readers, producers)
        members = _members(graph, i, r.outputs[0], readers) if kept is not None else []
        if not members or any(n in taken for n in members):
            continue
        nodes = _sink(graph, r, members, kept)
        if nodes is None:
            continue
        taken.update([r, *members])
        replaced[members[-1]] = nodes
    if not replaced:
        return PassResult(model, False)
    out: list[Node] = []
    for n in graph.nodes:
        if n in replaced:
            out += replaced[n]
        elif n not in taken:
            out.append(n)
    graph.nodes = out
    return PassResult(model, True)
