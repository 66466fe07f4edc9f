"""Rounding-order and legacy-semantics tests against onnx.reference: QLinearMatMul with f16/bf16
scales, DequantizeLinear with narrow scales and float8 inputs, PRelu's per-channel slope of
opsets 1/6 (also inside a fusible chain), and f16 depthwise Conv accumulating in f32."""

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
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


# --------------------------------------------------------------------------- QuantizeLinear of
# f16/bf16 x (quantization.quantize_linear docstring): divided in f32 at opsets 19/21, in the
# scale's type (or `precision`) from opset 23, both operands rounded to it first, as onnxruntime
# does.

F8 = (TP.FLOAT8E4M3FN, TP.FLOAT8E5M2)
_LAYOUTS = {"tensor": ([], {}), "axis": ([6], {"axis": 1}),
            "block": ([4, 2, 5], {"axis": 1, "block_size": 4})}


def _ort(model, feeds):
    model.ir_version = 10
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _bits(a):
    """Integer view of a quantized array: float8 as its bytes (onnxruntime returns uint8)."""
    a = np.asarray(a)
    if a.dtype.itemsize == 1 and a.dtype.kind not in "iu":
        a = a.view(np.uint8)
    return a.astype(np.int64)


def _q_model(xt, st, zt, opset, layout, **attrs):
    """float8 via output_dtype (onnxruntime takes no float8 zero point from numpy)."""
    sshape, lay = _LAYOUTS[layout]
    inputs = [("x", xt, [4, 6, 5]), ("s", st, sshape)]
    if zt in F8:
        attrs["output_dtype"] = zt
    else:
        inputs.append(("z", zt, sshape))
    node = oh.make_node("QuantizeLinear", [n for n, *_ in inputs], ["y"], **lay, **attrs)
    return _model([node], inputs, [("y", zt, [4, 6, 5])], opset)


