"""Empty tensors through the CNN op families (Conv, ConvTranspose, the pools, LRN,
InstanceNormalization): a zero batch or zero channels compiles and gives the right shape and
values (zeros where a sum over nothing is taken), compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit

F = TensorProto.FLOAT


def _model(op: str, xshape: tuple, attrs: dict, wshape: tuple | None):
    names, inits = ["x"], []
    if wshape is not None:
        w = np.random.default_rng(1).standard_normal(wshape).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "w"))
        names.append("w")
    if op == "InstanceNormalization":
        c = xshape[1]
        inits += [numpy_helper.from_array(np.ones(c, np.float32), "s"),
                  numpy_helper.from_array(np.zeros(c, np.float32), "b")]
        names += ["s", "b"]
    g = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)], "empty",
        [helper.make_tensor_value_info("x", F, ["n", "c", *xshape[2:]])],
        [helper.make_tensor_value_info("y", F, [None] * len(xshape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("op, xshape, attrs, wshape", [
    ("Conv", (0, 3, 8, 8), {"pads": [1, 1, 1, 1]}, (4, 3, 3, 3)),     # im2col path
    ("Conv", (0, 3, 8, 8), {}, (4, 3, 1, 1)),                         # pointwise path
    ("Conv", (0, 3, 8, 8), {"group": 3}, (3, 1, 3, 3)),               # depthwise path
    ("Conv", (2, 0, 8, 8), {}, (4, 0, 3, 3)),                         # no input channels
    ("ConvTranspose", (0, 3, 8, 8), {}, (3, 2, 3, 3)),
    ("MaxPool", (0, 3, 8, 8), {"kernel_shape": [2, 2]}, None),
    ("AveragePool", (0, 3, 8, 8), {"kernel_shape": [2, 2]}, None),
    ("GlobalAveragePool", (0, 3, 8, 8), {}, None),
    ("GlobalMaxPool", (0, 3, 8, 8), {}, None),  # (onnxruntime refuses zero channels here)
    ("LRN", (0, 3, 8, 8), {"size": 3}, None),
    ("InstanceNormalization", (0, 3, 8, 8), {}, None),
])
def test_empty_batch_or_channels_match_onnxruntime(op, xshape, attrs, wshape):
    m = _model(op, xshape, attrs, wshape)
    x = np.random.default_rng(0).standard_normal(xshape).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = onnxjit.compile(m, cache_dir=False)(x)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
