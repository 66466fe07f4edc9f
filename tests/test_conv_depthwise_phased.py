"""Depthwise Conv through zero-padded stride phases (`ir/depthwise_phased.py`): strides
1-3 (kernels narrower than the stride too), asymmetric and oversized pads, VALID padding that
leaves input rows unused, channel multipliers, batches, more planes than `CHUNKS`, f64, and
fused epilogues (Clip, residual Add); each case also runs through the direct nest (the width
limit set to 0), in the loop-IR interpreter (bounds-checked) and natively against
onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from loop_harness import OPTIONS, run_via_loop_ir
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.driver import import_model, lower_signature
from onnxjit.ir.ops.conv import depthwise_phased
from onnxjit.ir.types import DType

RNG = np.random.default_rng(7)
TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}

CASES = [
    # (x shape, w shape, Conv attributes)
    ((2, 3, 7, 7), (3, 1, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 5, 9, 8), (5, 1, 3, 3), dict(strides=[2, 2], pads=[0, 1, 1, 0])),
    ((1, 4, 11, 10), (4, 1, 2, 2), dict(strides=[3, 3], pads=[1, 0, 0, 1])),  # k < s
    ((1, 2, 6, 13), (2, 1, 3, 5), dict(strides=[2, 1], pads=[4, 0, 0, 4])),  # pads > k
    ((2, 3, 8, 9), (6, 1, 3, 3), dict(strides=[1, 2], pads=[1, 1, 1, 1])),  # multiplier 2
    ((1, 40, 5, 5), (40, 1, 3, 3), dict(pads=[1, 1, 1, 1])),  # 40 planes: uneven chunks
    ((1, 3, 8, 8), (3, 1, 3, 3), dict(strides=[2, 2])),  # VALID: the last row is unused
    ((1, 3, 9, 9), (3, 1, 1, 1), dict(strides=[2, 2])),  # 1x1 depthwise, stride 2
    ((1, 2, 12, 11), (2, 1, 7, 7), dict(pads=[3, 3, 3, 3])),  # 49 taps
    ((1, 3, 10, 7), (3, 1, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
]


def _model(xs, ws, attrs, bias: bool, dtype=np.float32, epilogue: bool = False):
    c = xs[1]
    inits = [numpy_helper.from_array(RNG.standard_normal(ws).astype(dtype), "w")]
    names = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(ws[0]).astype(dtype), "b"))
        names.append("b")
    nodes = [helper.make_node("Conv", names, ["c"], group=c, kernel_shape=list(ws[2:]),
                              **attrs)]
    out = "c"
    if epilogue:  # Conv + Clip + residual Add: fused into the depthwise kernel's epilogue
        inits += [numpy_helper.from_array(np.array(0.0, dtype), "lo"),
                  numpy_helper.from_array(np.array(1.5, dtype), "hi")]
        nodes += [helper.make_node("Clip", ["c", "lo", "hi"], ["r"]),
                  helper.make_node("Add", ["r", "c"], ["y"])]
        out = "y"
    t = TYPES[dtype]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", t, list(xs))],
                          [helper.make_tensor_value_info(out, t, [None] * len(xs))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _kernels(m, x):
    gm = import_model(m.SerializeToString(), OPTIONS)
    _, prog = lower_signature(gm, ((DType.from_numpy(x.dtype), x.shape),), OPTIONS)
    return [k.name for k in prog.kernels]


def _ort(m, x):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


@pytest.mark.parametrize("path", ["phased", "direct"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CASES)
def test_depthwise_matches_reference(xs, ws, attrs, bias, path, monkeypatch):
    phased = path != "direct"
    if not phased:
        monkeypatch.setattr(depthwise_phased, "MAX_WIDTH", 0)
    m = _model(xs, ws, attrs, bias)
    x = RNG.standard_normal(xs).astype(np.float32)
    names = _kernels(m, x)
    assert ("conv_depthwise_phased" in names) == phased, names
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    got = run_via_loop_ir(m, [x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    (y,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_allclose(y, _ort(m, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xs,ws,attrs", [CASES[1], CASES[4]])
def test_depthwise_phased_epilogue_and_f64(xs, ws, attrs):
    m = _model(xs, ws, attrs, bias=True, epilogue=True)
    x = RNG.standard_normal(xs).astype(np.float32)
    assert "conv_depthwise_phased" in _kernels(m, x)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(run_via_loop_ir(m, [x])[0], want, rtol=1e-4, atol=1e-4)
    (y,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_allclose(y, _ort(m, x), rtol=1e-4, atol=1e-4)
    m64 = _model(xs, ws, attrs, bias=True, dtype=np.float64)
    x64 = x.astype(np.float64)
    (y64,) = onnxjit.compile(m64, cache_dir=False)(x64)
    np.testing.assert_allclose(y64, ReferenceEvaluator(m64).run(None, {"x": x64})[0],
                               rtol=1e-10, atol=1e-10)


def test_direct_nest_kept_for_wide_rows_dilations_and_tall_images():
    x = RNG.standard_normal((1, 2, 40, 40)).astype(np.float32)
    wide = _model(x.shape, (2, 1, 3, 3), dict(pads=[1, 1, 1, 1]), bias=True)
    assert "conv_depthwise_phased" not in _kernels(wide, x)
    x = RNG.standard_normal((1, 2, 9, 9)).astype(np.float32)
    dil = _model(x.shape, (2, 1, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2]), bias=True)
    assert "conv_depthwise_phased" not in _kernels(dil, x)
    x = RNG.standard_normal((1, 1, 8000, 8)).astype(np.float32)  # 320 KB of scratch
    tall = _model(x.shape, (1, 1, 3, 3), dict(pads=[1, 1, 1, 1]), bias=True)
    assert "conv_depthwise_phased" not in _kernels(tall, x)
    x = RNG.standard_normal((1, 1, 2000, 8)).astype(np.float32)
    tall = _model(x.shape, (1, 1, 3, 3), dict(pads=[1, 1, 1, 1]), bias=True)
    assert "conv_depthwise_phased" in _kernels(tall, x)
