"""Verifier of the graph IR: the rules of the ONNX IR spec and the IR's own invariants.

`verify_model(model)` raises `ModelError` naming the node, value and graph at fault. It runs
after every pass, so it is one linear walk over the model.

Algorithm: walk the main graph (then each model-local function body, in a fresh scope) in
order, keeping one table of the values visible at the current point, shared by every open scope:
1) on entering a graph, record every output of its nodes as *pending* (value -> node), so that a
   use before the definition (wrong order, or a cycle) is told apart from an undefined value;
2) define the graph's inputs and initializers, then visit the nodes in order: check each input
   is visible (or a free constant: `.const` set and no producer), check the attributes and visit
   the nested graphs they hold — whose scope is everything visible at this node, not the node's
   own outputs — then define the node's outputs;
3) defining a value already visible is an SSA violation (in the same graph: defined twice; from
   an enclosing graph: shadowing); defining one that a closed scope defined is also one, since
   a Value has a single producer;
4) check the graph's outputs are visible, then close the scope (its values stop being visible).
Values are compared by identity: names are hints, except the main graph's interface names.
Types, attributes, domains and versions are checked as each thing is reached, and so are the
counts of inputs and outputs between a control-flow node and its regions (`verify_regions`).
Errors inside a region name the node at fault and then, one clause per level as the error
leaves each region, the subgraph and the attribute and node owning it ("...; in subgraph 'b'
(attribute 'then_branch' of node 'if1' (If)); in subgraph ...").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.errors import ModelError, OnnxJitError, add_context
from onnxjit.ir.graph import AttrRef, Function, Graph, Model, Node, TypeAttr, Value
from onnxjit.ir.types import (
    DType,
    MapType,
    OptionalType,
    SequenceType,
    SparseTensorType,
    Sym,
    TensorType,
)
from onnxjit.ir.verify_regions import check_regions

#: Kinds an `AttrRef` may name (AttributeProto.AttributeType, lower case, minus UNDEFINED).
ATTR_REF_KINDS = frozenset({
    "float", "int", "string", "tensor", "graph", "sparse_tensor", "type_proto", "floats", "ints",
    "strings", "tensors", "graphs", "sparse_tensors", "type_protos"})
_SYM_ARITY = {"add": None, "mul": None, "floordiv": 2, "max": 2, "min": 2}

#: long plain tuple attributes already verified, by identity (values kept alive)
_PLAIN: dict[int, tuple] = {}


def verify_model(model: Model) -> None:
    """Raise ModelError if `model` breaks the ONNX IR rules or the graph IR's invariants."""
    if not isinstance(model, Model):
        raise ModelError(f"expected a graph-IR Model, got {type(model).__name__}")
    opsets = _check_opsets(model.opset_imports, "the model")
    local = {f.domain for f in model.functions if isinstance(f, Function)}
    _Verifier(set(opsets) | local, None).main_graph(model.graph)
    seen: set[tuple[str, str, str]] = set()
    for f in model.functions:
        if not isinstance(f, Function):
            raise ModelError(f"model functions must be Function objects, got {type(f).__name__}")
        key = (f.domain, f.name, f.overload)
        if key in seen:
            raise ModelError(f"{_fn_desc(f)} is defined twice")
        seen.add(key)
        own = _check_opsets(f.opset_imports, _fn_desc(f))
        # Domains a function does not import itself come from the model's imports.
        _Verifier(set(opsets) | set(own) | local, f).function_body(f)


def _fn_desc(f: Function) -> str:
    return f"function '{f.domain}.{f.name}'" if f.domain else f"function '{f.name}'"


def _check_opsets(opsets: Any, owner: str) -> dict[str, int]:
    if not isinstance(opsets, dict):
        raise ModelError(f"opset_imports of {owner} must be a dict, got {type(opsets).__name__}")
    for domain, version in opsets.items():
        if not isinstance(domain, str):
            raise ModelError(f"{owner} imports a domain {domain!r} that is not a string")
        if domain == "ai.onnx":
            raise ModelError(f"{owner} imports domain 'ai.onnx' under that name; the default "
                             "domain is keyed \"\"")
        if type(version) is not int or version < 0:
            raise ModelError(f"{owner} imports domain '{domain or 'ai.onnx'}' at version "
                             f"{version!r}; expected a non-negative int")
    return opsets


