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
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from op_audit import node_cases, reference, registered_ops, schema, with_opset

import onnxjit
from onnxjit.errors import InputError, ModelError

AXIS_NAME = re.compile(r"^(axis|axes|perm|\w+_axis|\w+_axes)$")
NOT_AXES = {"noop_with_empty_axes", "new_axis"}
NEG_DOC = re.compile(r"[Nn]egative value|\[-r|-1 mean|Default is -2")
# the rank an axis indexes is the output's: the op inserts the indexed dimension
RANK_FROM_OUTPUT = {"Unsqueeze", "OneHot"}
# Scan's axes index each scan input/output separately: hand cases below
NOT_DERIVED = {"Scan"}
MAX_CASES = 2


def axis_params(op: str, v: int) -> list[tuple[str, str, int]]:
    """(kind, name, input index) of the axis parameters of `op` at version `v`."""
    s = schema(op, v)
    out = [("attr", a, -1) for a in s.attributes if AXIS_NAME.match(a) and a not in NOT_AXES]
    out += [("input", i.name, k) for k, i in enumerate(s.inputs)
            if AXIS_NAME.match(i.name) and i.name not in NOT_AXES]
    return out


def _doc(op: str, v: int, kind: str, name: str) -> str:
    s = schema(op, v)
    if kind == "attr":
        return s.attributes[name].description
    return next(i.description for i in s.inputs if i.name == name)


def neg_versions(op: str) -> tuple[int, ...]:
    """The registered versions of `op` whose schema documents negative axis values."""
    return tuple(v for v in registered_ops()[op]
                 if any(NEG_DOC.search(_doc(op, v, k, n)) for k, n, _ in axis_params(op, v)))


def _only_last(op: str, v: int) -> bool:
    # these docs name -1 ("the last axis") as the one negative value
    return op == "LpNormalization" or (op == "OneHot" and v < 11)


def _exempt() -> dict[str, str]:
    out = {}
    for op, vs in registered_ops().items():
        names = sorted({n for v in vs for _, n, _ in axis_params(op, v)})
        if not names:
            out[op] = "no attribute or input naming an axis in any registered schema"
        elif not neg_versions(op):
            out[op] = (f"{'/'.join(names)} accept no negative values: no registered version's "
                       "doc allows them (e.g. the legacy broadcast axis of opsets 1-6, Transpose's "
                       "perm, ReverseSequence's 0/1, Tile-1's axis, MeanVarianceNormalization)")
    return out


EXEMPT = _exempt()


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
        ok = a == r - 1 if _only_last(op, v) else 0 <= a < r
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
    if isinstance(expected, list):
        assert isinstance(got, (list, tuple)) and len(got) == len(expected), where
        for k, (g, e) in enumerate(zip(got, expected)):
            _compare(g, e, f"{where}[{k}]")
        return
    e = np.asarray(expected)
    g = np.asarray(got)
    assert g.dtype == e.dtype, f"{where}: dtype {g.dtype}, expected {e.dtype}"
    assert g.shape == e.shape, f"{where}: shape {g.shape}, expected {e.shape}"
    if e.dtype.kind in "fc":
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=1e-3,
                                   atol=1e-5, err_msg=where)
    else:
        np.testing.assert_array_equal(g, e, err_msg=where)


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
    got = _run(model, feeds)
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        _compare(g, e, f"output {k}")


# ------------------------------------------------------------------ hand cases

def _model(nodes, inputs, outputs, v: int, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", v)], ir_version=8)


def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


F = TensorProto.FLOAT
I64 = TensorProto.INT64
RNG = np.random.default_rng(3)
X234 = RNG.standard_normal((2, 3, 4)).astype(np.float32)


def _scan(v: int):
    # running sum over x's last axis: scan_input_axes=[-1] (x is rank 2), and the per-step
    # outputs stacked on the last axis: scan_output_axes=[-1] (the stacked output is rank 2)
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["s2"]), helper.make_node("Identity", ["s2"], ["o"])],
        "body", [_vi("s", F, [2]), _vi("xt", F, [2])], [_vi("s2", F, [2]), _vi("o", F, [2])])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1,
                            scan_input_axes=[-1], scan_output_axes=[-1], name="scan")
    m = _model([node], [_vi("s0", F, [2]), _vi("x", F, [2, 3])],
               [_vi("s", F, [2]), _vi("ys", F, [2, 3])], v)
    s0 = np.array([1.0, -1.0], np.float32)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    # numpy oracle: the scan is a cumulative sum along axis 1
    return m, {"s0": s0, "x": x}, [s0 + x.sum(1), s0[:, None] + np.cumsum(x, axis=1)]


