"""Localize a failing fuzz case and name the known bug it hits, if any.

Algorithm:
1. `first_failure`: re-judge the case with each node output in turn as the model's only
   output (graph order); the first value not judged pass is where onnxjit goes wrong, and its
   node is the suspect. "unconfirmed" values (only one reference family ran, and onnxjit
   differs from it) pass unless the caller asks otherwise (`tools/fuzz.py --triage` does).
2. `known_bug`: a failure is put down to a bug being fixed on another branch only when its
   suspect node matches an entry of `KNOWN`: the op, and a test of the report's condition
   (attribute, dtype, constant or symbolic operand). Anything else is a new failure. The
   entries of issue 26 (overridable initializers, Slice clamping, GatherElements, ConvTranspose
   SAME, empty-constant folds, float16 reductions, Sinh/Cosh/Acosh/Sin/Cos/Tan) were removed
   when their fixes reached main; add one, with its reason, only while a fix is pending.
"""

from __future__ import annotations

import onnx
from fuzz_oracle import judge
from onnx import helper

OK = ("pass", "unsupported", "precision", "disagree", "noref", "unconfirmed")


def first_failure(case, ok: tuple = OK):
    """(node, verdict) of the first value onnxjit gets wrong (judged not in `ok`), or
    (None, None)."""
    g = case.model.graph
    inputs = {i.name for i in g.input}
    inferred = onnx.shape_inference.infer_shapes(case.model)
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(inferred.graph.value_info) + list(g.output)}
    for node in g.node:
        for name in node.output:
            if name in inputs or name not in types:
                continue
            m, feeds = _prefix(case, name, types[name])
            spec = [[tuple(d[k] for d in case.dims[name])] for k in range(len(case.feeds))] \
                if name in case.dims else None
            v = judge(m, feeds, case.symbolic, spec)
            if v.status not in ok:
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
    dims = case.dims.get(name)
    m.graph.output.append(helper.make_tensor_value_info(
        name, dtype, None if dims is None else [d[0] if len(set(d)) == 1 else f"o{i}"
                                                for i, d in enumerate(dims)]))
    names = {i.name for i in keep}
    return m, [{k: v for k, v in f.items() if k in names} for f in case.feeds]


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


#: (ops, test(case, node) -> bool, "branch: what") of bugs whose fix is pending elsewhere,
#: e.g. ({"ConvTranspose"}, lambda c, n: _attrs(n).get("auto_pad", b"NOTSET") != b"NOTSET",
#: "wt_fold: ConvTranspose SAME_* with a symbolic spatial dim")
KNOWN: list = []


def known_bug(case, verdict) -> str | None:
    """The known bug (branch: description) that explains a failing case, or None."""
    if not KNOWN:
        return None
    node, v = first_failure(case)
    if node is None:
        return None
    for ops, test, what in KNOWN:
        if node.op_type in ops and test(case, node):
            return what
    return None
