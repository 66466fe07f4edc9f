"""fuse: group chains of elementwise/broadcast nodes into `onnxjit.Fused` regions.

Requires concrete shapes (it runs per signature). Algorithm, one forward sweep:
1) a node is a candidate if its OpDef has a scalar rule, it has one output, that output's
   shape is static, and every input broadcasts to it numpy-style;
2) it joins the region of a producer of one of its inputs when the region has the same output
   shape and every other input of the node is defined before the region's first member
   (a graph input, a constant, or an earlier node's output) — this keeps the graph acyclic
   without any reachability analysis; otherwise it starts a new region;
3) each region of two or more members becomes one Fused node placed at its first member's
   position; member outputs read outside the region (or graph outputs) become its outputs.
"""

from __future__ import annotations

from onnxjit.ir.graph import Graph, Model, Node, Value, replace_uses
from onnxjit.ir.opdef import lookup
from onnxjit.ir.ops.fused.region import FUSED_DOMAIN
from onnxjit.ir.symbolic import known_shape
from onnxjit.ir.types import DType, TensorType
from onnxjit.passes import PassContext, PassResult

name = "fuse"
level = "graph"


class _Region:
    def __init__(self, first: int, shape: tuple):
        self.first = first
        self.shape = shape
        self.members: list[Node] = []


def _candidate(node: Node) -> tuple | None:
    d = lookup(node.domain, node.op)
    if d is None or d.scalar is None or len(node.outputs) != 1:
        return None
    t = node.outputs[0].type
    if not isinstance(t, TensorType) or known_shape(t) is None:
        return None
    if any(isinstance(v.type, TensorType) and v.type.dtype == DType.STRING
           for v in node.inputs + node.outputs if v is not None):
        return None  # string ops run on the host (onnxjit.staged), never fused
    for v in node.inputs:  # an input read other than by numpy broadcasting (legacy PRelu)
        s = v.type.shape if v is not None and isinstance(v.type, TensorType) else None
        if s is not None and (len(s) > len(t.shape) or any(
                d != 1 and d != e for d, e in zip(s[::-1], t.shape[::-1]))):
            return None
    return t.shape


def _build(graph: Graph, region: _Region, readers: dict[Value, list[Node]]) -> Node:
    members = set(region.members)
    produced = {v for n in region.members for v in n.outputs}
    ext_inputs: list[Value] = []
    for n in region.members:
        for v in n.inputs:
            if v is not None and v not in produced and v not in ext_inputs:
                ext_inputs.append(v)
    escaping = [v for v in (n.outputs[0] for n in region.members)
                if v in graph.outputs or any(r not in members for r in readers.get(v, []))]
    body_inputs = [Value(v.type, v.name) for v in ext_inputs]
    for n in region.members:
        n.inputs = [body_inputs[ext_inputs.index(v)] if v in ext_inputs else v
                    for v in n.inputs]
    body = Graph(list(region.members), body_inputs, list(escaping), name="fused")
    outs = [Value(v.type, v.name) for v in escaping]
    fused = Node("Fused", ext_inputs, outs, {"body": body}, FUSED_DOMAIN, 1,
                 name="+".join(n.op for n in region.members))
    # Readers outside the region now read the Fused node's outputs; members keep reading the
    # original values, which live on inside the body.
    mapping = dict(zip(escaping, outs))
    for n in graph.nodes:
        if n not in members:
            n.inputs = [mapping.get(v, v) if v is not None else None for v in n.inputs]
            for g in n.regions():
                for old, new in mapping.items():
                    replace_uses(g, old, new)
    graph.outputs = [mapping.get(v, v) for v in graph.outputs]
    return fused


def run(model: Model, ctx: PassContext) -> PassResult:
    graph = model.graph
    position = {n: i for i, n in enumerate(graph.nodes)}
    region_of: dict[Node, _Region] = {}
    regions: list[_Region] = []
    for i, node in enumerate(graph.nodes):
        shape = _candidate(node)
        if shape is None:
            continue
        chosen = None
        for v in node.inputs:
            p = v.producer if v is not None else None
            r = region_of.get(p) if p is not None else None
            if r is None or r.shape != shape:
                continue
            ok = all(w is None or w.producer is None or region_of.get(w.producer) is r
                     or position.get(w.producer, -1) < r.first for w in node.inputs)
            if ok:
                chosen = r
                break
        if chosen is None:
            chosen = _Region(i, shape)
            regions.append(chosen)
        chosen.members.append(node)
        region_of[node] = chosen
    regions = [r for r in regions if len(r.members) > 1]
    if not regions:
        return PassResult(model, False)
    readers = graph.users()
    # A value read only inside a region (If branch, Loop body) must stay visible outside.
    from onnxjit.ir.host_eval import implicit_inputs

    for n in graph.nodes:
        for v in implicit_inputs(n):
            readers.setdefault(v, []).append(n)
    fused_at = {r.first: _build(graph, r, readers) for r in regions}
    fused_members = {n for r in regions for n in r.members}
    new_nodes = []
    for i, node in enumerate(graph.nodes):
        if i in fused_at:
            new_nodes.append(fused_at[i])
        elif node not in fused_members:
            new_nodes.append(node)
    graph.nodes = new_nodes
    model.opset_imports.setdefault(FUSED_DOMAIN, 1)
    return PassResult(model, True)
