"""Softmax and LogSoftmax rows with NaN, +-inf and all -inf, against numpy's formula, and the
shape of the row max: the ordered fold (`Lanes` "fmax": select of a greater-than), not the
NaN-propagating `max` op, since the NaN reaches every output through the sum anyway."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxjit


def _model(op: str, n: int):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], axis=-1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, n])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _numpy(op: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        d = x - x.max(axis=1, keepdims=True)
        e = np.exp(d)
        s = e.sum(axis=1, keepdims=True)
        return e / s if op == "Softmax" else d - np.log(s)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("n", [7, 40, 133])  # one lane, the lanes, lanes and a tail
def test_rows_with_nan_and_inf(op, n):
    x = np.random.default_rng(n).standard_normal((5, n)).astype(np.float32) * 4
    x[0, n // 2] = np.nan  # a NaN inside the lanes
    x[1, n - 1] = np.nan  # a NaN in the tail
    x[2, 0] = np.inf  # +inf: NaN for the inf element (inf - inf), 0 or -inf elsewhere
    x[3, :] = -np.inf  # all -inf: NaN throughout
    y = onnxjit.compile(_model(op, n), cache_dir=False)(x)[0]
    np.testing.assert_allclose(y, _numpy(op, x), rtol=1e-5, atol=1e-6)
    assert np.isnan(y[:2]).all() and np.isnan(y[3]).all()


def test_row_max_is_the_ordered_fold():
    fn = onnxjit.compile(_model("Softmax", 133), cache_dir=False)
    fn(np.zeros((5, 133), np.float32))
    text = fn.ir("loops")
    assert "= max " not in text  # no NaN-propagating max op
    assert text.count("= select ") >= 16  # the 16 lanes of the fold
