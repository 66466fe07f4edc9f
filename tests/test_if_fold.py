"""If nodes whose condition folds to a constant (shape guards, as torch exports them) are replaced
by their branch at compile time: one native program, no host-driven stages."""

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnxjit
from onnxjit.staged import Staged


def _branch(name: str, op: str, k: float) -> onnx.GraphProto:
    c = helper.make_node("Constant", [], [f"{name}_k"], value=helper.make_tensor(
        f"{name}_kv", TensorProto.FLOAT, [], [k]))
    n = helper.make_node(op, ["x", f"{name}_k"], [f"{name}_y"])
    return helper.make_graph([c, n], name, [], [helper.make_tensor_value_info(
        f"{name}_y", TensorProto.FLOAT, None)])


def _guarded(outer_if_on_input: bool) -> onnx.ModelProto:
    """y = (x * 2 if x.shape[0] == 1 else x + 3) [then, if `outer_if_on_input`, negated when
    flag != 0: an If on an input's value, which stays a run-time choice]."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Equal", ["n", "one"], ["is_one"]),
        helper.make_node("If", ["is_one"], ["g"], then_branch=_branch("t", "Mul", 2.0),
                         else_branch=_branch("e", "Add", 3.0)),
        helper.make_node("Relu", ["g"], ["r"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])]
    out = "r"
    if outer_if_on_input:
        neg = helper.make_graph([helper.make_node("Neg", ["r"], ["neg_y"])], "neg", [],
                                [helper.make_tensor_value_info("neg_y", TensorProto.FLOAT, None)])
        same = helper.make_graph([helper.make_node("Identity", ["r"], ["same_y"])], "same", [],
                                 [helper.make_tensor_value_info("same_y", TensorProto.FLOAT,
                                                                None)])
        nodes += [helper.make_node("Cast", ["flag"], ["flag_b"], to=TensorProto.BOOL),
                  helper.make_node("If", ["flag_b"], ["y"], then_branch=neg, else_branch=same)]
        inputs.append(helper.make_tensor_value_info("flag", TensorProto.INT64, []))
        out = "y"
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(
        out, TensorProto.FLOAT, None)], initializer=[
        helper.make_tensor("zero", TensorProto.INT64, [], [0]),
        helper.make_tensor("one", TensorProto.INT64, [], [1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _want(x: np.ndarray, flag: int = 0) -> np.ndarray:
    r = np.maximum(x * 2 if x.shape[0] == 1 else x + 3, 0)
    return -r if flag else r


def test_shape_guard_folds_to_one_native_program():
    fn = onnxjit.compile(_guarded(False), cache_dir=False, specialize="shape")
    for n in (1, 3):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_allclose(fn(x)[0], _want(x), rtol=1e-6)
        assert not isinstance(fn._last, Staged), "the shape guard should fold away"
        assert "If" not in fn.ir("graph")


def test_value_dependent_if_still_chooses_at_run_time():
    fn = onnxjit.compile(_guarded(True), cache_dir=False)
    x = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)
    for flag in (0, 1, 0, 1):
        f = np.array(flag, np.int64)
        np.testing.assert_allclose(fn(x, f)[0], _want(x, flag), rtol=1e-6)
    x3 = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(fn(x3, np.array(1, np.int64))[0], _want(x3, 1), rtol=1e-6)
