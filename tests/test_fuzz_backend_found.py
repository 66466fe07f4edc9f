"""Wrong answers and unclean errors the third fuzz generator (`fuzz_backend`: the ONNX backend
node cases with new values) found, each as a small model against onnxruntime and
onnx.reference, which agree on all of them.

1. NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss: an element whose target is
   `ignore_index` contributes 0, not input * 0 (a NaN or inf input there made the loss NaN).
2. Attention: a fully masked row is 0 even where its masked scores are NaN (the probabilities
   were NaN * 0); Q is scaled before Q K^T, so a key near float max overflows where the
   references' (sqrt(s) Q)(sqrt(s) K)^T does (q . k overflowed first: inf - inf = NaN).
3. Tier 0's MaxPool follows the native code's NaN rule (`pooling.max_rule`, onnx.reference's):
   numpy's maximum let any NaN win.
4. Resize with run-time scales that make an absurd output: an `InputError` naming the node, not
   a failed allocation inside the compiler.
5. LinearAttention (gated delta rule): the decayed state e * S is formed before u = S^T k, in
   the spec's order, so an overflow there is the references' overflow (it was folded into
   S^T (e * k), which stayed finite).
6. Cast of NaN, inf or out-of-range floats to ints, and Pow of an int base with such a power:
   what onnxruntime and numpy give (C on x86-64: the int's minimum, wrapped), not a
   saturated value (NaN was 0, +inf the maximum).
7. DynamicQuantizeLinear of an input holding -inf: the scale is inf and -min / scale NaN,
   which C++'s std::min(255, NaN) (onnxruntime) and Python's min (onnx.reference) turn into
   a zero point of 255; it was 0. Of an input holding NaN, folded or in tier 0: the scale is
   NaN (the host evaluation's Python max(0.0, nan) had dropped it).
8. Attention with a float mask holding +inf where the causal rule masks the key: the
   references add the rule's -inf to the mask (NaN) rather than select it, so such a row is
   NaN; it was finite.
9. NegativeLogLikelihoodLoss summing losses near float max and one +inf: the float32 running
   sum overflowed to -inf first and gave NaN where the references give inf, the true sum (the
   sums are now float64, which has no such overflow).
10. LinearAttention's read o = scale * (q^T S): the scale was folded into q (alpha of the
   product, which the small-product loops apply to A), so a q^T S past float max stayed
   finite where the references overflow; it is now applied after the product.
11. LinearAttention's products (u = k^T S, o = q^T S) add products rounded one by one, as the
   references do: a query head holding inf and 3.4e38 has an infinite product and one that
   overflows with the other sign, NaN; the GEMM's fused 3.4e38 * s + (-inf) stayed -inf.
12. NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss "mean" with weights whose sum passes
   float max: the references' float32 sums are inf and the mean NaN; the float64 weight sum
   of item 9 stayed finite (mean inf). Each sum is now rounded to the input type first.
13. ScatterElements max/min with a NaN update: an update counts only when it compares greater
   (less), onnx.reference's rule; 1.09 then updates NaN and 1.23 is 1.23 in both references
   (onnxruntime lets NaN win, then 1.23), where NaN propagation kept NaN.
More in `test_fuzz_backend_found_more.py`.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from tier0_ref import Tier0

import onnxjit


def _model(nodes, inputs, outputs, opset, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _both(m: onnx.ModelProto, feeds: dict) -> list:
    """The references' outputs, after checking that they agree."""
    o = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    r = ReferenceEvaluator(m).run(None, feeds)
    for a, b in zip(o, r):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
    return o