def _q_feeds(xt, st, zt, layout, seed=0):
    """x with +-inf, NaN, values beyond the output range and quotients whose f32 and f16
    roundings differ; a zero point in the lower quarter of the range (none for float8)."""
    rng = np.random.default_rng(seed)
    sshape = _LAYOUTS[layout][0]
    x = (rng.standard_normal((4, 6, 5)) * 300).astype(np.float32)
    x.flat[:6] = [np.inf, -np.inf, np.nan, 65504, -65504, 2.5]
    s = (np.abs(rng.standard_normal(sshape)) * 3 + 0.05).astype(np.float32)
    feeds = {"x": x.astype(oh.tensor_dtype_to_np_dtype(xt)),
             "s": np.asarray(s).astype(oh.tensor_dtype_to_np_dtype(st))}
    if zt not in F8:
        info = np.iinfo(oh.tensor_dtype_to_np_dtype(zt))
        z = rng.integers(info.min // 4, info.max // 4, sshape)
        feeds["z"] = np.asarray(z).astype(oh.tensor_dtype_to_np_dtype(zt))
    return feeds


@pytest.mark.parametrize("layout", sorted(_LAYOUTS))
@pytest.mark.parametrize("zt,attrs", [(TP.UINT8, {}), (TP.INT8, {}), (TP.INT16, {}),
                                      (TP.UINT16, {}), (TP.FLOAT8E4M3FN, {"saturate": 1}),
                                      (TP.FLOAT8E4M3FN, {"saturate": 0})])
@pytest.mark.parametrize("opset", [21, 23])
def test_quantize_f16_matches_onnxruntime(opset, zt, attrs, layout):
    # (onnxruntime returns no float8e5m2 to numpy: the bf16 test covers it)
    m = _q_model(TP.FLOAT16, TP.FLOAT16, zt, opset, layout, **attrs)
    feeds = _q_feeds(TP.FLOAT16, TP.FLOAT16, zt, layout)
    ours = onnxjit.compile(m, cache_dir=False).run(None, feeds)[0]
    assert ours.dtype == oh.tensor_dtype_to_np_dtype(zt)
    np.testing.assert_array_equal(_bits(ours), _bits(_ort(m, feeds)[0]))


@pytest.mark.parametrize("xt,st,attrs", [
    (TP.FLOAT, TP.FLOAT16, {}),                    # divides in f16: x rounded to f16 first
    (TP.FLOAT16, TP.FLOAT, {}),                    # divides in f32
    (TP.FLOAT, TP.FLOAT, {"precision": TP.FLOAT16}),
    (TP.FLOAT16, TP.FLOAT16, {"precision": TP.FLOAT})])
def test_quantize_division_type_matches_onnxruntime(xt, st, attrs):
    m = _q_model(xt, st, TP.INT16, 23, "axis", **attrs)
    feeds = _q_feeds(xt, st, TP.INT16, "axis", seed=1)
    ours = onnxjit.compile(m, cache_dir=False).run(None, feeds)[0]
    np.testing.assert_array_equal(ours, _ort(m, feeds)[0])


@pytest.mark.parametrize("layout", sorted(_LAYOUTS))
@pytest.mark.parametrize("zt", [TP.INT8, TP.UINT16, *F8])
@pytest.mark.parametrize("opset", [21, 25])
def test_quantize_bf16_matches_reference(opset, zt, layout):
    # onnxruntime has no bf16 kernel. Opset 25 divides in bf16 as the reference does; opset
    # 21 in f32: the oracle is the reference on the widened inputs. The reference's int cast
    # of +-inf/NaN is undefined: those elements are checked by the next test.
    m = _q_model(TP.BFLOAT16, TP.BFLOAT16, zt, opset, layout)
    feeds = _q_feeds(TP.BFLOAT16, TP.BFLOAT16, zt, layout, seed=2)
    ours = onnxjit.compile(m, cache_dir=False).run(None, feeds)[0]
    if opset < 23:
        wide = _q_model(TP.FLOAT, TP.FLOAT, zt, opset, layout)
        ref = ReferenceEvaluator(wide).run(None, feeds | {k: feeds[k].astype(np.float32)
                                                           for k in "xs"})[0]
    else:
        ref = ReferenceEvaluator(m).run(None, feeds)[0]
    finite = np.isfinite(feeds["x"].astype(np.float32))
    if zt in F8:
        np.testing.assert_array_equal(ours.astype(np.float32), ref.astype(np.float32))
    else:
        np.testing.assert_array_equal(ours[finite], ref[finite])


@pytest.mark.parametrize("xt", [TP.FLOAT16, TP.BFLOAT16])
@pytest.mark.parametrize("zt,lo,hi", [(TP.UINT8, 0, 255), (TP.INT8, -128, 127),
                                      (TP.INT16, -32768, 32767), (TP.INT4, -8, 7)])
def test_quantize_narrow_saturates_inf_and_nan(xt, zt, lo, hi):
    # +inf and overflowing quotients (65504 / 0.5 is inf in f16) saturate to the type's
    # maximum, -inf to its minimum, NaN to its minimum: onnxruntime's results
    x = np.array([np.inf, -np.inf, np.nan, 65504, -65504, 3.0, -2.75, 1.25],
                 np.float32).astype(oh.tensor_dtype_to_np_dtype(xt))
    s = np.array(0.5, oh.tensor_dtype_to_np_dtype(xt))
    m = _model([oh.make_node("QuantizeLinear", ["x", "s"], ["y"], output_dtype=zt)],
               [("x", xt, [8]), ("s", xt, [])], [("y", zt, [8])], 23)
    ours = onnxjit.compile(m, cache_dir=False).run(None, {"x": x, "s": s})[0]
    want = [hi, lo, lo, hi, lo, min(6, hi), max(-6, lo), 2]  # -5.5 and 2.5: half to even
    np.testing.assert_array_equal(ours.astype(np.int64), want)


def test_quantize_dequantize_f16_roundtrip_matches_onnxruntime():
    # QDQ of an f16 activation per channel, with DequantizeLinear's output_dtype widening
    x = (np.random.default_rng(3).standard_normal((2, 3, 8)) * 4).astype(np.float16)
    s = np.array([0.02, 0.05, 0.1], np.float16)
    z = np.array([-3, 0, 7], np.int8)
    nodes = [oh.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             oh.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1),
             oh.make_node("DequantizeLinear", ["q", "s", "z"], ["y32"], axis=1,
                          output_dtype=TP.FLOAT)]
    m = _model(nodes, [("x", TP.FLOAT16, [2, 3, 8]), ("s", TP.FLOAT16, [3]),
                       ("z", TP.INT8, [3])],
               [("q", TP.INT8, [2, 3, 8]), ("y", TP.FLOAT16, [2, 3, 8]),
                ("y32", TP.FLOAT, [2, 3, 8])], 23)
    feeds = {"x": x, "s": s, "z": z}
    ours = onnxjit.compile(m, cache_dir=False).run(None, feeds)
    want = _ort(m, feeds)
    assert [o.dtype for o in ours] == [np.int8, np.float16, np.float32]
    for o, w in zip(ours, want):
        np.testing.assert_array_equal(o, w)
