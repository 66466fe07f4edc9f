"""Fit the polynomial coefficients of codegen/mathlib.py and report their float32 error.

    python tools/fit_math.py

Algorithm: 1) each polynomial is a weighted linear least-squares problem in float64 on
Chebyshev-distributed points of its reduced range; Lawson's iteration reweights the points by
their error until the fit is (close to) minimax in the weighted error, the weight being chosen
so the error measured is the *relative* error of the final float32 result. 2) The coefficients
are rounded to float32. 3) The float32 code path is replayed exactly as `codegen/mathlib.py`
emits it (float32 numpy arithmetic, fused multiply-adds emulated in float64 then rounded once,
the same Horner order, range reduction, scaling and selects) on a dense sample of every binade
of the input range, and the worst error in ulps of the float32-rounded reference is printed
against `math` in float64. Paste the printed tuples into mathlib.py when changing a form.
"""

from __future__ import annotations

import math

import numpy as np

F = np.float32
LOG2E = F(1.4426950408889634)
LN2 = F(0.6931471805599453)
LN2_HI, LN2_LO = F(0.693359375), F(-2.12194440e-4)
MAGIC = F(12582912.0)  # 1.5 * 2^23: adding it rounds a float of magnitude < 2^22 to an integer
EXP_LO, EXP_HI = F(-104.0), F(89.0)
TANH_ONE = F(9.1)  # tanh(x) rounds to 1.0f beyond 9.011
ERF_ONE = F(3.92)  # erf(x) rounds to 1.0f beyond 3.9192
SMALL = 1.0  # bound of |x| for the range-specialised odd polynomials
erf64 = np.vectorize(math.erf, otypes=[np.float64])
erfc64 = np.vectorize(math.erfc, otypes=[np.float64])


# fitting ----------------------------------------------------------------------------------------
def cheb(lo: float, hi: float, n: int = 4000) -> np.ndarray:
    k = np.arange(n)
    return (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)


def minimax(basis: np.ndarray, degree: int, target: np.ndarray, weight: np.ndarray,
            iters: int = 300) -> list[float]:
    """Coefficients c[0..degree] of sum c_i basis^i ~ target minimising max |weight * error|
    (Lawson's iteratively reweighted least squares), rounded to float32."""
    a = np.stack([basis ** i for i in range(degree + 1)], axis=1)
    lw = np.full(len(target), 1.0 / len(target))
    best: tuple[float, np.ndarray] | None = None
    for _ in range(iters):
        s = np.sqrt(lw) * weight
        c, *_ = np.linalg.lstsq(a * s[:, None], target * s, rcond=None)
        err = np.abs(a @ c - target) * weight
        if best is None or err.max() < best[0]:
            best = (float(err.max()), c)
        lw = lw * err
        lw /= lw.sum()
    assert best is not None
    return [float(F(v)) for v in best[1]]


# float32 replay of the emitted code ------------------------------------------------------------
def fma(a: np.ndarray, b: np.ndarray | float, c: np.ndarray | float) -> np.ndarray:
    """float32 fused multiply-add: the float64 product of two floats is exact."""
    prod = np.asarray(a, np.float64) * np.asarray(b, np.float64)
    return (prod + np.asarray(c, np.float64)).astype(F)


def horner(c: list[float], t: np.ndarray) -> np.ndarray:
    acc = np.full_like(t, F(c[-1]))
    for v in reversed(c[:-1]):
        acc = fma(acc, t, F(v))
    return acc