def _check(m: onnx.ModelProto, feeds: dict) -> None:
    want = _both(m, feeds)
    fn = onnxjit.compile(m, cache_dir=False, tiered=False)
    got = fn.run(None, feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_ignored_target_keeps_nan_out_of_the_loss(op, reduction):
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    if op == "NegativeLogLikelihoodLoss":
        x = -np.abs(x)
    x[0, 0] = np.nan  # row 0 is ignored: its target is 2, the ignore_index
    x[0, 3] = np.inf
    y = np.array([2, 4, 3], np.int64)
    node = helper.make_node(op, ["x", "y"], ["z"], reduction=reduction, ignore_index=2)
    zshape = [3] if reduction == "none" else []
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5]),
                        helper.make_tensor_value_info("y", TensorProto.INT64, [3])],
               [helper.make_tensor_value_info("z", TensorProto.FLOAT, zshape)], 13)
    _check(m, {"x": x, "y": y})


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_large_losses_and_an_infinite_one_sum_to_inf(reduction):
    """Losses of +-3e38 and one +inf: the true sum is +inf. A float32 running sum meets two
    -3e38 losses in a row first (-inf, then NaN); the references' sums, in other orders, give
    inf here (in some orders they overflow too: no float32 order is right for every input)."""
    rng = np.random.default_rng(14)  # picked: the references agree on inf, in-order float32 NaN
    x = rng.choice(np.array([-3e38, 3e38, 1.0], np.float32), size=(24, 2),
                   p=[0.3, 0.2, 0.5]).astype(np.float32)
    x[rng.integers(24), 0] = -np.inf
    y = np.zeros(24, np.int64)
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "y"], ["z"],
                            reduction=reduction)
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [24, 2]),
                        helper.make_tensor_value_info("y", TensorProto.INT64, [24])],
               [helper.make_tensor_value_info("z", TensorProto.FLOAT, [])], 13)
    assert _both(m, {"x": x, "y": y})[0] == np.inf
    _check(m, {"x": x, "y": y})



@pytest.mark.parametrize("folded", [False, True])
def test_mean_loss_divides_sums_rounded_to_float32(folded):
    """Weights whose sum passes float max: the references' float32 sums are inf and inf / inf
    is NaN; a float64 weight sum stayed finite and made the mean inf. As a constant input the
    node folds: the numpy evaluation follows the same rule."""
    x = -np.abs(np.random.default_rng(2).standard_normal((4, 3))).astype(np.float32) - 1
    y = np.array([0, 0, 1, 0], np.int64)
    w = np.array([3.4e38, 1.0, 1.0], np.float32)
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "y", "w"], ["z"],
                            reduction="mean")
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
           helper.make_tensor_value_info("y", TensorProto.INT64, [4]),
           helper.make_tensor_value_info("w", TensorProto.FLOAT, [3])]
    out = [helper.make_tensor_value_info("z", TensorProto.FLOAT, [])]
    m = _model([node], ins, out, 13)
    assert np.isnan(_both(m, {"x": x, "y": y, "w": w})[0])
    if folded:
        m = _model([node], ins[1:2], out, 13, [onnx.numpy_helper.from_array(x, "x"),
                                               onnx.numpy_helper.from_array(w, "w")])
        got = onnxjit.compile(m, cache_dir=False, tiered=False).run(None, {"y": y})[0]
        assert np.isnan(got)
        return
    _check(m, {"x": x, "y": y, "w": w})

