"""Unrolling of Loop and Scan into straight-line graph nodes, for native compilation.

When a stage of the run-time shape phase (`onnxjit.staged`) reaches a Loop whose trip count it
knows (and whose condition cannot end it early), or a Scan (whose length is a static dim), with
at most `UNROLL_LIMIT` iterations, it replaces the node by one copy of the body per iteration:

    Loop:  carried_0 = initial values
           for i in 0..M-1: copy the body with (i, true, carried_i) bound to its inputs;
                            carried_{i+1} = the copy's carried outputs
           Loop outputs = Identity(carried_M), Concat(Unsqueeze(scan value of each copy))
    Scan:  the same with states, each scan input sliced by a Gather at index i (or L-1-i for a
           reverse direction) along its axis, and each scan output stacked along its axis
           (in reverse for a reverse direction).

Each copy is inferred on its own, so carried shapes may change from one iteration to the next,
and everything compiles natively with the nodes around the loop. Longer loops, zero-trip loops
and loops that may exit early run on the host interpreter instead (`ir.host_eval`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.ir.graph import Graph, Node, Value, clone_graph
from onnxjit.ir.types import DType, TensorType

#: Most iterations unrolled; longer loops run on the host interpreter.
UNROLL_LIMIT = 64


def _const(arr: np.ndarray, name: str, inits: list[Value]) -> Value:
    v = Value(TensorType(DType.from_numpy(arr.dtype), tuple(arr.shape)), name, None, arr)
    inits.append(v)
    return v


def _copy_body(body: Graph, args: list[Value], inits: list[Value], tag: str
               ) -> tuple[list[Node], list[Value]]:
    """One copy of a region with `args` bound to its inputs: (nodes, output values)."""
    vmap: dict[Value, Value] = dict(zip(body.inputs, args))
    for v in body.initializers:
        nv = Value(v.type, v.name, None, v.const)
        vmap[v] = nv
        inits.append(nv)
    nodes = []
    for n in body.nodes:
        ins = [None if v is None else vmap.get(v, v) for v in n.inputs]
        attrs = {k: clone_graph(a, vmap) if isinstance(a, Graph) else
                 tuple(clone_graph(g, vmap) if isinstance(g, Graph) else g for g in a)
                 if isinstance(a, tuple) else a for k, a in n.attrs.items()}
        outs = []
        for v in n.outputs:
            nv = Value(None, f"{v.name}{tag}")
            vmap[v] = nv
            outs.append(nv)
        nodes.append(Node(n.op, ins, outs, attrs, n.domain, n.version, f"{n.name}{tag}"))
    return nodes, [vmap.get(v, v) for v in body.outputs]


def _stack(parts: list[Value], axis: int, out: Value, version: int, inits: list[Value],
           tag: str) -> list[Node]:
    """Nodes computing `out` = the parts stacked along a new axis."""
    nodes = []
    ups = []
    for k, p in enumerate(parts):
        u = Value(None, f"{out.name}_part{k}{tag}")
        if version >= 13:
            axes = _const(np.array([axis], np.int64), f"{out.name}_axes", inits)
            nodes.append(Node("Unsqueeze", [p, axes], [u], {}, "", version))
        else:
            nodes.append(Node("Unsqueeze", [p], [u], {"axes": (axis,)}, "", version))
        ups.append(u)
    nodes.append(Node("Concat", ups, [out], {"axis": axis}, "", version))
    return nodes


def loop_unrollable(node: Node) -> bool:
    """A Loop whose iterations are fixed by its trip count: no condition that may end it early,
    tensors only."""
    body = node.attr("body")
    if not isinstance(body, Graph) or node.input(0) is None or len(body.inputs) < 2:
        return False
    cond = node.input(1)
    if cond is not None and (cond.const is None or not bool(np.asarray(cond.const).all())):
        return False
    out = body.outputs[0]
    forwards = out is body.inputs[1] or (
        out.producer is not None and out.producer.op == "Identity"
        and out.producer.inputs[0] is body.inputs[1])
    always = out.const is not None and out.producer is None and bool(np.asarray(out.const).all())
    if not (forwards or always):
        return False
    values = list(node.inputs[2:]) + list(node.outputs)
    return all(v is not None and isinstance(v.type, TensorType) for v in values)


def unroll_loop(node: Node, trip: int, inits: list[Value]) -> list[Node]:
    """The nodes replacing a Loop run `trip` (>= 1) times; they define the Loop's outputs."""
    body = node.attr("body")
    n_car = len(node.inputs) - 2
    state = list(node.inputs[2:])
    scans: list[list[Value]] = [[] for _ in node.outputs[n_car:]]
    nodes: list[Node] = []
    true = _const(np.array(True), "cond_true", inits)
    for i in range(trip):
        it = _const(np.array(i, np.int64), f"iter{i}", inits)
        copy, outs = _copy_body(body, [it, true, *state], inits, f"_it{i}")
        nodes += copy
        state = outs[1:1 + n_car]
        for k, v in enumerate(outs[1 + n_car:]):
            scans[k].append(v)
    for out, v in zip(node.outputs[:n_car], state):
        nodes.append(Node("Identity", [v], [out], {}, "", node.version))
    for out, parts in zip(node.outputs[n_car:], scans):
        nodes += _stack(parts, 0, out, node.version, inits, "")
    return nodes


