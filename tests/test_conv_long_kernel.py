"""Long-kernel convs of few input channels (`conv.strided_windows`): 1-D convs over few
positions as products over overlapping windows of X read in place (no im2col), and
one-channel convs the windows do not take on the im2col product instead of the depthwise
nest. Each case in the loop-IR interpreter (bounds-checked, overlapping windows included)
against onnx's reference and natively against onnxruntime; the switches restore the old
forms."""

from __future__ import annotations

import numpy as np
import pytest
from loop_harness import run_via_loop_ir
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from test_conv_depthwise_phased import _kernels, _ort

import onnxjit
from onnxjit.ir.ops.conv import strided_windows

RNG = np.random.default_rng(5)
TYPES = {np.float32: 1, np.float64: 11}


def _model(xs, ws, attrs, relu=False, dtype=np.float32):
    """Conv (with bias) over x, then Relu when asked (fused into a FusedConv epilogue)."""
    inits = [numpy_helper.from_array(RNG.standard_normal(ws).astype(dtype), "w"),
             numpy_helper.from_array(RNG.standard_normal(ws[0]).astype(dtype), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=list(ws[2:]),
                              **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    t = TYPES[dtype]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", t, list(xs))],
                          [helper.make_tensor_value_info("y" if relu else "c", t,
                                                         [None] * len(xs))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _check(m, x):
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(run_via_loop_ir(m, [x])[0], want, rtol=1e-4, atol=1e-4)
    ref = want if x.dtype == np.float64 else _ort(m, x)  # onnxruntime has no f64 Conv
    (y,) = onnxjit.compile(m, cache_dir=False, num_threads=2)(x)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


WINDOWS = [
    # (x shape, w shape, Conv attributes, fused Relu): 33-34 positions, so vectors along
    # them would waste lanes (the windows' condition) with 8 or 16 lanes
    ((1, 1, 2000), (65, 1, 64), dict(strides=[60]), False),  # a spectrogram front end, small
    ((2, 1, 1700), (70, 1, 48), dict(strides=[50], pads=[20, 7]), True),  # padded, a batch
    ((1, 2, 1000), (64, 2, 40), dict(strides=[30]), False),  # two channels: two products
]


@pytest.mark.parametrize("xs,ws,attrs,relu", WINDOWS)
def test_windows_match_reference(xs, ws, attrs, relu, monkeypatch):
    m = _model(xs, ws, attrs, relu)
    x = RNG.standard_normal(xs).astype(np.float32)
    names = _kernels(m, x)
    assert "conv_gemm_t" in names and not any("im2col" in k for k in names), names
    _check(m, x)
    monkeypatch.setattr(strided_windows, "WINDOWS", False)
    old = _kernels(m, x)
    assert any("im2col" in k or "depthwise" in k for k in old), old


def test_windows_f64(monkeypatch):
    # 33 positions waste 21% of 8 f64 lanes (AVX-512), 9% of 4 (AVX2): under MIN_WASTE, so
    # there the windows would not take them; lowered, the f64 windows are checked on any host
    from onnxjit.codegen.kernel_shapes import tile_shape
    from onnxjit.ir.ops.conv import few_positions

    vl = tile_shape(8)[0]
    if -(-33 // vl) * vl < (1 + few_positions.MIN_WASTE) * 33:
        monkeypatch.setattr(few_positions, "MIN_WASTE", 0.0)
    xs, ws, attrs, _ = WINDOWS[0]
    m = _model(xs, ws, attrs, dtype=np.float64)
    x = RNG.standard_normal(xs)
    assert "conv_gemm_t" in _kernels(m, x)
    _check(m, x)


ONE_CHANNEL = [  # (stride 1, many positions: the same im2col product as the dilated conv)
    ((1, 1, 600), (40, 1, 33), dict(strides=[3], dilations=[2]), False),  # dilated
    ((1, 1, 30, 30), (16, 1, 7, 7), dict(strides=[2, 2], pads=[3] * 4), True),  # 2-D, fused
]


@pytest.mark.parametrize("xs,ws,attrs,relu", ONE_CHANNEL)
def test_one_channel_long_kernels_take_im2col(xs, ws, attrs, relu, monkeypatch):
    m = _model(xs, ws, attrs, relu)
    x = RNG.standard_normal(xs).astype(np.float32)
    names = _kernels(m, x)
    assert "conv_im2col_gemm" in names and not any("depthwise" in k for k in names), names
    _check(m, x)
    monkeypatch.setattr(strided_windows, "ONE_CHANNEL_IM2COL", False)
    assert "conv_im2col_gemm" not in _kernels(m, x)



def test_one_channel_long_kernel_with_run_time_length():
    # a symbolic program (audio of any length) takes the run-time im2col product too
    m = _model((1, 1, 600), (40, 1, 64), dict(strides=[20]))
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "L"
    f = onnxjit.compile(m, cache_dir=False, specialize="dynamic")
    for length in (600, 777):
        x = RNG.standard_normal((1, 1, length)).astype(np.float32)
        np.testing.assert_allclose(f(x)[0], _ort(m, x), rtol=1e-4, atol=1e-4)
