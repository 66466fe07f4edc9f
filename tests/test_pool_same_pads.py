"""Pools with auto_pad SAME and dilations, or strides past the kernel: onnxruntime's sizes and
windows (`pooling.semantics.geometry`), in native, symbolic and tier-0 code alike."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from test_ops_pool_norm import check, model, x

import onnxjit


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("n, k, s, d", [(7, 3, 2, 2), (8, 3, 1, 2), (9, 2, 3, 2),
                                        (5, 3, 3, 3), (12, 2, 4, 2)])
def test_same_pads_with_dilations_as_onnxruntime(op: str, auto_pad: str, n: int, k: int,
                                                 s: int, d: int) -> None:
    # SAME pads of a dilated pool: onnxruntime (and mostly onnx.reference) pad for the
    # undilated kernel and keep the windows that fit, fewer than the spec's ceil(n / s)
    # (found by the differential fuzzer, issue 26). Native, symbolic and tier-0 code alike.
    from onnxjit.driver import import_model
    from onnxjit.options import CompileOptions
    from onnxjit.tiered.interpreter import Plan

    attrs = dict(auto_pad=auto_pad, kernel_shape=[k, 2], strides=[s, 1], dilations=[d, 1])
    check(op, [x(1, 2, n, 5)], 19, **attrs)
    m = model(op, [x(1, 2, n, 5)], 19, **attrs)
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"
    inp = x(1, 2, n, 5)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"in0": inp})[0]
    got = onnxjit.compile(m, cache_dir=False, specialize="dynamic")(inp)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    g = import_model(m.SerializeToString(), CompileOptions.from_user({"cache_dir": False}))
    tier0 = Plan(g.graph).run([inp])
    assert tier0 is not None
    np.testing.assert_allclose(tier0[0], want, rtol=1e-6)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("n, k, s", [(12, 2, 4), (13, 1, 5), (14, 1, 4)])
def test_same_pads_negative_when_strides_pass_the_kernel(auto_pad: str, n: int, k: int,
                                                         s: int) -> None:
    # (ceil(n / s) - 1) * s + k - n < -1: onnxruntime's begin pad is negative, its windows
    # start one position later (its MaxPool refuses such pads, its AveragePool runs them)
    check("AveragePool", [x(1, 2, n, 5)], 19, auto_pad=auto_pad, kernel_shape=[k, 1],
          strides=[s, 1])
