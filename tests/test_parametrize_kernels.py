"""parametrize-kernels: layers equal but for their sizes share one compiled function."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.passes import parametrize_kernels


def _depthwise_chain(channels=(24, 48, 96), size=20) -> tuple[object, np.ndarray]:
    """Depthwise 3x3 convs (+ Relu) on other channel counts and sizes, joined by 1x1 convs:
    the depthwise kernels differ only in integer constants."""
    rs = np.random.RandomState(0)
    nodes, inits = [], []
    x, c = "x", channels[0]
    for k, ch in enumerate(channels):
        if ch != c:
            w = numpy_helper.from_array((0.3 * rs.randn(ch, c, 1, 1)).astype(np.float32), f"p{k}")
            inits.append(w)
            nodes.append(helper.make_node("Conv", [x, w.name], [f"pw{k}"]))
            x, c = f"pw{k}", ch
        w = numpy_helper.from_array((0.3 * rs.randn(ch, 1, 3, 3)).astype(np.float32), f"d{k}")
        inits.append(w)
        stride = 1
        nodes.append(helper.make_node("Conv", [x, w.name], [f"dw{k}"], group=ch,
                                      pads=[1, 1, 1, 1], strides=[stride, stride]))
        nodes.append(helper.make_node("Relu", [f"dw{k}"], [f"r{k}"]))
        x = f"r{k}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, channels[0], size, size])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model, rs.randn(1, channels[0], size, size).astype(np.float32)


def _kernel_functions(fn) -> int:
    """Kernel functions defined in the model's LLVM module (a twin calls another's)."""
    return len(re.findall(r'^define [^@]*@"[^"]*\.k\d+\.\w+"\(', fn.ir("llvm"), re.M))


@pytest.mark.parametrize("specialize", ["shape", "dynamic"])
def test_layers_of_other_sizes_share_a_function(monkeypatch, specialize):
    model, x = _depthwise_chain()
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    counts = {}
    for on in (False, True):
        monkeypatch.setattr(parametrize_kernels, "MIN_GROUP", 2 if on else 10**9)
        model.doc_string = f"parametrize {on}"  # another model: no in-memory cache hit
        fn = onnxjit.compile(model, cache_dir=False, specialize=specialize)
        np.testing.assert_allclose(fn(x)[0], want, rtol=1e-4, atol=1e-4)
        counts[on] = _kernel_functions(fn)
        loops = fn.ir("loops")
        assert ("_params: i64[" in loops) == on
    assert counts[True] < counts[False]


def test_values_that_agree_stay_constants_and_checks_stay_apart():
    """Only the slots whose values differ become parameters; a kernel with a Check (its
    failure code is its own) is never grouped."""
    from onnxjit.ir.loop_builder import Builder
    from onnxjit.ir.loops import Buffer, Check, Const, Kernel, Program, i64
    from onnxjit.ir.types import DType
    from onnxjit.passes import PassContext

    x = Buffer("x", DType.FLOAT, (64,), "input", slot=0)
    y = Buffer("y", DType.FLOAT, (64,), "output", slot=1)

    def kernel(n: int, scale: float, check: bool) -> Kernel:
        b = Builder()
        with b.loop(0, n, hint="i") as i:
            b.store(y, i, b.op("mul", b.load(x, b.iadd(i, i64(3))), Const(scale, DType.FLOAT)))
        body = b.body
        if check:
            body.insert(0, Check(i64(1), "never"))
        return Kernel(f"k{n}", body)

    kernels = [kernel(10, 2.0, False), kernel(20, 2.0, False), kernel(30, 2.0, True),
               kernel(40, 3.0, False)]
    program = Program([x, y], kernels)
    parametrize_kernels.run(program, PassContext())
    params = [b for b in program.buffers if b.name.endswith("_params")]
    # k10 and k20 share a skeleton (k40 multiplies by another float, k30 has a Check)
    assert sorted(b.name for b in params) == ["k10_params", "k20_params"]
    assert [b.data.tolist() for b in params] == [[10], [20]]  # the offset 3 stays a constant
    assert not any(b.name.startswith(("k30", "k40")) for b in params)
