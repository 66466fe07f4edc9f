"""Every elementwise math op over its whole domain, in float32, float16 and float64.

One model a dtype holds every op (one node and one output each) and runs on a sample of the
whole domain: float16 exhaustively (all 65536 values), float32 and float64 on random bit
patterns of every binade (subnormals included) of both signs, the special values (+-0, +-inf,
NaN, the extremes) and dense ranges where the forms change or results overflow (`inputs`).
Each result is compared with numpy in float64 (`REFS`, rewritten where the textbook formula
itself cancels) rounded to the output type: NaN exactly where the reference is NaN, infinities
and signed zeros exactly, finite results within MEASURED[dtype][op] + MARGIN units of the
spacing of the rounded reference (subnormal results count in the subnormal spacing): the worst
errors measured on these inputs (on an AVX-512 host) plus a margin.
Constant folding runs the same scalar rules through numpy (`ir/scalar_eval.py`): folded
results meet the same bounds. Pow runs every base sample against a set of exponents, in each
type and mixed types. The issue-26 regressions (Cosh/Sinh overflowing early, Acosh of x < 1,
Sin/Cos/Tan of huge arguments) and the RNN activations' tails have their own tests below.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from onnx import helper, numpy_helper

import onnxjit

erf = np.vectorize(math.erf, otypes=[np.float64])
erfc = np.vectorize(math.erfc, otypes=[np.float64])
SELU_A, SELU_G = 1.67326319217681884765625, 1.05070102214813232421875
TANH_K = math.sqrt(2 / math.pi)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x)


#: op -> (float64 reference, node attributes)
REFS = {
    "Exp": (np.exp, {}), "Log": (np.log, {}), "Sqrt": (np.sqrt, {}),
    "Reciprocal": (lambda x: 1 / x, {}), "Tanh": (np.tanh, {}), "Sigmoid": (_sigmoid, {}),
    "Erf": (erf, {}), "Sin": (np.sin, {}), "Cos": (np.cos, {}), "Tan": (np.tan, {}),
    "Asin": (np.arcsin, {}), "Acos": (np.arccos, {}), "Atan": (np.arctan, {}),
    "Sinh": (np.sinh, {}), "Cosh": (np.cosh, {}), "Asinh": (np.arcsinh, {}),
    "Acosh": (np.arccosh, {}), "Atanh": (np.arctanh, {}), "Softplus": (_softplus, {}),
    "Softsign": (lambda x: x / (1 + np.abs(x)), {}),
    "Mish": (lambda x: x * np.tanh(_softplus(x)), {}),
    "Elu": (lambda x: np.where(x < 0, np.expm1(x), x), {}),
    "Selu": (lambda x: SELU_G * np.where(x > 0, x, SELU_A * np.expm1(x)), {}),
    "Celu": (lambda x: np.where(x > 0, x, np.expm1(x)), {}),
    "HardSwish": (lambda x: x * np.clip((x + 3) / 6, 0, 1), {}),
    "Swish": (lambda x: x * _sigmoid(x), {}),
    "Gelu": (lambda x: 0.5 * x * erfc(-x / math.sqrt(2)), {}),
    "GeluTanh": (lambda x: x * _sigmoid(2 * TANH_K * (x + 0.044715 * x ** 3)),
                 {"approximate": "tanh"}),
}
OPSET = 24  # Swish is new in 24; Celu-12 (f32 only) is the Celu of opsets 12..27
DTYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64}
#: worst errors in ulps measured on `inputs` (AVX-512 host), compiled code; x >= the limit
#: of TAILS. f64 errors are against numpy's float64, whose own error (up to ~1 ulp) they
#: include. Every f16 result is the correctly rounded one (0.5).
_F32 = {"Exp": 0.81, "Log": 1.05, "Sqrt": 0.5, "Reciprocal": 0.5, "Tanh": 2.44,
        "Sigmoid": 1.86, "Erf": 2.53, "Sin": 0.5, "Cos": 0.5, "Tan": 0.5, "Asin": 0.5,
        "Acos": 0.5, "Atan": 0.5, "Sinh": 1.78, "Cosh": 1.89, "Asinh": 1.85, "Acosh": 2.61,
        "Atanh": 1.82, "Softplus": 1.94, "Softsign": 1.42, "Mish": 3.39, "Elu": 1.0,
        "Selu": 2.65, "Celu": 1.0, "HardSwish": 2.33, "Swish": 2.44, "Gelu": 2.41,
        "GeluTanh": 2.73}
_F64 = {"Exp": 1.0, "Log": 1.0, "Sqrt": 0.0, "Reciprocal": 0.0, "Tanh": 2.0, "Sigmoid": 2.0,
        "Erf": 0.0, "Sin": 1.0, "Cos": 1.0, "Tan": 3.0, "Asin": 5.0, "Acos": 5.0, "Atan": 5.0,
        "Sinh": 2.0, "Cosh": 2.0, "Asinh": 2.0, "Acosh": 2.0, "Atanh": 2.0, "Softplus": 2.0,
        "Softsign": 0.0, "Mish": 5.0, "Elu": 1.0, "Selu": 2.0, "HardSwish": 2.0, "Swish": 3.0,
        "Gelu": 2.0, "GeluTanh": 3.0}
MEASURED = {"f32": _F32, "f16": dict.fromkeys(REFS, 0.5), "f64": _F64}
#: folded (numpy's float32 functions are less accurate than the compiled ones, e.g. exp
#: 2.2 ulp, and vary with the CPU numpy dispatches to)
MEASURED_FOLDED = {
    "f32": {**_F32, "Exp": 2.2, "Log": 2.62, "Sigmoid": 2.72, "Sinh": 2.69, "Cosh": 2.78,
            "Asinh": 2.9, "Acosh": 2.87, "Atanh": 3.38, "Softplus": 3.29, "Mish": 4.42,
            "Elu": 2.16, "Celu": 2.16, "Swish": 3.1, "GeluTanh": 2.79},
    "f16": dict.fromkeys(REFS, 0.5),
    "f64": {**_F64, "Mish": 4.0},
}
#: what the bounds allow beyond the measured worst case (other hosts round the last step of
#: exp differently, `mathlib.ldexp` without AVX-512; numpy dispatches by CPU)
MARGIN = {False: 0.6, True: 1.0}
#: ops whose -0 result may come out +0 (their formula does not define a sign for it)
UNSIGNED_ZERO = {"Celu"}
#: op -> (x below which, dtype -> bound there): tails with their own, looser bound, in ulps;
#: for Gelu in units of eps |x| (absolute: see below), MEASURED holds the x >= limit part.
#: - Mish, Swish: results below 2^-126 (f32; 2^-1022 f64) are x times a subnormal
#:   tanh(softplus(x)) or sigmoid(x), which carries few significant bits;
#: - Gelu "tanh": x sigmoid(u) with u ~ 0.0713 x^3: sigmoid turns the rounding of u (up to
#:   |u| ~ 600 before the result underflows) into up to |u| ulps;
#: - Gelu: 1 + erf(x/sqrt 2) cancels for x < -1 (as in onnxruntime and PyTorch): the error
#:   is erf's, about eps, times |x|/2, where the true result falls to 1e-8 |x| and below.
TAILS = {
    "Mish": (-87.0, {"f32": 64.0, "f16": 1.0, "f64": 64.0}),
    "Swish": (-87.0, {"f32": 64.0, "f16": 1.0, "f64": 64.0}),
    "GeluTanh": (-1.0, {"f32": 160.0, "f64": 2400.0, "f16": 1.0}),
    "Gelu": (-1.0, {"f32": 2.0, "f16": 2.0, "f64": 2.0}),
}
EPS = {"f32": 2.0 ** -24, "f16": 2.0 ** -24, "f64": 2.0 ** -53}  # f16 computes in f32


def _ops(dt: str) -> list[str]:
    return [op for op in REFS if op != "Celu" or dt == "f32"]


def _edges(dt: str) -> list[float]:
    """Where forms change, results overflow, or the reduction is hardest."""
    big = {"f16": [11.08, 11.76, 11.8], "f32": [88.72, 89.41, 89.42, 2.0 ** 28, 1.8e19],
           "f64": [709.78, 710.47, 710.48, 2.0 ** 28, 1.3e154, 1.35e154]}[dt]
    pts = [0.0, 1.0, 0.5, 2.0, 3.0, 20.0, 2.0 ** -12, 2.0 ** -27, 2.0 ** 20, 4096.0, 1e15, 1e20,
           1e30, 1.7e38] + big
    if dt != "f16":  # the hardest arguments of the trig reductions (Muller's worst cases)
        pts += [16367173 * 2.0 ** 72, 10741887 * 2.0 ** 11, 16367173 * 2.0 ** 73]
    if dt == "f64":  # (its worst case, 6381956970095103 2^797, in test_trig_huge_arguments)
        pts += [1e300, 1.7e308]
    return pts


@functools.lru_cache(maxsize=None)
def inputs(dt: str) -> np.ndarray:
    t = DTYPES[dt]
    if dt == "f16":
        return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    rng = np.random.default_rng(26)
    if dt == "f32":
        bits = rng.integers(0, 0x7F800000, 40000, dtype=np.int64).astype(np.uint32).view(t)
        top = 100.0
    else:
        bits = rng.integers(0, 0x7FF0000000000000, 40000, dtype=np.int64).view(t)
        top = 800.0
    edges = np.array(_edges(dt), np.float64)
    near = np.concatenate([edges * (1 + d) for d in np.linspace(-2e-3, 2e-3, 41)])
    k = np.arange(1, 200001, 997, dtype=np.float64)  # near multiples of pi/2
    x = np.concatenate([bits, np.linspace(-top, top, 8001), np.linspace(-4, 4, 8001),
                        np.linspace(0.99, 2.01, 2001), np.linspace(-1.01, -0.99, 201),
                        k * (np.pi / 2), near, [np.inf, np.nan, np.finfo(t).max,
                                                np.finfo(t).smallest_subnormal]])
    with np.errstate(over="ignore"):
        x = x.astype(t)
    return np.concatenate([x, -x])


def _model(ops: list[str], x: np.ndarray, const: bool = False):
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    nodes = [helper.make_node("Gelu" if op == "GeluTanh" else op, ["x"], [op], **REFS[op][1])
             for op in ops]
    outs = [helper.make_tensor_value_info(op, t, [x.size]) for op in ops]
    ins = [] if const else [helper.make_tensor_value_info("x", t, [x.size])]
    inits = [numpy_helper.from_array(x, "x")] if const else []
    g = helper.make_graph(nodes, "domains", ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 10
    return m


@functools.lru_cache(maxsize=None)
def results(dt: str, folded: bool = False) -> dict[str, np.ndarray]:
    """Every op of `dt` on `inputs(dt)`: compiled, or folded at compile time."""
    x = inputs(dt)
    if folded:  # numpy evaluates f16 results one by one: a third of the domain is enough
        x = x[::3].copy()
    ops = _ops(dt)
    fn = onnxjit.compile(_model(ops, x, folded), cache_dir=False)
    return dict(zip(ops, fn() if folded else fn(x)))


def errors(op: str, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(ulp error and absolute error of every finite result (0 elsewhere), descriptions of
    exact-value mismatches)."""
    with np.errstate(all="ignore"):
        ref = REFS[op][0](x.astype(np.float64))
        r = ref.astype(x.dtype)
    bad = []
    for what, mask in [("NaN", np.isnan(y) != np.isnan(r)),
                       ("inf", ~np.isnan(r) & (np.isinf(r) | np.isinf(y)) & (y != r)),
                       ("zero sign", (r == 0) & (y == 0) & (np.signbit(y) != np.signbit(r))
                        & (op not in UNSIGNED_ZERO))]:
        if mask.any():
            i = np.flatnonzero(mask)[:4]
            bad.append(f"{what}: x={x[i]} y={y[i]} ref={ref[i]}")
    fin = np.isfinite(r) & np.isfinite(y)
    absolute = np.zeros(x.shape)
    with np.errstate(all="ignore"):
        absolute[fin] = np.abs(y[fin].astype(np.float64) - ref[fin])
        err = absolute / np.spacing(np.abs(r)).astype(np.float64)
    return np.where(fin, err, 0.0), absolute, bad


