"""inline-functions: replace every call of a model-local function (FunctionProto) by its body.

A call is a node whose (domain, op) names a function of the model. Algorithm, per graph (the
main graph, then recursively every region, so calls inside If/Loop/Scan bodies are inlined):
1) walk the nodes; a call is expanded in place: its attribute values are bound (the call's own
   attributes, else the function's defaults; an attribute referenced with `@name` but bound
   to nothing is dropped from the body node, as the spec says);
2) the body is copied with its inputs mapped to the call's inputs (an omitted trailing input
   maps to "no input") and its outputs to the call's output values, so readers of the call
   need no rewrite; a body output that is an input or a constant goes through an Identity;
   regions inside the body are copied too, with their `@name` references bound;
3) the copied nodes go back onto the worklist, so nested calls expand; a chain longer than
   `MAX_DEPTH` is a recursive function (a ModelError naming the function).
The functions' own opset imports are merged into the model's (a node's version was resolved
against its function's imports by the importer). Afterwards the model holds no functions.
ONNX-defined function ops all have direct lowerings in the op table, so none is expanded here.
"""

from __future__ import annotations

from typing import Any

from onnxjit.errors import ModelError
from onnxjit.ir.graph import AttrRef, Function, Graph, Model, Node, Value
from onnxjit.passes import PassContext, PassResult

name = "inline-functions"
level = "graph"

#: Calls nested deeper than this are taken to be recursion (ONNX forbids recursive functions).
MAX_DEPTH = 64


def _bind_attrs(attrs: dict[str, Any], bound: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, a in attrs.items():
        if isinstance(a, AttrRef):
            if a.name in bound:
                out[k] = bound[a.name]
        else:
            out[k] = a
    return out


def _copy_graph(g: Graph, vmap: dict[Value, Value | None], bound: dict[str, Any]) -> Graph:
    """A copy of a region of a function body: fresh values, references bound."""
    local: dict[Value, Value | None] = dict(vmap)

    def fresh(v: Value) -> Value:
        nv = Value(v.type, v.name, None, v.const)
        local[v] = nv
        return nv

    inputs = [fresh(v) for v in g.inputs]
    inits = [fresh(v) for v in g.initializers]
    nodes = [_copy_node(n, local, bound, {}, "") for n in g.nodes]
    outputs = [local.get(v, v) for v in g.outputs]
    return Graph(nodes, inputs, outputs, inits, g.name, list(g.output_names or []), g.doc)


def _copy_node(n: Node, vmap: dict[Value, Value | None], bound: dict[str, Any],
               out_map: dict[Value, Value], prefix: str) -> Node:
    ins = [None if v is None else vmap.get(v, v) for v in n.inputs]
    attrs = {}
    for k, a in _bind_attrs(n.attrs, bound).items():
        if isinstance(a, Graph):
            a = _copy_graph(a, vmap, bound)
        elif isinstance(a, tuple) and any(isinstance(g, Graph) for g in a):
            a = tuple(_copy_graph(g, vmap, bound) if isinstance(g, Graph) else g for g in a)
        attrs[k] = a
    outs = []
    for v in n.outputs:
        nv = out_map.get(v) or Value(v.type, f"{prefix}{v.name}", None, v.const)
        vmap[v] = nv
        outs.append(nv)
    return Node(n.op, ins, outs, attrs, n.domain, n.version, f"{prefix}{n.name}")


def _expand(call: Node, f: Function, identity_version: int) -> list[Node]:
    body = f.body
    if len(call.inputs) > len(body.inputs):
        raise ModelError(f"the call passes {len(call.inputs)} inputs to function '{f.name}', "
                         f"which takes {len(body.inputs)}", where=call)
    if len(call.outputs) > len(body.outputs):
        raise ModelError(f"the call takes {len(call.outputs)} outputs from function "
                         f"'{f.name}', which has {len(body.outputs)}", where=call)
    bound = dict(f.attribute_defaults)
    bound.update({k: a for k, a in call.attrs.items() if k in f.attributes})
    vmap: dict[Value, Value | None] = {v: None for v in body.inputs}
    vmap.update(zip(body.inputs, call.inputs))
    produced = {v for n in body.nodes for v in n.outputs}
    out_map: dict[Value, Value] = {}
    forwards: list[tuple[Value, Value]] = []
    for src, dst in zip(body.outputs, call.outputs):
        if src in produced and src not in out_map:
            out_map[src] = dst
        else:  # an input, a constant, or a value returned twice
            forwards.append((src, dst))
    prefix = f"{call.name or f.name}/"
    nodes = [_copy_node(n, vmap, bound, out_map, prefix) for n in body.nodes]
    for src, dst in forwards:
        s = vmap.get(src, src)
        if s is None:
            raise ModelError(f"function '{f.name}' returns its input '{src.name}', which the "
                             "call omits", where=call)
        nodes.append(Node("Identity", [s], [dst], {}, "", identity_version, f"{prefix}forward"))
    return nodes


def _inline_graph(graph: Graph, table: dict[tuple[str, str], Function],
                  identity_version: int) -> bool:
    changed = False
    work = [(n, 0) for n in graph.nodes]
    out: list[Node] = []
    while work:
        node, depth = work.pop(0)
        f = table.get((node.domain, node.op))
        if f is None:
            for g in node.regions():
                changed |= _inline_graph(g, table, identity_version)
            out.append(node)
            continue
        if depth >= MAX_DEPTH:
            raise ModelError(f"function '{f.name}' calls itself (directly or through other "
                             f"functions) more than {MAX_DEPTH} levels deep", where=node)
        work[:0] = [(n, depth + 1) for n in _expand(node, f, identity_version)]
        changed = True
    graph.nodes = out
    return changed


def run(model: Model, ctx: PassContext) -> PassResult:
    if not model.functions:
        return PassResult(model, False)
    table: dict[tuple[str, str], Function] = {}
    for f in model.functions:
        # An overloaded function is called with the overload name unset only for the default.
        table.setdefault((f.domain, f.name), f)
    for f in model.functions:
        for domain, version in f.opset_imports.items():
            model.opset_imports.setdefault(domain, version)
    version = model.opset_imports.get("") or max(
        (f.opset_imports.get("", 0) for f in model.functions), default=0) or 13
    model.opset_imports.setdefault("", version)
    _inline_graph(model.graph, table, version)
    model.functions = []
    return PassResult(model, True)