def _gdesc(graph: Graph) -> str:
    return f"graph '{graph.name}'"


class _Verifier:
    """One walk over a main graph or a function body (see the module docstring)."""

    def __init__(self, domains: set[str], function: Function | None):
        self.domains = domains
        self.function = function
        self.visible: set[Value] = set()
        #: Every value defined so far (also in closed scopes) -> (what defined it, its graph).
        self.defined: dict[Value, tuple[str, Graph]] = {}
        self.pending: dict[Value, Node] = {}
        self.nodes: set[Node] = set()
        self.graphs: set[Graph] = set()

    # entry points ---------------------------------------------------------------------------
    def main_graph(self, graph: Graph) -> None:
        if not isinstance(graph, Graph):
            raise ModelError(f"the model's graph must be a Graph, got {type(graph).__name__}")
        self._graph(graph, nested=False)
        self._interface(graph)

    def function_body(self, f: Function) -> None:
        body = f.body
        if not isinstance(body, Graph):
            raise ModelError(f"the body of {_fn_desc(f)} is not a Graph")
        names = [v.name if isinstance(v, Value) else None for v in body.inputs]
        if names != list(f.inputs):
            raise ModelError(f"{_fn_desc(f)} declares inputs {list(f.inputs)} but its body "
                             f"has inputs {names}")
        if list(body.output_names or []) != list(f.outputs):
            raise ModelError(f"{_fn_desc(f)} declares outputs {list(f.outputs)} but its body "
                             f"has outputs {body.output_names}")
        for a in f.attribute_defaults:
            if a not in f.attributes:
                raise ModelError(f"{_fn_desc(f)} has a default for attribute '{a}', which is "
                                 f"not one of its attributes {list(f.attributes)}")
        self._graph(body, nested=True)

    # graphs ---------------------------------------------------------------------------------
    def _graph(self, graph: Graph, nested: bool) -> None:
        if graph in self.graphs:
            raise ModelError(f"{_gdesc(graph)} appears twice in the model (each region must be "
                             "its own Graph object)")
        self.graphs.add(graph)
        for attr in ("nodes", "inputs", "outputs", "initializers"):
            if not isinstance(getattr(graph, attr), list):
                raise ModelError(f"{_gdesc(graph)}: '{attr}' must be a list")
        opened: list[Value] = []
        marked: list[Value] = []
        for node in graph.nodes:
            if not isinstance(node, Node):
                raise ModelError(f"{_gdesc(graph)} holds a {type(node).__name__} among its "
                                 "nodes; expected Node")
            for v in node.outputs:
                if isinstance(v, Value) and v not in self.pending:
                    self.pending[v] = node
                    marked.append(v)
        for k, v in enumerate(graph.inputs):
            self._define(v, f"input {k} of {_gdesc(graph)}", graph, opened)
            self._value(v, f"input {k} of {_gdesc(graph)}", nested)
        for v in graph.initializers:
            what = f"an initializer of {_gdesc(graph)}"
            self._define(v, what, graph, opened)
            if v.const is None:
                raise ModelError(f"{v.describe()} is {what} but has no constant value (.const)")
            self._value(v, what, True)
        for node in graph.nodes:
            self._node(node, graph, opened)
        for k, v in enumerate(graph.outputs):
            what = f"output {k} of {_gdesc(graph)}"
            self._use(v, what, None, graph)
            if not nested:  # typed, unless a node computes it (inference types it then, as
                # onnxruntime does); its shape may be left to inference (the spec's rule)
                self._value(v, what, v.producer is not None)
        for v in opened:
            self.visible.discard(v)
        for v in marked:
            self.pending.pop(v, None)

    def _interface(self, graph: Graph) -> None:
        """The main graph's interface: names given, unique and consistent."""
        names = graph.output_names
        if not isinstance(names, list) or len(names) != len(graph.outputs):
            raise ModelError(f"{_gdesc(graph)} has {len(graph.outputs)} outputs but "
                             f"output_names {names!r}; expected one name per output")
        inputs: dict[str, Value] = {}
        for k, v in enumerate(graph.inputs):
            if not isinstance(v.name, str) or not v.name:
                raise ModelError(f"input {k} of {_gdesc(graph)} has no name; the main graph's "
                                 "inputs are the model's interface")
            if v.name in inputs:
                raise ModelError(f"{_gdesc(graph)} has two inputs named '{v.name}'")
            inputs[v.name] = v
        seen: set[str] = set()
        for k, name in enumerate(names):
            if not isinstance(name, str) or not name:
                raise ModelError(f"output {k} of {_gdesc(graph)} has no name ({name!r})")
            if name in seen:
                raise ModelError(f"{_gdesc(graph)} has two outputs named '{name}'")
            seen.add(name)
            same = inputs.get(name)
            if same is not None and graph.outputs[k] is not same:
                raise ModelError(f"output {k} of {_gdesc(graph)} is named '{name}' like an "
                                 f"input, but holds {graph.outputs[k].describe()}, not that input")

    # values ---------------------------------------------------------------------------------
    def _define(self, v: Any, what: str, graph: Graph, opened: list[Value]) -> None:
        if not isinstance(v, Value):
            raise ModelError(f"{what} is a {type(v).__name__}, not a Value")
        if v in self.visible or v in self.defined:
            prev, pgraph = self.defined[v]
            if v not in self.visible:
                why = f"also defined by {prev} in {_gdesc(pgraph)}; a value has one definition"
            elif pgraph is graph:
                why = f"defined twice: by {prev} and by {what} (the graph must be in SSA form)"
            else:
                why = (f"already visible from the enclosing {_gdesc(pgraph)} (defined by {prev}); "
                       "a nested graph must not redefine an outer value")
                what = f"{what} in subgraph '{graph.name}'"
            raise ModelError(f"{v.describe()} is {what} but is {why}")
        self.visible.add(v)
        self.defined[v] = (what, graph)
        opened.append(v)

    def _use(self, v: Any, what: str, node: Node | None, graph: Graph) -> None:
        if not isinstance(v, Value):
            raise ModelError(f"{what} is a {type(v).__name__}, not a Value", where=node)
        if v in self.visible:
            return
        later = self.pending.get(v)
        if later is not None:
            raise ModelError(f"{what} ({v.describe()}) is used before {later.describe()} defines "
                             f"it: the nodes of {_gdesc(graph)} are not in topological order (or "
                             "there is a cycle)", where=node)
        if v.const is not None and v.producer is None:
            return  # a constant needs no definition
        if v in self.defined:
            prev, pgraph = self.defined[v]
            raise ModelError(f"{what} ({v.describe()}) is defined by {prev} in {_gdesc(pgraph)}, "
                             f"which is not visible from {_gdesc(graph)}", where=node)
        raise ModelError(f"{what} ({v.describe()}) is undefined in {_gdesc(graph)}: not a graph "
                         "input, initializer, constant, or output of an earlier node", where=node)

    def _value(self, v: Value, what: str, may_be_untyped: bool) -> None:
        """A defined value's type (required on the main graph's interface; its shape is not:
        an output's is inference's to find, and an input without one takes any shape a call
        gives, as in onnxruntime) and constant."""
        t = v.type
        if t is None:
            if not may_be_untyped:
                raise ModelError(f"{what} ({v.describe()}) has no type; the main graph's inputs "
                                 "and outputs must have one")
        else:
            _check_type(t, f"{what} ({v.describe()})")
        if v.const is not None:
            _check_const(v, what)

    # nodes ----------------------------------------------------------------------------------
    def _node(self, node: Node, graph: Graph, opened: list[Value]) -> None:
        if node in self.nodes:
            raise ModelError(f"the node appears twice in the model (again in {_gdesc(graph)})",
                             where=node)
        self.nodes.add(node)
        if not isinstance(node.op, str) or not node.op:
            raise ModelError(f"a node in {_gdesc(graph)} has no op name ({node.op!r})")
        if not isinstance(node.domain, str):
            raise ModelError(f"domain {node.domain!r} is not a string", where=node)
        domain = "" if node.domain == "ai.onnx" else node.domain
        if domain not in self.domains:
            have = sorted(d or "ai.onnx" for d in self.domains)
            raise ModelError(f"domain '{node.domain or 'ai.onnx'}' is neither imported by the "
                             f"model nor a model-local function's domain (have {have})",
                             where=node)
        if type(node.version) is not int or node.version < 1:
            raise ModelError(f"opset version {node.version!r} must be a positive int", where=node)
        if not isinstance(node.inputs, list) or not isinstance(node.outputs, list):
            raise ModelError("inputs and outputs must be lists", where=node)
        for i, v in enumerate(node.inputs):
            if v is not None:
                self._use(v, f"input {i}", node, graph)
        if not isinstance(node.attrs, dict):
            raise ModelError("attrs must be a dict", where=node)
        for name, a in node.attrs.items():
            if not isinstance(name, str) or not name:
                raise ModelError(f"an attribute has no name ({name!r})", where=node)
            self._attr(a, f"attribute '{name}'", node)
        if domain == "":
            check_regions(node)
        own: set[Value] = set()
        for k, v in enumerate(node.outputs):
            what = f"output {k} of {node.describe()}"
            if v in own:
                raise ModelError(f"output {k} ({v.describe()}) is listed twice among the node's "
                                 "outputs", where=node)
            self._define(v, what, graph, opened)
            own.add(v)
            if v.producer is not node:
                other = "no node" if v.producer is None else v.producer.describe()
                raise ModelError(f"output {k} ({v.describe()}) has producer {other}, not this "
                                 "node", where=node)
            if v.const is not None:
                raise ModelError(f"output {k} ({v.describe()}) has a constant value but is "
                                 "still computed by the node (a folded value is an initializer)",
                                 where=node)
            if v.type is not None:
                _check_type(v.type, f"{what} ({v.describe()})")

    def _attr(self, a: Any, what: str, node: Node) -> None:
        kind = self._attr_kind(a, what, node)
        if kind == "tuple":
            # Tree ensembles carry lists of 10^5-10^6 numbers: decide plain lists by their
            # element types (a C-level pass) before checking element by element; a long one
            # once per process (the clones of a graph share their attribute values)
            if _PLAIN.get(id(a)) is a:
                return
            if set(map(type, a)) in ({int}, {float}, {str}):
                if len(a) >= 4096:
                    if len(_PLAIN) > 64:
                        _PLAIN.clear()
                    _PLAIN[id(a)] = a
                return
            kinds = {self._attr_kind(x, what, node) for x in a}
            if "tuple" in kinds or "ref" in kinds or len(kinds) > 1:
                raise ModelError(f"{what} is a tuple mixing {sorted(kinds)}; a list attribute "
                                 "holds values of one kind (ints, floats, strings, tensors, "
                                 "graphs or types)", where=node)
            for x in a:
                if isinstance(x, Graph):
                    self._region(x, what, node)
        elif kind == "graph":
            self._region(a, what, node)

    def _region(self, g: Graph, what: str, node: Node) -> None:
        """Verify a subgraph; an error inside it also names the subgraph and its owner."""
        try:
            self._graph(g, nested=True)
        except OnnxJitError as e:
            raise add_context(e, f"subgraph '{g.name}' ({what} of {node.describe()})") from None

    def _attr_kind(self, a: Any, what: str, node: Node) -> str:
        if isinstance(a, bool):
            raise ModelError(f"{what} is a bool; ONNX attributes have no bool kind (use 0/1)",
                             where=node)
        if isinstance(a, int):
            return "int"
        if isinstance(a, float):
            return "float"
        if isinstance(a, (str, bytes)):
            return "string"
        if isinstance(a, np.ndarray):
            if _dtype_of(a) is None:
                raise ModelError(f"{what} is a tensor of numpy dtype {a.dtype}, which is no "
                                 "ONNX element type", where=node)
            return "tensor"
        if isinstance(a, Graph):
            return "graph"
        if isinstance(a, TypeAttr):
            _check_type(a.type, f"{node.describe()}: {what}")
            return "type"
        if isinstance(a, AttrRef):
            f = self.function
            if f is None:
                raise ModelError(f"{what} refers to '@{a.name}', but only nodes inside a function "
                                 "body may refer to a function's attributes", where=node)
            if a.name not in f.attributes:
                raise ModelError(f"{what} refers to '@{a.name}', which is not an attribute of "
                                 f"{_fn_desc(f)} (has {list(f.attributes)})", where=node)
            if a.kind not in ATTR_REF_KINDS:
                raise ModelError(f"{what} refers to '@{a.name}' with unknown kind {a.kind!r}",
                                 where=node)
            return "ref"
        if isinstance(a, tuple):
            return "tuple"
        raise ModelError(f"{what} has a value of type {type(a).__name__}; expected int, float, "
                         "str, bytes, ndarray, TypeAttr, AttrRef, Graph or a tuple of one kind",
                         where=node)


