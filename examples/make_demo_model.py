"""Regenerate the bundled demo model `onnxjit/examples/mlp.onnx` (needs the `onnx` package).

An MLP 784-128-128-10 with ReLU and a symbolic batch dim "N", weights from a fixed seed.
    python examples/make_demo_model.py
"""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(sizes=(784, 128, 128, 10), seed=0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    x = "x"
    for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        w = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        bias = (0.1 * rng.standard_normal(b)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(bias, f"b{k}")]
        nodes.append(helper.make_node("MatMul", [x, f"w{k}"], [f"mm{k}"]))
        last = k == len(sizes) - 1
        nodes.append(helper.make_node("Add", [f"mm{k}", f"b{k}"], ["y" if last else f"a{k}"]))
        if not last:
            nodes.append(helper.make_node("Relu", [f"a{k}"], [f"h{k}"]))
            x = f"h{k}"
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", sizes[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", sizes[-1]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="onnxjit-examples")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    out = Path(__file__).resolve().parents[1] / "onnxjit" / "examples" / "mlp.onnx"
    onnx.save(build(), out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")
