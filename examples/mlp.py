"""Build an MLP in code, compile it with onnxjit, and run it at two batch sizes.

    python examples/mlp.py
"""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onnxjit

rng = np.random.default_rng(0)
w1 = rng.standard_normal((784, 256)).astype(np.float32) * 0.05
w2 = rng.standard_normal((256, 10)).astype(np.float32) * 0.05
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
     helper.make_node("MatMul", ["r", "w2"], ["y"])],
    "mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 784])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
    [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

fn = onnxjit.compile(model)
for batch in (1, 32):
    x = rng.standard_normal((batch, 784)).astype(np.float32)
    (y,) = fn(x)
    ref = np.maximum(x @ w1, 0) @ w2
    print(f"batch {batch}: y {y.shape}, max |error| vs numpy {np.abs(y - ref).max():.2e}")
print("signatures:", fn.signatures)