# --------------------------------------------------------------------------- types and constants


def _dtype_of(arr: np.ndarray) -> DType | None:
    try:
        return DType.from_numpy(arr.dtype)
    except (KeyError, TypeError):
        return None


def _check_const(v: Value, what: str) -> None:
    arr = v.const
    if not isinstance(arr, np.ndarray):
        raise ModelError(f"{what} ({v.describe()}) has a constant of type {type(arr).__name__}; "
                         "expected an ndarray")
    if _dtype_of(arr) is None:
        raise ModelError(f"{what} ({v.describe()}) has a constant of numpy dtype {arr.dtype}, "
                         "which is no ONNX element type")
    t = v.type
    if isinstance(t, TensorType):
        try:
            want = t.dtype.numpy
        except KeyError:
            want = None
        shape_ok = t.shape is None or (len(t.shape) == arr.ndim and all(
            not isinstance(d, int) or d == n for d, n in zip(t.shape, arr.shape)))
        if (want is not None and want != arr.dtype) or not shape_ok:
            raise ModelError(f"{what} ({v.describe()}) has type {t} but its constant is "
                             f"{arr.dtype}{list(arr.shape)}")


def _check_type(t: Any, what: str) -> None:
    if isinstance(t, (TensorType, SparseTensorType)):
        if not isinstance(t.dtype, DType):
            raise ModelError(f"{what} has element type {t.dtype!r}; expected a DType")
        if t.shape is not None:
            if not isinstance(t.shape, tuple):
                raise ModelError(f"{what} has a shape of type {type(t.shape).__name__}; "
                                 "expected a tuple of dims")
            for d in t.shape:
                _check_dim(d, what)
    elif isinstance(t, (SequenceType, OptionalType)):
        if t.elem is not None:
            _check_type(t.elem, what)
    elif isinstance(t, MapType):
        if not isinstance(t.key, DType) or not (t.key.is_int or t.key == DType.STRING):
            raise ModelError(f"{what} is a map whose key type {t.key!r} is not an integer or "
                             "string element type")
        _check_type(t.value, what)
    else:
        raise ModelError(f"{what} has type {t!r}; expected a TensorType, SequenceType, "
                         "OptionalType, MapType or SparseTensorType")


def _check_dim(d: Any, what: str) -> None:
    if d is None:
        return
    if isinstance(d, bool) or not isinstance(d, (int, Sym)):
        raise ModelError(f"{what} has a dim {d!r} of type {type(d).__name__}; expected an int, "
                         "a Sym or None")
    if isinstance(d, int):
        if d < 0:
            raise ModelError(f"{what} has a negative dim {d}")
        return
    if d.op == "var":
        if len(d.args) != 1 or not isinstance(d.args[0], str) or not d.args[0]:
            raise ModelError(f"{what} has a symbolic dim with bad name {d.args!r}")
        return
    if d.op not in _SYM_ARITY or not isinstance(d.args, tuple):
        raise ModelError(f"{what} has a symbolic dim with unknown operation {d.op!r}")
    arity = _SYM_ARITY[d.op]
    if len(d.args) < 2 or (arity is not None and len(d.args) != arity):
        raise ModelError(f"{what} has a symbolic '{d.op}' with {len(d.args)} operands")
    for a in d.args:
        if isinstance(a, bool) or not isinstance(a, (int, Sym)):
            raise ModelError(f"{what} has a symbolic dim operand {a!r}; expected an int or Sym")
        if isinstance(a, Sym):
            _check_dim(a, what)
