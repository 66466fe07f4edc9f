"""flush-denormals: subnormal weights of products become zeros (the products' results stay
those of onnxruntime), while other readers of the same constant keep the subnormals."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxjit
from onnxjit.driver import import_model
from onnxjit.options import CompileOptions
from onnxjit.passes import PassContext
from onnxjit.passes.flush_denormals import flushed, run

RNG = np.random.default_rng(5)
TINY = np.finfo(np.float32).tiny


def _model() -> tuple:
    """y = x @ W (W a third subnormal), z = W + r: W is a product weight and an Add input."""
    w = RNG.standard_normal((16, 512)).astype(np.float32)  # MIN_ELEMENTS entries
    w[RNG.random(w.shape) < 0.35] *= np.float32(1e-39)
    g = h.make_graph(
        [h.make_node("MatMul", ["x", "w"], ["y"]), h.make_node("Add", ["w", "r"], ["z"])],
        "g", [h.make_tensor_value_info("x", TP.FLOAT, [4, 16]),
              h.make_tensor_value_info("r", TP.FLOAT, [16, 512])],
        [h.make_tensor_value_info("y", TP.FLOAT, [4, 512]),
         h.make_tensor_value_info("z", TP.FLOAT, [16, 512])],
        [nh.from_array(w, "w")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 10
    return m, w


def _subnormal(a: np.ndarray) -> bool:
    return bool(((np.abs(a) < TINY) & (a != 0)).any())


def test_flushed_zeroes_only_subnormals():
    a = np.array([1e-39, -1e-40, 0.0, TINY, -2.5, 1e-30], np.float32)
    np.testing.assert_array_equal(flushed(a), np.array([0, 0, 0, TINY, -2.5, 1e-30], np.float32))
    assert flushed(np.ones(3, np.float64)) is None


def test_a_few_subnormal_weights_stay_exact():
    # a small or mostly normal weight keeps its subnormals: times an input near 1e38 they are
    # terms of 1e-1 that onnxruntime keeps (a fuzzer's extreme values)
    assert flushed(np.array([1e-40, 1.0], np.float32), addend=False) is None
    big = np.ones(8192, np.float32)
    big[:40] = 1e-40  # 0.5%
    assert flushed(big, addend=False) is None
    big[:200] = 1e-40
    assert flushed(big, addend=False) is not None
    x = np.full((1, 2), 1e38, np.float32)
    m = h.make_model(h.make_graph(
        [h.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [h.make_tensor_value_info("x", TP.FLOAT, [1, 2])],
        [h.make_tensor_value_info("y", TP.FLOAT, [1, 1])],
        [nh.from_array(np.array([[1e-39], [0.0]], np.float32), "w")]),
        opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    y = onnxjit.compile(m, cache_dir=False)(x)[0]
    np.testing.assert_allclose(y, [[1e-1]], rtol=1e-5)


def test_product_reads_a_flushed_copy_other_readers_keep_the_original():
    m, w = _model()
    gm = import_model(m.SerializeToString(), CompileOptions(cache_dir=False))
    assert run(gm, PassContext()).changed
    mm, add = (next(n for n in gm.graph.nodes if n.op == op) for op in ("MatMul", "Add"))
    assert _subnormal(w) and not _subnormal(mm.inputs[1].const)
    np.testing.assert_array_equal(add.inputs[0].const, w)
    assert not run(gm, PassContext()).changed  # nothing left to flush


def test_results_match_onnxruntime():
    m, w = _model()
    feeds = {"x": RNG.standard_normal((4, 16)).astype(np.float32), "r": np.zeros_like(w)}
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    y, z = onnxjit.compile(m, cache_dir=False).run(None, feeds)
    np.testing.assert_allclose(y, want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(z, want[1])  # the Add keeps W's subnormals


def test_conv_bias_is_flushed():
    # a pruned channel: zero weights and a subnormal bias would make its outputs subnormal
    w = RNG.standard_normal((4, 3, 1, 1)).astype(np.float32)
    w[1] = 0
    b = np.array([0.5, 3e-39, -1.0, 0.0], np.float32)
    g = h.make_graph([h.make_node("Conv", ["x", "w", "b"], ["y"])], "g",
                     [h.make_tensor_value_info("x", TP.FLOAT, [1, 3, 5, 5])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, 4, 5, 5])],
                     [nh.from_array(w, "w"), nh.from_array(b, "b")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    gm = import_model(m.SerializeToString(), CompileOptions(cache_dir=False))
    assert run(gm, PassContext()).changed
    conv = gm.graph.nodes[0]
    np.testing.assert_array_equal(conv.inputs[2].const, np.array([0.5, 0, -1, 0], np.float32))
    np.testing.assert_array_equal(conv.inputs[1].const, w)