def _check(dt: str, op: str, x: np.ndarray, y: np.ndarray, folded: bool = False) -> None:
    err, absolute, bad = errors(op, x, y)
    assert not bad, (op, dt, bad)
    tail = np.zeros(x.shape, bool)
    if op in TAILS:
        limit, bounds = TAILS[op]
        tail = x < limit
        if op == "Gelu":  # absolute, in units of eps |x|, on top of the result's half ulp
            with np.errstate(all="ignore"):
                scaled = np.maximum(absolute - np.spacing(np.abs(y)) / 2, 0) / (
                    EPS[dt] * np.abs(x.astype(np.float64)))
            worst = np.where(tail & np.isfinite(scaled), scaled, 0).max()
        else:
            worst = np.where(tail, err, 0).max()
        assert worst <= bounds[dt], f"{op} {dt} below {limit}: {worst:.3g}"
    err = np.where(tail, 0.0, err)
    k = int(np.argmax(err))
    bound = (MEASURED_FOLDED if folded else MEASURED)[dt][op] + MARGIN[folded]
    assert err[k] <= bound, f"{op} {dt}: {err[k]:.3g} ulp at x={x[k]!r}, y={y[k]!r}"


CASES = [(op, dt) for dt in DTYPES for op in _ops(dt)]


@pytest.mark.parametrize("op,dt", CASES)
def test_whole_domain(op: str, dt: str) -> None:
    """Compiled code: within MEASURED + MARGIN ulps, special values exact."""
    _check(dt, op, inputs(dt), results(dt)[op])


