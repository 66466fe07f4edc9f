"""The host interpreter of the graph IR: runs nodes and regions with numpy.

Used by the run-time shape phase (`onnxjit.staged`) for nodes it cannot compile, and by the
control-flow ops (`control.if_loop_scan`) to run their regions. `evaluate_node` runs one node given
a lookup of the values in scope; `run_graph` runs a region node by node with a scope chained to the
enclosing one, so that a region reads outer values. Each node goes through its op's numpy `evaluate`
(elementwise ops through their scalar rule, as constant folding does), on a proxy node whose inputs
are constants holding the actual arrays and whose types are re-inferred: inside a region, operand
values and shapes are only known per iteration. Ops that exist only on the host (control flow;
sequences and optionals, whose values are Python lists or None) register their evaluation in `HOST`;
constant folding never calls those.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnxjit.errors import UnsupportedError
from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ir.opdef import Registry, ensure, resolve
from onnxjit.ir.types import DType, SequenceType, TensorType

#: (domain, op) -> host evaluation `fn(node, inputs, lookup) -> outputs` (lists, None allowed).
HOST: dict[tuple[str, str], Callable[[Node, list[Any], Callable[[Value], Any]], list[Any]]] = \
    Registry()
Lookup = Callable[[Value], Any]
#: (domain, op) of a HOST op -> whether a node of it compiles natively after all (Loop and Scan
#: of fixed shapes: `ops.control.native_loop` registers the test).
NATIVE_WHEN: dict[tuple[str, str], Callable[[Node], bool]] = Registry()


#: (domain, op) -> `prepare(node) -> step(inputs) -> outputs`: a HOST op that runs on every call
#: (a classifier's ZipMap) does its per-node work (attributes) once, in `prepare`.
PREPARE: dict[tuple[str, str], Callable[[Node], Callable[[list[Any]], list[Any]]]] = \
    Registry()


def host_op(name: str, domain: str = "") -> Callable:
    def deco(fn: Callable) -> Callable:
        HOST[(domain, name)] = fn
        return fn
    return deco


def host_prepare(name: str, domain: str = "") -> Callable:
    """Register `prepare(node) -> step(inputs)` for a HOST op (see `PREPARE`)."""
    def deco(fn: Callable) -> Callable:
        PREPARE[(domain, name)] = fn
        return fn
    return deco


def host_step(node: Node) -> Callable[[list[Any]], list[Any]] | None:
    """`step(inputs) -> outputs` for `node` with its attributes read once, or None: the op has
    no `prepare` (then `host_function`)."""
    _tables(node)
    prepare = PREPARE.get((node.domain if node.domain != "ai.onnx" else "", node.op))
    return None if prepare is None else prepare(node)


def _tables(node: Node) -> None:
    ensure(node.domain, node.op)  # the tables fill as the op's family registers


def is_host_only(node: Node) -> bool:
    """A node that must run on the host: a region op (but a Loop or Scan of fixed shapes that
    compiles natively), a host-table op, one that draws random numbers, or one whose inputs or
    outputs are
    sequences/optionals/maps or string tensors."""
    _tables(node)
    key = (node.domain if node.domain != "ai.onnx" else "", node.op)
    if key in HOST:
        native = NATIVE_WHEN.get(key)  # a Loop or Scan that compiles to a native loop
        return native is None or not native(node)
    from onnxjit.ir.opdef import lookup

    d = lookup(node.domain, node.op)
    if d is not None and d.draws is not None and d.draws(node):
        return True  # a fresh random draw at every call
    for v in list(node.inputs) + list(node.outputs):
        if v is not None and v.type is not None and (not isinstance(v.type, TensorType)
                                                     or v.type.dtype == DType.STRING):
            return True  # strings are numpy object arrays: never in native code
    return False


# ------------------------------------------------------------------------------- interpreter


def free_values(graph: Graph) -> list[Value]:
    """Values a region reads from enclosing scopes (its implicit inputs), in first-use order."""
    defined: set[Value] = set(graph.inputs) | set(graph.initializers)
    seen: dict[Value, None] = {}

    def use(v: Value | None) -> None:
        if v is not None and v not in defined:
            seen.setdefault(v)

    for n in graph.nodes:
        for v in n.inputs:
            use(v)
        for g in n.regions():
            for v in free_values(g):
                use(v)
        defined.update(n.outputs)
    for v in graph.outputs:
        use(v)
    return list(seen)


def implicit_inputs(node: Node) -> list[Value]:
    """The outer values a node's regions read."""
    out: dict[Value, None] = {}
    for g in node.regions():
        for v in free_values(g):
            out.setdefault(v)
    return list(out)


