"""The wrong answers of issue 26 as small models, each with the feeds of its calls: the
differential oracle (`fuzz_oracle.judge`) judged every one "mismatch" or "error" before the
fixes (main at b1722b2), and must pass them all now.

`CASES` maps a name to (builder, the output shapes by the spec where onnx.reference has them
wrong); a builder returns (model, feeds list, symbolic).
"""

from __future__ import annotations

import numpy as np
from models import node_model
from onnx import TensorProto, helper, numpy_helper


def _graph(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "issue26", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _one(op, inputs, consts=(), opset=18, **attrs):
    m, feeds = node_model(op, inputs, consts=consts, opset=opset, **attrs)
    return m, [{i.name: a for i, a in zip(m.graph.input, feeds)}], False


def overridable_initializer():
    """w is a graph input with an initializer; Relu(w) is all-constant unless the caller
    passes w, which it does."""
    vi = helper.make_tensor_value_info
    m = _graph([helper.make_node("Relu", ["w"], ["y"])],
               [vi("x", TensorProto.FLOAT, [3]), vi("w", TensorProto.FLOAT, [3])],
               [vi("y", TensorProto.FLOAT, [3])],
               [numpy_helper.from_array(np.ones(3, np.float32), "w")])
    x = np.zeros(3, np.float32)
    return m, [{"x": x, "w": np.array([5, -1, 2], np.float32)}], False


def slice_negative_step():
    """Slice(arange(5), start -7, end -100, step -1): the spec clamps start to 0 -> [0]."""
    x = np.arange(5, dtype=np.float32)
    return _one("Slice", [x, np.array([-7]), np.array([-100]), np.array([0]), np.array([-1])],
                consts=(1, 2, 3, 4))


def gather_elements_folded():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[0, 2], [1, 0]], np.int64)
    vi = helper.make_tensor_value_info
    m = _graph([helper.make_node("GatherElements", ["d", "i"], ["g"], axis=0),
                helper.make_node("Add", ["g", "x"], ["y"])],
               [vi("x", TensorProto.FLOAT, [2, 2])], [vi("y", TensorProto.FLOAT, [2, 2])],
               [numpy_helper.from_array(data, "d"), numpy_helper.from_array(idx, "i")])
    return m, [{"x": np.zeros((2, 2), np.float32)}], False


def conv_transpose_same_symbolic():
    vi = helper.make_tensor_value_info
    w = np.ones((1, 1, 3, 3), np.float32)
    m = _graph([helper.make_node("ConvTranspose", ["x", "w"], ["y"], auto_pad="SAME_UPPER",
                                 kernel_shape=[3, 3], strides=[2, 2])],
               [vi("x", TensorProto.FLOAT, [1, 1, "H", 4])],
               [vi("y", TensorProto.FLOAT, [1, 1, "H2", 8])], [numpy_helper.from_array(w, "w")])
    rng = np.random.default_rng(0)
    return m, [{"x": rng.standard_normal((1, 1, h, 4)).astype(np.float32)} for h in (3, 5)], True


def _folded(op, data, extra=(), **attrs):
    """op on a constant, added to an input of the result's shape (so the graph has one)."""
    vi = helper.make_tensor_value_info
    inits = [numpy_helper.from_array(data, "d")] + [numpy_helper.from_array(e, f"e{k}")
                                                     for k, e in enumerate(extra)]
    probe, _ = node_model(op, [data, *extra], consts=tuple(range(1 + len(extra))), **attrs)
    shape = [d.dim_value for d in probe.graph.output[0].type.tensor_type.shape.dim]
    node = helper.make_node(op, ["d"] + [f"e{k}" for k in range(len(extra))], ["c"], **attrs)
    m = _graph([node, helper.make_node("Add", ["c", "x"], ["y"])],
               [vi("x", TensorProto.FLOAT, shape)], [vi("y", TensorProto.FLOAT, shape)], inits)
    return m, [{"x": np.ones(shape, np.float32)}], False


def maxpool_empty_constant():
    return _folded("MaxPool", np.zeros((0, 1, 4, 4), np.float32), kernel_shape=[2, 2])


def cumsum_empty_constant():
    return _folded("CumSum", np.zeros((2, 0), np.float32), (np.array(1, np.int64),),
                   exclusive=1)


def reduce_l2_float16():
    return _one("ReduceL2", [np.array([[300, 400, 1]], np.float16), np.array([1])],
                consts=(1,), keepdims=0)


def cosh_near_89():
    return _one("Cosh", [np.array([89.2, -89.3, 88.0, 1.0] * 4, np.float32)])


def sinh_near_89():
    return _one("Sinh", [np.array([89.2, -89.3, 88.0, 1.0] * 4, np.float32)])


def acosh_below_minus_4096():
    return _one("Acosh", [np.array([-5000.0, -1e10, 5000.0, 2.0] * 4, np.float32)])


def sin_cos_tan_1e20():
    vi = helper.make_tensor_value_info
    m = _graph([helper.make_node(op, ["x"], [op]) for op in ("Sin", "Cos", "Tan")],
               [vi("x", TensorProto.FLOAT, [16])],
               [vi(op, TensorProto.FLOAT, [4]) for op in ("Sin", "Cos", "Tan")])
    return m, [{"x": np.array([1e20, -1e20, 3e30, 1.0] * 4, np.float32)}], False


CASES = {
    "overridable_initializer": (overridable_initializer, None),
    "slice_negative_step": (slice_negative_step, [[(1,)]]),
    "gather_elements_folded": (gather_elements_folded, None),
    "conv_transpose_same_symbolic": (conv_transpose_same_symbolic, None),
    "maxpool_empty_constant": (maxpool_empty_constant, None),
    "cumsum_empty_constant": (cumsum_empty_constant, None),
    "reduce_l2_float16": (reduce_l2_float16, None),
    "cosh_near_89": (cosh_near_89, None),
    "sinh_near_89": (sinh_near_89, None),
    "acosh_below_minus_4096": (acosh_below_minus_4096, None),
    "sin_cos_tan_1e20": (sin_cos_tan_1e20, None),
}
