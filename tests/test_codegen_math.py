"""Native transcendental math against float64 numpy: exp/expm1/log/tanh/sigmoid/erf/sin/cos/
tan accuracy in ulps over every binade, special values, vectorization (no scalar libm calls;
huge trig arguments behind one branch a vector), and the range-specialised short forms taken
when `ir.loop_ranges` proves |arg| <= 1. Programs are built and run with the helpers of
`test_codegen`.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy_free_erf import erf as erf64
from test_codegen import F32, native, ops_program

from onnxjit.codegen import mathlib, target
from onnxjit.ir.loop_builder import Builder, const, elementwise
from onnxjit.ir.loops import Buffer, Kernel, Program
from onnxjit.ir.types import DType

# transcendental accuracy ----------------------------------------------------------------------
# Worst error in ulps of the float32-rounded float64 result, over the whole range; measured by
# tools/fit_math.py (exp 0.91, log 1.15, tanh 2.49, sigmoid 2.25, erf 2.83) and on
# `math_inputs` (expm1 1.33; sin, cos, tan 0.49999: computed in f64, correctly rounded unless
# the f64 result lies within 2^-28 ulp of a midpoint) plus a margin.
MAX_ULP = {"exp": 1.5, "log": 1.5, "tanh": 3.0, "sigmoid": 3.0, "erf": 3.5, "expm1": 2.0,
           "sin": 0.51, "cos": 0.51, "tan": 0.51}
MATH = list(MAX_ULP)


def math_inputs() -> np.ndarray:
    """Every binade of both signs (random bit patterns, subnormals included), dense linear
    ranges where the forms change, and the special values."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 0x7F800000, 60000, dtype=np.int64).astype(np.uint32).view(np.float32)
    return np.concatenate([bits, -bits, np.logspace(-38, 38.5, 20000),
                           np.linspace(-120, 120, 20001), np.linspace(-4.5, 4.5, 20001),
                           [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 88.7, -103.9,
                            3.92, 9.1, 1e-5, -1e-5]]).astype(np.float32)


def math_refs(x: np.ndarray) -> list[np.ndarray]:
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        return [np.exp(x64), np.log(x64), np.tanh(x64), 1.0 / (1.0 + np.exp(-x64)), erf64(x64),
                np.expm1(x64), np.sin(x64), np.cos(x64), np.tan(x64)]


def ulps(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|y - ref| in units of the spacing of ref rounded to float32 (finite refs only)."""
    with np.errstate(over="ignore"):
        ulp = np.spacing(np.abs(ref.astype(np.float32))).astype(np.float64)
    return np.abs(y.astype(np.float64) - ref) / ulp


@pytest.mark.parametrize("scalef", [True, False], ids=["host", "no-ldexp"])
def test_f32_math_accuracy(scalef: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The float32 code against float64 numpy: within MAX_ULP over the whole range, with NaN
    and inf handled like numpy. "no-ldexp" forces exp's portable two-step 2^n scaling that
    hosts without AVX-512 use (on such a host both cases test it)."""
    if not scalef:
        monkeypatch.setattr(mathlib, "has_scalef", lambda: False)
    x = math_inputs()
    got = native(ops_program(F32, x.size, MATH, 1), True).run((x,))
    for name, y, ref in zip(MATH, got, math_refs(x)):
        with np.errstate(over="ignore"):
            ref32 = ref.astype(np.float32)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref32), err_msg=name)
        ok = ~np.isnan(ref32)
        inf = np.isinf(ref32) & ok
        np.testing.assert_array_equal(y[inf], ref32[inf], err_msg=name)
        fin = ok & ~inf
        err = ulps(y[fin], ref[fin])
        bad = err > MAX_ULP[name]
        assert not bad.any(), (name, x[fin][bad][:5], y[fin][bad][:5], ref[fin][bad][:5],
                               err.max())


