"""Depthwise Conv over tiny planes, vectorized across channels (`ir/depthwise_tiny.py`):
3x3 and smaller outputs, strides 1 and 2, padding that leaves input rows unused, a partial
last block of channels, batches, more blocks than `CHUNKS`, f64, and fused epilogues on a
partial block; each case in the loop-IR interpreter (bounds-checked) and natively on one and
two threads, against onnx's reference and onnxruntime, and the switch restores the per-plane
form."""

from __future__ import annotations

import numpy as np
import pytest
from loop_harness import run_via_loop_ir
from onnx.reference import ReferenceEvaluator
from test_conv_depthwise_phased import _kernels, _model, _ort

import onnxjit
from onnxjit.ir.ops.conv import depthwise_tiny

RNG = np.random.default_rng(11)

CASES = [
    # (x shape, w shape, Conv attributes)
    ((1, 32, 3, 3), (32, 1, 3, 3), dict(pads=[1, 1, 1, 1])),  # MobileNetV2's 3x3 stage
    ((1, 40, 6, 6), (40, 1, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),  # 16 + 16 + 8
    ((2, 24, 4, 4), (24, 1, 3, 3), dict(pads=[1, 1, 1, 1])),  # a batch, a partial block
    ((1, 16, 5, 5), (16, 1, 3, 3), dict(strides=[2, 2])),  # VALID: 2x2, the last row unused
    ((1, 20, 4, 3), (20, 1, 5, 5), dict(pads=[2, 2, 2, 2])),  # 25 taps, a wider padding
    ((3, 128, 2, 2), (128, 1, 3, 3), dict(pads=[1, 1, 1, 1])),  # 24 blocks: chunks of 2
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CASES)
def test_tiny_depthwise_matches_reference(xs, ws, attrs, bias, monkeypatch):
    m = _model(xs, ws, attrs, bias)
    x = RNG.standard_normal(xs).astype(np.float32)
    assert "conv_depthwise_lanes" in _kernels(m, x)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(run_via_loop_ir(m, [x])[0], want, rtol=1e-4, atol=1e-4)
    ref = _ort(m, x)
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(x)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(depthwise_tiny, "TINY", False)
    assert "conv_depthwise_lanes" not in _kernels(m, x)


@pytest.mark.parametrize("xs,ws,attrs", [CASES[1], CASES[2]])
def test_tiny_depthwise_epilogue_and_f64(xs, ws, attrs):
    m = _model(xs, ws, attrs, bias=True, epilogue=True)  # Clip + residual Add, fused
    x = RNG.standard_normal(xs).astype(np.float32)
    assert "conv_depthwise_lanes" in _kernels(m, x)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(run_via_loop_ir(m, [x])[0], want, rtol=1e-4, atol=1e-4)
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(x)
        np.testing.assert_allclose(y, _ort(m, x), rtol=1e-4, atol=1e-4)
    m64 = _model(xs, ws, attrs, bias=True, dtype=np.float64)
    x64 = x.astype(np.float64)
    assert "conv_depthwise_lanes" in _kernels(m64, x64)
    (y64,) = onnxjit.compile(m64, cache_dir=False)(x64)
    np.testing.assert_allclose(y64, ReferenceEvaluator(m64).run(None, {"x": x64})[0],
                               rtol=1e-10, atol=1e-10)
