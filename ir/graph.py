"""The graph IR: an SSA graph of ONNX nodes with typed values and symbolic shapes.

Few node types: a `Model` holds a `Graph`; a graph holds input `Value`s, `Node`s in topological
order and output values; a node has an op name, a domain, the resolved opset `version` of its
domain, input values (None for an omitted optional input), output values, and attributes as plain
Python values (int, float, str, bytes, np.ndarray for tensors, tuples of those, `Graph` for
subgraph regions, `TypeAttr` for type protos). Op semantics live in the op table (`ir.opdef`).

Values are objects compared by identity; `name` is a hint, except for graph inputs and outputs,
whose names are the model's interface. A value with `const` set is a constant (an initializer or a
folded result); a graph input with `const` set is an input with a default value, which the
caller may override (IR >= 4), so passes must not read it as a constant: the driver sets such
defaults aside while the graph pipeline runs (`driver.overridable_defaults`), and binding a
signature drops them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxjit.ir.types import DType, TensorType, ValueType


class Value:
    """An SSA value: produced by exactly one node, or a graph input, or a constant."""

    __slots__ = ("type", "name", "producer", "const", "sym_value", "__weakref__")

    def __init__(self, type: ValueType | None = None, name: str = "",
                 producer: Node | None = None, const: np.ndarray | None = None):
        self.type = type
        self.name = name
        self.producer = producer
        self.const = const
        #: Known contents of a small int64 tensor that holds dims (e.g. the output of Shape),
        #: as a tuple of `Dim`s; lets Reshape/Expand see through Shape-driven subgraphs.
        self.sym_value: tuple | None = None

    @property
    def tensor_type(self) -> TensorType | None:
        return self.type if isinstance(self.type, TensorType) else None

    @property
    def dtype(self) -> DType | None:
        t = self.type
        return t.dtype if isinstance(t, TensorType) else None

    @property
    def shape(self) -> tuple | None:
        t = self.type
        return t.shape if isinstance(t, TensorType) else None

    def describe(self) -> str:
        return f"value '{self.name}'" if self.name else "an unnamed value"

    def __repr__(self) -> str:
        c = " const" if self.const is not None else ""
        return f"<Value {self.name or '?'}: {self.type}{c}>"


@dataclass(frozen=True)
class TypeAttr:
    """An attribute whose value is a type (AttributeProto.TYPE_PROTO)."""

    type: ValueType


@dataclass(frozen=True)
class AttrRef:
    """An attribute that refers to an attribute of the enclosing function (`@name`)."""

    name: str
    kind: str  # "int", "float", "string", "tensor", "graph", "ints", ...


@dataclass(eq=False)
class Node:
    op: str
    inputs: list[Value | None]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    version: int = 0
    name: str = ""

    def __post_init__(self) -> None:
        for v in self.outputs:
            v.producer = self

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def input(self, i: int) -> Value | None:
        """The i-th input, or None when it is omitted or past the end."""
        return self.inputs[i] if i < len(self.inputs) else None

    def regions(self) -> Iterator[Graph]:
        for v in self.attrs.values():
            if isinstance(v, Graph):
                yield v
            elif isinstance(v, tuple) and v and isinstance(v[0], Graph):
                # a list attribute holds one kind (the verifier checks it): the first element
                # tells whether it holds graphs, without a pass over long number lists
                yield from (g for g in v if isinstance(g, Graph))

    @property
    def qualified_op(self) -> str:
        return f"{self.domain}.{self.op}" if self.domain not in ("", "ai.onnx") else self.op

    def describe(self) -> str:
        label = f" '{self.name}'" if self.name else ""
        return f"node{label} ({self.qualified_op})"

    def __repr__(self) -> str:
        return f"<Node {self.qualified_op} {self.name}>"


@dataclass(eq=False)
class Graph:
    nodes: list[Node]
    inputs: list[Value]
    outputs: list[Value]
    #: Constant values of the graph (initializers), each with `.const` set.
    initializers: list[Value] = field(default_factory=list)
    name: str = "main"
    #: Names under which the outputs are visible; usually each output value's own name, but two
    #: output slots may hold one value.
    output_names: list[str] | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        if self.output_names is None:
            self.output_names = [v.name for v in self.outputs]

    def walk(self) -> Iterator[Node]:
        """Every node, including those in subgraph regions (pre-order)."""
        for n in self.nodes:
            yield n
            for g in n.regions():
                yield from g.walk()

    def users(self, captures: bool = False) -> dict[Value, list[Node]]:
        """Map from each value to the nodes (of this graph only) that read it; with
        `captures`, a value read inside a node's subgraph regions (or returned by one) also
        gets a placeholder reader, a "Capture" node outside the graph, so a rewrite that
        needs a value's only reader sees that it has others."""
        out: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                if v is not None:
                    out.setdefault(v, []).append(n)
        if captures:
            captured: set[Value] = set()
            for n in self.nodes:
                for g in n.regions():
                    for m in g.walk():
                        captured.update(v for v in m.inputs if v is not None)
                    captured.update(g.outputs)
            for v in captured:
                out.setdefault(v, []).append(Node("Capture", [], []))
        return out