def test_f32_math_special_values() -> None:
    """Exact results where float32 rounding makes them exact, and signed zeros."""
    x = np.array([0.0, -0.0, np.inf, -np.inf, 1e-5, -1e-5, 1e-30, 200.0, -200.0, 89.0,
                  -103.0, 9.5, -9.5, 4.0, -4.0], np.float32)
    got = dict(zip(MATH, native(ops_program(F32, x.size, MATH, 1), False).run((x,))))
    inf, nan = np.inf, np.nan
    want = {"exp": [1, 1, inf, 0, None, None, 1, inf, 0, inf, None, None, None, None, None],
            "tanh": [0, -0.0, 1, -1, None, None, 1e-30, 1, -1, 1, -1, 1, -1, None, None],
            "sigmoid": [.5, .5, 1, 0, None, None, .5, 1, 0, 1, None, None, None, None, None],
            "erf": [0, -0.0, 1, -1, None, None, None, 1, -1, 1, -1, 1, -1, 1, -1],
            "log": [-inf, -inf, inf, nan, None, None, None, None, nan, None, nan, None, nan,
                    None, nan],
            "expm1": [0, -0.0, inf, -1, None, None, 1e-30, inf, -1, inf, -1, None, None, None,
                      None],
            "sin": [0, -0.0, nan, nan, None, None, 1e-30, None, None, None, None, None, None,
                    None, None],
            "cos": [1, 1, nan, nan, 1, 1, 1, None, None, None, None, None, None, None, None],
            "tan": [0, -0.0, nan, nan, None, None, 1e-30, None, None, None, None, None, None,
                    None, None]}
    for name, values in want.items():
        for xi, yi, w in zip(x, got[name], values):
            if w is None:
                continue
            w32 = np.float32(w)
            assert (np.isnan(yi) and np.isnan(w32)) or (
                yi == w32 and np.signbit(yi) == np.signbit(w32)), (name, xi, yi, w)
    # results in the subnormal range are rounded once, like a correctly rounded libm
    assert ulps(got["exp"][10:11], np.exp(np.float64(-103.0)))[0] <= 1.0
    # erf near 0 stays relatively accurate (its leading term is 2/sqrt(pi) x)
    assert ulps(got["erf"][4:6], erf64(np.array([1e-5, -1e-5], np.float32).astype(np.float64))
                ).max() <= 2.0


def test_f32_erf_rounds_to_one_where_erf_does() -> None:
    """Every float32 of [3.5, 4] and its negative: erf is +-1 exactly where the correctly
    rounded value is (from x = 3.919206 on), else at most 1 - 2^-24 in magnitude, so a Cast to
    an integer agrees with the references (erf(3.889) gave 1, fuzz seed 10141081)."""
    lo, hi = np.array([3.5, 4.0], np.float32).view(np.int32)
    x = np.arange(lo, hi, dtype=np.int32).view(np.float32)
    x = np.concatenate([x, -x])
    y = native(ops_program(F32, x.size, ["erf"], 1), False).run((x,))[0]
    one = np.abs(erf64(x.astype(np.float64)).astype(np.float32)) == 1
    assert one.any() and not one.all()
    np.testing.assert_array_equal(np.abs(y) == 1, one)
    assert (np.sign(y) == np.sign(x)).all()


def test_vectorizes_transcendentals() -> None:
    n = 4096
    x = Buffer("x", F32, (n,), "input", slot=0)
    y = Buffer("y", F32, (n,), "output", slot=1)
    bld = Builder()
    elementwise(bld, y, [x], lambda b, a: b.op("add", b.op("add", b.op("tanh", a[0]),
                                                             b.op("erf", a[0])),
                                               b.op("sigmoid", a[0])))
    dump: dict[str, str] = {}
    art = native(Program([x, y], [Kernel("k", bld.body)]), True, dump)
    assert list(dump) == ["llvm.ll", "llvm-opt.ll", "asm.s"]
    assert "vector-function-abi-variant" not in dump["llvm.ll"]  # only trig has a rare path
    assert "ptr noalias captures(none)" in dump["llvm.ll"].replace('captures(none) noalias',
                                                                   'noalias captures(none)')
    lanes = target.vector_bytes() // 4
    opt = dump["llvm-opt.ll"]
    assert f"<{lanes} x float>" in opt
    for bad in ("tanhf", "expf", "erff", "ldexpf", "llvm.exp", "float*"):
        assert bad not in opt and bad not in dump["llvm.ll"] and bad not in dump["asm.s"], bad
    xs = np.linspace(-6, 6, n, dtype=np.float32)
    out, = art.run((xs,))
    x64 = xs.astype(np.float64)
    ref = np.tanh(x64) + erf64(x64) + 1 / (1 + np.exp(-x64))
    np.testing.assert_allclose(out, ref, atol=1e-6)


def test_trig_rare_path_vectorizes() -> None:
    """sin/cos/tan vectorize in f32 and f64; lanes beyond 2^20 (here every 37th, up to the
    type's maximum) take the exact reduction through the masked vector variants, behind one
    branch on the lanes' mask, and nothing calls libm."""
    n = 4099  # not a multiple of any vector width: the scalar remainder takes the path too
    for dt, tol in ((F32, 0.51), (DType.DOUBLE, 2.0)):
        t = dt.numpy
        x = np.linspace(-10, 10, n).astype(t)
        x[::37] = np.geomspace(2.0 ** 20, float(np.finfo(t).max) / 2, x[::37].size) * (
            (-1.0) ** np.arange(x[::37].size))
        ops = ["sin", "cos", "tan"]
        dump: dict[str, str] = {}
        got = native(ops_program(dt, n, ops, 1), True, dump).run((x,))
        opt = dump["llvm-opt.ll"]
        assert "_ZGV_LLVM_M8v_onnxjit.sin_big" in dump["llvm.ll"]
        assert re.search(r"x double>", opt) and re.search(r"bitcast <\d+ x i1> %\S+ to i\d+",
                                                          opt), "no vector loop with a mask test"
        for bad in ("@sin(", "@cos(", "@tan(", "llvm.sin", "llvm.cos", "llvm.tan", "sinf"):
            assert bad not in opt, bad
        x64 = x.astype(np.float64)
        for name, y, ref in zip(ops, got, (np.sin(x64), np.cos(x64), np.tan(x64))):
            spacing = np.spacing(np.abs(ref.astype(t))).astype(np.float64)
            assert (np.abs(y - ref) / spacing).max() <= tol, name