def scan_length(node: Node) -> int | None:
    """The number of iterations of a Scan (opset 9+) when it can be unrolled, else None."""
    if node.version < 9 or not isinstance(node.attr("body"), Graph):
        return None
    n_scan = int(node.attr("num_scan_inputs", 0))
    n_state = len(node.inputs) - n_scan
    axes = node.attr("scan_input_axes") or (0,) * n_scan
    x = node.inputs[n_state] if n_scan >= 1 else None
    values = [v for v in node.inputs] + list(node.outputs)
    if x is None or not all(v is not None and isinstance(v.type, TensorType) for v in values):
        return None
    t = x.type
    if not t.is_static or not t.shape:
        return None
    return int(t.shape[int(axes[0]) % len(t.shape)])


def scan_layout(node: Node) -> tuple[int, int, int, Any, Any, Any, Any]:
    """A Scan's (n_scan, n_state, n_out, input directions, input axes, output directions,
    output axes), the attributes' defaults filled in."""
    n_scan = int(node.attr("num_scan_inputs"))
    n_state = len(node.inputs) - n_scan
    n_out = len(node.outputs) - n_state
    return (n_scan, n_state, n_out,
            node.attr("scan_input_directions") or (0,) * n_scan,
            node.attr("scan_input_axes") or (0,) * n_scan,
            node.attr("scan_output_directions") or (0,) * n_out,
            node.attr("scan_output_axes") or (0,) * n_out)


def unroll_scan(node: Node, length: int, inits: list[Value]) -> list[Node]:
    """The nodes replacing a Scan of `length` (>= 1) iterations; they define its outputs."""
    body = node.attr("body")
    n_scan, n_state, n_out, in_dirs, in_axes, out_dirs, out_axes = scan_layout(node)
    state = list(node.inputs[:n_state])
    scans: list[list[Value]] = [[] for _ in range(n_out)]
    nodes: list[Node] = []
    for i in range(length):
        slices = []
        for k, x in enumerate(node.inputs[n_state:]):
            at = length - 1 - i if in_dirs[k] else i
            idx = _const(np.array(at, np.int64), f"scan_index{at}", inits)
            s = Value(None, f"{x.name}_slice{i}")
            nodes.append(Node("Gather", [x, idx], [s], {"axis": int(in_axes[k])}, "",
                              node.version))
            slices.append(s)
        copy, outs = _copy_body(body, [*state, *slices], inits, f"_it{i}")
        nodes += copy
        state = outs[:n_state]
        for k, v in enumerate(outs[n_state:]):
            scans[k].append(v)
    for out, v in zip(node.outputs[:n_state], state):
        nodes.append(Node("Identity", [v], [out], {}, "", node.version))
    for k, (out, parts) in enumerate(zip(node.outputs[n_state:], scans)):
        parts = parts[::-1] if out_dirs[k] else parts
        nodes += _stack(parts, int(out_axes[k]), out, node.version, inits, "")
    return nodes
