"""Math ops at the edges of their domains, in float32, float16 and float64: the issue-26
regressions (Cosh/Sinh overflowing early, Acosh of x < 1), each against numpy in float64.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper

import onnxjit

DTYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64}


def _model(ops: list[str], x: np.ndarray):
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    nodes = [helper.make_node(op, ["x"], [op]) for op in ops]
    outs = [helper.make_tensor_value_info(op, t, [x.size]) for op in ops]
    ins = [helper.make_tensor_value_info("x", t, [x.size])]
    m = helper.make_model(helper.make_graph(nodes, "domains", ins, outs),
                          opset_imports=[helper.make_opsetid("", 24)])
    m.ir_version = 10
    return m


# issue 26, items 7-9 ------------------------------------------------------------------------

def _run(op: str, x: np.ndarray) -> np.ndarray:
    return onnxjit.compile(_model([op], x), cache_dir=False)(x)[0]


def _ulps(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|y - ref| in units of the spacing of ref rounded to y's type."""
    spacing = np.spacing(np.abs(ref.astype(y.dtype))).astype(np.float64)
    return np.abs(y.astype(np.float64) - ref) / spacing


@pytest.mark.parametrize("dt,edge", [("f32", 89.415987), ("f16", 11.7763), ("f64", 710.4758)])
def test_cosh_sinh_finite_up_to_overflow(dt: str, edge: float) -> None:
    """Item 7: e**x overflows before the halving in (e**x + e**-x)/2 for x between ln(max)
    and ln(2 max) (f32: 88.72-89.41); the results there are finite (and inf beyond)."""
    t = DTYPES[dt]
    lo = math.log(float(np.finfo(t).max))
    x = np.concatenate([np.linspace(lo - 0.05, edge * (1 - 2e-6), 97), [edge * 1.0001]])
    x = np.concatenate([x, -x]).astype(t)
    for op, fn in (("Cosh", np.cosh), ("Sinh", np.sinh)):
        y = _run(op, x)
        with np.errstate(over="ignore"):
            ref = fn(x.astype(np.float64))
            finite = np.isfinite(ref.astype(t))
        assert np.isfinite(y[finite]).all() and np.isinf(y[~finite]).all(), op
        assert _ulps(y[finite], ref[finite]).max() <= 3.0, op


@pytest.mark.parametrize("dt", list(DTYPES))
def test_acosh_nan_below_one_and_huge_arguments(dt: str) -> None:
    """Item 8: x < 1 gives NaN (x*x once overflowed to inf, giving -inf or inf below -4096
    in f32), and x beyond the square's overflow gives log(x) + ln 2, not inf."""
    t = DTYPES[dt]
    big = float(np.finfo(t).max)
    low = np.array([-big, -1e30, -5000.0, -4096.5, -300.0, -1.0, 0.0, 0.5, np.nextafter(t(1), 0),
                    -np.inf, np.nan])
    with np.errstate(over="ignore"):
        y = _run("Acosh", low.astype(t))
    assert np.isnan(y).all(), y
    high = np.geomspace(2.0, big / 2, 200).astype(t)
    y = _run("Acosh", high)
    assert _ulps(y, np.arccosh(high.astype(np.float64))).max() <= 3.0
    assert _run("Acosh", np.array([1.0, np.inf], t)).tolist() == [0.0, np.inf]
