"""Localize a failing fuzz case and name the known bug it hits, if any.

Algorithm:
1. `first_failure`: re-judge the case with each node output in turn as the model's only
   output (graph order); the first value not judged pass is where onnxjit goes wrong, and its
   node is the suspect.
2. `known_bug`: a failure is put down to a bug being fixed on another branch only when a
   precise test says so: for the overridable initializers, the case passes once no call
   overrides them (or then fails of another known bug); otherwise the suspect node must match
   a pattern of `KNOWN` (op, and the attribute, dtype or operand condition of the report).
   Anything else is a new failure.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from fuzz_oracle import judge
from onnx import helper, numpy_helper

OK = ("pass", "unsupported", "precision", "disagree", "noref", "unconfirmed")


def first_failure(case):
    """(node, verdict) of the first value onnxjit gets wrong, or (None, None)."""
    g = case.model.graph
    inputs = {i.name for i in g.input}
    inferred = onnx.shape_inference.infer_shapes(case.model)
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(inferred.graph.value_info) + list(g.output)}
    for node in g.node:
        for name in node.output:
            if name not in case.dims or name in inputs or name not in types:
                continue
            m, feeds = _prefix(case, name, types[name])
            spec = [[tuple(d[k] for d in case.dims[name])] for k in range(len(case.feeds))]
            v = judge(m, feeds, case.symbolic, spec)
            if v.status not in OK:
                return node, v
    return None, None


def _prefix(case, name: str, dtype: int):
    """The model cut down to the nodes `name` depends on, with `name` as its output, and the
    feeds of the graph inputs it keeps."""
    g = case.model.graph
    need, nodes = {name}, []
    for node in reversed(g.node):
        if need & set(node.output):
            nodes.append(node)
            need |= set(node.input)
    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    del m.graph.node[:], m.graph.output[:]
    m.graph.node.extend(reversed(nodes))
    keep = [i for i in g.input if i.name in need]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    inits = [t for t in g.initializer if t.name in need]
    del m.graph.initializer[:]
    m.graph.initializer.extend(inits)
    m.graph.output.append(helper.make_tensor_value_info(
        name, dtype, [d[0] if len(set(d)) == 1 else f"o{i}"
                      for i, d in enumerate(case.dims[name])]))
    names = {i.name for i in keep}
    return m, [{k: v for k, v in f.items() if k in names} for f in case.feeds]


def _consts(case) -> dict:
    out = {t.name: numpy_helper.to_array(t) for t in case.model.graph.initializer}
    for n in case.model.graph.node:
        if n.op_type == "Constant":
            a = n.attribute[0]
            v = helper.get_attribute_value(a)
            out[n.output[0]] = numpy_helper.to_array(v) if a.name == "value" else np.array(v)
    return out


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _slice_neg_start(case, node) -> bool:
    c = _consts(case)
    if len(node.input) < 5 or node.input[4] not in c or node.input[1] not in c:
        return False
    axes = c.get(node.input[3], range(len(c[node.input[1]]))) if node.input[3] else \
        range(len(c[node.input[1]]))
    dims = case.dims.get(node.input[0])
    return any(step < 0 and start < -min(dims[a]) for a, start, step in
               zip(axes, c[node.input[1]], c[node.input[4]])) if dims else False


def _folded(case, name: str) -> bool:
    """Whether the value `name` depends on no graph input (so onnxjit folds it)."""
    g = case.model.graph
    producer = {o: n for n in g.node for o in n.output}
    inputs = {i.name for i in g.input}
    todo, seen = [name], set()
    while todo:
        v = todo.pop()
        if v in inputs:
            return False
        if v in seen or v not in producer:
            continue
        seen.add(v)
        todo += list(producer[v].input)
    return True


def _const_operand(case, node) -> bool:
    return _folded(case, node.input[0])


def _empty_const(case, node) -> bool:
    dims = case.dims.get(node.input[0])
    return bool(dims) and any(0 in d for d in dims) and _folded(case, node.input[0])


def _symbolic(case, node) -> bool:
    return any(len(set(d)) > 1 for d in case.dims.get(node.input[0], []))


def _f16(case, node) -> bool:
    inferred = onnx.shape_inference.infer_shapes(case.model)
    for v in list(inferred.graph.value_info) + list(case.model.graph.input):
        if v.name == node.input[0]:
            return v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    return False


OVERRIDE = "wt_fold: overridable initializer ignored"
MATH = "wt_math: Sin/Cos/Tan of large args, Cosh/Sinh overflow near 89, Acosh x < -4096"
KNOWN = [
    ({"Sin", "Cos", "Tan", "Cosh", "Sinh", "Acosh"}, lambda c, n: True, MATH),
    ({"Slice"}, _slice_neg_start, "wt_fold: Slice negative step with start < -dim"),
    ({"GatherElements"}, _const_operand, "wt_fold: GatherElements folded with wrong shape"),
    ({"ConvTranspose"}, lambda c, n: _attrs(n).get("auto_pad", b"NOTSET") != b"NOTSET" and
     _symbolic(c, n), "wt_fold: ConvTranspose SAME_* with a symbolic spatial dim"),
    # LpPool and AveragePool fold through MaxPool's window code
    ({"MaxPool", "AveragePool", "LpPool", "CumSum"}, _empty_const,
     "wt_fold: MaxPool/CumSum folding of empty constants"),
    # the fix computes every float16 reduction in f32; the global pools lower as reductions
    ({"ReduceL2", "ReduceL1", "ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceLogSum",
      "ReduceLogSumExp", "ReduceProd", "GlobalAveragePool", "GlobalLpPool"}, _f16,
     "wt_fold: ReduceL2 float16 overflow (float16 reductions in f32)"),
]


def known_bug(case, verdict) -> str | None:
    """The known bug (branch: description) that explains a failing case, or None."""
    overridden = {i.name for i in case.model.graph.input} & \
        {t.name for t in case.model.graph.initializer}
    if overridden and any(overridden & set(f) for f in case.feeds):
        # the same calls without the overrides must pass, or fail of another known bug
        feeds = [{k: v for k, v in f.items() if k not in overridden} for f in case.feeds]
        rest = dataclasses.replace(case, feeds=feeds)
        if judge(case.model, feeds, case.symbolic, case.spec_shapes()).status in OK:
            return OVERRIDE
        other = known_bug(rest, None)
        return f"{OVERRIDE}; {other}" if other else None
    node, v = first_failure(case)
    if node is None:
        return None
    for ops, test, what in KNOWN:
        if node.op_type in ops and test(case, node):
            return what
    return None
