"""simplify: remove nodes that only forward a value (Identity, inference-mode Dropout).

Algorithm: for each such node whose forwarded output is not needed as a separate value, replace
every use of its output by its input (in this graph, its subgraph regions, and the graph's
outputs; output names are kept in `graph.output_names`) and drop the node. Dropout is only
removed when its mask output is unused and training mode is not constant-true.
"""

from __future__ import annotations

from onnxjit.ir.graph import Graph, Model, Node, Value, replace_uses
from onnxjit.passes import PassContext, PassResult

name = "simplify"
level = "graph"


def _forwarded(node: Node, used: set[Value]) -> tuple[Value, Value] | None:
    if node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
        return None
    if node.op == "Identity" and len(node.outputs) == 1:
        return node.inputs[0], node.outputs[0]
    if node.op == "Dropout":
        if len(node.outputs) > 1 and node.outputs[1] in used:
            return None
        mode = node.input(2)
        if mode is not None and (mode.const is None or bool(mode.const)):
            return None
        return node.inputs[0], node.outputs[0]
    return None


def _used(graph: Graph) -> set[Value]:
    used: set[Value] = set(graph.outputs)
    for n in graph.walk():
        used.update(v for v in n.inputs if v is not None)
    return used


def run(model: Model, ctx: PassContext) -> PassResult:
    graph = model.graph
    used = _used(graph)
    kept = []
    changed = False
    for node in graph.nodes:
        fwd = _forwarded(node, used)
        if fwd is None:
            kept.append(node)
            continue
        src, out = fwd
        replace_uses(graph, out, src)
        changed = True
    graph.nodes = kept
    return PassResult(model, changed)

