"""fuse-epilogue: Conv/MatMul/Gemm + following elementwise ops -> FusedConv/FusedMatMul.

Requires concrete shapes (it runs per signature, before `fuse`). For each producer (a float
Conv whose W has rank >= 3, a MatMul or Gemm, or a FusedMatMul without an epilogue yet, as
fold-transpose leaves it) with output p:
1) candidates: sweeping forward from the producer, an elementwise node (an OpDef scalar rule,
   one output of p's shape and element type) joins when one of its inputs is p or a
   candidate's output, and each other input is an "extra" the epilogue can index (the output's
   shape, one value per channel, or one element: `fused.linear.extra_kind`);
2) the longest prefix (in graph order) of the candidates that is a closed region is taken:
   every value of the region but the last member's output (p included) is read only inside
   the region and is not a graph output. Then no extra input can depend on a region value,
   so the fused node placed at the last member's position keeps the graph acyclic;
3) the members move into the `epilogue` graph (first input stands for p, one input per extra)
   of a FusedConv (X, W, B, extras...: Conv attributes kept) or FusedMatMul (A, B, extras...:
   trans_a/trans_b/alpha; a Gemm's C becomes an extra read by a leading Add, beta folded into
   a constant C, or the Gemm is left alone when C is not constant and beta != 1).
A producer with no member (e.g. a Conv whose output is read twice) is left as it is, except
a GEMM-path Conv with a bias: it becomes a FusedConv without `epilogue`, whose bias is added
per block after the Matmul (no separate pass filling Y with the bias first).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.ir.graph import Graph, Model, Node, Value, replace_uses
from onnxjit.ir.opdef import lookup
from onnxjit.ir.ops.fused.epilogue import extra_kind
from onnxjit.ir.ops.fused.region import FUSED_DOMAIN
from onnxjit.ir.symbolic import known_shape
from onnxjit.ir.types import DType, TensorType
from onnxjit.passes import PassContext, PassResult

name = "fuse-epilogue"
level = "graph"

MAX_MEMBERS = 32
_FLOATS = (DType.FLOAT, DType.DOUBLE)


def _static(v: Value | None) -> tuple | None:
    t = v.tensor_type if v is not None else None
    return known_shape(t)


def _positive(d: object) -> bool:
    """A size known to be > 0: an int, or a symbolic one (an empty sum for a call that makes
    it 0 zero-fills the product, then the epilogue runs on it)."""
    return not isinstance(d, int) or d > 0


def producer_kind(node: Node) -> str | None:
    """'conv' or 'matmul' when the node can take an epilogue, else None."""
    out = node.outputs[0] if node.outputs else None
    if out is None or _static(out) is None or out.dtype not in _FLOATS or \
            any(v is not None and _static(v) is None for v in node.inputs):
        return None
    if node.domain == FUSED_DOMAIN and node.op == "FusedMatMul":
        return "matmul" if node.attr("epilogue") is None and len(node.inputs) == 2 else None
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op == "Conv" and len(node.inputs[1].shape) >= 3 and \
            all(_positive(d) for d in node.inputs[1].shape[1:]):
        return "conv"
    if node.op == "MatMul" and all(len(v.shape) >= 2 for v in node.inputs) and \
            _positive(node.inputs[0].shape[-1]):
        return "matmul"
    if node.op == "Gemm" and _positive(node.inputs[0].shape[0 if node.attr("transA", 0) else 1]):
        c = node.input(2)
        beta = float(node.attr("beta", 1.0))
        if c is None or beta == 0.0 or beta == 1.0 or c.const is not None:
            return "matmul"
    return None


def _members(graph: Graph, start: int, p: Value, chan_axis: int,
             readers: dict[Value, list[Node]]) -> list[Node]:
    shape = _static(p)
    return elementwise_chain(graph, start, p, _static, lambda v: extra_kind(
        _static(v), shape, chan_axis) is not None, readers)


def elementwise_chain(graph: Graph, start: int, head: Value, shape_of: Any,
                      extra_ok: Any, readers: dict[Value, list[Node]]) -> list[Node]:
    """The elementwise nodes after `graph.nodes[start]` that extend `head` (same shape by
    `shape_of`, same dtype; other operands accepted by `extra_ok`), cut to the longest closed
    prefix: no value before its last node read outside it or a graph output (the module
    docstring, step 2). `sink_reshape` collects its chains the same way."""
    shape, dtype = shape_of(head), head.dtype
    region: set[Value] = {head}
    cands: list[Node] = []
    for node in graph.nodes[start + 1:]:
        if len(cands) >= MAX_MEMBERS:
            break
        if not any(v in region for v in node.inputs):
            continue
        d = lookup(node.domain, node.op)
        out = node.outputs[0] if len(node.outputs) == 1 else None
        if d is None or d.scalar is None or out is None or shape_of(out) != shape or \
                out.dtype != dtype:
            continue
        extras = [v for v in node.inputs if v is not None and v not in region]
        if any(shape_of(v) is None or not extra_ok(v) for v in extras):
            continue
        cands.append(node)
        region.add(out)
    for k in range(len(cands), 0, -1):
        members = cands[:k]
        inside = set(members)
        values = [head] + [n.outputs[0] for n in members[:-1]]
        if all(v not in graph.outputs and all(r in inside for r in readers.get(v, []))
               for v in values) and members[-1].outputs[0] not in values:
            return members
    return []


def _gemm_as_matmul(graph: Graph, node: Node) -> tuple[Node, Value | None]:
    """A FusedMatMul computing alpha * A' @ B' and the (beta-scaled) C to add, if any."""
    c = node.input(2)
    beta = float(node.attr("beta", 1.0))
    if c is not None and beta == 0.0:
        c = None
    if c is not None and beta != 1.0:
        arr = np.ascontiguousarray(c.const * np.asarray(beta, c.const.dtype))
        c = Value(TensorType(DType.from_numpy(arr.dtype), arr.shape), "c_beta", const=arr)
        graph.initializers.append(c)
    attrs = {"trans_a": int(node.attr("transA", 0)), "trans_b": int(node.attr("transB", 0)),
             "alpha": float(node.attr("alpha", 1.0))}
    out = Value(node.outputs[0].type, node.outputs[0].name)
    mm = Node("FusedMatMul", list(node.inputs[:2]), [out], attrs, FUSED_DOMAIN, 1, node.name)
    return mm, c


def _build(graph: Graph, prod: Node, kind: str, members: list[Node]
           ) -> tuple[Node, Value, Value]:
    """The fused node, the final member's value it replaces, and its own output value."""
    p = prod.outputs[0]
    label = "+".join([prod.op] + [n.op for n in members])
    lead: Node | None = None
    if prod.op == "Gemm":
        mm, c = _gemm_as_matmul(graph, prod)
        if c is not None:
            # Y = A' @ B' + C: the Add is the epilogue's first member.
            lead = Node("Add", [mm.outputs[0], c], [Value(p.type, "gemm_c")], {}, "", 14)
            members = [lead] + members
            replace_uses_in(members[1:], p, lead.outputs[0])
        else:
            replace_uses_in(members, p, mm.outputs[0])
        prod, p = mm, mm.outputs[0]
    if not members:  # a Conv whose bias alone moves into the epilogue
        out = Value(p.type, p.name)
        fused = Node("FusedConv", list(prod.inputs), [out], dict(prod.attrs), FUSED_DOMAIN, 1,
                     name=label)
        return fused, p, out
    region = {p} | {n.outputs[0] for n in members}
    extras: list[Value] = []
    for n in members:
        for v in n.inputs:
            if v is not None and v not in region and v not in extras:
                extras.append(v)
    acc = Value(p.type, "acc")
    body_extras = [Value(v.type, v.name) for v in extras]
    remap = {p: acc, **dict(zip(extras, body_extras))}
    for n in members:
        n.inputs = [None if v is None else remap.get(v, v) for v in n.inputs]
    final = members[-1].outputs[0]
    body = Graph(list(members), [acc, *body_extras], [final], name="epilogue")
    out = Value(final.type, final.name)
    attrs = {**prod.attrs, "epilogue": body}
    if kind == "conv":
        ins = [prod.inputs[0], prod.inputs[1], prod.input(2), *extras]
        fused = Node("FusedConv", ins, [out], attrs, FUSED_DOMAIN, 1, name=label)
    else:
        if prod.op == "MatMul":
            attrs = {"trans_a": 0, "trans_b": 0, "alpha": 1.0, "epilogue": body}
        fused = Node("FusedMatMul", [*prod.inputs[:2], *extras], [out], attrs, FUSED_DOMAIN, 1,
                     name=label)
    return fused, final, out


