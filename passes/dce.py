"""dce: remove nodes whose outputs nobody reads, and unused initializers.

Algorithm: mark the graph outputs live; walk the nodes backwards, keeping a node if any output
is live (then marking its inputs, and every value its subgraph regions read, live). Initializers
not marked live are dropped. One backward sweep suffices because the order is topological.
"""

from __future__ import annotations

from onnxjit.ir.graph import Graph, Model, Value
from onnxjit.passes import PassContext, PassResult

name = "dce"
level = "graph"


def _region_reads(graph: Graph, live: set[Value]) -> None:
    for n in graph.nodes:
        live.update(v for v in n.inputs if v is not None)
        for g in n.regions():
            _region_reads(g, live)
    live.update(graph.outputs)


def run(model: Model, ctx: PassContext) -> PassResult:
    graph = model.graph
    live: set[Value] = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(v in live for v in node.outputs):
            kept.append(node)
            live.update(v for v in node.inputs if v is not None)
            for g in node.regions():
                _region_reads(g, live)
    kept.reverse()
    inits = [v for v in graph.initializers if v in live]
    changed = len(kept) != len(graph.nodes) or len(inits) != len(graph.initializers)
    graph.nodes = kept
    graph.initializers = inits
    return PassResult(model, changed)