@dataclass(eq=False)
class Function:
    """A model-local function (FunctionProto): a body graph with attribute parameters."""

    name: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attributes: list[str]
    attribute_defaults: dict[str, Any]
    body: Graph
    opset_imports: dict[str, int]
    overload: str = ""


@dataclass(eq=False)
class Model:
    graph: Graph
    opset_imports: dict[str, int]
    ir_version: int = 10
    producer_name: str = ""
    producer_version: str = ""
    domain: str = ""
    model_version: int = 0
    doc: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    functions: list[Function] = field(default_factory=list)


def replace_uses(graph: Graph, old: Value, new: Value) -> None:
    """Make every reader of `old` in `graph` (and nested regions) read `new`."""
    for n in graph.nodes:
        n.inputs = [new if v is old else v for v in n.inputs]
        for g in n.regions():
            replace_uses(g, old, new)
    graph.outputs = [new if v is old else v for v in graph.outputs]


def clone_graph(graph: Graph, outer: dict[Value, Value] | None = None) -> Graph:
    """A deep copy of a graph's structure: fresh Values and Nodes, shared constant arrays.

    `outer` maps values of enclosing scopes (for subgraphs); values not found there are the
    graph's own. Used to specialise a copy of the graph per input signature.
    """
    vmap: dict[Value, Value] = dict(outer or {})

    def copy_value(v: Value) -> Value:
        nv = Value(v.type, v.name, None, v.const)
        nv.sym_value = v.sym_value
        vmap[v] = nv
        return nv

    inputs = [copy_value(v) for v in graph.inputs]
    inits = [copy_value(v) for v in graph.initializers]
    nodes: list[Node] = []
    for n in graph.nodes:
        ins = [None if v is None else vmap.get(v, v) for v in n.inputs]
        attrs = {k: _clone_attr(a, vmap) for k, a in n.attrs.items()}
        outs = [copy_value(v) for v in n.outputs]
        nodes.append(Node(n.op, ins, outs, attrs, n.domain, n.version, n.name))
    outputs = [vmap.get(v, v) for v in graph.outputs]
    return Graph(nodes, inputs, outputs, inits, graph.name, list(graph.output_names or []),
                 graph.doc)


def _clone_attr(a: Any, vmap: dict[Value, Value]) -> Any:
    if isinstance(a, Graph):
        return clone_graph(a, vmap)
    if isinstance(a, tuple) and a and isinstance(a[0], Graph):  # one kind per list
        return tuple(clone_graph(g, vmap) if isinstance(g, Graph) else g for g in a)
    return a


def clone_model(model: Model) -> Model:
    import dataclasses

    return dataclasses.replace(model, graph=clone_graph(model.graph),
                               opset_imports=dict(model.opset_imports))