def test_fully_masked_row_is_zero_despite_nan_scores():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 2, 2, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 2, 8)).astype(np.float32)
    v = rng.standard_normal((1, 2, 2, 8)).astype(np.float32)
    k[0, 1, 0, 0] = np.nan  # head 1's scores against key 0 are NaN
    k[0, 1, 1, 0] = -np.inf
    mask = np.array([[False, True], [False, True]])  # with causal: query 0 sees no key
    node = helper.make_node("Attention", ["Q", "K", "V", "M"], ["Y"], is_causal=1)
    m = _model([node], [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, 2, 8])
                        for n in "QKV"] + [
        helper.make_tensor_value_info("M", TensorProto.BOOL, [2, 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 2, 2, 8])], 23)
    feeds = {"Q": q, "K": k, "V": v, "M": mask}
    want = _both(m, feeds)[0]
    assert not np.isnan(want[0, :, 0]).any() and (want[0, :, 0] == 0).all()
    _check(m, feeds)


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("stride,dilation", [(1, 1), (1, 2), (2, 1)])
@pytest.mark.parametrize("pads", [0, 1])
def test_tier0_max_pool_takes_nan_as_the_native_code_does(rank, stride, dilation, pads):
    """Tier 0 and the native code agree window by window on NaN taps (`pooling.max_rule`:
    strides and dilations 1 drop NaN, others keep a NaN first tap), and with onnx.reference
    where it runs; onnxruntime's float32 kernels differ from it in some windows, so it is not
    asked."""
    rng = np.random.default_rng(rank * 10 + stride * 3 + dilation + pads)
    shape = (1, 2) + (7,) * rank
    x = rng.standard_normal(shape).astype(np.float32)
    drop = stride == dilation == 1  # onnx.reference raises on a window of NaNs only
    x.reshape(-1)[rng.integers(0, x.size, x.size // (12 if drop else 4))] = np.nan
    x.reshape(-1)[rng.integers(0, x.size, 3)] = -np.inf
    m = _model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2] * rank,
                                 strides=[stride] * rank, dilations=[dilation] * rank,
                                 pads=[pads] * 2 * rank)],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], 12)
    want = onnxjit.compile(m, cache_dir=False, tiered=False)(x)[0]
    try:  # onnx.reference's padded pools of strides 1 fail on their own edges
        ref = ReferenceEvaluator(m).run(None, {"x": x})[0]
    except (IndexError, ValueError):
        assert pads and drop
    else:
        np.testing.assert_array_equal(want, ref)
    got = Tier0(m).run([x])
    assert got is not None, "tier 0 declined the call"
    np.testing.assert_array_equal(got[0], want)


def test_resize_to_an_absurd_size_is_an_input_error():
    node = helper.make_node("Resize", ["X", "", "S"], ["Y"], mode="nearest")
    m = _model([node], [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, 2, 4]),
                        helper.make_tensor_value_info("S", TensorProto.FLOAT, [4])],
               [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], 19)
    fn = onnxjit.compile(m, cache_dir=False, tiered=False)
    x = np.ones((1, 1, 2, 4), np.float32)
    big = np.array([0.5, 1, 1, 3.4e38], np.float32)  # a 0 dim beside a 10^39 one
    with pytest.raises(onnxjit.InputError, match=r"Resize.*exceed.*check the scales"):
        fn(x, big)
    assert fn(x, np.array([1, 1, 2, 2], np.float32))[0].shape == (1, 1, 4, 8)


def test_gated_delta_state_decays_before_the_delta():
    rng = np.random.default_rng(2)
    b, t, h, dk = 1, 1, 1, 4
    feeds = {"q": rng.standard_normal((b, t, h * dk)).astype(np.float32),
             "k": rng.standard_normal((b, t, h * dk)).astype(np.float32),
             "v": rng.standard_normal((b, t, h * dk)).astype(np.float32),
             "past": rng.standard_normal((b, h, dk, dk)).astype(np.float32),
             "decay": np.full((b, t, h * dk), 0.2, np.float32),  # e = 1.22
             "beta": np.full((b, t, h), 0.5, np.float32)}
    feeds["past"][0, 0, 3, 1] = 3.4e38  # e * S overflows; S^T (e * k) would not
    node = helper.make_node("LinearAttention", ["q", "k", "v", "past", "decay", "beta"],
                            ["y", "present"], q_num_heads=h, kv_num_heads=h)
    m = _model([node], [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
                        for n, a in feeds.items()],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                helper.make_tensor_value_info("present", TensorProto.FLOAT, None)], 27)
    want = _both(m, feeds)
    assert np.isinf(want[1]).any()
    _check(m, feeds)


