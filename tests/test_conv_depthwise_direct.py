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


@pytest.mark.parametrize("bias,act", [(False, "Identity"), (True, "Relu")])
def test_float16_edges_sum_in_float32(monkeypatch, bias, act):
    """f16 taps sum in f32 and round once, in the edge columns and border rows too: products
    of 2e4-sized weights and x = 10 exceed float16's range on their own (their sums do not),
    and summing them in float16 gave inf - inf = NaN where onnxruntime gives 0 or inf."""
    from onnx import TensorProto, helper, numpy_helper

    monkeypatch.setattr(depthwise_phased, "MAX_WIDTH", 0)  # the direct nest
    c, k = 2, 3
    w = np.where(np.arange(c * k * k) % 2 == 0, 2e4, -2e4).reshape(c, 1, k, k)
    inits = [numpy_helper.from_array(w.astype(np.float16), "w")]
    if bias:
        inits.append(numpy_helper.from_array(np.array([1, -1], np.float16), "b"))
    nodes = [helper.make_node("Conv", ["x", "w", "b"][:2 + bias], ["c"], group=c,
                              auto_pad="SAME_UPPER", strides=[2, 1]),
             helper.make_node(act, ["c"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT16, [1, c, 5, 7])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT16, [1, c, 3, 7])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.full((1, c, 5, 7), 10, np.float16)
    got = onnxjit.compile(model, cache_dir=False)(x)[0]
    m32 = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, c, 5, 7])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, c, 3, 7])], [numpy_helper.from_array(
                numpy_helper.to_array(t).astype(np.float32), t.name) for t in inits]),
        opset_imports=[helper.make_opsetid("", 17)])
    with np.errstate(over="ignore"):
        want = ReferenceEvaluator(m32).run(None, {"x": x.astype(np.float32)})[0].astype(
            np.float16)
    assert not np.isnan(got).any()
    np.testing.assert_array_equal(got, want)