def host_function(node: Node) -> Callable | None:
    """The host table's function for `node` (`fn(node, inputs, lookup)`), or None: a caller
    running the same node on every call looks it up once."""
    _tables(node)
    return HOST.get((node.domain if node.domain != "ai.onnx" else "", node.op))


def evaluate_node(node: Node, lookup: Lookup) -> list[Any]:
    """Run one node on the host; `lookup(value)` gives the value of any input in scope."""
    ins = [None if v is None else lookup(v) for v in node.inputs]
    _tables(node)
    fn = HOST.get((node.domain if node.domain != "ai.onnx" else "", node.op))
    if fn is not None:
        return list(fn(node, ins, lookup))
    d = resolve(node)
    if d.evaluate is None and d.scalar is None:
        raise UnsupportedError("the op has no host evaluation (needed inside a control-flow "
                               "region or for a run-time shape phase)", where=node)
    proxy = _proxy(node, ins)
    if d.evaluate is not None:  # a sequence (ZipMap's maps) stays a list, as onnxruntime's
        return [o if isinstance(o, list) and _is_sequence(v) else np.asarray(o)
                for o, v in zip(d.evaluate(proxy, ins), node.outputs)]
    from onnxjit.ir.scalar_eval import evaluate_elementwise

    shape = np.broadcast_shapes(*(np.shape(a) for a in ins if a is not None))
    # evaluate_elementwise returns 0-d results as shape (1,) (np.ascontiguousarray).
    return [np.asarray(o).reshape(shape) for o in evaluate_elementwise(d, proxy, ins)]


def _is_sequence(v: Any) -> bool:
    return v is not None and isinstance(v.type, SequenceType)


def _proxy(node: Node, ins: list[Any]) -> Node:
    """A copy of `node` whose inputs are constants holding `ins`, inferred: op rules read
    operand values (`.const`) and types from the node, and inside a region those are only
    known per iteration. The region's own values are never mutated (calls may be concurrent)."""
    from onnxjit.ir.infer import infer_node

    vals: list[Value | None] = []
    for a in ins:
        if a is None:
            vals.append(None)
            continue
        a = np.asarray(a)
        vals.append(Value(TensorType(DType.from_numpy(a.dtype), tuple(a.shape)), const=a))
    outs = [Value(None, v.name) for v in node.outputs]
    proxy = Node(node.op, vals, outs, dict(node.attrs), node.domain, node.version, node.name)
    infer_node(proxy)
    return proxy


def run_graph(graph: Graph, args: list[Any], outer: Lookup) -> list[Any]:
    """Run a region with `args` bound to its inputs; outer values come from `outer`."""
    env: dict[Value, Any] = dict(zip(graph.inputs, args))

    def lookup(v: Value) -> Any:
        if v in env:
            return env[v]
        if v.const is not None and v.producer is None:
            return v.const
        return outer(v)

    for n in graph.nodes:
        outs = evaluate_node(n, lookup)
        env.update(zip(n.outputs, outs))
    return [lookup(v) for v in graph.outputs]


def const_lookup(v: Value) -> Any:
    if v.const is not None:
        return v.const
    raise UnsupportedError(f"{v.describe()} is not known at this point")