def replace_uses_in(nodes: list[Node], old: Value, new: Value) -> None:
    for n in nodes:
        n.inputs = [new if v is old else v for v in n.inputs]


def _bias_only(node: Node, kind: str) -> bool:
    """An im2col/GEMM Conv with a bias and no epilogue members still gains: the bias is added
    to each block after its Matmul instead of filling Y in a separate pass beforehand."""
    return kind == "conv" and node.op == "Conv" and node.input(2) is not None and \
        node.inputs[1].shape[1] > 1


def run(model: Model, ctx: PassContext) -> PassResult:
    graph = model.graph
    readers = graph.users(captures=True)  # a read from a subgraph: a reader outside
    taken: set[Node] = set()
    plans: list[tuple[Node, str, list[Node]]] = []
    for i, node in enumerate(graph.nodes):
        if node in taken:
            continue
        kind = producer_kind(node)
        if kind is None:
            continue
        members = _members(graph, i, node.outputs[0], 1 if kind == "conv" else -1, readers)
        if any(n in taken for n in members):
            members = []
        if not members and not _bias_only(node, kind):
            continue
        c = node.input(2) if node.op == "Gemm" else None
        if c is not None and extra_kind(_static(c), _static(node.outputs[0]), -1) is None:
            continue
        taken.update(members)
        taken.add(node)
        plans.append((node, kind, members))
    if not plans:
        return PassResult(model, False)
    at_last: dict[Node, Node] = {}
    renamed: dict[Value, Value] = {}
    for prod, kind, members in plans:
        fused, final, out = _build(graph, prod, kind, members)
        at_last[members[-1] if members else prod] = fused
        renamed[final] = out
    graph.nodes = [at_last.get(n, n) for n in graph.nodes if n in at_last or n not in taken]
    fused_nodes = set(at_last.values())
    for n in graph.nodes:
        n.inputs = [None if v is None else renamed.get(v, v) for v in n.inputs]
        if n not in fused_nodes:  # an epilogue body keeps its own values
            for g in n.regions():
                for old, new in renamed.items():
                    replace_uses(g, old, new)
    graph.outputs = [renamed.get(v, v) for v in graph.outputs]
    model.opset_imports.setdefault(FUSED_DOMAIN, 1)
    return PassResult(model, True)
