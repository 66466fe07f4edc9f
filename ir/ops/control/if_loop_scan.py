"""Control flow: If, Loop and Scan.

Shape inference runs through the regions: a branch or body gets its input types (Loop: the
iteration number, the condition and the carried values; Scan: the states and one slice of each
scan input), its Constant nodes become region initializers, every node inside is inferred with
its op's rule, and the op's outputs take the
region outputs' types. A Loop whose carried shapes change per iteration is inferred to a fixed
point: the dims that differ between the carried input and the body's result become unknown.
An If whose branches produce different shapes gets the dims they share.

Execution: a Loop or Scan whose carried shapes are fixed and whose body compiles natively is
lowered into one serial loop over its iterations (`ir.ops.control.native_loop`), compiled with the
nodes around it. An If whose condition is known when a stage of the run-time shape phase
(`onnxjit.staged`) reaches it is replaced by the selected branch, compiled natively with what
follows; a short Loop or Scan of the staged phase is unrolled (`ir.ops.control.unroll`).
Otherwise the node runs on the host: its region is run by the interpreter of `ir.host_eval`
once per branch taken or iteration, each iteration reading the carried values, the slices of
the scan inputs and the outer values in scope.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ir.host_eval import HOST, Lookup, const_lookup, run_graph
from onnxjit.ir.opdef import op
from onnxjit.ir.types import DType, OptionalType, SequenceType, TensorType, ValueType

# ------------------------------------------------------------------------------ inference


def infer_graph(graph: Graph, input_types: list[ValueType | None]) -> list[ValueType | None]:
    """Give a region's inputs these types (where known), infer its nodes, return output types."""
    from onnxjit.ir.infer import infer_node

    _fold_constant_nodes(graph)
    for v, t in zip(graph.inputs, input_types):
        if t is not None:
            v.type = t
    for n in graph.nodes:
        infer_node(n)
    return [v.type for v in graph.outputs]


def _fold_constant_nodes(graph: Graph) -> None:
    """A region's numeric Constant nodes become its initializers (constant folding does not
    enter regions): the rules that read operand values (a Reshape's target, a Slice's
    starts) then see them, so the region's shapes are as static as at top level."""
    from onnxjit.ir.graph import replace_uses
    from onnxjit.ir.opdef import resolve

    keep = []
    for n in graph.nodes:
        d = resolve(n) if n.op == "Constant" and n.domain in ("", "ai.onnx") else None
        arr = None
        if d is not None and d.evaluate is not None and not n.inputs and len(n.outputs) == 1:
            try:
                arr = np.asarray(d.evaluate(n, [])[0])
            except Exception:  # an invalid attribute: inference reports it
                arr = None
        if arr is None or arr.dtype.kind not in "biuf":
            keep.append(n)
            continue
        out = n.outputs[0]
        v = Value(TensorType(DType.from_numpy(arr.dtype), tuple(arr.shape)), out.name, None,
                  arr)
        graph.initializers.append(v)
        replace_uses(graph, out, v)
    graph.nodes = keep


def _reset(graph: Graph) -> None:
    # A re-inference with more general input types must not keep the dims of the last round.
    for n in graph.walk():
        for v in n.outputs:
            v.type = None


def join(a: ValueType | None, b: ValueType | None) -> ValueType | None:
    """The most precise type covering both: differing dims unknown, differing ranks unknown."""
    if a is None or b is None:
        return None
    if a == b:
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType) and a.dtype == b.dtype:
        if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
            return TensorType(a.dtype, None)
        return TensorType(a.dtype, tuple(x if x == y else None for x, y in zip(a.shape, b.shape)))
    if isinstance(a, SequenceType) and isinstance(b, SequenceType):
        return SequenceType(join(a.elem, b.elem))
    if isinstance(a, OptionalType) and isinstance(b, OptionalType):
        return OptionalType(join(a.elem, b.elem))
    return a


def _check_outputs(node: Node, g: Graph, n: int, what: str) -> None:
    if len(g.outputs) != n:
        raise ModelError(f"subgraph '{g.name}' ({what}) has {len(g.outputs)} outputs; "
                         f"expected {n}", where=node)


def _region(node: Node, name: str) -> Graph:
    g = node.attr(name)
    if not isinstance(g, Graph):
        raise ModelError(f"attribute '{name}' must be a graph", where=node)
    return g


# ------------------------------------------------------------------------------------- If


def _infer_if(node: Node) -> list[ValueType | None]:
    then_g, else_g = _region(node, "then_branch"), _region(node, "else_branch")
    n = len(node.outputs)
    _check_outputs(node, then_g, n, "then_branch of If")
    _check_outputs(node, else_g, n, "else_branch of If")
    ta = _infer_branch(then_g, n)
    tb = _infer_branch(else_g, n)
    if ta is None or tb is None:
        return (ta or tb or [None] * n)
    return [join(a, b) for a, b in zip(ta, tb)]


