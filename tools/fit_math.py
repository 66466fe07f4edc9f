"""Fit the polynomial coefficients of codegen/mathlib.py and report their float32 error.

    python tools/fit_math.py

Each approximation is a least-squares fit in float64 on Chebyshev-distributed points of the
reduced range, with weights that make the fit minimise *relative* error of the final result
(close to minimax for these smooth functions). The script then evaluates the float32 code path
exactly as `codegen/mathlib.py` emits it (numpy float32 arithmetic, Horner order, same range
reduction) on a dense sample and prints the worst error in ulps against `math` in float64.
Paste the printed tuples into mathlib.py when changing a degree or a range.
"""

from __future__ import annotations

import math

import numpy as np

F = np.float32


def cheb(lo: float, hi: float, n: int = 4000) -> np.ndarray:
    k = np.arange(n)
    return (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)


def fit(x: np.ndarray, target: np.ndarray, basis: np.ndarray, degree: int,
        weight: np.ndarray) -> list[float]:
    """Coefficients c[0..degree] (constant first) of sum c_i basis^i ~ target."""
    a = np.stack([basis ** i for i in range(degree + 1)], axis=1) * weight[:, None]
    c, *_ = np.linalg.lstsq(a, target * weight, rcond=None)
    return [float(F(v)) for v in c]


def horner(c: list[float], t: np.ndarray) -> np.ndarray:
    acc = np.full_like(t, F(c[-1]))
    for v in reversed(c[:-1]):
        acc = acc * t + F(v)
    return acc


def ulp_err(got: np.ndarray, ref: np.ndarray) -> float:
    ref32 = ref.astype(F)
    ulp = np.spacing(np.abs(ref32)).astype(np.float64)
    ulp = np.where(ulp == 0, np.spacing(F(0)), ulp)
    return float(np.max(np.abs(got.astype(np.float64) - ref) / ulp))


# exp: x = n*ln2 + r, |r| <= ln2/2; e^r = 1 + r + r^2 P(r)
LN2_HI, LN2_LO = F(0.693359375), F(-2.12194440e-4)


def fit_exp(deg: int = 5) -> list[float]:
    r = cheb(-0.35, 0.35)
    e = np.exp(r)
    # fit P on (e - 1 - r) / r^2, weighted so the error of e^r is relative
    return fit(r, (e - 1 - r) / r ** 2, r, deg, r ** 2 / e)


def exp32(x: np.ndarray, p: list[float]) -> np.ndarray:
    x = x.astype(F)
    n = np.floor(x * F(1.4426950408889634) + F(0.5)).astype(F)
    r = (x - n * LN2_HI) - n * LN2_LO
    y = F(1) + r + r * r * horner(p, r)
    return (y.astype(np.float64) * np.exp2(n.astype(np.float64))).astype(F)


# log: x = m * 2^e, m in [sqrt(.5), sqrt(2)), f = m - 1; log(1+f) = f - f^2/2 + f^3 P(f)
def fit_log(deg: int = 8) -> list[float]:
    f = cheb(math.sqrt(0.5) - 1, math.sqrt(2) - 1)
    f = f[np.abs(f) > 1e-4]
    target = (np.log1p(f) - f + f * f / 2) / f ** 3
    return fit(f, target, f, deg, np.abs(f ** 3 / np.log1p(f)))


def log32(x: np.ndarray, p: list[float]) -> np.ndarray:
    m, e = np.frexp(x.astype(np.float64))  # m in [0.5, 1)
    small = m < math.sqrt(0.5)
    m = np.where(small, m * 2, m).astype(F)
    e = np.where(small, e - 1, e).astype(F)
    f = m - F(1)
    y = f - F(0.5) * f * f + f * f * f * horner(p, f)
    return (y + e * LN2_LO) + e * LN2_HI


# tanh, |x| < 0.625: x + x^3 P(x^2)
def fit_tanh(deg: int = 5) -> list[float]:
    x = cheb(1e-3, 0.625)
    return fit(x, (np.tanh(x) - x) / x ** 3, x * x, deg, x ** 3 / np.tanh(x))


# erf, |x| <= 1: x P(x^2)
def fit_erf_small(deg: int = 6) -> list[float]:
    x = cheb(1e-4, 1.0)
    erf = np.vectorize(math.erf)(x)
    return fit(x, erf / x, x * x, deg, x / erf)


# erf, 1 <= x <= 4: 1 - exp(-x^2) R(u), u = 1/x
ERF_BIG_LIMIT = 3.92  # erf(x) rounds to 1.0f beyond this


def fit_erfc(deg: int = 10) -> list[float]:
    x = cheb(1.0, 4.0)
    r = np.vectorize(math.erfc)(x) * np.exp(x * x)
    return fit(x, r, 1 / x, deg, 1 / r)


def erf32(x: np.ndarray, ps: list[float], pb: list[float]) -> np.ndarray:
    x = x.astype(F)
    a = np.abs(x)
    small = x * horner(ps, x * x)
    u = F(1) / a
    big = F(1) - np.exp(-(a * a).astype(np.float64)).astype(F) * horner(pb, u)
    big = np.where(a > F(ERF_BIG_LIMIT), F(1), big)
    return np.where(a <= F(1), small, np.copysign(big, x))


def main() -> None:
    pe, pl, pt = fit_exp(), fit_log(), fit_tanh()
    ps, pb = fit_erf_small(), fit_erfc()
    x = np.linspace(-87, 88, 2_000_001).astype(F)
    print("EXP_P =", tuple(pe), "max ulp", ulp_err(exp32(x, pe), np.exp(x.astype(np.float64))))
    x = np.exp(np.linspace(-80, 80, 2_000_001)).astype(F)
    print("LOG_P =", tuple(pl), "max ulp", ulp_err(log32(x, pl), np.log(x.astype(np.float64))))
    x = np.linspace(-0.625, 0.625, 1_000_001).astype(F)
    print("TANH_P =", tuple(pt), "max ulp",
          ulp_err(x + x * x * x * horner(pt, x * x), np.tanh(x.astype(np.float64))))
    x = np.linspace(-4.5, 4.5, 1_000_001).astype(F)
    ref = np.vectorize(math.erf)(x.astype(np.float64))
    print("ERF_SMALL_P =", tuple(ps))
    print("ERFC_P =", tuple(pb), "erf max ulp", ulp_err(erf32(x, ps, pb), ref),
          "max abs", float(np.max(np.abs(erf32(x, ps, pb) - ref))))


if __name__ == "__main__":
    main()
