"""Matrix products compiled once for symbolic sizes (`specialize="dynamic"`), run at many sizes.

Every model here declares symbolic dims; each is compiled once and then called with sizes
around the microkernel's tile edges (rows 1-13 and 0, columns around the 16/64-lane panels,
depths around the KC block), transposed operands, batch broadcasting, and int, float64 and
float16 element types, against numpy. A test also checks that one symbolic program served the
calls (no shape was compiled on its own).
"""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit

RNG = np.random.default_rng(7)
NP = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64,
      TensorProto.INT32: np.int32, TensorProto.FLOAT16: np.float16, TensorProto.INT64: np.int64}


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _data(shape, et):
    if et in (TensorProto.INT32, TensorProto.INT64):
        return RNG.integers(-5, 6, shape).astype(NP[et])
    return (RNG.standard_normal(shape) / 2).astype(NP[et])


def _compile(model):
    return onnxjit.compile(model, cache_dir=False, specialize="dynamic")


def _one_program(fn):
    assert fn._symbolic.reasons() == []
    assert [p for p in fn._symbolic.programs.values() if p is not None]


def _tol(et):
    return dict(rtol=2e-2, atol=2e-2) if et == TensorProto.FLOAT16 else dict(rtol=1e-4,
                                                                              atol=1e-4)


@pytest.mark.parametrize("et", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32,
                                TensorProto.FLOAT16])
def test_matmul_all_dims_symbolic(et):
    """A (B, M, K) @ B (B, K, N): every dim symbolic, batch broadcast from 1."""
    m = _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
               [helper.make_tensor_value_info("a", et, ["B", "M", "K"]),
                helper.make_tensor_value_info("b", et, ["C", "K", "N"])],
               [helper.make_tensor_value_info("y", et, [None] * 3)])
    fn = _compile(m)
    sizes = [(2, 2, 5, 7, 9), (1, 3, 1, 1, 1), (2, 2, 13, 70, 33), (3, 1, 6, 300, 17),
             (1, 1, 0, 4, 5), (2, 2, 4, 0, 5), (1, 1, 7, 3, 0), (2, 2, 64, 64, 64),
             (1, 1, 97, 130, 258)]
    for bsz, csz, mm, kk, nn in sizes:
        a, b = _data((bsz, mm, kk), et), _data((csz, kk, nn), et)
        y, = fn(a, b)
        ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(y.astype(np.float64), ref, **_tol(et))
    _one_program(fn)


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_transposed_symbolic(ta, tb):
    """Gemm with transA/transB and a bias, M and K symbolic against a constant or input B."""
    n = 48
    w = RNG.standard_normal((n, 40) if tb else (40, n)).astype(np.float32)
    c = RNG.standard_normal(n).astype(np.float32)
    for const_b in (True, False):
        k = 40 if const_b else "K"
        a_in = helper.make_tensor_value_info("a", TensorProto.FLOAT,
                                             [k, "M"] if ta else ["M", k])
        inputs = [a_in]
        inits = [numpy_helper.from_array(c, "c")]
        if const_b:
            inits.append(numpy_helper.from_array(w, "w"))
        else:
            inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT,
                                                        [n, "K"] if tb else ["K", n]))
        m = _model([helper.make_node("Gemm", ["a", "w", "c"], ["y"], transA=ta, transB=tb,
                                     alpha=0.5, beta=2.0)], inputs,
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 2)], inits)
        fn = _compile(m)
        for mm, kk in ((1, 40), (7, 40), (31, 40), (200, 40)) if const_b else \
                ((1, 1), (7, 40), (31, 300), (6, 0), (0, 5)):
            a = _data((kk, mm) if ta else (mm, kk), TensorProto.FLOAT)
            wb = w if const_b else _data((n, kk) if tb else (kk, n), TensorProto.FLOAT)
            y, = fn(a, *(() if const_b else (wb,)))
            aa = a.T if ta else a
            bb = wb.T if tb else wb
            np.testing.assert_allclose(y, 0.5 * aa @ bb + 2.0 * c, rtol=1e-4, atol=1e-4)
        _one_program(fn)


