"""infer-shapes: give every value a type with (symbolic) shape, from the op table.

Algorithm: walk the nodes in topological order (the verifier guarantees it) and infer each
(`ir.infer.infer_node`: the op's `infer` rule, merged with the declared value_info, sizes
checked). Subgraph regions are left to the control-flow ops' own rules.
"""

from __future__ import annotations

from onnxjit.ir.graph import Model
from onnxjit.ir.infer import infer_node
from onnxjit.passes import PassContext, PassResult

name = "infer-shapes"
level = "graph"


def run(model: Model, ctx: PassContext) -> PassResult:
    for node in model.graph.nodes:
        infer_node(node)
    return PassResult(model, True)