def _concat_from_sequence(v: int, new_axis: int):
    # rank 3 elements: axis -1 is the last axis (new_axis=0) or a new last axis (new_axis=1,
    # accepted range [-r-1, r])
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["seq"]),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=-1, new_axis=new_axis,
                              name="cfs")]
    b = X234 + 1
    m = _model(nodes, [_vi("a", F, [2, 3, 4]), _vi("b", F, [2, 3, 4])],
               [_vi("y", F, ["d0", "d1", "d2"] + ["d3"] * new_axis)], v)
    expected = np.stack([X234, b], -1) if new_axis else np.concatenate([X234, b], -1)
    return m, {"a": X234, "b": b}, [expected]


def _scatter_11():
    # Scatter is deprecated at 11 (the onnx checker rejects it there) but onnxjit accepts
    # it with ScatterElements' semantics: numpy oracle
    data = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    upd = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    node = helper.make_node("Scatter", ["d", "i", "u"], ["y"], axis=-1, name="scatter")
    m = _model([node], [_vi("d", F, [3, 3]), _vi("i", I64, [2, 3]), _vi("u", F, [2, 3])],
               [_vi("y", F, [3, 3])], 11)
    expected = data.copy()
    for r in range(2):
        for c in range(3):
            expected[r, idx[r, c]] = upd[r, c]
    return m, {"d": data, "i": idx, "u": upd}, [expected]


def _tensor_scatter(axis: int):
    # a rank-4 cache (batch, heads, seq, dim): the sequence axis 2 named as -2
    cache = RNG.standard_normal((2, 2, 5, 3)).astype(np.float32)
    upd = RNG.standard_normal((2, 2, 2, 3)).astype(np.float32)
    idx = np.array([1, 3], np.int64)
    node = helper.make_node("TensorScatter", ["c", "u", "i"], ["y"], axis=axis, name="ts")
    m = _model([node], [_vi("c", F, [2, 2, 5, 3]), _vi("u", F, [2, 2, 2, 3]), _vi("i", I64, [2])],
               [_vi("y", F, [2, 2, 5, 3])], 24)
    return m, {"c": cache, "u": upd, "i": idx}


def _tensor_scatter_case():
    m, feeds = _tensor_scatter(-2)
    return m, feeds, reference(_tensor_scatter(2)[0], feeds)


HAND = {f"Scan-v{v}-neg-scan-axes": ("Scan", v, functools.partial(_scan, v))
        for v in neg_versions("Scan")}
HAND |= {f"ConcatFromSequence-v{v}-axis-1-new_axis{n}":
         ("ConcatFromSequence", v, functools.partial(_concat_from_sequence, v, n))
         for v in neg_versions("ConcatFromSequence") for n in (0, 1)}
HAND["Scatter-v11-axis-1"] = ("Scatter", 11, _scatter_11)
HAND["TensorScatter-v24-axis-2-rank4"] = ("TensorScatter", 24, _tensor_scatter_case)


@pytest.mark.parametrize("case_id", sorted(HAND))
def test_negative_axis_hand_cases(case_id):
    model, feeds, expected = HAND[case_id][2]()
    got = _run(model, feeds)
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        _compare(g, e, f"output {k}")


# ------------------------------------------------------------------ out-of-range axes

def _outs(rank: int, n: int = 1) -> list:
    # graph outputs need a rank; symbolic dims leave the sizes to inference
    return [_vi(f"y{k}", F, [f"d{j}" for j in range(rank)]) for k in range(n)]


def _attr_case(op: str, v: int, x: np.ndarray, extra_inputs=(), rank: int = 3, n_out: int = 1,
               **attrs):
    ins = [_vi("x", F, list(x.shape))] + [_vi(n, I64 if a.dtype == np.int64 else F,
                                               list(a.shape)) for n, a in extra_inputs]
    outs = _outs(rank, n_out)
    node = helper.make_node(op, ["x"] + [n for n, _ in extra_inputs], [o.name for o in outs],
                            name="bad_axis", **attrs)
    m = _model([node], ins, outs, v)
    return m, {"x": x, **dict(extra_inputs)}


