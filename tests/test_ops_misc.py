"""Losses, Attention, RotaryEmbedding, quantization, Einsum, TopK, Det, Swish/SwiGLU: edge
semantics beyond the ONNX backend suite (checked through the loop-IR interpreter against
`onnx.reference`), run-time input errors, attribute/dtype errors and symbolic inference."""

from __future__ import annotations

import numpy as np
import pytest
from loop_harness import run_via_loop_ir
from models import node_model
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

from onnxjit.errors import InputError, ModelError, UnsupportedError
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.opdef import resolve
from onnxjit.ir.types import DType, Sym, TensorType

RNG = np.random.default_rng(0)


def model(op: str, inputs: list, n_out: int = 1, opset: int = 24, consts=(), **attrs):
    """A one-node model (`models.node_model`) at this file's default opset."""
    return node_model(op, inputs, n_out, opset, consts, **attrs)


def check(op: str, inputs: list, n_out: int = 1, opset: int = 24, rtol=1e-5, atol=1e-6,
          consts=(), **attrs) -> list:
    """Run through the loop IR and compare every output with onnx.reference."""
    m, feeds = model(op, inputs, n_out, opset, consts, **attrs)
    got = run_via_loop_ir(m, feeds)
    ref = ReferenceEvaluator(m).run(None, {f"in{k}": np.asarray(a) for k, a in
                                           enumerate(inputs) if a is not None and k not in
                                           consts})
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, r.dtype, g.shape, r.shape)
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
    return got


def infer(op: str, types: list, opset: int = 24, n_out: int = 1, **attrs):
    ins = [None if t is None else Value(TensorType(*t), f"x{k}") for k, t in enumerate(types)]
    node = Node(op, ins, [Value() for _ in range(n_out)], dict(attrs), version=opset)
    return resolve(node).infer(node)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


F = DType.FLOAT

# --------------------------------------------------------------------------- losses


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_nll_negative_ignore_index_and_weights(reduction):
    x = rand(3, 4, 2, 2)
    t = RNG.integers(0, 4, (3, 2, 2)).astype(np.int64)
    t[0, 0, 0] = t[2, 1, 1] = -3
    check("NegativeLogLikelihoodLoss", [x, t, rand(4)], opset=22, reduction=reduction,
          ignore_index=-3)


def test_nll_all_ignored_mean_is_nan_and_out_of_range_target():
    x, t = rand(2, 3), np.array([1, 1], np.int64)
    m, feeds = model("NegativeLogLikelihoodLoss", [x, t], ignore_index=1, opset=13)
    assert np.isnan(run_via_loop_ir(m, feeds)[0])
    m, feeds = model("NegativeLogLikelihoodLoss", [x, np.array([0, 3], np.int32)], opset=13)
    with pytest.raises(InputError, match="out of range"):
        run_via_loop_ir(m, feeds)


def test_softmax_cross_entropy_log_prob_output_f64():
    x = rand(2, 5, 3, dtype=np.float64)
    t = RNG.integers(0, 5, (2, 3)).astype(np.int32)
    check("SoftmaxCrossEntropyLoss", [x, t, rand(5, dtype=np.float64)], n_out=2, opset=13,
          reduction="mean", ignore_index=2, rtol=1e-12, atol=1e-12)


def test_loss_errors():
    with pytest.raises(ModelError, match="reduction"):
        infer("NegativeLogLikelihoodLoss", [(F, (2, 3)), (DType.INT64, (2,))], opset=13,
              reduction="avg")
    with pytest.raises(ModelError, match="target shape"):
        infer("NegativeLogLikelihoodLoss", [(F, (2, 3, 4)), (DType.INT64, (2, 5))], opset=13)
    n = Sym.var("N")
    t = infer("SoftmaxCrossEntropyLoss", [(F, (n, 3, 7)), (DType.INT64, (n, 7))], opset=13,
              n_out=2, reduction="none")
    assert t[0].shape == (n, 7) and t[1].shape == (n, 3, 7)

# --------------------------------------------------------------------------- attention


def test_attention_gqa_3d_cache_causal_bool_mask_qk_modes():
    q, k, v = rand(2, 3, 4 * 4), rand(2, 3, 2 * 4), rand(2, 3, 2 * 5)
    pk, pv = rand(2, 2, 2, 4), rand(2, 2, 2, 5)
    mask = RNG.random((2, 1, 3, 4)) > 0.3  # shorter than T = 5: padded with False
    for mode in (0, 1, 2, 3):
        # Mode 0 is the raw product (the spec); onnx.reference applies the softcap there too.
        check("Attention", [q, k, v, mask, pk, pv], n_out=4, opset=23, q_num_heads=4,
              kv_num_heads=2, is_causal=1, softcap=1.5 if mode else 0.0,
              qk_matmul_output_mode=mode)


