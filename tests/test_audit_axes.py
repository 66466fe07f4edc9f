"""Audit: negative axes, for every registered op (issue 3).

Algorithm:
1. From the schemas, find each op's axis parameters: attributes or inputs named `axis`, `axes`,
   `*_axis`, `*_axes` or `perm` (not the flags `new_axis`/`noop_with_empty_axes`). A version
   accepts negative values when a parameter's doc says so (`NEG_DOC`: "Negative value ...",
   a range starting at -r, "-1 means ...", a negative default).
2. Derived cases (metamorphic): for each such (op, version), take the backend suite's node
   cases whose node is valid at that version (the onnx checker with full shape inference
   decides) and rewrite every axis value `a` in [0, r) to `a - r`, where r is the rank of the
   tensor the axis indexes: the output for Unsqueeze and OneHot (they index the result), input
   0 otherwise. The rewritten model must give the backend case's own expected outputs at its
   own opset, and onnx.reference's outputs for the original model at an older retargeted
   opset (old versions can differ in semantics, e.g. Softmax's 2-D coercion before 13).
   Ops documenting only -1 (LpNormalization, OneHot-9) rewrite only the last axis.
3. Hand cases where no backend case reaches (Scan's per-input axes, sequence ops).
4. Out-of-range axes (-r-1 or r) raise ModelError naming the node at compile time, or an
   InputError at call time when the axes arrive in a run-time input.
5. Completeness: every (op, version) accepting negatives has a case; every other op is in
   `EXEMPT`, derived from the schemas, with the reason.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from audit_axes_cases import (
    EXEMPT,
    HAND,
    MAX_CASES,
    NOT_DERIVED,
    OUT_OF_RANGE,
    RANK_FROM_OUTPUT,
    axis_params,
    neg_versions,
    only_last,
)
from onnx import helper, numpy_helper
from op_audit import assert_same, node_cases, reference, registered_ops, schema, with_opset

import onnxjit
from onnxjit.errors import ModelError

# ------------------------------------------------------------------ derived cases

def _native_version(op: str, model: onnx.ModelProto) -> int:
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return max(v for v in registered_ops()[op] if v <= opset)


def _valid_at(model: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception:  # noqa: BLE001 -- any checker complaint means "not this version's form"
        return False
    return True


def _feeds(model: onnx.ModelProto, inputs: list) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    return dict(zip([i.name for i in model.graph.input if i.name not in inits], inputs))


def _constant(model: onnx.ModelProto, feeds: dict, name: str) -> np.ndarray | None:
    if name in feeds:
        return np.asarray(feeds[name])
    init = next((t for t in model.graph.initializer if t.name == name), None)
    return None if init is None else numpy_helper.to_array(init)


def _retarget(model: onnx.ModelProto, feeds: dict, op: str, v: int):
    """The case at opset v, with axes that v takes as an attribute moved there from an input
    (Reduce*, Squeeze and Unsqueeze made axes an input in 13/18); None if impossible."""
    m = with_opset(model, v)
    feeds = dict(feeds)
    node = m.graph.node[0]
    s = schema(op, v)
    for name in ("axes", "axis"):
        if name not in s.attributes or any(i.name == name for i in s.inputs):
            continue
        native = schema(op, _native_version(op, model))
        k = next((k for k, i in enumerate(native.inputs) if i.name == name), None)
        if k is None or k >= len(node.input) or not node.input[k]:
            continue
        value = _constant(m, feeds, node.input[k])
        if value is None or not value.size:
            return None
        src = node.input[k]
        del node.input[k:]
        feeds.pop(src, None)
        for coll in (m.graph.input, m.graph.initializer):
            for item in [x for x in coll if x.name == src]:
                coll.remove(item)
        node.attribute.append(helper.make_attribute(name, [int(a) for a in value.ravel()]))
    for at in list(node.attribute):
        if at.name == "noop_with_empty_axes" and at.name not in s.attributes:
            if at.i:
                return None
            node.attribute.remove(at)
    return m, feeds


def _rewrite(model: onnx.ModelProto, feeds: dict, outputs: list, op: str, v: int):
    """`model` with every axis a in [0, r) replaced by a - r (absent attributes with a
    nonnegative default made explicit first), and its feeds; None when nothing changed."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    feeds = dict(feeds)
    node = m.graph.node[0]
    inits = {t.name: t for t in m.graph.initializer}
    x0 = _constant(m, feeds, node.input[0])
    r = np.asarray(outputs[0]).ndim if op in RANK_FROM_OUTPUT else np.ndim(x0)
    changed = 0

    def neg(a: int) -> int:
        nonlocal changed
        ok = a == r - 1 if only_last(op, v) else 0 <= a < r
        changed += ok
        return a - r if ok else a

    s = schema(op, v)
    for kind, name, k in axis_params(op, v):
        if kind == "attr":
            default = s.attributes[name].default_value
            if (not any(at.name == name for at in node.attribute)
                    and default.type == onnx.AttributeProto.INT and default.i >= 0):
                node.attribute.append(helper.make_attribute(name, default.i))
            for at in node.attribute:
                if at.name == name and at.type == onnx.AttributeProto.INT:
                    at.i = neg(at.i)
                elif at.name == name and at.type == onnx.AttributeProto.INTS:
                    at.ints[:] = [neg(a) for a in at.ints]
        elif k < len(node.input) and node.input[k]:
            src = node.input[k]
            arr = _constant(m, feeds, src)
            if arr is None or not arr.size:
                continue
            new = np.vectorize(neg, otypes=[arr.dtype])(arr)
            if src in feeds:
                feeds[src] = new
            else:
                inits[src].CopyFrom(numpy_helper.from_array(new, src))
    return (m, feeds) if changed else None


