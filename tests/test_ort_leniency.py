"""What onnxruntime accepts that a strict reading of the model would refuse (issue 28), each
checked against onnxruntime itself: the same calls must run (and match) or fail in both.

- a declared dim of -1 (Paddle exports) is an unknown dim, and so is a dim_param "?" (Paddle
  names H and W of one input both "?"): each "?" is its own unknown dim, not one symbol;
- an input declared as a scalar takes an array of any shape (a VAD model's sample rate passed
  as np.array([16000])); the program runs on the shape given, as onnxruntime's does;
- an input declared without a shape takes any shape;
- an output whose value_info entry has no shape, and a graph output with no type at all (an
  empty TypeProto) when a node computes it: inference types it, and the session reports
  the inferred type, as onnxruntime's does.
Still refused, by both: another rank or size for an input declared with dims, another dtype.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxjit


def _model(nodes: list, inputs: list, outputs: list, inits: list = (), value_info: list = ()
           ) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits), value_info=list(value_info))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _both(m: onnx.ModelProto, feeds: dict) -> tuple:
    """(onnxjit's outputs or error, onnxruntime's outputs or error)."""
    results = []
    for run in (lambda: onnxjit.InferenceSession(m, cache_dir=False).run(None, feeds),
                lambda: ort.InferenceSession(m.SerializeToString(),
                                             providers=["CPUExecutionProvider"]).run(None, feeds)):
        try:
            results.append(run())
        except Exception as e:  # noqa: BLE001 - either engine's refusal is compared
            results.append(e)
    return tuple(results)


def _same(m: onnx.ModelProto, feeds: dict) -> None:
    got, want = _both(m, feeds)
    assert not isinstance(want, Exception), f"onnxruntime refuses it: {want}"
    assert not isinstance(got, Exception), f"onnxjit refuses what onnxruntime runs: {got!r}"
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)


def _both_refuse(m: onnx.ModelProto, feeds: dict) -> None:
    got, want = _both(m, feeds)
    assert isinstance(want, Exception), "onnxruntime accepts it"
    assert isinstance(got, onnxjit.InputError), f"onnxjit accepts it: {got}"


def _relu(shape: list | None) -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"])],
                  [helper.make_tensor_value_info("x", T.FLOAT, shape)],
                  [helper.make_tensor_value_info("y", T.FLOAT, shape)])


def test_negative_declared_dim_is_unknown() -> None:
    m = _relu([-1, 3])
    assert [i.shape for i in onnxjit.InferenceSession(m, cache_dir=False).get_inputs()] == \
        [i.shape for i in ort.InferenceSession(m.SerializeToString()).get_inputs()] == \
        [[None, 3]]
    _same(m, {"x": np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3)})
    _both_refuse(m, {"x": np.ones((2, 4), np.float32)})


def test_question_mark_dims_are_each_unknown() -> None:
    m = _relu([-1, 3, "?", "?"])
    x = np.linspace(-1, 1, 2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
    _same(m, {"x": x})
    _same(m, {"x": x.reshape(2, 3, 6, 4)})
    _both_refuse(m, {"x": np.ones((2, 4, 4, 6), np.float32)})


def _vad() -> onnx.ModelProto:
    """A VAD-shaped graph: the scalar sample rate picks a branch and scales the result."""
    two = numpy_helper.from_array(np.float32(2), "two")
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["a"])], "then", [],
                               [helper.make_tensor_value_info("a", T.FLOAT, None)], [two])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "else", [],
                               [helper.make_tensor_value_info("b", T.FLOAT, None)])
    nodes = [helper.make_node("Equal", ["sr", "k"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Cast", ["sr"], ["srf"], to=T.FLOAT),
             helper.make_node("Div", ["y", "srf"], ["z"])]
    return _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [1, 4]),
                          helper.make_tensor_value_info("sr", T.INT64, [])],
                  [helper.make_tensor_value_info("z", T.FLOAT, [1, 4])],
                  [numpy_helper.from_array(np.array(16000, np.int64), "k")])


@pytest.mark.parametrize("sr", [np.array(16000), np.array([16000]), np.array([8000]),
                                np.array([[16000]])], ids=["scalar", "[1]", "[1]-else", "[1,1]"])
def test_declared_scalar_takes_one_element_arrays(sr: np.ndarray) -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    _same(_vad(), {"x": x, "sr": sr.astype(np.int64)})


def test_declared_scalar_takes_any_shape_like_onnxruntime() -> None:
    m = _model([helper.make_node("Identity", ["s"], ["y"])],
               [helper.make_tensor_value_info("s", T.FLOAT, [])],
               [helper.make_tensor_value_info("y", T.FLOAT, [])])
    for s in (np.float32(3), np.array([3], np.float32), np.array([1, 2], np.float32)):
        _same(m, {"s": np.asarray(s)})


def test_input_without_shape_takes_any_shape() -> None:
    m = _relu(None)
    for shape in ((2, 3), (4,)):
        _same(m, {"x": np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape)})


def test_output_value_info_without_shape() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Neg", ["t"], ["y"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
               [helper.make_tensor_value_info("y", T.FLOAT, None)],
               value_info=[helper.make_tensor_value_info("y", T.FLOAT, None),
                           helper.make_tensor_value_info("t", T.FLOAT, None)])
    _same(m, {"x": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)})


def test_untyped_graph_output_computed_by_a_node() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Cast", ["t"], ["y"],
                                                                       to=T.INT64)]
    m = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
               [helper.make_value_info("y", onnx.TypeProto())])
    _same(m, {"x": np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)})
    (out,) = onnxjit.InferenceSession(m, cache_dir=False).get_outputs()
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).get_outputs()[0]
    assert (out.name, out.type) == (want.name, want.type) == ("y", "tensor(int64)")


def test_what_onnxruntime_refuses_stays_refused() -> None:
    m = _relu([3])
    _both_refuse(m, {"x": np.ones((1, 3), np.float32)})   # another rank
    _both_refuse(m, {"x": np.ones(4, np.float32)})        # another size
    _both_refuse(m, {"x": np.ones(3, np.float64)})        # another dtype
    _both_refuse(_relu([1]), {"x": np.array(1.0, np.float32)})  # a scalar for [1]
