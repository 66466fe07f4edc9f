"""Pointwise convs over few positions lowered as T = X^T W^T (`ir/ops_conv_transposed.py`):
which convs take the form, and its results against the reference (bounds-checked loop-IR
interpreter and native code, one and two threads) for 7x7 and 3x3 images, output channels
that are not whole panels or copy blocks, batches, f64, bias and a fused Relu + residual Add."""

from __future__ import annotations

import numpy as np
import pytest
from loop_harness import OPTIONS, run_via_loop_ir
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.driver import import_model, lower_signature
from onnxjit.ir import ops_conv_transposed
from onnxjit.ir.types import DType

RNG = np.random.default_rng(5)
TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(xs, cout, dtype=np.float32, bias=True, residual=False, group=1):
    n, c, h, w = xs
    t = TYPES[dtype]
    inits = [numpy_helper.from_array(
        (RNG.standard_normal((cout, c // group, 1, 1)) / np.sqrt(c)).astype(dtype), "w")]
    names = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(cout).astype(dtype), "b"))
        names.append("b")
    nodes = [helper.make_node("Conv", names, ["c"], kernel_shape=[1, 1], group=group)]
    ins = [helper.make_tensor_value_info("x", t, list(xs))]
    out = "c"
    if residual:  # Conv + Add + Relu: the epilogue reads the residual at the same positions
        ins.append(helper.make_tensor_value_info("r", t, [n, cout, h, w]))
        nodes += [helper.make_node("Add", ["c", "r"], ["s"]),
                  helper.make_node("Relu", ["s"], ["y"])]
        out = "y"
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info(out, t, [None] * 4)],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _feeds(m, xs, cout, dtype):
    feeds = [RNG.standard_normal(xs).astype(dtype)]
    if len(m.graph.input) > 1:
        feeds.append(RNG.standard_normal((xs[0], cout, *xs[2:])).astype(dtype))
    return feeds


def _kernels(m, feeds):
    gm = import_model(m.SerializeToString(), OPTIONS)
    sig = tuple((DType.from_numpy(a.dtype), a.shape) for a in feeds)
    _, prog = lower_signature(gm, sig, OPTIONS)
    return [k.name for k in prog.kernels]


CASES = [
    # (x shape, output channels, dtype, bias, residual)
    ((1, 64, 7, 7), 128, np.float32, True, False),
    ((1, 96, 7, 7), 100, np.float32, False, False),  # a chunk of 36 channels: partial copy block
    ((2, 64, 7, 7), 200, np.float32, True, True),  # batch, residual + Relu epilogue
    ((1, 80, 3, 3), 72, np.float32, True, True),
    ((1, 64, 3, 3), 96, np.float64, True, False),  # f64: 9 positions of 8-lane vectors
    ((1, 256, 5, 5), 512, np.float32, True, True),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("xs,cout,dtype,bias,residual", CASES)
def test_transposed_pointwise_matches_reference(xs, cout, dtype, bias, residual, threads):
    m = _model(xs, cout, dtype, bias, residual)
    feeds = _feeds(m, xs, cout, dtype)
    assert "conv_gemm_t" in _kernels(m, feeds)
    names = [i.name for i in m.graph.input]
    want = ReferenceEvaluator(m).run(None, dict(zip(names, feeds)))[0]
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(run_via_loop_ir(m, feeds)[0], want, rtol=tol, atol=tol)
    (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(*feeds)
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("xs,cout,group,why", [
    ((1, 64, 8, 8), 128, 1, "64 positions: whole vectors"),
    ((1, 48, 7, 7), 128, 1, "depth below MIN_DEPTH"),
    ((1, 64, 7, 7), 32, 1, "fewer channels than a panel"),
    ((1, 128, 7, 7), 128, 2, "two groups"),
])
def test_other_pointwise_convs_keep_the_usual_form(xs, cout, group, why):
    m = _model(xs, cout, group=group)
    feeds = _feeds(m, xs, cout, np.float32)
    assert "conv_gemm_t" not in _kernels(m, feeds), why


def test_switch_off_restores_the_usual_form(monkeypatch):
    m = _model((1, 64, 7, 7), 128)
    feeds = _feeds(m, (1, 64, 7, 7), 128, np.float32)
    monkeypatch.setattr(ops_conv_transposed, "TRANSPOSED", False)
    assert "conv_gemm_t" not in _kernels(m, feeds)
