"""4-bit MatMulNBits (`linalg.nbits`): models from onnxruntime's own 4-bit quantizer, run
against onnxruntime. Few rows (decode) take the 4-bit kernel (N not a multiple of its chunk,
zero points or symmetric, a bias), more rows the float product; a symbolic program chooses
at run time; the loop-IR interpreter agrees with onnxruntime on the 4-bit kernel."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from loop_harness import run_via_loop_ir
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.driver import import_model, lower_signature
from onnxjit.ir.types import DType

nbits = pytest.importorskip("onnxruntime.quantization.matmul_nbits_quantizer",
                            reason="the 4-bit quantizer needs onnx_ir")
RNG = np.random.default_rng(7)


def _model(k: int, n: int, block: int, symmetric: bool, bias: bool = False):
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["M", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    q = nbits.MatMulNBitsQuantizer(m, block_size=block, is_symmetric=symmetric)
    q.process()
    qm = q.model.model
    qm.ir_version = 10
    (node,) = [x for x in qm.graph.node if x.op_type == "MatMulNBits"]
    if bias:  # input 5; zero points and g_idx omitted when absent
        qm.graph.initializer.append(numpy_helper.from_array(
            RNG.standard_normal(n).astype(np.float32), "bias"))
        node.input.extend([""] * (5 - len(node.input)) + ["bias"])
    return qm


def _kernels(m, a):
    from loop_harness import OPTIONS

    gm = import_model(m.SerializeToString(), OPTIONS)
    _, prog = lower_signature(gm, ((DType.FLOAT, a.shape),), OPTIONS)
    return [k.name for k in prog.kernels]


def _ort(m, a):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"a": a})[0]


@pytest.mark.parametrize("rows,k,n,block,symmetric,bias", [
    (1, 128, 100, 32, False, False),  # N = 64 + 36: a partial chunk
    (3, 64, 64, 16, True, True),  # symmetric (no zero points), a bias
])
def test_decode_rows_take_the_4bit_kernel(rows, k, n, block, symmetric, bias):
    m = _model(k, n, block, symmetric, bias)
    a = RNG.standard_normal((rows, k)).astype(np.float32)
    assert "nbits_gemv" in _kernels(m, a)
    (y,) = onnxjit.compile(m, cache_dir=False, num_threads=2)(a)
    np.testing.assert_allclose(y, _ort(m, a), rtol=1e-4, atol=1e-4)


def test_4bit_kernel_in_the_interpreter():
    m = _model(32, 20, 32, False)  # one chunk, one block: the interpreter runs it in Python
    a = RNG.standard_normal((2, 32)).astype(np.float32)
    assert "nbits_gemv" in _kernels(m, a)
    np.testing.assert_allclose(run_via_loop_ir(m, [a])[0], _ort(m, a), rtol=1e-4, atol=1e-4)


def test_many_rows_take_the_float_product_and_symbolic_rows_choose():
    m = _model(64, 80, 32, False)
    a = RNG.standard_normal((16, 64)).astype(np.float32)
    names = _kernels(m, a)
    assert "nbits_gemv" not in names and "matmul" in names, names
    f = onnxjit.compile(m, cache_dir=False, specialize="dynamic")
    for rows in (16, 1, 9, 8):  # the float product, then the 4-bit kernel, by the rows
        a = RNG.standard_normal((rows, 64)).astype(np.float32)
        np.testing.assert_allclose(f(a)[0], _ort(m, a), rtol=1e-4, atol=1e-4)
