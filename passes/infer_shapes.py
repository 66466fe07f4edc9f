"""infer-shapes: give every value a type with (symbolic) shape, from the op table.

Algorithm: walk the nodes in topological order (the verifier guarantees it); for each node look
up its OpDef and call `infer(node)`, which reads input types, constant inputs and `sym_value`s
and returns the output types. The result is merged with what the model declared (value_info):
an inferred concrete dim wins, a declared dim fills an unknown inferred one, and the declared
dtype must agree. Subgraph regions are left to the control-flow ops' own rules.
"""

from __future__ import annotations

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Model, Node
from onnxjit.ir.opdef import resolve
from onnxjit.ir.types import TensorType, ValueType
from onnxjit.passes import PassContext, PassResult

name = "infer-shapes"
level = "graph"


def merge(inferred: ValueType | None, declared: ValueType | None, node: Node, index: int
          ) -> ValueType | None:
    if inferred is None:
        return declared
    if not isinstance(inferred, TensorType) or not isinstance(declared, TensorType):
        return inferred
    if inferred.dtype != declared.dtype:
        raise ModelError(f"output {index} is declared {declared.dtype.short} but the op "
                         f"produces {inferred.dtype.short}", where=node)
    if inferred.shape is None:
        return declared
    if declared.shape is None or len(declared.shape) != len(inferred.shape):
        return inferred
    dims = tuple(d if d is not None else e for d, e in zip(inferred.shape, declared.shape))
    return TensorType(inferred.dtype, dims)


def infer_node(node: Node) -> None:
    opdef = resolve(node)
    if opdef.infer is None:
        return
    types = opdef.infer(node)
    if len(types) < len(node.outputs):
        types = list(types) + [None] * (len(node.outputs) - len(types))
    for k, (out, t) in enumerate(zip(node.outputs, types)):
        out.type = merge(t, out.type, node, k)


def run(model: Model, ctx: PassContext) -> PassResult:
    for node in model.graph.nodes:
        infer_node(node)
    return PassResult(model, True)
