"""Case tables of the negative-axes audit (tests/test_audit_axes.py): which ops and versions
accept negative axes (read from the schemas' docs), the exemptions, the hand-written cases no
backend case reaches, and the out-of-range cases that must raise."""

from __future__ import annotations

import functools
import re

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from op_audit import reference, registered_ops, schema

from onnxjit.errors import InputError, ModelError

# ------------------------------------------------------------------ rules from the schemas

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


def only_last(op: str, v: int) -> bool:
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
