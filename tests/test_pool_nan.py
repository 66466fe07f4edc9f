"""MaxPool with NaN taps (`pooling.max_rule`): onnxjit follows onnx.reference's rule (NaNs
dropped at strides and dilations 1; else a NaN first real tap sticks, later NaNs are dropped),
so it agrees with onnxruntime and onnx.reference wherever those two agree. Checked on every
MaxPool loop (general rows in 1-D and 3-D, fused and flat 2-D rows, symbolic sizes), with
padding, ceil_mode, dilations, the Indices output, float16/float64, and the constant fold."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxjit

NAN = np.nan
TYPES = {np.float16: TensorProto.FLOAT16, np.float32: TensorProto.FLOAT,
         np.float64: TensorProto.DOUBLE}


def _model(attrs: dict, shape: list, dt=np.float32, indices: bool = False,
           const: np.ndarray | None = None) -> onnx.ModelProto:
    t = TYPES[dt]
    outs = [helper.make_tensor_value_info("y", t, None)]
    if indices:
        outs.append(helper.make_tensor_value_info("i", TensorProto.INT64, None))
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "i"][:len(outs)], **attrs)]
    inputs, inits = [helper.make_tensor_value_info("x", t, shape)], []
    if const is not None:  # x is a constant: the pool folds
        inits = [numpy_helper.from_array(const, "x")]
        inputs = [helper.make_tensor_value_info("z", t, [1])]
        nodes[0].output[0] = "p"
        nodes.append(helper.make_node("Add", ["p", "z"], ["y"]))
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outs, inits),
                          opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


def _ort(m: onnx.ModelProto, feeds: dict) -> list:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("dt", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("attrs, want", [
    # strides and dilations 1: every NaN dropped; NaN only for a window of NaNs
    (dict(kernel_shape=[3]), [2, 2, 2, NAN, 1, 1]),
    # stride 2 (windows [0..2], [3..5], ...): a NaN first tap sticks
    (dict(kernel_shape=[3], strides=[3]), [NAN, 2, NAN, 1]),
    # dilation 2, pads 1: windows (-1, 1, 3), (0, 2, 4), ...; padding is no first tap
    (dict(kernel_shape=[3], dilations=[2], pads=[1, 1]), [3, NAN, 3, NAN]),
])
def test_maxpool_nan_windows(dt, attrs: dict, want: list) -> None:
    """NaN first, in the middle, last and everywhere in a window: onnxjit's results (values
    and Indices) are onnx.reference's, and onnxruntime's wherever the two agree."""
    x = np.array([NAN, 1, 2, NAN, NAN, NAN, 1, NAN], dt)
    if "dilations" in attrs:
        x = np.array([NAN, 1, NAN, 3, 2, NAN], dt)
    elif "strides" in attrs:
        x = np.array([NAN, 1, 2, 1, NAN, 2, NAN, NAN, NAN, 1, NAN, NAN], dt)
    x = x.reshape(1, 1, -1)
    m = _model(attrs, list(x.shape), dt, indices=True)
    got = onnxjit.compile(m, cache_dir=False).run(None, {"x": x})
    np.testing.assert_array_equal(got[0].ravel(), np.array(want, dt))
    ref = ReferenceEvaluator(m).run(None, {"x": x}) if not np.isnan(want).any() or \
        "strides" in attrs or "dilations" in attrs else None  # it raises on all-NaN windows
    if ref is not None:
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])
    rt = _ort(m, {"x": x})
    same = (rt[0] == got[0]) | (np.isnan(rt[0]) & np.isnan(got[0]))
    if ref is not None:
        agree = (rt[0] == ref[0]) | (np.isnan(rt[0]) & np.isnan(ref[0]))
        assert np.all(same[agree])
    np.testing.assert_array_equal(got[1][same], rt[1][same])


CASES = [  # (attrs, input shape): each MaxPool loop with NaN-dense data
    (dict(kernel_shape=[3]), [2, 3, 17]),  # (the reference gets 1-D and 3-D pads wrong)
    (dict(kernel_shape=[2], strides=[2], ceil_mode=1), [1, 2, 15]),
    (dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), [1, 2, 20, 30]),  # fused rows, drop
    (dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), [1, 2, 17, 40]),  # fused
    (dict(kernel_shape=[3, 3], strides=[2, 2]), [2, 2, 13, 13]),  # flat planes
    (dict(kernel_shape=[2, 3], dilations=[2, 1], strides=[1, 2], ceil_mode=1,
          pads=[0, 1, 1, 0]), [1, 2, 9, 11]),
    (dict(kernel_shape=[2, 2, 2]), [1, 1, 5, 4, 5]),  # 3-D
    (dict(kernel_shape=[2, 2, 2], strides=[2, 1, 2]), [1, 2, 5, 4, 5]),
]


@pytest.mark.parametrize("attrs, shape", CASES)
def test_maxpool_nan_rule_every_loop(attrs: dict, shape: list) -> None:
    """Random data with NaNs and infinities, also a window of NaNs only: onnxjit gives
    onnx.reference's values bit for bit (without and with Indices: the fused/flat and the
    general loops) and, where it agrees with onnxruntime on a value, its index."""
    rng = np.random.default_rng(len(shape) * 7 + shape[-1])
    x = rng.standard_normal(shape).astype(np.float32)
    drop = all(v == 1 for v in attrs.get("strides", []) + attrs.get("dilations", []))
    nan = rng.random(shape) < 0.5
    if drop:  # no window of NaNs only (onnx.reference raises there): even coordinate sums
        nan &= np.indices(shape)[2:].sum(axis=0) % 2 == 1
    x[nan] = NAN
    x[rng.random(shape) < 0.05] = -np.inf
    want = ReferenceEvaluator(_model(attrs, shape)).run(None, {"x": x})[0]
    for indices in (False, True):
        m = _model(attrs, shape, indices=indices)
        got = onnxjit.compile(m, cache_dir=False).run(None, {"x": x})
        np.testing.assert_array_equal(got[0], want)
        if indices:  # the reference's stride-1 Indices leave out the plane offset
            rt = _ort(m, {"x": x})
            same = rt[0] == got[0]
            np.testing.assert_array_equal(got[1][same], rt[1][same])
            if not drop:
                np.testing.assert_array_equal(got[1], ReferenceEvaluator(m).run(None, {"x": x})[1])


def test_maxpool_nan_rule_symbolic_f16_f64_and_folded() -> None:
    """The same rule on run-time sizes (`specialize="dynamic"`), in float16 and float64, and
    when the pool folds on a constant."""
    rng = np.random.default_rng(5)
    attrs = [dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    for a in attrs:
        for dt in (np.float16, np.float64):
            x = rng.standard_normal((1, 2, 9, 8)).astype(dt)
            x[(rng.random(x.shape) < 0.6) & (np.indices(x.shape)[2:].sum(axis=0) % 2 == 1)] = NAN
            m = _model(a, ["N", "C", "H", "W"], dt)
            want = ReferenceEvaluator(m).run(None, {"x": x})[0]
            fn = onnxjit.compile(m, cache_dir=False, specialize="dynamic")
            np.testing.assert_array_equal(fn.run(None, {"x": x})[0], want)
        x = rng.standard_normal((1, 1, 6, 6)).astype(np.float32)
        x[(rng.random(x.shape) < 0.6) & (np.indices(x.shape)[2:].sum(axis=0) % 2 == 1)] = NAN
        m = _model(a, [1], const=x)
        feeds = {"z": np.zeros(1, np.float32)}
        np.testing.assert_array_equal(onnxjit.compile(m, cache_dir=False).run(None, feeds)[0],
                                      ReferenceEvaluator(m).run(None, feeds)[0])