@pytest.mark.parametrize("op,dt", CASES)
def test_folded_whole_domain(op: str, dt: str) -> None:
    """Constant folding (numpy through scalar_eval) within MEASURED_FOLDED + MARGIN."""
    _check(dt, op, inputs(dt)[::3], results(dt, folded=True)[op], folded=True)


#: Pow's exponents: signed zeros, integers (odd and even: the sign of a negative base), halves,
#: thirds, large and tiny ones, the infinities and NaN
POW_Y = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 1 / 3, 2.5, -2.5, 4.1, 7.3,
         -7.3, 100.5, 1e-3, 1e-30, np.inf, -np.inf, np.nan]
POW_INT_Y = [0, 1, -1, 2, 3, -3, 7, 11, 65521, -65521, 2 ** 20 + 1, 2 ** 24 + 1, -(2 ** 24 + 3),
             2 ** 31 - 1]
#: (base type, exponent type, ulp bound): libm's pow/powf err below 1 ulp; narrow bases compute
#: in f32 and mixed types in the wider one, then round to the base type (0.5, plus a hair for
#: rounding twice). f16 ** f32 once rounded the exponent to f16 (10 ** 4.1 was 5 ulps off) and
#: f16 ** int an exponent beyond 65504 to inf ((-1) ** 65521 was 1); float ** int computes in
#: f64, as onnxruntime and onnx.reference do (in f32 (-1) ** (2**24 + 1) was 1).
POW_CASES = [("f32", "f32", 1.0), ("f64", "f64", 1.0), ("f16", "f16", 0.51),
             ("f16", "f32", 0.51), ("f32", "f64", 0.51), ("f16", "i64", 0.51),
             ("f16", "i32", 0.51), ("f32", "i64", 0.51), ("f32", "i32", 0.51)]