def test_attention_fully_masked_rows_are_zero_and_float_mask_broadcasts():
    q, k, v = rand(1, 2, 3, 4), rand(1, 2, 5, 4), rand(1, 2, 5, 4)
    mask = np.ones((3, 5), bool)
    mask[1] = False
    y = check("Attention", [q, k, v, mask], opset=24)[0]
    assert np.all(y[:, :, 1] == 0)
    check("Attention", [q, k, v, rand(2, 1, 5)], opset=24, scale=0.3)


def test_attention_nonpad_and_window():
    q, k, v = rand(2, 2, 3, 4), rand(2, 2, 6, 4), rand(2, 2, 6, 4)
    nonpad = np.array([4, 6], np.int64)
    check("Attention", [q, k, v, None, None, None, nonpad], opset=24, is_causal=1)
    check("Attention", [q, k, v], opset=25, left_window_size=1, right_window_size=2)


def test_attention_errors_and_symbolic_shapes():
    with pytest.raises(ModelError, match="q_num_heads"):
        infer("Attention", [(F, (1, 2, 8)), (F, (1, 2, 8)), (F, (1, 2, 8))])
    with pytest.raises(ModelError, match="multiple"):
        infer("Attention", [(F, (1, 3, 2, 4)), (F, (1, 2, 2, 4)), (F, (1, 2, 2, 4))])
    with pytest.raises(ModelError, match="together"):
        infer("Attention", [(F, (1, 2, 2, 4))] * 3 + [None, (F, (1, 2, 1, 4))])
    with pytest.raises(ModelError, match="does not broadcast"):
        infer("Attention", [(F, (1, 2, 3, 4))] * 3 + [(DType.BOOL, (2, 2, 3))])
    b, s, p = Sym.var("B"), Sym.var("S"), Sym.var("P")
    out = infer("Attention", [(F, (b, 8, s, 4)), (F, (b, 2, s, 4)), (F, (b, 2, s, 6)), None,
                              (F, (b, 2, p, 4)), (F, (b, 2, p, 6))], n_out=4)
    assert out[0].shape == (b, 8, s, 6)
    assert out[1].shape == (b, 2, p + s, 4) and out[3].shape == (b, 8, s, p + s)


def test_rotary_position_ids_out_of_range():
    x, cos, sin = rand(1, 2, 2, 4), rand(3, 2), rand(3, 2)
    m, feeds = model("RotaryEmbedding", [x, cos, sin, np.array([[0, 3]], np.int64)], opset=23)
    with pytest.raises(InputError, match="position id"):
        run_via_loop_ir(m, feeds)
    check("RotaryEmbedding", [rand(1, 2, 12), rand(4, 2), rand(4, 2),
                              np.array([[3, 1]], np.int64)], opset=23, num_heads=2,
          rotary_embedding_dim=4, interleaved=1)

# --------------------------------------------------------------------------- quantization


def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1000, -1000, 2.4999], np.float32)
    for zp in (np.int8(3), np.uint8(128), np.int16(-7), np.uint16(9)):
        check("QuantizeLinear", [x, np.float32(1.0), zp], opset=21)
    y = check("QuantizeLinear", [x, np.float32(1.0)], opset=13)[0]
    assert y.dtype == np.uint8 and list(y[:4]) == [0, 2, 2, 0]


def test_quantize_dequantize_axis_and_blocks():
    x = rand(2, 5, 3) * 10
    check("QuantizeLinear", [x, np.abs(rand(5)) + 0.1, np.arange(5).astype(np.int8)], axis=1)
    scale = np.abs(rand(2, 2, 3)) + 0.1  # ceil(5 / 3) = 2 blocks, the last one short
    zp = RNG.integers(-3, 3, (2, 2, 3)).astype(np.int8)
    check("QuantizeLinear", [x, scale, zp], opset=21, axis=1, block_size=3)
    xq = RNG.integers(-100, 100, (2, 5, 3)).astype(np.int32)
    check("DequantizeLinear", [xq, scale, zp.astype(np.int32)], opset=21, axis=-2, block_size=3)
    check("DequantizeLinear", [xq.astype(np.int16), np.float32(0.5), np.int16(4)], opset=21)