def round_n(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n as float, the bits of x*log2e + MAGIC) with n = round(x*log2e)."""
    t = fma(x, LOG2E, MAGIC)
    return t - MAGIC, t.view(np.int32)


def exp32(x: np.ndarray, p: list[float]) -> np.ndarray:
    x = np.minimum(np.maximum(x.astype(F), EXP_LO), EXP_HI)
    n, _ = round_n(x)
    r = fma(-n, LN2_HI, x)
    r = fma(-n, LN2_LO, r)
    y = horner([1.0, 1.0] + p, r)
    # ldexp (vscalefps) or y * 2^(n/2) * 2^(n - n/2): both round once
    return np.ldexp(y, n.astype(np.int32)).astype(F)


def expm1_32(w: np.ndarray, p: list[float]) -> np.ndarray:
    """e^w - 1 for w in [-87, 0]: one-constant reduction, 2^n built in the exponent field."""
    n, tbits = round_n(w)
    r = fma(-n, LN2, w)
    em1 = fma(r * r, horner(p, r), r)
    s = ((tbits << 23) + np.int32(0x3F800000)).view(F)
    return fma(s, em1, s - F(1))


def tanh32(x: np.ndarray, p: list[float]) -> np.ndarray:
    a = np.minimum(np.abs(x.astype(F)), TANH_ONE)
    m = expm1_32(a * F(-2), p)
    return np.copysign(m / (F(-2) - m), x)


def sigmoid32(x: np.ndarray, p: list[float]) -> np.ndarray:
    x = x.astype(F)
    e = exp32(-np.abs(x), p)
    return np.where(x >= 0, F(1), e) / (F(1) + e)


def erf32(x: np.ndarray, h: list[float], p: list[float]) -> np.ndarray:
    a = np.minimum(np.abs(x.astype(F)), ERF_ONE)
    return np.copysign(expm1_32(a * horner(h, a), p), x)


def log32(x: np.ndarray, p: list[float]) -> np.ndarray:
    m, e = np.frexp(x.astype(np.float64))  # m in [0.5, 1)
    small = m < math.sqrt(0.5)
    m = np.where(small, m * 2, m).astype(F)
    e = np.where(small, e - 1, e).astype(F)
    f = m - F(1)
    f2 = f * f
    y = fma(f2 * f, horner(p, f), fma(F(-0.5), f2, f))
    return fma(e, LN2_HI, fma(e, LN2_LO, y))


# the fits ---------------------------------------------------------------------------------------
def fit_exp(deg: int = 6) -> list[float]:
    """e^r - 1 = r + r^2 P(r), |r| <= ln2/2, minimax relative to e^r - 1 (the stricter of the
    two uses: exp evaluates 1 + r + r^2 P(r) with the same P); returns P."""
    r = cheb(-0.3466, 0.3466)
    r = r[np.abs(r) > 1e-6]
    em1 = np.expm1(r)
    return minimax(r, deg - 2, (em1 - r) / r ** 2, np.abs(r ** 2 / em1))


def fit_log(deg: int = 8) -> list[float]:
    """log(1+f) = f - f^2/2 + f^3 P(f), f in [sqrt(1/2) - 1, sqrt(2) - 1)."""
    f = cheb(math.sqrt(0.5) - 1, math.sqrt(2) - 1)
    f = f[np.abs(f) > 1e-4]
    target = (np.log1p(f) - f + f * f / 2) / f ** 3
    return minimax(f, deg, target, np.abs(f ** 3 / np.log1p(f)))


def fit_erf(deg: int = 7) -> list[float]:
    """log(erfc(a)) = a H(a) on [0, ERF_ONE]; an error dH costs erf a relative error of
    a dH erfc(a) / erf(a), which is the weight."""
    a = cheb(1e-6, float(ERF_ONE))
    return minimax(a, deg, np.log(erfc64(a)) / a, a * erfc64(a) / erf64(a))


def fit_odd(target_fn, degree: int, offset: float = 0.0) -> list[float]:
    """f(x) = offset + x P(x^2) on |x| <= SMALL (the range-specialised forms); P minimises the
    error relative to f(x) (for sigmoid, relative to the smaller of f(x) and f(-x))."""
    x = cheb(1e-4, SMALL)
    fx = target_fn(x)
    weight = x / np.minimum(np.abs(fx), np.abs(2 * offset - fx)) if offset else np.ones_like(x)
    return minimax(x * x, degree, (fx - offset) / x, weight)


def odd32(x: np.ndarray, p: list[float], offset: float = 0.0) -> np.ndarray:
    """offset + x P(x^2) as mathlib emits it (one fma with an offset, else one multiply)."""
    x = x.astype(F)
    q = horner(p, x * x)
    return fma(x, q, F(offset)) if offset else x * q


def sigmoid64(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


# measurement ------------------------------------------------------------------------------------
def ulp_err(got: np.ndarray, ref: np.ndarray) -> float:
    """Worst |got - ref| in units of the spacing (np.spacing) of ref rounded to float32;
    where ref rounds to +-inf, got must be that inf."""
    ref32 = ref.astype(F)
    inf = np.isinf(ref32)
    if (got[inf] != ref32[inf]).any():
        return math.inf
    got, ref, ref32 = got[~inf], ref[~inf], ref32[~inf]
    ulp = np.spacing(np.abs(ref32)).astype(np.float64)
    err = np.abs(got.astype(np.float64) - ref) / ulp
    return float(np.max(err))


def sample(lo: float, hi: float, n: int = 1_000_001) -> np.ndarray:
    """Dense linear points on [lo, hi] plus random floats of every binade in range."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 0x7F800000, 4 * n, dtype=np.int64).astype(np.uint32).view(F)
    bits = np.concatenate([bits, -bits])
    return np.concatenate([np.linspace(lo, hi, n).astype(F), bits[(bits >= lo) & (bits <= hi)]])


def main() -> None:
    pe, pl, ph = fit_exp(), fit_log(), fit_erf()
    with np.errstate(all="ignore"):
        x = sample(-104, 89)
        print("EXP_P =", tuple(pe))
        print("  exp max ulp", ulp_err(exp32(x, pe), np.exp(x.astype(np.float64))))
        x = sample(-120, 120)
        ref = 1 / (1 + np.exp(-x.astype(np.float64)))
        print("  sigmoid max ulp", ulp_err(sigmoid32(x, pe), ref))
        x = sample(-87, 0)
        print("  expm1 max ulp", ulp_err(expm1_32(x, pe), np.expm1(x.astype(np.float64))))
        x = sample(-12, 12)
        print("  tanh max ulp", ulp_err(tanh32(x, pe), np.tanh(x.astype(np.float64))))
        print("ERF_H =", tuple(ph))
        x = sample(-5, 5)
        print("  erf max ulp", ulp_err(erf32(x, ph, pe), erf64(x.astype(np.float64))))
        print("LOG_P =", tuple(pl))
        small = {"TANH_SMALL": (np.tanh, 8, 0.0), "ERF_SMALL": (erf64, 5, 0.0),
                 "SIGMOID_SMALL": (sigmoid64, 5, 0.5)}
        x = sample(-SMALL, SMALL)
        for name, (f, deg, off) in small.items():
            p = fit_odd(f, deg, off)
            print(f"{name} =", tuple(p))
            print(f"  max ulp on |x| <= {SMALL}",
                  ulp_err(odd32(x, p, off), f(x.astype(np.float64))))
        x = sample(0, 3.4e38)
        x = x[x > 0]
        print("  log max ulp", ulp_err(log32(x, pl), np.log(x.astype(np.float64))))


if __name__ == "__main__":
    main()