@pytest.mark.parametrize("xt,yt,bound", POW_CASES)
@pytest.mark.parametrize("folded", [False, True])
def test_pow_whole_domain(xt: str, yt: str, bound: float, folded: bool) -> None:
    """Pow of every base sample (f16 a seventh of its domain) with each of POW_Y (or POW_INT_Y
    for integer exponents), against numpy's float64 power of the exact operands."""
    x = inputs(xt)[::7 if xt == "f16" else 5].copy()
    tx = x.dtype
    ty = np.dtype(DTYPES.get(yt) or {"i64": np.int64, "i32": np.int32}[yt])
    y = np.array(POW_Y if ty.kind == "f" else POW_INT_Y, np.float64).astype(ty)
    xs, ys = x[:, None], y[None, :]
    proto = helper.np_dtype_to_tensor_dtype
    node = helper.make_node("Pow", ["x", "y"], ["z"])
    ins = [helper.make_tensor_value_info("x", proto(tx), list(xs.shape)),
           helper.make_tensor_value_info("y", proto(ty), list(ys.shape))]
    out = helper.make_tensor_value_info("z", proto(tx), [x.size, y.size])
    inits = [numpy_helper.from_array(xs, "x"), numpy_helper.from_array(ys, "y")]
    g = helper.make_graph([node], "pow", [] if folded else ins, [out], inits if folded else [])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    m.ir_version = 10
    fn = onnxjit.compile(m, cache_dir=False)
    z = fn()[0] if folded else fn(xs, ys)[0]
    # the bases' NaNs quiet: f16's signalling ones are quieted by widening them (vcvtph2ps,
    # what onnxjit compiles to), and numpy's own conversion keeps them signalling, which
    # libm's pow (numpy's loop on hosts without AVX-512) takes ** 0 to NaN, not 1
    x64 = xs.astype(np.float64)
    x64 = np.where(np.isnan(x64), np.nan, x64)
    with np.errstate(all="ignore"):
        ref = np.power(x64, ys.astype(np.float64))
        r = ref.astype(tx)
    nan = np.isnan(z) != np.isnan(r)
    assert not nan.any(), (xs[nan.any(1), 0][:4], ys[0, nan.any(0)][:4])
    fin = np.isfinite(r) & np.isfinite(z)
    exact = ~fin & ~np.isnan(r)
    assert (z[exact] == r[exact]).all(), "infinities"
    zero = (r == 0) & (z == 0)
    assert (np.signbit(z[zero]) == np.signbit(r[zero])).all(), "signed zeros"
    with np.errstate(all="ignore"):
        err = np.abs(z[fin].astype(np.float64) - ref[fin]) / np.spacing(np.abs(r[fin])).astype(
            np.float64)
    assert err.max(initial=0) <= bound, (xt, yt, err.max())


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


@pytest.mark.parametrize("act,ref", [("Elu", np.expm1), ("Softplus", _softplus)])
def test_rnn_activations_keep_tails(act: str, ref) -> None:
    """An RNN's Elu and Softplus activations are the ops' forms: e**x - 1 was 0 for |x| below
    2**-25 and log(1 + e**x) was 0 below x = -17 (f32)."""
    x = -np.geomspace(1e-30, 80, 301).astype(np.float32)
    one, zero = (numpy_helper.from_array(np.full((1, 1, 1), v, np.float32), n)
                 for v, n in ((1, "W"), (0, "R")))
    node = helper.make_node("RNN", ["X", "W", "R"], ["Y"], hidden_size=1, activations=[act])
    g = helper.make_graph([node], "rnn", [helper.make_tensor_value_info("X", 1, [1, x.size, 1])],
                          [helper.make_tensor_value_info("Y", 1, [1, 1, x.size, 1])], [one, zero])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
    m.ir_version = 10
    y = onnxjit.compile(m, cache_dir=False)(x.reshape(1, -1, 1))[0].ravel()
    want = ref(x.astype(np.float64))
    normal = np.abs(want) >= np.finfo(np.float32).tiny
    assert _ulps(y[normal], want[normal]).max() <= 4.0, act
