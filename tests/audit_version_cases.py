"""Hand-written version-form cases for the (op, v) no backend node case reaches.

`HAND[(op, v)]` maps a case name to a builder returning (model, feeds, expected outputs, or
None for onnx.reference at the model's opset, or the onnxjit error type the model must
raise). Models are built directly at opset `v` in the form `schema(op, v)` defines. Random
ops are made deterministic by their parameters (Bernoulli with p in {0, 1}, RandomNormal
with scale 0, RandomUniform with low == high, Multinomial with one class of probability 1),
so exact outputs are known; numpy oracles are used where onnx.reference lacks the version
(each says why).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h

from onnxjit.errors import ModelError

HAND: dict = {}

F = TP.FLOAT
_RNG = np.random.default_rng(7)


def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, v: int, ir: int = 8) -> onnx.ModelProto:
    g = h.make_graph(nodes, "g", inputs, outputs)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", v)])
    m.ir_version = ir
    return m


def case(op: str, versions, name: str):
    """Register the decorated builder(v) for every version in `versions`."""
    def wrap(fn):
        for v in versions:
            HAND.setdefault((op, v), {})[name] = (lambda v=v: fn(v))
        return fn
    return wrap


def _x(*shape) -> np.ndarray:
    return _RNG.standard_normal(shape).astype(np.float32)


@case("Bernoulli", (15, 22), "p01")
def _bernoulli(v):
    p = np.array([[0, 1, 1], [1, 0, 0]], np.float32)
    m = _model([h.make_node("Bernoulli", ["p"], ["y"], seed=1.0)], [_vi("p", F, [2, 3])],
               [_vi("y", F, [2, 3])], v)
    return m, {"p": p}, [p]  # p in {0, 1}: the draw is certain


@case("Cast", (1,), "to_string_attr")
def _cast1(v):
    # Cast-1's `to` is a string; onnx.reference has no Cast-1: numpy oracle.
    x = np.array([[1.5, -2.25], [3.0, 7.75]], np.float32)
    m = _model([h.make_node("Cast", ["x"], ["y"], to="DOUBLE")], [_vi("x", F, [2, 2])],
               [_vi("y", TP.DOUBLE, [2, 2])], v, ir=3)
    return m, {"x": x}, [x.astype(np.float64)]


@case("ConcatFromSequence", (11, 25), "new_axis")
def _concat_seq(v):
    nodes = [h.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             h.make_node("ConcatFromSequence", ["s"], ["y"], axis=-1, new_axis=1)]
    m = _model(nodes, [_vi("a", F, [2, 3]), _vi("b", F, [2, 3])], [_vi("y", F, [2, 3, 2])], v)
    return m, {"a": _x(2, 3), "b": _x(2, 3)}, None


@case("GlobalLpPool", (1, 2, 22), "p3")
def _global_lp(v):
    x = np.abs(_x(2, 3, 4, 5)) + 0.1
    # GlobalLpPool-1's p is a float; onnx.reference has no GlobalLpPool: numpy oracle.
    p = 3.0 if v == 1 else 3
    m = _model([h.make_node("GlobalLpPool", ["x"], ["y"], p=p)], [_vi("x", F, [2, 3, 4, 5])],
               [_vi("y", F, [2, 3, 1, 1])], v, ir=3 if v < 3 else 8)
    y = (np.sum(x.astype(np.float64) ** 3, axis=(2, 3), keepdims=True) ** (1 / 3))
    return m, {"x": x}, [y.astype(np.float32)]


@case("GroupNormalization", (18,), "per_group_affine")
def _group_norm18(v):
    # GroupNormalization-18's scale and bias have one value per group (21: per channel).
    x, scale, bias = _x(2, 4, 3), np.array([2.0, 0.5], np.float32), np.array([1, -1], np.float32)
    m = _model([h.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)],
               [_vi("x", F, [2, 4, 3]), _vi("s", F, [2]), _vi("b", F, [2])],
               [_vi("y", F, [2, 4, 3])], v)
    g = x.reshape(2, 2, 6).astype(np.float64)
    y = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
    y = y * scale[None, :, None] + bias[None, :, None]
    return m, {"x": x, "s": scale, "b": bias}, [y.reshape(2, 4, 3).astype(np.float32)]


@case("Loop", (1,), "counter_sum")
def _loop1(v):
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]),
         h.make_node("Add", ["acc_in", "x"], ["acc_out"])], "body",
        [_vi("i", TP.INT64, []), _vi("cond_in", TP.BOOL, []), _vi("acc_in", F, [3])],
        [_vi("cond_out", TP.BOOL, []), _vi("acc_out", F, [3])])
    node = h.make_node("Loop", ["n", "", "acc0"], ["acc"], body=body)
    m = _model([node], [_vi("n", TP.INT64, []), _vi("acc0", F, [3]), _vi("x", F, [3])],
               [_vi("acc", F, [3])], v, ir=3)
    x, acc0 = _x(3), _x(3)
    # onnx.reference has no Loop-1: numpy oracle (4 iterations of acc += x).
    return m, {"n": np.array(4, np.int64), "acc0": acc0, "x": x}, [acc0 + x + x + x + x]


@case("MaxRoiPool", (1, 22), "two_rois")
def _max_roi(v):
    x = _x(1, 2, 6, 6)
    rois = np.array([[0, 0, 0, 3, 3], [0, 2, 1, 5, 5]], np.float32)
    m = _model([h.make_node("MaxRoiPool", ["x", "r"], ["y"], pooled_shape=[2, 2])],
               [_vi("x", F, [1, 2, 6, 6]), _vi("r", F, [2, 5])], [_vi("y", F, [2, 2, 2, 2])],
               v, ir=3 if v == 1 else 8)
    # numpy oracle (Caffe's RoIPool, as the spec defines): onnx.reference has no MaxRoiPool.
    y = np.zeros((2, 2, 2, 2), np.float32)
    for r, (_, x1, y1, x2, y2) in enumerate(rois.astype(int)):
        hh, ww = y2 - y1 + 1, x2 - x1 + 1
        for i in range(2):
            for j in range(2):
                hs, he = y1 + int(np.floor(i * hh / 2)), y1 + int(np.ceil((i + 1) * hh / 2))
                ws, we = x1 + int(np.floor(j * ww / 2)), x1 + int(np.ceil((j + 1) * ww / 2))
                y[r, :, i, j] = x[0, :, hs:he, ws:we].max(axis=(1, 2))
    return m, {"x": x, "r": rois}, [y]


@case("Multinomial", (7, 22), "certain_class")
def _multinomial(v):
    # One class has all the mass (log 0 = -inf for the others): every draw is that class.
    logits = np.array([[-np.inf, 0.0, -np.inf], [0.0, -np.inf, -np.inf]], np.float32)
    m = _model([h.make_node("Multinomial", ["x"], ["y"], sample_size=4, seed=3.0)],
               [_vi("x", F, [2, 3])], [_vi("y", TP.INT32, [2, 4])], v)
    return m, {"x": logits}, [np.array([[1] * 4, [0] * 4], np.int32)]


@case("Optional", (15, 25), "has_element")
def _optional(v):
    nodes = [h.make_node("Optional", ["x"], ["o"]),
             h.make_node("OptionalHasElement", ["o"], ["has"]),
             h.make_node("OptionalGetElement", ["o"], ["y"])]
    m = _model(nodes, [_vi("x", F, [3])], [_vi("has", TP.BOOL, []), _vi("y", F, [3])], v)
    x = _x(3)
    return m, {"x": x}, [np.array(True), x]


@case("RandomNormal", (1, 22), "scale0")
def _random_normal(v):
    m = _model([h.make_node("RandomNormal", [], ["y"], shape=[2, 3], mean=1.5, scale=0.0,
                            seed=2.0)], [], [_vi("y", F, [2, 3])], v, ir=3 if v == 1 else 8)
    return m, {}, [np.full((2, 3), 1.5, np.float32)]


@case("RandomUniform", (1, 22), "low_eq_high")
def _random_uniform(v):
    m = _model([h.make_node("RandomUniform", [], ["y"], shape=[4], low=2.0, high=2.0,
                            seed=2.0)], [], [_vi("y", F, [4])], v, ir=3 if v == 1 else 8)
    return m, {}, [np.full(4, 2.0, np.float32)]


@case("RandomNormalLike", (1, 22), "scale0")
def _random_normal_like(v):
    m = _model([h.make_node("RandomNormalLike", ["x"], ["y"], mean=-0.5, scale=0.0)],
               [_vi("x", F, [2, 2])], [_vi("y", F, [2, 2])], v, ir=3 if v == 1 else 8)
    return m, {"x": _x(2, 2)}, [np.full((2, 2), -0.5, np.float32)]


@case("RandomUniformLike", (1, 22), "low_eq_high")
def _random_uniform_like(v):
    m = _model([h.make_node("RandomUniformLike", ["x"], ["y"], low=3.0, high=3.0)],
               [_vi("x", F, [3])], [_vi("y", F, [3])], v, ir=3 if v == 1 else 8)
    return m, {"x": _x(3)}, [np.full(3, 3.0, np.float32)]


@case("Scan", (8,), "batched_cumsum")
def _scan8(v):
    # Scan-8: a leading batch axis, an (empty) sequence_lens input, no scan_input_axes.
    body = h.make_graph([h.make_node("Add", ["s_in", "e"], ["s_out"]),
                         h.make_node("Identity", ["s_out"], ["scan_out"])], "body",
                        [_vi("s_in", F, [2]), _vi("e", F, [2])],
                        [_vi("s_out", F, [2]), _vi("scan_out", F, [2])])
    node = h.make_node("Scan", ["", "s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1)
    m = _model([node], [_vi("s0", F, [2, 2]), _vi("xs", F, [2, 3, 2])],
               [_vi("s", F, [2, 2]), _vi("ys", F, [2, 3, 2])], v, ir=3)
    s0, xs = _x(2, 2), _x(2, 3, 2)
    ys = s0[:, None, :] + np.cumsum(xs, axis=1)  # numpy: onnx.reference has no Scan-8
    return m, {"s0": s0, "xs": xs}, [ys[:, -1], ys.astype(np.float32)]


@case("Scatter", (11,), "negative_index")
def _scatter11(v):
    # Scatter-11 (deprecated, = ScatterElements-11) allows negative indices; onnx.reference has
    # no Scatter: numpy oracle.
    data = np.zeros((2, 3), np.float32)
    idx = np.array([[-1, 0], [1, -3]], np.int64)
    upd = np.array([[1, 2], [3, 4]], np.float32)
    m = _model([h.make_node("Scatter", ["d", "i", "u"], ["y"], axis=1)],
               [_vi("d", F, [2, 3]), _vi("i", TP.INT64, [2, 2]), _vi("u", F, [2, 2])],
               [_vi("y", F, [2, 3])], v)
    y = np.array([[2, 0, 1], [4, 3, 0]], np.float32)
    return m, {"d": data, "i": idx, "u": upd}, [y]


@case("SequenceAt", (11, 25), "negative_position")
def _sequence_at(v):
    nodes = [h.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             h.make_node("SequenceAt", ["s", "p"], ["y"])]
    m = _model(nodes, [_vi("a", F, [2]), _vi("b", F, [3]), _vi("p", TP.INT64, [])],
               [_vi("y", F, [3])], v)
    return m, {"a": _x(2), "b": _x(3), "p": np.array(-1, np.int64)}, None


@case("SequenceConstruct", (11, 25), "length")
def _sequence_construct(v):
    nodes = [h.make_node("SequenceConstruct", ["a", "b", "a"], ["s"]),
             h.make_node("SequenceLength", ["s"], ["n"])]
    m = _model(nodes, [_vi("a", F, [2]), _vi("b", F, [2])], [_vi("n", TP.INT64, [])], v)
    return m, {"a": _x(2), "b": _x(2)}, None


@case("SequenceLength", (11, 25), "after_erase")
@case("SequenceErase", (11, 25), "after_erase")
def _sequence_erase(v):
    nodes = [h.make_node("SequenceConstruct", ["a", "b", "a"], ["s"]),
             h.make_node("SequenceErase", ["s", "p"], ["t"]),
             h.make_node("SequenceLength", ["t"], ["n"]),
             h.make_node("SequenceAt", ["t", "p"], ["y"])]
    m = _model(nodes, [_vi("a", F, [2]), _vi("b", F, [2]), _vi("p", TP.INT64, [])],
               [_vi("n", TP.INT64, []), _vi("y", F, [2])], v)
    return m, {"a": _x(2), "b": _x(2), "p": np.array(1, np.int64)}, None


@case("SequenceEmpty", (11, 25), "insert_into_empty")
def _sequence_empty(v):
    nodes = [h.make_node("SequenceEmpty", [], ["s"], dtype=F),
             h.make_node("SequenceInsert", ["s", "a"], ["t"]),
             h.make_node("ConcatFromSequence", ["t"], ["y"], axis=0)]
    m = _model(nodes, [_vi("a", F, [3])], [_vi("y", F, [3])], v)
    return m, {"a": _x(3)}, None


@case("Tile", (1,), "tiles_and_axis_inputs")
def _tile1(v):
    # Tile-1 takes a scalar repeat count and an axis as inputs; onnx.reference has no Tile-1.
    x = _x(2, 3)
    m = _model([h.make_node("Tile", ["x", "t", "a"], ["y"])],
               [_vi("x", F, [2, 3]), _vi("t", TP.INT64, []), _vi("a", TP.INT64, [])],
               [_vi("y", F, [2, 9])], v, ir=3)
    return m, {"x": x, "t": np.array(3, np.int64), "a": np.array(1, np.int64)}, [np.tile(x, 3)]


@case("Upsample", (10,), "nearest_scales_input")
def _upsample10(v):
    # Upsample-10 is the deprecation schema: a model using it is invalid (the checker rejects
    # it too), so onnxjit must raise ModelError.
    x = _x(1, 1, 2, 3)
    s = np.array([1, 1, 2, 2], np.float32)
    m = _model([h.make_node("Upsample", ["x", "s"], ["y"], mode="nearest")],
               [_vi("x", F, [1, 1, 2, 3]), _vi("s", F, [4])], [_vi("y", F, [1, 1, 4, 6])], v)
    return m, {"x": x, "s": s}, ModelError