CAST_VALUES = [np.nan, np.inf, -np.inf, 1e10, -1e10, 300, -300, 70000, -1, 2.5e9, 5e9, -2.5e9,
               1e20, -0.5, 1.5e19, 2147483520.0, -2147483648.0, 4294967040.0, 65504, -65504]


def test_linear_attention_scales_after_the_read():
    b, t, h, dk = 1, 1, 2, 4  # k = 0: the state stays past, o = scale * q^T past
    feeds = {"q": np.full((b, t, h * dk), 3e38, np.float32),
             "k": np.zeros((b, t, h * dk), np.float32),
             "v": np.ones((b, t, h * dk), np.float32),
             "past": np.full((b, h, dk, dk), 0.5, np.float32)}
    feeds["q"][0, 0, dk:] = 1.0  # head 1 stays finite
    node = helper.make_node("LinearAttention", ["q", "k", "v", "past"], ["y", "present"],
                            q_num_heads=h, kv_num_heads=h, update_rule="linear")
    m = _model([node], [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
                        for n, a in feeds.items()],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                helper.make_tensor_value_info("present", TensorProto.FLOAT, None)], 27)
    assert np.isinf(_both(m, feeds)[0][0, 0, :dk]).all()  # 4 x 1.5e38 overflows
    _check(m, feeds)


@pytest.mark.parametrize("src", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("to", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.int64,
                                np.uint64, np.uint32])
def test_cast_float_to_int_out_of_range_as_onnxruntime(src, to):
    """NaN, inf and out-of-range floats cast to ints as onnxruntime and numpy give them (C on
    x86-64), natively, folded, and through Pow with an int base; uint32 from float32/64 only
    where onnxruntime follows the documented rule (in range of int32, and not NaN)."""
    x = np.array(CAST_VALUES, src)
    if to == np.uint32 and src != np.float16:
        x = x[np.isfinite(x) & (x.astype(np.float64) >= -2**31) & (x.astype(np.float64) < 2**32)]
    to_t = helper.np_dtype_to_tensor_dtype(np.dtype(to))
    node = helper.make_node("Cast", ["x"], ["y"], to=to_t)
    m = _model([node], [helper.make_tensor_value_info(
        "x", helper.np_dtype_to_tensor_dtype(np.dtype(src)), ["n"])],
        [helper.make_tensor_value_info("y", to_t, ["n"])], 19)
    want = _both(m, {"x": x})[0]
    fn = onnxjit.compile(m, cache_dir=False, tiered=False)
    np.testing.assert_array_equal(fn(x)[0], want)
    np.testing.assert_array_equal(np.concatenate([fn(x[i:i + 1])[0] for i in range(len(x))]),
                                  want)
    from onnxjit.ir.ops.elementwise.cast import _numeric_cast  # the folding rule
    from onnxjit.ir.types import DType

    np.testing.assert_array_equal(_numeric_cast(x, DType.from_numpy(np.dtype(to)), True), want)


