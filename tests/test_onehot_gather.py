"""The onehot-gather pass (`passes/onehot_gather.py`): a 0/1 one-hot matrix times a constant
weight becomes a gather of the weight's rows. Models built here, run by onnxjit and
onnxruntime: OneHot's rules (negative indices count from the end, out-of-range ones give
zeros), jax's Equal + Cast spelling (negative and too-large bytes match no column), batches
of run-time size, a Gemm (alpha, beta, transB, C); and one-hots the pass must leave alone
(depth an input, values other than 0/1, a weight with an infinity, a compared vector other
than 0..D-1)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit

RNG = np.random.default_rng(11)
D, N = 7, 20
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, inits):
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(a, k) for k, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _weight(inf: bool = False) -> np.ndarray:
    w = RNG.standard_normal((D, N)).astype(np.float32)
    if inf:
        w[2, 3] = np.inf
    return w


def onehot_model(idx_type=I64, depth_input=False, values=(0.0, 1.0), inf=False):
    inits = {"w": _weight(inf), "v": np.array(values, np.float32)}
    inputs = [helper.make_tensor_value_info("i", idx_type, ["b", 3])]
    if depth_input:
        inputs.append(helper.make_tensor_value_info("d", I64, []))
    else:
        # onnxruntime has OneHot for int32 indices with an int32 or float depth only
        inits["d"] = np.array(D, np.int32 if idx_type == TensorProto.INT32 else np.int64)
    nodes = [helper.make_node("OneHot", ["i", "d", "v"], ["h"], axis=-1),
             helper.make_node("MatMul", ["h", "w"], ["y"])]
    return _model(nodes, inputs, inits)


def gemm_model(trans_b: int, alpha: float, beta: float):
    """OneHot of (b,) indices -> Gemm(h, W, C) with C one value per column."""
    w = _weight()
    inits = {"w": w.T.copy() if trans_b else w, "v": np.array([0.0, 1.0], np.float32),
             "d": np.array(D, np.int64), "c": RNG.standard_normal(N).astype(np.float32)}
    nodes = [helper.make_node("OneHot", ["i", "d", "v"], ["h"]),
             helper.make_node("Gemm", ["h", "w", "c"], ["y"], transB=trans_b, alpha=alpha,
                              beta=beta)]
    return _model(nodes, [helper.make_tensor_value_info("i", I64, ["b"])], inits)


def equal_model(compared=None):
    """jax's one-hot: bytes (b, L) reshaped to (b, L, 1), broadcast to a computed shape,
    compared with (1, 1, D), cast to float, times W."""
    inits = {"w": _weight(), "c": (np.arange(D) if compared is None else compared)
             .astype(np.int32).reshape(1, 1, D), "r": np.array([-1, 4, 1], np.int64),
             "tail": np.array([4, 1], np.int64), "s0": np.array([0], np.int64),
             "s1": np.array([1], np.int64)}
    nodes = [helper.make_node("Reshape", ["i", "r"], ["x"]),
             helper.make_node("Shape", ["i"], ["sh"]),
             helper.make_node("Slice", ["sh", "s0", "s1"], ["b"]),
             helper.make_node("Concat", ["b", "tail"], ["to"], axis=0),
             helper.make_node("Expand", ["x", "to"], ["xe"]),
             helper.make_node("Equal", ["xe", "c"], ["e"]),
             helper.make_node("Cast", ["e"], ["h"], to=F),
             helper.make_node("MatMul", ["h", "w"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("i", TensorProto.INT32, ["b", 4])],
                  inits)


def _check(m, feeds, gathered: bool, tol: float = 0.0):
    """onnxjit matches onnxruntime on every feed (bit for bit unless `tol`), rewritten or not
    as `gathered` says."""
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = onnxjit.compile(m, cache_dir=False)
    for f in feeds:
        (got,) = fn(**f)
        np.testing.assert_allclose(got, sess.run(None, f)[0], rtol=tol, atol=tol)
        graph = fn.ir("graph")
        product = "MatMul" in graph or "Gemm" in graph
        assert ("Gather" in graph and not product) == gathered, graph


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_onehot_rules(dtype):
    # in range, negative (from the end), out of range on both sides
    i = np.array([[0, 6, 3], [-1, -7, 2], [7, -8, 100]], dtype)
    m = onehot_model({np.int64: I64, np.int32: TensorProto.INT32}[dtype])
    _check(m, [{"i": i}, {"i": i[:1]}], gathered=True)


@pytest.mark.parametrize("trans_b,alpha,beta", [(0, 1.0, 1.0), (1, 0.5, -2.0)])
def test_gemm(trans_b, alpha, beta):
    i = np.array([0, 6, -1, 7, -9, 3], np.int64)
    _check(gemm_model(trans_b, alpha, beta), [{"i": i}], gathered=True, tol=1e-6)


def test_equal_cast_form():
    i = RNG.integers(0, D, (3, 4)).astype(np.int32)
    i[0] = [-1, D, 2**31 - 1, -(2**31)]  # match no column: rows of zeros
    _check(equal_model(), [{"i": i}, {"i": i[:2]}], gathered=True)


@pytest.mark.parametrize("model,why", [
    (lambda: onehot_model(depth_input=True), "depth is an input"),
    (lambda: onehot_model(values=(0.0, 2.0)), "values are not 0/1"),
    (lambda: onehot_model(values=(1.0, 0.0)), "values are swapped"),
    (lambda: onehot_model(inf=True), "0 * inf is NaN in the product"),
    (lambda: equal_model(np.arange(D) + 1), "compared with 1..D"),
])
def test_other_one_hots_keep_the_product(model, why):
    m = model()
    if m.graph.node[0].op_type == "OneHot":
        feeds = {"i": np.array([[0, 6, 3], [1, -2, 5]], np.int64)}
    else:
        feeds = {"i": np.array([[0, 6, 3, 1], [1, 2, 5, 7]], np.int32)}
    if len(m.graph.input) > 1:
        feeds["d"] = np.array(D, np.int64)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = onnxjit.compile(m, cache_dir=False)
    (got,) = fn(**feeds)
    np.testing.assert_allclose(got, sess.run(None, feeds)[0], rtol=1e-6, atol=1e-6)
    assert "MatMul" in fn.ir("graph"), why