def _infer_branch(g: Graph, n: int) -> list[ValueType | None] | None:
    # The branch not taken may be invalid for these shapes (models guard a rank-2 path and a
    # rank-3 path with one If): its types stay unknown; the taken one is checked when it runs.
    try:
        return infer_graph(g, [])
    except ModelError:
        _reset(g)
        return None


def _eval_if(node: Node, ins: list[Any], lookup: Lookup) -> list[Any]:
    cond = np.asarray(ins[0])
    if cond.size != 1:
        raise ModelError(f"If condition has {cond.size} elements; expected one", where=node)
    g = _region(node, "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch")
    return run_graph(g, [], lookup)


op("If", (1, 11, 13, 16, 19, 21, 23, 24, 25), infer=_infer_if,
   evaluate=lambda node, ins: _eval_if(node, ins, const_lookup))
HOST[("", "If")] = _eval_if


# ----------------------------------------------------------------------------------- Loop


def _infer_loop(node: Node) -> list[ValueType | None]:
    body = _region(node, "body")
    carried = node.inputs[2:]
    n_car = len(carried)
    if len(body.inputs) != n_car + 2:
        raise ModelError(f"subgraph '{body.name}' (body of Loop) has {len(body.inputs)} inputs; "
                         f"expected {n_car + 2} (iteration number, condition, carried)",
                         where=node)
    if len(body.outputs) < n_car + 1 or len(node.outputs) != len(body.outputs) - 1:
        raise ModelError(f"subgraph '{body.name}' (body of Loop) has {len(body.outputs)} outputs"
                         f" for {len(node.outputs)} Loop outputs and {n_car} carried values",
                         where=node)
    types = [v.type if v is not None else None for v in carried]
    for _ in range(4):
        outs = infer_graph(body, [TensorType(DType.INT64, ()), TensorType(DType.BOOL, ())]
                           + types)
        new = [join(t, o) if t is not None else o for t, o in zip(types, outs[1:1 + n_car])]
        if new == types:
            break
        types = new
        _reset(body)
    trip = None
    m = node.input(0)
    if m is not None and m.const is not None and node.input(1) is None:
        trip = int(np.asarray(m.const).reshape(-1)[0])
    scans = []
    for t in outs[1 + n_car:]:
        if isinstance(t, TensorType):
            t = TensorType(t.dtype, None if t.shape is None else (trip, *t.shape))
        scans.append(t)
    return types + scans


def _stack(parts: list[np.ndarray], t: ValueType | None, node: Node) -> np.ndarray:
    if parts:
        if len({p.shape for p in parts}) > 1:
            raise ModelError("a scan output changes shape between iterations: "
                             f"{sorted({p.shape for p in parts})}", where=node)
        return np.stack(parts)
    if isinstance(t, TensorType):
        shape = t.shape if t.shape is not None and all(isinstance(d, int) for d in t.shape) \
            else ()
        return np.zeros((0, *shape), t.dtype.numpy)
    return np.zeros((0,), np.float32)


def _eval_loop(node: Node, ins: list[Any], lookup: Lookup) -> list[Any]:
    body = _region(node, "body")
    m, cond = ins[0], ins[1]
    state = list(ins[2:])
    n_car = len(state)
    trip = None if m is None else int(np.asarray(m).reshape(-1)[0])
    go = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    scans: list[list[np.ndarray]] = [[] for _ in body.outputs[1 + n_car:]]
    i = 0
    while go and (trip is None or i < trip):
        outs = run_graph(body, [np.array(i, np.int64), np.array(go)] + state, lookup)
        go = bool(np.asarray(outs[0]).reshape(-1)[0])
        state = outs[1:1 + n_car]
        for k, x in enumerate(outs[1 + n_car:]):
            scans[k].append(np.asarray(x))
        i += 1
    return state + [_stack(p, v.type, node)
                    for p, v in zip(scans, body.outputs[1 + n_car:])]


def _lower_loop(ctx: Any, node: Node) -> None:
    from onnxjit.ir.ops.control.native_loop import lower_loop

    lower_loop(ctx, node)


def _lower_scan(ctx: Any, node: Node) -> None:
    from onnxjit.ir.ops.control.native_loop import lower_scan

    lower_scan(ctx, node)


op("Loop", (1, 11, 13, 16, 19, 21, 23, 24, 25), infer=_infer_loop, lower=_lower_loop,
   evaluate=lambda node, ins: _eval_loop(node, ins, const_lookup))
HOST[("", "Loop")] = _eval_loop


# ----------------------------------------------------------------------------------- Scan


def _scan_attrs(node: Node, n_scan: int, n_out: int) -> tuple[list, list, list, list]:
    def ints(name: str, n: int, default: int) -> list[int]:
        v = node.attr(name)
        vals = [default] * n if v is None else [int(x) for x in v]
        if len(vals) != n:
            raise ModelError(f"attribute '{name}' has {len(vals)} entries; expected {n}",
                             where=node)
        return vals
    in_dirs = ints("scan_input_directions" if node.version >= 9 else "directions", n_scan, 0)
    return (in_dirs, ints("scan_input_axes", n_scan, 0), ints("scan_output_directions", n_out, 0),
            ints("scan_output_axes", n_out, 0))