def test_dynamic_quantize_and_qlinearmatmul():
    for x in (rand(3, 4) - 5, np.zeros((2, 2), np.float32), rand(7) * 3):
        check("DynamicQuantizeLinear", [x], n_out=3, opset=11)
    a = RNG.integers(0, 255, (2, 3, 4)).astype(np.uint8)
    bm = RNG.integers(-128, 127, (4, 5)).astype(np.int8)
    check("QLinearMatMul", [a, np.float32(0.05), np.uint8(120), bm, np.float32(0.02),
                            np.int8(-3), np.float32(0.1), np.uint8(100)], opset=21)


def test_quantize_errors():
    x = (F, (2, 3))
    with pytest.raises(UnsupportedError, match="f6e2m3"):
        infer("QuantizeLinear", [x, (F, ())], opset=21, output_dtype=TensorProto.FLOAT6E2M3)
    with pytest.raises(ModelError, match="per-axis scale"):
        infer("QuantizeLinear", [x, (F, (2,)), (DType.INT8, (2,))], opset=13, axis=1)
    with pytest.raises(ModelError, match="blocked scale"):
        infer("QuantizeLinear", [x, (F, (2, 3)), (DType.INT8, (2, 3))], opset=21,
              block_size=2)

# --------------------------------------------------------------------------- Einsum, TopK, Det


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("bij,bkj->bki", [(2, 3, 4), (2, 5, 4)]),       # Matmul path, transposed output
    ("ii->i", [(4, 4)]), ("iij->j", [(3, 3, 2)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),     # ellipsis broadcasting, implicit output
    ("ba,ab", [(3, 2), (2, 3)]), ("i,i->", [(5,), (5,)]), ("ij->", [(0, 3)])])
def test_einsum(eq, shapes):
    check("Einsum", [rand(*s) for s in shapes], opset=12, rtol=1e-4, atol=1e-5, equation=eq)


def test_einsum_int_and_errors():
    a = RNG.integers(-5, 5, (3, 4)).astype(np.int64)
    check("Einsum", [a, a], opset=12, equation="ij,kj->ik")
    with pytest.raises(ModelError, match="operands"):
        infer("Einsum", [(F, (2, 3))], opset=12, equation="ij,jk->ik")
    with pytest.raises(ModelError, match="sizes 3 and 4"):
        infer("Einsum", [(F, (2, 3)), (F, (4, 5))], opset=12, equation="ij,jk->ik")
    n = Sym.var("N")
    assert infer("Einsum", [(F, (n, 3)), (F, (3, 7))], opset=12,
                 equation="ij,jk->ki")[0].shape == (7, n)


def test_topk_ties_smallest_and_attribute_k():
    x = np.array([[3, 1, 3, 2, 1, 3], [0, 0, 0, 0, 0, 0]], np.int32)
    for largest in (0, 1):
        check("TopK", [x, np.array([4], np.int64)], n_out=2, opset=11, consts=(1,), axis=1,
              largest=largest)
    check("TopK", [rand(3, 5, 2)], n_out=2, opset=1, axis=1, k=5)
    with pytest.raises(ModelError, match="exceeds"):
        infer("TopK", [(F, (2, 3))], opset=1, n_out=2, k=4)
    out = infer("TopK", [(F, (Sym.var("N"), 5)), (DType.INT64, (1,))], opset=11, n_out=2)
    assert out[0].shape == (Sym.var("N"), None)  # k unknown until run time


def test_det_pivoting_singular_and_batch():
    a = np.array([[0, 2, 1], [1, 0, 0], [3, 1, 1]], np.float32)
    singular = np.array([[1, 2], [2, 4]], np.float64)
    check("Det", [a], opset=11, rtol=1e-5)
    assert check("Det", [singular], opset=22)[0] == 0
    check("Det", [rand(2, 3, 4, 4, dtype=np.float64)], opset=22, rtol=1e-10)
    with pytest.raises(ModelError, match="square"):
        infer("Det", [(F, (2, 3))], opset=11)


def test_swish_swiglu():
    x = rand(3, 4)
    check("Swish", [x], opset=24, alpha=0.7)
    check("SwiGLU", [x, rand(3, 4)], opset=28, alpha=1.3)
    with pytest.raises(ModelError, match="one shape"):
        infer("SwiGLU", [(F, (3, 4)), (F, (1, 4))], opset=28)
