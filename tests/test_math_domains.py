"""Math ops at the edges of their domains, in float32, float16 and float64: the issue-26
regressions (Cosh/Sinh overflowing early, Acosh of x < 1) against numpy in float64, Sin/Cos/Tan
of huge arguments against exact values.
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


def _exact_trig(x: float) -> tuple[float, float, float]:
    """(sin x, cos x, tan x) of a double, independently of the code under test: `decimal`
    with 460 digits, pi from Machin's formula, r = x - k pi/2 exactly, Taylor series of r."""
    import decimal
    from decimal import Decimal as D

    with decimal.localcontext() as ctx:
        ctx.prec = 460  # up to 309 integer digits of x, then 150 of the remainder

        def atan_inv(n: int) -> D:
            term, total, k = D(1) / n, D(0), 0
            while term != 0 and abs(term) > D(10) ** -(ctx.prec + 2):
                total += term / (2 * k + 1)
                term = -term / (n * n)
                k += 1
            return total

        half_pi = (16 * atan_inv(5) - 4 * atan_inv(239)) / 2
        m, e = math.frexp(x)
        xd = D(int(m * 2 ** 53)) * D(2) ** (e - 53)
        k = (xd / half_pi).to_integral_value(rounding=decimal.ROUND_HALF_EVEN)
        r = xd - k * half_pi  # |r| <= pi/4: 60 terms leave less than 10^-200
        s = sum(D(-1) ** j * r ** (2 * j + 1) / math.factorial(2 * j + 1) for j in range(60))
        c = sum(D(-1) ** j * r ** (2 * j) / math.factorial(2 * j) for j in range(60))
        q = int(k % 4)
        sin_x, cos_x = (s, c, -s, -c)[q], (c, -s, -c, s)[q]
        return float(sin_x), float(cos_x), float(sin_x / cos_x)


#: huge arguments: the type's maximum, powers of ten, and the arguments closest to a multiple
#: of pi/2 (Muller, "Elementary Functions": 16367173 2^72 for f32, 6381956970095103 2^797 for
#: f64, the latter within 4.7e-19 of one)
HUGE = {"f32": [1e15, 1e20, 1.7e38, float(np.finfo(np.float32).max), 16367173 * 2.0 ** 72,
                10741887 * 2.0 ** 11, 2.0 ** 20 + 0.5, 1647099.25],
        "f64": [1e15, 1e20, 1e22, 1e300, float(np.finfo(np.float64).max),
                6381956970095103 * 2.0 ** 797, 2.0 ** 20 + 0.5, 1e6 * math.pi]}


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_trig_huge_arguments(dt: str) -> None:
    """Item 9: Sin/Cos/Tan of huge arguments (Sin(1e20) was 2e33, Tan(1.7e38) NaN): within
    half an ulp in f32 (correctly rounded) and one ulp in f64 of the exact values, in a
    vector whose other lanes take the fast path."""
    t = DTYPES[dt]
    huge = np.array(HUGE[dt], np.float64).astype(t)
    x = np.empty(4 * huge.size, t)
    x[::4] = huge
    x[1::4], x[2::4], x[3::4] = -huge, t(0.5), t(-3.0)
    for k, op in enumerate(("Sin", "Cos", "Tan")):
        y = _run(op, x)
        exact = np.array([_exact_trig(float(v))[k] for v in x])
        err = _ulps(y, exact)
        bound = 0.5 if dt == "f32" else 1.0
        assert err.max() <= bound, (op, dt, x[np.argmax(err)], err.max())