def _layout(node: Node) -> tuple[int, int, int]:
    """(index of the first state input, number of states, number of scan inputs)."""
    first = 1 if node.version < 9 else 0  # opset 8: an optional sequence_lens comes first
    n_scan = int(node.attr("num_scan_inputs", 0))
    n_state = len(node.inputs) - first - n_scan
    if n_scan < 1 or n_state < 0:
        raise ModelError(f"Scan has {len(node.inputs)} inputs and num_scan_inputs={n_scan}",
                         where=node)
    return first, n_state, n_scan


def _infer_scan(node: Node) -> list[ValueType | None]:
    body = _region(node, "body")
    first, n_state, n_scan = _layout(node)
    if len(body.inputs) != n_state + n_scan:
        raise ModelError(f"subgraph '{body.name}' (body of Scan) has {len(body.inputs)} inputs;"
                         f" expected {n_state + n_scan}", where=node)
    _check_outputs(node, body, len(node.outputs), "body of Scan")
    batch = node.version < 9
    _, in_axes, _, out_axes = _scan_attrs(node, n_scan, len(node.outputs) - n_state)
    types: list[ValueType | None] = []
    length = None
    for k, v in enumerate(node.inputs[first:]):
        t = v.type if v is not None else None
        if isinstance(t, TensorType) and t.shape is not None and batch:
            t = TensorType(t.dtype, t.shape[1:])
        if k >= n_state and isinstance(t, TensorType) and t.shape is not None:
            ax = in_axes[k - n_state] % max(len(t.shape), 1)
            length = length if length is not None else t.shape[ax]
            t = TensorType(t.dtype, t.shape[:ax] + t.shape[ax + 1:])
        types.append(t)
    outs = infer_graph(body, types)
    result = list(outs[:n_state])
    for k, t in enumerate(outs[n_state:]):
        if isinstance(t, TensorType) and t.shape is not None:
            ax = out_axes[k] % (len(t.shape) + 1)
            t = TensorType(t.dtype, t.shape[:ax] + (length,) + t.shape[ax:])
        result.append(t)
    if batch:
        lead = node.inputs[first].type if node.inputs[first] is not None else None
        b = lead.shape[0] if isinstance(lead, TensorType) and lead.shape else None
        result = [TensorType(t.dtype, (b, *t.shape)) if isinstance(t, TensorType)
                  and t.shape is not None else t for t in result]
    return result


def _scan_once(node: Node, body: Graph, states: list, xs: list[np.ndarray], lookup: Lookup,
               n_out: int) -> list:
    n_scan = len(xs)
    in_dirs, in_axes, out_dirs, out_axes = _scan_attrs(node, n_scan, n_out)
    xs = [np.moveaxis(x, a % x.ndim, 0) for x, a in zip(xs, in_axes)]
    length = xs[0].shape[0] if xs else 0
    parts: list[list[np.ndarray]] = [[] for _ in range(n_out)]
    for i in range(length):
        slices = [x[length - 1 - i if d else i] for x, d in zip(xs, in_dirs)]
        outs = run_graph(body, list(states) + slices, lookup)
        states = outs[:len(states)]
        for k, y in enumerate(outs[len(states):]):
            parts[k].append(np.asarray(y))
    result = list(states)
    for k, (p, v) in enumerate(zip(parts, body.outputs[len(states):])):
        if out_dirs[k]:
            p = p[::-1]
        y = _stack(p, v.type, node)
        result.append(np.moveaxis(y, 0, out_axes[k] % y.ndim))
    return result


def _eval_scan(node: Node, ins: list[Any], lookup: Lookup) -> list[Any]:
    body = _region(node, "body")
    first, n_state, n_scan = _layout(node)
    states = ins[first:first + n_state]
    xs = [np.asarray(x) for x in ins[first + n_state:]]
    n_out = len(node.outputs) - n_state
    if node.version >= 9:
        return _scan_once(node, body, states, xs, lookup, n_out)
    lens = ins[0]
    per_batch = []
    for b in range(xs[0].shape[0]):
        n = xs[0].shape[1] if lens is None else int(np.asarray(lens)[b])
        per_batch.append(_scan_once(node, body, [s[b] for s in states],
                                    [x[b, :n] for x in xs], lookup, n_out))
    return [np.stack([r[k] for r in per_batch]) for k in range(len(node.outputs))]


op("Scan", (8, 9, 11, 16, 19, 21, 23, 24, 25), infer=_infer_scan, lower=_lower_scan,
   evaluate=lambda node, ins: _eval_scan(node, ins, const_lookup))
HOST[("", "Scan")] = _eval_scan
