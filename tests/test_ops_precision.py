"""Rounding-order and legacy-semantics tests against onnx.reference: QLinearMatMul with f16/bf16
scales, DequantizeLinear with narrow scales and float8 inputs, PRelu's per-channel slope of
opsets 1/6 (also inside a fusible chain), and f16 depthwise Conv accumulating in f32."""

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.errors import ModelError


def _model(nodes, inputs, outputs, opset, inits=()):
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                      [oh.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                      initializer=list(inits))
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])


def _run_both(model, feeds):
    ref = ReferenceEvaluator(model).run(None, feeds)
    ours = onnxjit.compile(model, cache_dir=False).run(None, feeds)
    return ref, ours


@pytest.mark.parametrize("qt", [np.int8, np.uint8])
@pytest.mark.parametrize("st", [np.float16, np.float32])
@pytest.mark.parametrize("shape_a,shape_b", [((5, 7), (7, 3)), ((2, 4, 6), (6, 5))])
def test_qlinearmatmul_scales_match_reference(qt, st, shape_a, shape_b):
    rng = np.random.default_rng(0)
    info = np.iinfo(qt)
    a = rng.integers(info.min, info.max + 1, shape_a).astype(qt)
    b = rng.integers(info.min, info.max + 1, shape_b).astype(qt)
    tq = oh.np_dtype_to_tensor_dtype(np.dtype(qt))
    ts = oh.np_dtype_to_tensor_dtype(np.dtype(st))
    out_shape = list(np.matmul(np.zeros(shape_a), np.zeros(shape_b)).shape)
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    types = [(tq, list(shape_a)), (ts, [1]), (tq, [1]), (tq, list(shape_b)), (ts, [1]),
             (tq, [1]), (ts, [1]), (tq, [1])]
    m = _model([oh.make_node("QLinearMatMul", names, ["y"])],
               [(n, t, s) for n, (t, s) in zip(names, types)], [("y", tq, out_shape)], 21)
    feeds = dict(zip(names, [a, np.array([0.0066], st), np.array([3], qt), b,
                             np.array([0.00705], st), np.array([-2 if qt == np.int8 else 7], qt),
                             np.array([0.0107], st), np.array([5], qt)]))
    ref, ours = _run_both(m, feeds)
    assert ours[0].dtype == qt
    np.testing.assert_array_equal(ours[0], ref[0])


def test_qlinearmatmul_mixed_scale_types_rejected():
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    ts = [TP.INT8, TP.FLOAT16, TP.INT8, TP.INT8, TP.FLOAT, TP.INT8, TP.FLOAT16, TP.INT8]
    shapes = [[2, 3], [1], [1], [3, 2], [1], [1], [1], [1]]
    m = _model([oh.make_node("QLinearMatMul", names, ["y"])],
               list(zip(names, ts, shapes)), [("y", TP.INT8, [2, 2])], 21)
    with pytest.raises(ModelError, match="one element type"):
        onnxjit.compile(m, cache_dir=False)


@pytest.mark.parametrize("st,out", [(TP.FLOAT16, 0), (TP.FLOAT, 0), (TP.FLOAT16, TP.FLOAT),
                                    (TP.FLOAT, TP.BFLOAT16)])
def test_dequantize_float8_narrow_scale(st, out):
    x = np.array([0, 1, 2, 896, -208, 0.3, -17], np.float32).astype(ml_dtypes.float8_e4m3fn)
    s = np.array(0.37, oh.tensor_dtype_to_np_dtype(st))
    attrs = {"axis": 0} | ({"output_dtype": out} if out else {})
    yt = out or st
    m = _model([oh.make_node("DequantizeLinear", ["x", "s"], ["y"], **attrs)],
               [("x", TP.FLOAT8E4M3FN, [7]), ("s", st, [])], [("y", yt, [7])], 25)
    ref, ours = _run_both(m, {"x": x, "s": s})
    assert ours[0].dtype == ref[0].dtype
    np.testing.assert_array_equal(ours[0].astype(np.float32), ref[0].astype(np.float32))


def test_dequantize_int8_f16_scale_per_axis():
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (3, 4, 5)).astype(np.int8)
    s = np.array([0.01, 0.2, 3.0, 0.07], np.float16)
    z = np.array([1, -2, 0, 5], np.int8)
    m = _model([oh.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1)],
               [("x", TP.INT8, [3, 4, 5]), ("s", TP.FLOAT16, [4]), ("z", TP.INT8, [4])],
               [("y", TP.FLOAT16, [3, 4, 5])], 21)
    ref, ours = _run_both(m, {"x": x, "s": s, "z": z})
    assert ours[0].dtype == np.float16
    np.testing.assert_array_equal(ours[0], ref[0])


def _prelu_model(opset, x_shape, slope, extra_add=False):
    nodes = [oh.make_node("PRelu", ["x", "slope"], ["p"])]
    if extra_add:  # a fusible neighbour: the legacy node must stay out of the fused region
        nodes += [oh.make_node("Add", ["p", "x"], ["y"])]
    else:
        nodes[0].output[0] = "y"
    init = onnx.numpy_helper.from_array(slope, "slope")
    return _model(nodes, [("x", TP.FLOAT, list(x_shape))], [("y", TP.FLOAT, list(x_shape))],
                  opset, [init])


@pytest.mark.parametrize("opset", [6])
@pytest.mark.parametrize("x_shape", [(2, 3, 4), (2, 3, 4, 5), (1, 3, 2, 2, 2)])
@pytest.mark.parametrize("extra_add", [False, True])
def test_prelu_legacy_per_channel(opset, x_shape, extra_add):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(x_shape).astype(np.float32)
    slope = np.array([0.1, 0.5, 2.0], np.float32)
    fn = onnxjit.compile(_prelu_model(opset, x_shape, slope, extra_add), cache_dir=False)
    per_channel = slope.reshape((3,) + (1,) * (len(x_shape) - 2))
    want = np.where(x < 0, x * per_channel, x)
    if extra_add:
        want = want + x
    np.testing.assert_allclose(fn(x)[0], want, rtol=1e-6)


def test_prelu_opset7_keeps_numpy_broadcast():
    slope = np.array([0.1, 0.5, 2.0], np.float32)
    with pytest.raises(ModelError, match="broadcast"):
        onnxjit.compile(_prelu_model(7, (2, 3, 4), slope), cache_dir=False)
    # the trailing dim matches: numpy broadcasting, in every opset (as the reference)
    for opset in (6, 9):
        x = np.random.default_rng(3).standard_normal((2, 4, 3)).astype(np.float32)
        fn = onnxjit.compile(_prelu_model(opset, (2, 4, 3), slope), cache_dir=False)
        np.testing.assert_allclose(fn(x)[0], np.where(x < 0, x * slope, x), rtol=1e-6)


def test_depthwise_conv_f16_accumulates_in_f32():
    rng = np.random.default_rng(0)
    x = rng.random((2, 4, 11)).astype(np.float16)
    w = rng.random((4, 1, 4)).astype(np.float16)
    m = _model([oh.make_node("Conv", ["x", "w"], ["y"], group=4)],
               [("x", TP.FLOAT16, [2, 4, 11]), ("w", TP.FLOAT16, [4, 1, 4])],
               [("y", TP.FLOAT16, [2, 4, 8])], 22)
    ref, ours = _run_both(m, {"x": x, "w": w})
    np.testing.assert_array_equal(ours[0], ref[0])
