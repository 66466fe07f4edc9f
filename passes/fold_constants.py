"""fold-constants: evaluate nodes whose inputs are all known at compile time.

Algorithm, one forward sweep in topological order:
1) re-infer the node (an input may have become constant since infer-shapes ran, which sharpens
   shapes such as Reshape's);
2) if every present input is a constant, evaluate the node with its OpDef's numpy `evaluate`, or
   for elementwise ops by interpreting its `scalar` rule (`ir.scalar_eval`): the same semantics
   as the generated code;
3) otherwise, an int64 output whose `sym_value` is fully concrete (Shape of a static tensor and
   what is computed from it) becomes that constant;
4) folded outputs become initializers and the node is removed;
5) an If whose condition is now a constant is replaced by the branch it selects: the branch's
   nodes are spliced in where the If was (and swept next, so a nested If whose condition
   depends only on shapes folds too), readers of the If's outputs read the branch's. Exporters
   guard on shapes this way (`if x.shape[0] == 1`); left in place, each such If would split
   the program into host-driven stages.
Non-deterministic ops are never folded; results larger than `MAX_FOLD_ELEMENTS` are left alone.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import CompileError, OnnxJitError
from onnxjit.ir.graph import Graph, Model, Node, replace_uses
from onnxjit.ir.infer import infer_node
from onnxjit.ir.opdef import lookup, resolve
from onnxjit.ir.types import DType, TensorType
from onnxjit.passes import PassContext, PassResult

name = "fold-constants"
level = "graph"

MAX_FOLD_ELEMENTS = 1 << 26
NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                    "Bernoulli", "Multinomial"}


def _static_numel(node: Node) -> int:
    total = 0
    for v in node.outputs:
        t = v.type
        if isinstance(t, TensorType) and t.is_static:
            total = max(total, t.numel())
    return total


def evaluate(node: Node) -> list[np.ndarray] | None:
    """The node's outputs if they can be computed now, else None."""
    opdef = resolve(node)
    inputs = [None if v is None else v.const for v in node.inputs]
    if any(a is None for v, a in zip(node.inputs, inputs) if v is not None):
        return None
    if _static_numel(node) > MAX_FOLD_ELEMENTS:
        return None
    if opdef.evaluate is not None:
        return list(opdef.evaluate(node, inputs))
    if opdef.scalar is not None:
        from onnxjit.ir.scalar_eval import evaluate_elementwise

        return evaluate_elementwise(opdef, node, inputs)
    return None


def _from_sym_values(node: Node) -> list[np.ndarray] | None:
    outs = []
    for v in node.outputs:
        sv, t = v.sym_value, v.tensor_type
        if sv is None or t is None or t.dtype != DType.INT64 or t.shape is None:
            return None
        if not all(isinstance(d, int) for d in sv):
            return None
        arr = np.array(sv, dtype=np.int64)
        if t.shape == ():
            if len(sv) != 1:
                return None
            arr = arr.reshape(())
        elif len(t.shape) != 1:
            return None
        outs.append(arr)
    return outs


def _draws(node: Node) -> bool:
    d = lookup(node.domain, node.op)
    return d is not None and d.draws is not None and d.draws(node)


def _constant_branch(node: Node) -> str | None:
    """The branch a standard If with a constant one-element condition takes, else None."""
    if node.op != "If" or node.domain not in ("", "ai.onnx") or not node.inputs:
        return None
    cond = node.inputs[0].const if node.inputs[0] is not None else None
    if cond is None or np.asarray(cond).size != 1:
        return None
    return "then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"


def _inline_branch(graph: Graph, node: Node, branch: str) -> list[Node]:
    """Make readers of the If's outputs read the branch's results; the branch's nodes."""
    body = node.attrs[branch]
    for out, res in zip(node.outputs, body.outputs):
        replace_uses(graph, out, res)
    graph.initializers.extend(body.initializers)
    return list(body.nodes)


def run(model: Model, ctx: PassContext) -> PassResult:
    graph = model.graph
    kept: list[Node] = []
    changed = False
    pending = list(graph.nodes)
    pending.reverse()  # a stack: spliced branches are swept next, in their order
    while pending:
        node = pending.pop()
        infer_node(node)
        branch = _constant_branch(node)
        if branch is not None:
            graph.nodes = kept + pending[::-1]  # what replace_uses rewrites
            pending.extend(reversed(_inline_branch(graph, node, branch)))
            changed = True
            continue
        if node.op in NONDETERMINISTIC or any(True for _ in node.regions()) or _draws(node):
            kept.append(node)
            continue
        try:
            results = evaluate(node)
        except OnnxJitError:
            raise
        except Exception as e:  # numpy errors while folding are compiler bugs
            raise CompileError(f"fold-constants failed: {type(e).__name__}: {e}",
                               where=node) from e
        if results is None:
            results = _from_sym_values(node)
        if results is None:
            kept.append(node)
            continue
        for v, arr in zip(node.outputs, results):
            arr = np.asarray(arr)
            v.const = arr
            v.producer = None
            if isinstance(v.type, TensorType) or v.type is None:
                v.type = TensorType(DType.from_numpy(arr.dtype), tuple(arr.shape))
            graph.initializers.append(v)
        changed = True
    graph.nodes = kept
    return PassResult(model, changed)