@functools.cache
def derived_cases() -> tuple:
    """(id, op, version, model, feeds, expected, original model, original feeds) of every
    derived case; expected None means "onnx.reference on the original model"."""
    out = []
    for op in sorted(registered_ops()):
        if op in NOT_DERIVED:
            continue
        for v in neg_versions(op):
            n = 0
            for case in sorted(node_cases(op), key=lambda c: c.name):
                native = _native_version(op, case.model) == v
                # fewer retargeted cases: they exist for the version, not for variety
                if n == (MAX_CASES if native else 1):
                    break
                inputs, outputs = case.data_sets[0]
                feeds = _feeds(case.model, inputs)
                if native:
                    model = case.model
                else:
                    rt = _retarget(case.model, feeds, op, v)
                    if rt is None or not _valid_at(rt[0]):
                        continue
                    model, feeds = rt
                rw = _rewrite(model, feeds, outputs, op, v)
                if rw is None:
                    continue
                expected = list(outputs) if native else None
                out.append((f"{op}-v{v}-{case.name[5:]}", op, v, rw[0], rw[1], expected,
                            model, feeds))
                n += 1
    return tuple(out)


def _compare(got, expected, where: str) -> None:
    assert_same(got, expected, where, tol=(1e-3, 1e-5))


# onnx.reference computes these pre-13 versions with the 13 semantics (one axis instead of
# the 2-D coercion at `axis`): onnxruntime is the oracle there
REFERENCE_WRONG = {("Softmax", 11), ("LogSoftmax", 11), ("Hardmax", 11)}


def _oracle(model: onnx.ModelProto, feeds: dict, op: str, v: int) -> list:
    """onnx.reference; onnxruntime where the reference is wrong (`REFERENCE_WRONG`) or lacks
    the version (e.g. DequantizeLinear-13)."""
    if (op, v) not in REFERENCE_WRONG:
        try:
            return reference(model, feeds)
        except RuntimeError as e:
            if "No implementation" not in str(e):
                raise
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _run(model: onnx.ModelProto, feeds: dict) -> list:
    return onnxjit.compile(model, cache_dir=False).run(None, feeds)


def _derived_ids() -> list[str]:
    return [c[0] for c in derived_cases()]


@pytest.mark.parametrize("case_id", _derived_ids())
def test_negative_axis_matches_nonnegative(case_id):
    _, op, v, model, feeds, expected, original, orig_feeds = next(
        c for c in derived_cases() if c[0] == case_id)
    if expected is None:
        expected = _oracle(original, orig_feeds, op, v)
    _compare(_run(model, feeds), list(expected), "outputs")


@pytest.mark.parametrize("case_id", sorted(HAND))
def test_negative_axis_hand_cases(case_id):
    model, feeds, expected = HAND[case_id][2]()
    _compare(_run(model, feeds), list(expected), "outputs")


@pytest.mark.parametrize("case_id", sorted(OUT_OF_RANGE))
def test_out_of_range_axis_raises(case_id):
    build, error = OUT_OF_RANGE[case_id]
    model, feeds = build()
    with pytest.raises(error) as info:
        if error is ModelError:
            # static axes: rejected when compiling, before any call
            onnxjit.compile(model, cache_dir=False)
        else:
            onnxjit.compile(model, cache_dir=False).run(None, feeds)
    assert "bad_axis" in str(info.value)


# ------------------------------------------------------------------ completeness

def test_every_op_with_negative_axes_has_cases():
    covered = {(c[1], c[2]) for c in derived_cases()} | {(op, v) for op, v, _ in HAND.values()}
    missing = [(op, v) for op in registered_ops() for v in neg_versions(op)
               if (op, v) not in covered]
    assert not missing, f"(op, version) accepting negative axes without a case: {missing}"
    unaudited = [op for op in registered_ops() if not neg_versions(op) and op not in EXEMPT]
    assert not unaudited
    for op in EXEMPT:
        assert not neg_versions(op), f"{op} is exempt but documents negative axes"
