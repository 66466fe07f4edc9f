"""Wrong answers the third fuzz generator (`fuzz_backend`) found, continued from
`test_fuzz_backend_found.py` (same helpers): small models against onnxruntime and
onnx.reference, which agree on each.

1. GroupNormalization of a group whose E[x^2] passes float max: both references follow the
   spec body E[x^2] - E[x]^2 (NaN, or the bias), the two-pass variance did not; it now takes
   that formula where E[x^2] is not finite.
2. BatchNormalization in training mode: the batch mean sums each image's plane, then the
   images (both references' order), so an image holding 3.4e38, 3.4e38 and -inf makes it NaN;
   one running sum over all images had gone -inf first.
3. Einsum's host evaluation (tier 0, constant folding): numpy's einsum with optimize=True,
   onnx.reference's call, whose BLAS products keep 1.8e308 * 1.37 - inf at -inf (numpy's own
   loops gave NaN).
4. A product of a short depth (Attention's scores over a head of 8): both references' BLAS
   adds the products in order with fused multiply-adds, so a product past float max meets the
   sum before it unrounded; vectorized partial sums rounded it to inf alone
   (`codegen.matmul.DOT_IN_ORDER`).
5. A pool's host evaluation (constant folding, and tier 0 where its kernel declines, as with
   ceil_mode) summed a window's taps with numpy's pairwise sum; the native code and
   onnxruntime add them in window order, which overflows differently near float max.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from test_fuzz_backend_found import _both, _check, _model, ort
from tier0_ref import Tier0

import onnxjit


@pytest.mark.parametrize("big", [1e30, 1.9e19])
def test_group_normalization_past_float_max_takes_the_spec_formula(big):
    """A group holding 1e30: the spec body's E[x^2] - E[x]^2 is inf - inf (NaN) in both
    references, where (x - mean)^2 normalized the group; 1.9e19: E[x^2] overflows alone
    (inf variance, x - mean over it 0), where the two-pass variance stayed finite. (MVN keeps
    two passes, as onnxruntime's kernel; onnx.reference's spec body disagrees with it there.)"""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 2, 2)).astype(np.float32)
    x[0, 1, 1, 1] = big
    feeds = {"x": x, "s": rng.standard_normal(4).astype(np.float32),
             "b": rng.standard_normal(4).astype(np.float32)}
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)
    m = _model([node], [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
                        for n, a in feeds.items()],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)], 21)
    want = _both(m, feeds)[0]
    assert np.isnan(want).any() == (big == 1e30)
    _check(m, feeds)


def test_batchnorm_training_sums_each_image_then_the_images():
    # the batch mean of a channel sums each image's plane, then the images, as both
    # references do: an image holding 3.4e38, 3.4e38 and -inf sums to NaN whatever another
    # image holds; one running sum over both images went -inf first (fuzz seed 10071287)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    x[0, 2, 1, 2] = -np.inf
    x[1, 2, 0, 2] = x[1, 2, 2, 4] = np.float32(3.4028235e38)
    x[1, 2, 3, 2] = -np.inf
    params = [rng.uniform(0.5, 1.5, 3), rng.standard_normal(3), rng.standard_normal(3),
              rng.uniform(0.5, 1.5, 3)]
    names = ["s", "bias", "mean", "var"]
    m = _model([helper.make_node("BatchNormalization", ["x", *names],
                                 ["y", "running_mean", "running_var"], training_mode=1,
                                 epsilon=0.01)],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
               + [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in names],
               [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                for n in ("y", "running_mean", "running_var")], 15)
    feeds = {"x": x, **{n: p.astype(np.float32) for n, p in zip(names, params)}}
    with np.errstate(all="ignore"):
        _check(m, feeds)
    assert np.isnan(onnxjit.compile(m, cache_dir=False, tiered=False).run(None, feeds)[1][2])


@pytest.mark.parametrize("folded", [False, True])
def test_einsum_host_evaluation_multiplies_as_the_references(folded):
    # a row (1.8e308, 1.8e308, 0.89) times a column (-1.55, 1.37, -0.50): onnxruntime gives
    # -inf (fused multiply-adds in order), numpy's own einsum loops round 1.8e308 * 1.37 to inf
    # first and give NaN; the host evaluation (tier 0, constant folding) took the latter (fuzz
    # seed 10072964). The host evaluation is onnx.reference's call (einsum, optimize=True:
    # numpy's BLAS), so it gives what onnx.reference gives on this host: -inf with OpenBLAS's
    # AVX-512 kernels, NaN with its AVX2 (Haswell) dgemm; the native code gives onnxruntime's
    big = np.finfo(np.float64).max
    x = np.array([[[big, big, 0.887]]], np.float64)
    y = np.array([[[-1.55], [1.37], [-0.50]]], np.float64)
    node = helper.make_node("Einsum", ["x", "y"], ["z"], equation="bij, bjk -> bik")
    out = [helper.make_tensor_value_info("z", TensorProto.DOUBLE, None)]
    if folded:
        m = _model([node], [], out, 12, [onnx.numpy_helper.from_array(x, "x"),
                                         onnx.numpy_helper.from_array(y, "y")])
        feeds: dict = {}
    else:
        m = _model([node], [helper.make_tensor_value_info(n, TensorProto.DOUBLE, a.shape)
                            for n, a in (("x", x), ("y", y))], out, 12)
        feeds = {"x": x, "y": y}
    with np.errstate(all="ignore"):
        native = ort.InferenceSession(m.SerializeToString(),
                                      providers=["CPUExecutionProvider"]).run(None, feeds)
        assert np.isneginf(native[0]).all()
        host = ReferenceEvaluator(m).run(None, feeds)
        got = onnxjit.compile(m, cache_dir=False, tiered=False).run(None, feeds)
        np.testing.assert_array_equal(got[0], (host if folded else native)[0])
        if not folded:
            tier0 = Tier0(m).run([x, y])
            assert tier0 is not None, "tier 0 declined the call"
            np.testing.assert_array_equal(tier0[0], host[0])


@pytest.mark.parametrize("specialize", ["shape", "dynamic"])
def test_short_dot_products_add_in_order_past_float_max(specialize):
    # q . k over a head of 8: 3.4e38 * -1 + 3.4e38 * 1.5 = 1.7e38 with fused multiply-adds in
    # order (onnxruntime, onnx.reference); partial sums had 3.4e38 * 1.5 = inf alone, and the
    # softmax of an inf score made the row NaN (fuzz seed 10131671)
    big = np.float32(3.4e38)
    q = np.zeros((1, 1, 4, 8), np.float32)  # 4 x 6 scores: the vectorized dot form
    q[0, 0, :, 1] = q[0, 0, :, 4] = big
    k = np.zeros((1, 1, 6, 8), np.float32)
    k[0, 0, 0, 1], k[0, 0, 0, 4] = -1.0, 1.5
    k[0, 0, 1:] = np.random.default_rng(2).uniform(-0.1, 0.1, (5, 8))
    v = np.random.default_rng(3).standard_normal((1, 1, 6, 4)).astype(np.float32)
    node = helper.make_node("Attention", ["q", "k", "v"], ["y", "", "", "qk"], scale=1.0)
    m = _model([node], [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                        for n in "qkv"],
               [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "qk")],
               23)
    feeds = {"q": q, "k": k, "v": v}
    with np.errstate(all="ignore"):
        want = _both(m, feeds)
        assert np.isfinite(want[1][0, 0, :, 0]).all() and np.isfinite(want[0]).all()
        got = onnxjit.compile(m, cache_dir=False, tiered=False, specialize=specialize).run(
            None, feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("folded", [False, True])
def test_pool_host_evaluation_adds_taps_in_window_order(folded):
    # nine taps -3e38, -3e38, 0, 0, 3e38, 3e38, 0, 0, 0: in order -inf (onnxruntime, the native
    # code); numpy's pairwise sum makes 3e38 + 3e38 = inf of the second four, then NaN (the
    # reference's). Tier 0 (ceil_mode: its kernel declines to the host evaluation) and
    # constant folding now give the native code's -inf (fuzz seed 10130262)
    big = np.float32(3e38)
    x = np.array([[[-big, -big, 0, 0, big, big, 0, 0, 0, 1, 2]]], np.float32)
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[9], strides=[2],
                            ceil_mode=1)
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if folded:
        m = _model([node], [], out, 19, [onnx.numpy_helper.from_array(x, "x")])
    else:
        m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                   out, 19)
    feeds = {} if folded else {"x": x}
    with np.errstate(all="ignore"):
        want = ort.InferenceSession(m.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        got = onnxjit.compile(m, cache_dir=False, tiered=False).run(None, feeds)[0]
        assert np.isneginf(want[0, 0, 0])
        np.testing.assert_array_equal(got, want)
        if not folded:
            tier0 = Tier0(m).run([x])
            assert tier0 is not None, "tier 0 declined the call"
            np.testing.assert_array_equal(tier0[0], want)