def test_mlp_epilogue_symbolic_rows():
    """MatMul + bias + Relu (a fused product with its epilogue in the stores), two layers."""
    w1 = RNG.standard_normal((64, 96)).astype(np.float32) / 8
    b1 = RNG.standard_normal(96).astype(np.float32)
    w2 = RNG.standard_normal((96, 40)).astype(np.float32) / 8
    m = _model([helper.make_node("MatMul", ["x", "w1"], ["h"]),
                helper.make_node("Add", ["h", "b1"], ["h2"]),
                helper.make_node("Relu", ["h2"], ["h3"]),
                helper.make_node("MatMul", ["h3", "w2"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 40])],
               [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
                numpy_helper.from_array(w2, "w2")])
    fn = _compile(m)
    for n in (3, 0, 1, 7, 8, 13, 64, 1000, 5):
        x = _data((n, 64), TensorProto.FLOAT)
        y, = fn(x)
        ref = np.maximum(x @ w1 + b1, 0) @ w2
        assert y.shape == (n, 40)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    _one_program(fn)


@pytest.mark.parametrize("n", [64, 256])
def test_every_row_tail(n):
    """Rows 0-20 and 25-26 of one symbolic product, whose last rows run as the tiles the
    run-time row plan picks (whole tiles, a balanced pair, one shorter tile, single rows),
    over a B read in place (n = 64: few columns) and a B prepacked at compile time, with and
    without a bias and Relu in the stores."""
    w = RNG.standard_normal((96, n)).astype(np.float32) / 8
    bias = RNG.standard_normal(n).astype(np.float32)
    m = _model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                helper.make_node("Add", ["h", "b"], ["h2"]),
                helper.make_node("Relu", ["h2"], ["y"]),
                helper.make_node("MatMul", ["x", "w"], ["z"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 96])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", n]),
                helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", n])],
               [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    fn = _compile(m)
    for rows in [*range(21), 25, 26]:
        x = _data((rows, 96), TensorProto.FLOAT)
        y, z = fn(x)
        ref = x.astype(np.float64) @ w
        np.testing.assert_allclose(z, ref, rtol=1e-4, atol=1e-4, err_msg=str(rows))
        np.testing.assert_allclose(y, np.maximum(ref + bias, 0), rtol=1e-4, atol=1e-4,
                                   err_msg=str(rows))
    _one_program(fn)


@pytest.mark.parametrize("et", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_every_column_edge_of_scores(et):
    """Attention scores Q @ K^T / 8 with run-time rows and columns (K's rows: a growing KV
    cache): columns around every count of vectors in the edge panel (one to a panel's worth,
    each with its lanes counted at run time), the scale in the tile's stores, one program."""
    m = _model([helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
                helper.make_node("MatMul", ["q", "kt"], ["s"]),
                helper.make_node("Div", ["s", "eight"], ["y"])],
               [helper.make_tensor_value_info("q", et, [2, "S", 64]),
                helper.make_tensor_value_info("k", et, [2, "T", 64])],
               [helper.make_tensor_value_info("y", et, [2, "S", "T"])],
               [numpy_helper.from_array(np.array(8.0, NP[et]), "eight")])
    fn = _compile(m)
    for s, t in [(1, 1), (3, 16), (1, 17), (7, 31), (1, 33), (2, 48), (1, 49), (6, 63),
                 (1, 64), (9, 65), (1, 100), (13, 127), (1, 128), (4, 130), (1, 0), (0, 5)]:
        q, k = _data((2, s, 64), et), _data((2, t, 64), et)
        y, = fn(q, k)
        ref = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 2, 1) / 8
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4, err_msg=f"{s} x {t}")
    _one_program(fn)


@pytest.mark.parametrize("et", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_zero_depth_at_run_time_runs_the_epilogue(et):
    """A run-time depth of 0 (an empty sequence feeding a product): C is zeros and the
    epilogue fused into its stores (here a Max with a constant) still runs on them; depths
    around it before and after. (Found by the differential fuzzer: all zeros came out.)"""
    c = _data((1, 1, 1, 4), et)
    m = _model([helper.make_node("MatMul", ["a", "b"], ["z"]),
                helper.make_node("Max", ["z", "c"], ["y"])],
               [helper.make_tensor_value_info("a", et, ["B", 4, 3, "K"]),
                helper.make_tensor_value_info("b", et, ["B", 4, "K", 4])],
               [helper.make_tensor_value_info("y", et, ["B", 4, 3, 4])],
               [numpy_helper.from_array(c, "c")])
    fn = _compile(m)
    for bb, kk in ((1, 2), (2, 0), (1, 5), (1, 0), (3, 300), (2, 0)):
        a, b = _data((bb, 4, 3, kk), et), _data((bb, 4, kk, 4), et)
        y, = fn(a, b)
        ref = a.astype(np.float64) @ b
        np.testing.assert_allclose(y, np.maximum(ref, c), rtol=1e-4, atol=1e-4,
                                   err_msg=f"{bb} x {kk}")
    _one_program(fn)