# range-specialised math -----------------------------------------------------------------------
# tools/fit_math.py: tanh_small 1.22, erf_small 2.31, sigmoid_small 0.77 ulp on |x| <= 1.
SMALL_MAX_ULP = {"tanh": 1.5, "erf": 3.0, "sigmoid": 1.0}


def bounded_program(n: int, ops: list[str], inner: str | None) -> Program:
    """out_<op>[i] = op(t) with t = clamp(x[i], -1, 1), or t = inner(x[i]) when given."""
    x = Buffer("x", F32, (n,), "input", slot=0)
    outs, bld = [], Builder()
    with bld.loop(0, n) as i:
        v = bld.load(x, i)
        t = (bld.op(inner, v) if inner else
             bld.op("min", bld.op("max", v, const(-1.0, F32)), const(1.0, F32)))
        for k, op in enumerate(ops):
            out = Buffer(op, F32, (n,), "output", slot=1 + k)
            outs.append(out)
            bld.store(out, i, bld.op(op, t))
    return Program([x] + outs, [Kernel("bounded", bld.body)])


def test_value_ranges() -> None:
    """Intervals flow through bounded functions and arithmetic; loads, accumulators and
    unknown ops stay unbounded."""
    from onnxjit.ir.loop_ranges import magnitude, value_ranges
    x = Buffer("x", F32, (8,), "input", slot=0)
    bld = Builder()
    with bld.loop(0, 8) as i:
        v = bld.load(x, i)
        t = bld.op("tanh", v)
        e = bld.op("erf", bld.op("mul", t, const(0.5, F32)))
        s = bld.op("sigmoid", bld.op("add", e, bld.op("abs", t)))
        q = bld.op("sqrt", t)
    r = value_ranges(bld.body)
    assert magnitude(r, v) == np.inf and magnitude(r, q) == np.inf
    assert magnitude(r, t) == 1.0
    assert abs(magnitude(r, e) - 0.5205) < 1e-3
    lo, hi = r[s]
    assert 0.35 < lo < 0.38 and 0.82 < hi < 0.83
    acc = bld.var(const(0.0, F32))
    with bld.loop(0, 8) as i:
        bld.assign(acc, bld.op("add", acc, bld.op("tanh", bld.load(x, i))))
    assert magnitude(value_ranges(bld.body), acc) == np.inf


@pytest.mark.parametrize("inner", [None, "tanh"])
def test_small_range_math(inner: str | None) -> None:
    """With |arg| <= 1 known, tanh/erf/sigmoid take their short odd-polynomial forms: within
    SMALL_MAX_ULP of float64 on a dense sample of [-1, 1] (and NaN stays NaN)."""
    x = np.concatenate([np.linspace(-1, 1, 200001), np.linspace(-4, 4, 20001),
                        [0.0, -0.0, 1e-30, -1e-30, 1e-6, np.nan, np.inf, -np.inf]]
                       ).astype(np.float32)
    dump: dict[str, str] = {}
    p = bounded_program(x.size, list(SMALL_MAX_ULP), inner)
    got = native(p, True, dump).run((x,))
    for name in SMALL_MAX_ULP:
        assert f"onnxjit.{name}_small.f32" in dump["llvm.ll"], name
    x64 = x.astype(np.float64)
    # the argument: tanh(x) exactly, or the clamp of x (exact in float32)
    arg = np.tanh(x64) if inner else np.clip(x64, -1, 1)
    refs = {"tanh": np.tanh, "erf": erf64, "sigmoid": lambda v: 1 / (1 + np.exp(-v))}
    fin = ~np.isnan(arg)
    for name, y in zip(SMALL_MAX_ULP, got):
        ref = refs[name](arg)
        assert np.isnan(y[~fin]).all(), name
        if inner:  # the inner tanh's own error (<= 3 ulp of t) shifts the result slightly
            np.testing.assert_allclose(y[fin], ref[fin], rtol=4e-7, atol=1e-30, err_msg=name)
        else:
            err = ulps(y[fin], ref[fin])
            assert err.max() <= SMALL_MAX_ULP[name], (name, err.max())
    assert np.signbit(got[0][x.size - 7]) and np.signbit(got[1][x.size - 7])  # tanh, erf(-0)