def _const_axes_case(op: str, v: int, x: np.ndarray, axes: list[int], as_input: bool,
                     rank: int = 3):
    """`op` with its axes in an input: a constant initializer, or a run-time graph input."""
    axes_arr = np.array(axes, np.int64)
    node = helper.make_node(op, ["x", "axes"], ["y0"], name="bad_axis")
    ins = [_vi("x", F, list(x.shape))]
    inits = []
    feeds = {"x": x}
    if as_input:
        ins.append(_vi("axes", I64, [len(axes)]))
        feeds["axes"] = axes_arr
    else:
        inits.append(numpy_helper.from_array(axes_arr, "axes"))
    return _model([node], ins, _outs(rank), v, inits), feeds


IDX = np.array([0, 1], np.int64)
# (id, builder, error): r = 3 throughout; -r-1 = -4 and r = 3 are just out of range
OUT_OF_RANGE = {
    "Softmax-v13-axis3": (lambda: _attr_case("Softmax", 13, X234, axis=3), ModelError),
    "Softmax-v13-axis-4": (lambda: _attr_case("Softmax", 13, X234, axis=-4), ModelError),
    "ArgMax-v13-axis-4": (lambda: _attr_case("ArgMax", 13, X234, axis=-4), ModelError),
    "Concat-v13-axis3": (lambda: _attr_case("Concat", 13, X234, axis=3), ModelError),
    "Gather-v13-axis-4": (lambda: _attr_case("Gather", 13, X234, [("i", IDX)], axis=-4),
                          ModelError),
    "Flatten-v13-axis4": (lambda: _attr_case("Flatten", 13, X234, rank=2, axis=4), ModelError),
    "Flatten-v13-axis-4": (lambda: _attr_case("Flatten", 13, X234, rank=2, axis=-4), ModelError),
    "Split-v13-axis-4": (lambda: _attr_case("Split", 13, X234, axis=-4), ModelError),
    "TopK-v11-axis3": (lambda: _attr_case("TopK", 11, X234, [("k", np.array([1], np.int64))],
                                          n_out=2, axis=3), ModelError),
    "LayerNormalization-v17-axis-4": (lambda: _attr_case(
        "LayerNormalization", 17, X234, [("s", np.ones(4, np.float32))], axis=-4), ModelError),
    "ReduceSum-v11-axes3": (lambda: _attr_case("ReduceSum", 11, X234, axes=[3]), ModelError),
    "ReduceMax-v13-axes-4": (lambda: _attr_case("ReduceMax", 13, X234, axes=[-4]), ModelError),
    "Squeeze-v11-axes-4": (lambda: _attr_case("Squeeze", 11, X234, rank=2, axes=[-4]), ModelError),
    # Unsqueeze indexes the rank-4 output: -5 and 4 are out of range
    "Unsqueeze-v11-axes4": (lambda: _attr_case("Unsqueeze", 11, X234, rank=4, axes=[4]),
                            ModelError),
    "Unsqueeze-v11-axes-5": (lambda: _attr_case("Unsqueeze", 11, X234, rank=4, axes=[-5]),
                             ModelError),
    "ReduceSum-v13-const-axes-4": (lambda: _const_axes_case("ReduceSum", 13, X234, [-4], False),
                                   ModelError),
    "ReduceSum-v13-runtime-axes3": (lambda: _const_axes_case("ReduceSum", 13, X234, [3], True),
                                    InputError),
    "Squeeze-v13-runtime-axes-4": (lambda: _const_axes_case("Squeeze", 13, X234, [-4], True, 2),
                                   InputError),
    "Unsqueeze-v13-const-axes4": (lambda: _const_axes_case("Unsqueeze", 13, X234, [4], False, 4),
                                  ModelError),
    "CumSum-v14-runtime-axis3": (lambda: _cumsum_runtime(3), InputError),
    "CumSum-v14-runtime-axis-4": (lambda: _cumsum_runtime(-4), InputError),
}


def _cumsum_runtime(axis: int):
    node = helper.make_node("CumSum", ["x", "axis"], ["y0"], name="bad_axis")
    m = _model([node], [_vi("x", F, [2, 3, 4]), _vi("axis", I64, [])], _outs(3), 14)
    return m, {"x": X234, "axis": np.array(axis, np.int64)}


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