def test_pow_of_an_int_base_with_a_nan_exponent():
    x = np.array([1, 2, 3, 4], np.int32)
    y = np.array([4.9, np.nan, 40.0, -np.inf], np.float32)
    m = _model([helper.make_node("Pow", ["x", "y"], ["z"])],
               [helper.make_tensor_value_info("x", TensorProto.INT32, [4]),
                helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
               [helper.make_tensor_value_info("z", TensorProto.INT32, [4])], 15)
    _check(m, {"x": x, "y": y})


def test_attention_scales_before_a_key_near_float_max_overflows():
    """A key holding -inf and float max: the references score it -inf (onnx.reference's
    (sqrt(s) q) . (sqrt(s) k) stays finite but for the -inf term; onnxruntime's sequential
    FMAs never round the big product); onnxjit's vector partial sums overflowed q . k to
    inf - inf = NaN before the scale, unless Q is scaled first (fuzz case 7100744)."""
    rng = np.random.default_rng(3)
    q = rng.uniform(0.1, 1, (1, 1, 4, 8)).astype(np.float32)
    k = rng.uniform(0.1, 1, (1, 1, 6, 8)).astype(np.float32)
    v = rng.standard_normal((1, 1, 6, 8)).astype(np.float32)
    q[..., 7] = 2.0
    k[0, 0, 2, 4] = -np.inf
    k[0, 0, 2, 7] = 3.4e38  # 2 * 3.4e38 overflows; 2 / sqrt(8) * 3.4e38 does not
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], is_causal=1)
    m = _model([node], [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
                        for n, a in zip("QKV", (q, k, v))],
               [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 1, 4, 8])], 23)
    feeds = {"Q": q, "K": k, "V": v}
    want = _both(m, feeds)[0]
    assert np.isfinite(want).all()
    _check(m, feeds)
    got = Tier0(m).run([q, k, v])
    assert got is not None
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("folded", [False, True])
def test_dynamic_quantize_with_minus_inf_takes_the_references_zero_point(folded):
    """Native code, the host evaluation (constant folding) and tier 0 alike; +inf and
    NaN-free inputs keep their zero points; a NaN is the range's (scale NaN, zero point 255,
    every element 0: Python's max(0.0, nan) had dropped it in the host evaluation; the
    references agree on 12 elements, onnxruntime's scalar path drops it on 3)."""
    for x in ([-3.0, 7.5, 0.4, 2.5, -np.inf], [-3.0, np.inf, 0.4], [-2.0, 0.0, 5.0],
              [2.5, 1.1, 2.2, 3.3, 1.3, 1.7, 3.5, np.nan, 1.1, 2.2, 2.3, 1.0]):
        x = np.asarray(x, np.float32)
        node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
        outs = [helper.make_tensor_value_info(n, t, None) for n, t in
                (("y", TensorProto.UINT8), ("s", TensorProto.FLOAT), ("z", TensorProto.UINT8))]
        if folded:
            init = onnx.numpy_helper.from_array(x, "x")
            m = _model([node], [], outs, 11, [init])
            want = _both(m, {})
            got = onnxjit.compile(m, cache_dir=False, tiered=False).run(None, {})
        else:
            m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [len(x)])],
                       outs, 11)
            want = _both(m, {"x": x})
            got = onnxjit.compile(m, cache_dir=False, tiered=False).run(None, {"x": x})
            tier0 = Tier0(m).run([x])
            assert tier0 is not None, "tier 0 declined the call"
            for a, b in zip(tier0, want):
                np.testing.assert_array_equal(a, b)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_attention_mask_inf_under_the_causal_rule_is_nan(dtype):
    """A sliding window over an external cache (opset 25, nonpad_kv_seqlen), the fuzz case:
    every row has the +inf either at a key it sees or at one a rule masks, and both
    references give NaN everywhere. With is_causal alone onnxruntime masks by select (a
    finite row) while onnx.reference, the spec's function body, adds (NaN): onnxjit follows
    the spec there. Native code and tier 0 (float32) alike."""
    tp = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    rng = np.random.default_rng(3)
    shapes = {"Q": (2, 3, 4, 8), "K": (2, 3, 8, 8), "V": (2, 3, 8, 8), "M": (1, 8)}
    feeds = {k: rng.standard_normal(v).astype(dtype) for k, v in shapes.items()}
    feeds["M"][0, 3] = np.inf
    feeds["L"] = np.array([6, 7], np.int64)
    node = helper.make_node("Attention", ["Q", "K", "V", "M", "", "", "L"], ["Y"],
                            is_causal=1, left_window_size=2)
    ins = [helper.make_tensor_value_info(k, tp, v) for k, v in shapes.items()]
    ins.append(helper.make_tensor_value_info("L", TensorProto.INT64, [2]))
    m = _model([node], ins, [helper.make_tensor_value_info("Y", tp, None)], 25)
    want = _both(m, feeds)[0]
    assert np.isnan(want).all()
    got = onnxjit.compile(m, cache_dir=False, tiered=False).run(None, feeds)[0]
    assert np.isnan(got).all()
    if dtype == np.float32:  # tier 0 leaves float16 to the native code
        assert np.isnan(Tier0(m).run([feeds[k] for k in [*shapes, "L"]])[0]).all()

    # is_causal alone: onnx.reference's (the spec's) NaN rows 0-2, row 3 finite
    feeds = {k: rng.standard_normal(v).astype(dtype) for k, v in
             {"Q": (1, 2, 4, 8), "K": (1, 2, 5, 8), "V": (1, 2, 5, 8), "M": (4, 5)}.items()}
    feeds["M"][:3, 3] = np.inf  # causal offset 1: row i sees keys j <= i + 1
    node = helper.make_node("Attention", ["Q", "K", "V", "M"], ["Y"], is_causal=1)
    m = _model([node], [helper.make_tensor_value_info(k, tp, v.shape) for k, v in feeds.items()],
               [helper.make_tensor_value_info("Y", tp, None)], 23)
    with np.errstate(invalid="ignore"):
        want = ReferenceEvaluator(m).run(None, feeds)[0]
    got = onnxjit.compile(m, cache_dir=False, tiered=False).run(None, feeds)[0]
    assert np.isnan(want[0, :, :3]).all() and not np.isnan(want[0, :, 3]).any()
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3, equal_nan=True)


