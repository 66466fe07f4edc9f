"""The direct depthwise nest (`ir/ops/conv/depthwise_direct.py`) on rows whose interior is not a
whole number of vectors: at stride 1 the fused row ends with one vector that overlaps the previous
one (`whole_vectors`). Row widths around the vector lanes (f32 and f64), with and without bias and a
fused Clip + residual epilogue, run in the bounds-checked loop-IR interpreter and natively against
the reference; the phased lowering is switched off so the direct nest runs."""

from __future__ import annotations

import numpy as np
import pytest
from loop_harness import run_via_loop_ir
from onnx.reference import ReferenceEvaluator
from test_conv_depthwise_phased import _model

import onnxjit
from onnxjit.codegen.kernel_shapes import tile_shape
from onnxjit.ir.ops.conv import depthwise_phased
from onnxjit.ir.ops.conv.blocking import whole_vectors

RNG = np.random.default_rng(11)


def testwhole_vectors_ends_with_an_overlapping_vector():
    vl = tile_shape(4)[0]
    assert whole_vectors(1, 1 + 3 * vl + 6, 4, 1) == [(1, 1 + 3 * vl), (7 + 2 * vl, 7 + 3 * vl)]
    assert whole_vectors(1, 1 + 2 * vl, 4, 1) == [(1, 1 + 2 * vl)]  # whole already
    assert whole_vectors(1, vl, 4, 1) == [(1, vl)]  # shorter than one vector
    assert whole_vectors(1, 1 + 3 * vl + 6, 4, 2) == [(1, 1 + 3 * vl + 6)]  # strided: one loop


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [9, 17, 19, 34, 56, 61])
@pytest.mark.parametrize("bias,epilogue", [(False, False), (True, False), (True, True)])
def test_direct_rows_with_overlapping_tail(width, dtype, bias, epilogue, monkeypatch):
    monkeypatch.setattr(depthwise_phased, "MAX_WIDTH", 0)
    xs = (1, 3, 5, width)
    m = _model(xs, (3, 1, 3, 3), dict(pads=[1, 1, 1, 1]), bias, dtype, epilogue)
    x = RNG.standard_normal(xs).astype(dtype)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(run_via_loop_ir(m, [x])[0], want, rtol=tol, atol=tol)
    (y,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)
