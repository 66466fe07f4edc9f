"""Edge loops of a few iterations stay scalar (`Loop.few`, `llvmgen.FEW_SCALAR`).

A symbolic program's depthwise conv (here the stride-phased form, whose phase planes have
edge columns) and pooling compute their edge columns in loops whose
bounds are run-time values but whose trip counts are a few at most; the lowerings mark them
`few` and code generation keeps them scalar and rolled (vectorized, each was a vector body, a
remainder and run-time checks, compiled for nothing). The results match onnxruntime at sizes
with and without edge columns, with the rule on and off.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from models import finish
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit import runtime
from onnxjit.codegen import llvmgen

SCALAR_MD = '!"llvm.loop.vectorize.enable", i1 0'


def _model():
    """x[N, 8, H, W] -> 3x3 depthwise conv (pads 1) -> Relu -> AveragePool 3x3 stride 2
    (pads 1)."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((8, 1, 3, 3)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], group=8, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["y"], kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "edges", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 8, "H", "W"])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    return finish(graph)


@pytest.mark.parametrize("scalar", [True, False])
def test_edge_loops_are_few_and_scalar(monkeypatch, scalar):
    monkeypatch.setattr(llvmgen, "FEW_SCALAR", scalar)
    monkeypatch.setenv("ONNXJIT_COMPILE_JOBS", "0")  # one module: the IR text shows all
    runtime._MEMORY.clear()
    model = _model()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = onnxjit.compile(model, cache_dir=False, tiered=False, specialize="dynamic")
    for shape in ((1, 8, 9, 23), (2, 8, 16, 40), (1, 8, 2, 3)):
        x = np.random.default_rng(shape[3]).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(fn(x)[0], sess.run(None, {"x": x})[0], rtol=1e-5,
                                   atol=1e-5)
    kernels = {k.split()[0]: k for k in fn.ir("loops").split("\n  kernel @")[1:]}
    # the conv's edge columns of its phase planes; the pool's edge columns and their taps
    assert kernels["conv_depthwise_phased"].count(" few {") == 2, kernels
    assert kernels["averagepool"].count(" few {") == 4, kernels
    assert (SCALAR_MD in fn.ir("llvm")) == scalar
