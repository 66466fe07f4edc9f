"""Bad models and bad calls end in a named onnxjit error that says what was wrong."""

import numpy as np
import pytest
from models import finish, mlp, one_node
from onnx import TensorProto, helper

import onnxjit
from onnxjit import InputError, ModelError, UnsupportedError


def _graph(nodes, inputs=("x",), outputs=("y",)):
    return finish(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in outputs]))


def test_undecodable_bytes():
    with pytest.raises(ModelError):
        onnxjit.compile(b"\xff\xfe not a model \x00\x01", cache_dir=False)


def test_missing_file(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        onnxjit.compile(tmp_path / "nope.onnx", cache_dir=False)


def test_cycle_names_node_and_value():
    m = _graph([helper.make_node("Relu", ["b"], ["a"], name="n1"),
                helper.make_node("Relu", ["a"], ["b"], name="n2"),
                helper.make_node("Add", ["x", "b"], ["y"], name="n3")])
    with pytest.raises(ModelError, match="n1") as e:
        onnxjit.compile(m, cache_dir=False)
    assert "'b'" in str(e.value)


def test_undefined_name():
    m = _graph([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")])
    with pytest.raises(ModelError, match="ghost") as e:
        onnxjit.compile(m, cache_dir=False)
    assert "adder" in str(e.value)


def test_duplicate_output():
    m = _graph([helper.make_node("Relu", ["x"], ["y"], name="first"),
                helper.make_node("Neg", ["x"], ["y"], name="second")])
    with pytest.raises(ModelError, match="'y'"):
        onnxjit.compile(m, cache_dir=False)


def test_unknown_op_names_op_and_node():
    m = _graph([helper.make_node("FrobnicateX", ["x"], ["y"], name="frob")])
    with pytest.raises((UnsupportedError, ModelError), match="FrobnicateX") as e:
        onnxjit.compile(m, cache_dir=False)(np.ones(2, np.float32))
    assert "frob" in str(e.value)


def test_unsupported_dtype_names_dtype():
    m = one_node("Identity", [("x", TensorProto.COMPLEX64, [2])],
                 [("y", TensorProto.COMPLEX64, [2])])
    with pytest.raises(UnsupportedError, match="c64"):
        onnxjit.compile(m, cache_dir=False)(np.ones(2, np.complex64))


@pytest.fixture(scope="module")
def fn():
    return onnxjit.compile(mlp(sizes=(8, 4)), cache_dir=False)


def test_wrong_dtype(fn):
    with pytest.raises(InputError, match="input'.*dtype|dtype") as e:
        fn(np.ones((1, 8), np.float64))
    assert isinstance(e.value, TypeError)
    assert "input" in str(e.value)


def test_wrong_rank(fn):
    with pytest.raises(InputError, match="rank 2"):
        fn(np.ones(8, np.float32))


def test_wrong_fixed_size(fn):
    with pytest.raises(InputError, match="dim 1 must be 8"):
        fn(np.ones((1, 9), np.float32))


def test_missing_and_unknown_names(fn):
    with pytest.raises(InputError, match="missing input 'input'"):
        fn()
    with pytest.raises(InputError, match="unknown input name 'inp'"):
        fn(inp=np.ones((1, 8), np.float32))
    with pytest.raises(InputError, match="unknown output"):
        fn.run(["nope"], {"input": np.ones((1, 8), np.float32)})


def test_inconsistent_symbolic_dims():
    m = one_node("Add", [("a", TensorProto.FLOAT, ["N"]), ("b", TensorProto.FLOAT, ["N"])],
                 [("y", TensorProto.FLOAT, ["N"])])
    f = onnxjit.compile(m, cache_dir=False)
    with pytest.raises(InputError, match="symbolic dim 'N'"):
        f(np.ones(3, np.float32), np.ones(4, np.float32))


def test_lists_and_scalars_convert(fn):
    (a,) = fn([[1.0] * 8])
    (b,) = fn(np.ones((1, 8), np.float32))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("target, pattern", [
    ([-2, 3], r"node \(Reshape\): shape \[-2, 3\] has invalid dim -2"),
    ([4, 3], r"cannot reshape \[6\] \(6 elements\) into \[4, 3\]"),
    ([-1, -1], r"more than one -1"),
])
def test_shape_values_from_the_call_that_do_not_fit_are_input_errors(target, pattern):
    # The target shape is an input: its values are only known at call time, so a bad one is
    # the call's fault (InputError naming the node and the call's inputs), and the model
    # keeps working for good values afterwards.
    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    fn = onnxjit.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                         cache_dir=False)
    x = np.arange(6, dtype=np.float32)
    with pytest.raises(InputError, match=pattern) as info:
        fn(x, np.array(target, np.int64))
    assert "this call's inputs (x: f32[6], s: i64[2])" in str(info.value)
    np.testing.assert_array_equal(fn(x, np.array([3, 2], np.int64))[0], x.reshape(3, 2))
