"""simplify: remove nodes that only forward a value (Identity, inference-mode Dropout, a
Slice that keeps everything).

Algorithm: for each such node whose forwarded output is not needed as a separate value, replace
every use of its output by its input (in this graph, its subgraph regions, and the graph's
outputs; output names are kept in `graph.output_names`) and drop the node. Dropout is only
removed when its mask output is unused and training mode is not constant-true. A Slice is
whole when its starts, ends, axes and steps are constants, every step is positive and the
output's static shape is the input's (a positive step keeping all n >= 2 elements of an axis
must start at 0 with step 1); tf2onnx writes such Slices around convs ("strided_slice" with
masked bounds), and each was a copy that also kept the conv's epilogue from fusing.
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
    if node.op == "Slice" and _whole_slice(node):
        return node.inputs[0], node.outputs[0]
    if node.op == "Dropout":
        if len(node.outputs) > 1 and node.outputs[1] in used:
            return None
        mode = node.input(2)
        if mode is not None and (mode.const is None or bool(mode.const)):
            return None
        return node.inputs[0], node.outputs[0]
    return None


def _whole_slice(node: Node) -> bool:
    """Whether a Slice copies its whole input (see the module docstring)."""
    x, y = node.inputs[0], node.outputs[0]
    if x is None or x.shape is None or y.shape is None or x.dtype != y.dtype \
            or not all(isinstance(d, int) for d in x.shape) or tuple(x.shape) != tuple(y.shape):
        return False
    if node.version < 10:  # bounds are attributes, steps are 1
        return len(node.inputs) == 1
    bounds = [node.input(i) for i in range(1, 5)]
    if any(v is not None and v.const is None for v in bounds) or bounds[0] is None \
            or bounds[1] is None:
        return False
    steps = bounds[3]
    return steps is None or bool((steps.const > 0).all())


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

