"""simplify drops a Slice that keeps its whole input (`passes/simplify.py`): tf2onnx's masked
"strided_slice" after a conv disappears and the conv's epilogue fuses; slices that reverse,
subsample or cut are kept. Results against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit

RNG = np.random.default_rng(3)
BIG = 2**31 - 1


def _model(starts, ends, steps, conv: bool):
    """x (1, 4, 6, 1) -> [Conv 3x1 ->] Slice over all four axes -> Relu."""
    inits = {"s": np.array(starts, np.int64), "e": np.array(ends, np.int64),
             "a": np.arange(4, dtype=np.int64), "st": np.array(steps, np.int64),
             "w": RNG.standard_normal((4, 4, 3, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 1])] if conv else []
    nodes += [helper.make_node("Slice", ["c" if conv else "x", "s", "e", "a", "st"], ["t"]),
              helper.make_node("Relu", ["t"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4, 6, 1])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items() if conv or k != "w"])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("starts,ends,steps,conv,kept", [
    ([0] * 4, [BIG, BIG, BIG, 1], [1] * 4, True, False),  # tf2onnx's, after a conv
    ([0] * 4, [10**9] * 4, [1, 1, 1, 5], False, False),  # a big step on a dim of 1
    ([0] * 4, [BIG] * 4, [1, 1, 2, 1], False, True),  # subsamples
    ([0, 0, -1, 0], [BIG, BIG, -BIG, BIG], [1, 1, -1, 1], False, True),  # reverses
    ([0, 1, 0, 0], [BIG] * 4, [1] * 4, False, True),  # cuts
])
def test_whole_slices_go(starts, ends, steps, conv, kept):
    m = _model(starts, ends, steps, conv)
    x = RNG.standard_normal((1, 4, 6, 1)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    fn = onnxjit.compile(m, cache_dir=False)
    np.testing.assert_allclose(fn(x)[0], want, rtol=1e-5, atol=1e-5)
    graph = fn.ir("graph")
    assert ("Slice" in graph) == kept, graph
    if conv:
        assert "FusedConv" in graph, graph