@pytest.mark.parametrize("rule", ["linear", "delta"])
def test_linear_attention_adds_rounded_products(rule):
    b, t, h, dk = 1, 1, 1, 4  # one step from past: o = scale * q^T S with S = past (+ k u^T)
    feeds = {"q": np.array([[[np.inf, 3.4e38, 1.0, 1.0]]], np.float32),
             "k": np.zeros((b, t, h * dk), np.float32),
             "v": np.ones((b, t, h * dk), np.float32),
             "past": np.ones((b, h, dk, dk), np.float32)}
    feeds["past"][0, 0, 0] = -1.0  # inf * -1 = -inf; 3.4e38 * 1 ... in the sum with 2: +inf
    feeds["past"][0, 0, 1] = 2.0
    names = ["q", "k", "v", "past"]
    if rule == "delta":  # u = beta (v - k^T S): k = [inf, 3.4e38, 0, 0] makes it NaN too
        feeds["k"] = feeds["q"].copy()
        feeds["beta"] = np.ones((b, t, h), np.float32)
        names += ["", "beta"]
    node = helper.make_node("LinearAttention", names, ["y", "present"], q_num_heads=h,
                            kv_num_heads=h, update_rule=rule)
    m = _model([node], [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
                        for n, a in feeds.items()],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                helper.make_tensor_value_info("present", TensorProto.FLOAT, None)], 27)
    assert np.isnan(_both(m, feeds)[0]).all()
    _check(m, feeds)


@pytest.mark.parametrize("folded", [False, True])
@pytest.mark.parametrize("red", ["max", "min"])
def test_scatter_elements_skips_a_nan_update_where_the_references_agree(red, folded):
    sign = 1 if red == "max" else -1
    data = np.array([[1.09, 2.0, 0.5]], np.float32) * sign
    ind = np.array([[0, 0, 2]], np.int64)
    upd = np.array([[np.nan, 1.23, 4.0]], np.float32) * sign
    node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction=red)
    feeds = {"d": data, "i": ind, "u": upd}
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64 if n == "i" else
                                         TensorProto.FLOAT, a.shape) for n, a in feeds.items()]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])]
    m = _model([node], ins, out, 18)
    want = _both(m, feeds)[0]
    assert want[0, 0] == np.float32(1.23 * sign)
    if folded:  # constants: the node folds through the numpy evaluation
        m = _model([node], [], out, 18, [onnx.numpy_helper.from_array(a, n)
                                          for n, a in feeds.items()])
        np.testing.assert_array_equal(onnxjit.compile(m, cache_dir=False).run(None, {})[0],
                                      want)
        return
    _check(m, feeds)
