"""Dump the IR after every pass (graph IR, loop IR, LLVM IR, assembly) into a folder.

    python examples/dump_ir.py [DIR]
"""

import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

import onnxjit

out = Path(sys.argv[1] if len(sys.argv) > 1 else "dumps")
graph = helper.make_graph(
    [helper.make_node("Mul", ["x", "x"], ["sq"]), helper.make_node("Tanh", ["sq"], ["t"]),
     helper.make_node("Add", ["t", "x"], ["y"])],
    "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

fn = onnxjit.compile(model, dump_ir=out, cache_dir=False)
fn(np.linspace(-1, 1, 1000, dtype=np.float32))
for p in sorted(out.rglob("*")):
    if p.is_file():
        print(p)
print("\nloop IR of the fused kernel:\n")
print(fn.ir("loops"))
