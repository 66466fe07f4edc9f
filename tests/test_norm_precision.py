"""Normalizations where the intermediate precision decides the answer: LRN on float16 sums
its squares in float32 (they overflow float16), GroupNormalization-21 computes its statistics
in `stash_type` even for double inputs; each found by the differential fuzzers (issue 26) and
checked against onnxruntime and a float64 computation."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from test_ops_pool_norm import RNG, model

import onnxjit


@pytest.mark.parametrize("size", [1, 3])
def test_float16_lrn_squares_in_float32(size: int) -> None:
    # x**2 of float16 values near 1e4 overflows float16: the divisor was inf and the output 0
    # where onnxruntime gives x / (1 + alpha/size * sum x**2)**beta (found by the
    # differential fuzzer, issue 26)
    a = (1e4 * RNG.standard_normal((1, 4, 3, 5))).astype(np.float16)
    w = a.astype(np.float64)
    sq = np.pad(w ** 2, ((0, 0), ((size - 1) // 2, size // 2), (0, 0), (0, 0)))
    sums = sum(sq[:, k:k + 4] for k in range(size))
    want = (w / (1 + 1e-4 / size * sums) ** 0.75).astype(np.float16)
    m = model("LRN", [a], 13, size=size)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("out0", TensorProto.FLOAT16,
                                                             list(a.shape)))
    got, = onnxjit.compile(m, cache_dir=False)(a)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=5e-3, atol=1e-2)
    folded = model("LRN", [a], 13, consts={0: a}, size=size)  # fold-constants' evaluation
    folded.graph.output[0].CopyFrom(helper.make_tensor_value_info("out0", TensorProto.FLOAT16,
                                                                  list(a.shape)))
    got, = onnxjit.compile(folded, cache_dir=False)()
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=5e-3, atol=1e-2)


def test_groupnorm21_double_follows_stash_type() -> None:
    # opset 21's function casts X to stash_type (float32 by default) for the statistics, even
    # for double inputs, as onnxruntime and onnx.reference do; stash_type=11 keeps double
    # (the differential fuzzer's seed 940242 found onnxjit computing double throughout)
    a = 3 + 4 * RNG.standard_normal((2, 4, 5))
    s, b = RNG.standard_normal(4), RNG.standard_normal(4)
    r = a.reshape(2, 2, 10)
    exact = ((r - r.mean(-1, keepdims=True)) / np.sqrt(r.var(-1, keepdims=True) + 1e-5)
             ).reshape(a.shape) * s.reshape(1, 4, 1) + b.reshape(1, 4, 1)
    for stash, tol in ((1, 1e-5), (11, 1e-12)):
        m = model("GroupNormalization", [a, s, b], 21, consts={1: s, 2: b}, num_groups=2,
                  stash_type=stash)
        m.graph.output[0].CopyFrom(helper.make_tensor_value_info("out0", TensorProto.DOUBLE,
                                                                 list(a.shape)))
        m.ir_version = 10
        want = ort.InferenceSession(m.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"in0": a})[0]
        got, = onnxjit.compile(m, cache_dir=False)(a)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        assert (np.abs(got - exact).max() > 1e-9) == (stash == 1)  # float32 statistics
        # the scale and bias then apply in double to the normalized value (the function body
        # casts it back to T first), not to a float32 result (fuzzer seed 1101656)
        assert (got != got.astype(np.float32)).any()
