"""Elementwise floating-point math: Exp Log Sqrt Floor Ceil Round Erf Sigmoid Tanh, and the
hyperbolic functions Sinh Cosh Asinh Acosh Atanh.

Each op is a `scalar` rule over the loop IR's scalar ops (see `elementwise.arithmetic` for the
shared registration and dtype checks). Ops without a scalar op of their own are composed:

- Round (half to even): f = floor(x), d = x - f; d > 0.5 -> f + 1, d < 0.5 -> f, a tie -> the
  even one of f and f + 1 (inf/NaN fall through to f + 1, which is inf/NaN again);
- Sinh/Cosh: e**|x|/2 as e**(|x| - ln2_hi) * e**(ln2_hi - ln2) (ln2_hi has 9 bits, so the
  subtraction is exact), so results up to the type's maximum do not overflow in the exp; Sinh
  of |x| <= 20 is (m + m / (m + 1)) / 2 with m = expm1(|x|) (no cancellation near 0), beyond
  it e**|x|/2 (one expm1 either way), x's sign restored; Cosh = h + 1/(4h), h = e**|x|/2;
- Asinh/Acosh/Atanh follow fdlibm's forms, with one log each: log1p(v) of a v computed
  without cancellation (Asinh: |x| + sqrt(x**2 + 1) = 1 + v, v = |x| + x**2 / (1 + sqrt(1 +
  x**2)); Acosh: x + sqrt(x**2 - 1) = 1 + v, v = t + sqrt(t (t + 2)), t = x - 1; Atanh:
  2 atanh|x| = log1p(v), v = 2|x| + |x| w below 1/2, else w, w = 2|x| / (1 - |x|)), where
  log1p(v) = log(u) + (v - (u - 1)) / u with u = 1 + v, and 1/u = 1 - (u - 1) p(u) with a
  cubic p (no division: `_log1p_or`); beyond 2**28 (where x*x overflows or no longer
  matters) log(|x|) + ln 2 through the same log. Acosh of x < 1 is NaN; the odd ones return
  x itself where it is tiny (keeping -0);
- f16/bf16 compositions compute in f32 and round once (`arithmetic.in_f32`);
- Erf-9 also accepts integers: computed in f64 and truncated back.
"""

from __future__ import annotations

import math

from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Operand
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, INTS, c, in_f32, simple, unary
from onnxjit.ir.types import DType

_F = ((1, FLOATS), (13, FLOATS | BF16))  # T of the opset-1/6/13 unary float ops

unary("Exp", (1, 6, 13), _F, simple("exp"), "e ** x")
unary("Log", (1, 6, 13), _F, simple("log"), "natural logarithm")
unary("Sqrt", (1, 6, 13), _F, simple("sqrt"), "square root")
unary("Floor", (1, 6, 13), _F, simple("floor"), "round toward -inf")
unary("Ceil", (1, 6, 13), _F, simple("ceil"), "round toward +inf")
unary("Sigmoid", (1, 6, 13), _F, simple("sigmoid"), "1 / (1 + e ** -x)")
unary("Tanh", (1, 6, 13), _F, simple("tanh"), "hyperbolic tangent")


def _erf(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    if x.dtype.is_float:
        return b.op("erf", x)
    return b.cast(b.op("erf", b.cast(x, DType.DOUBLE)), x.dtype)


unary("Erf", (9, 13), ((9, FLOATS | INTS), (13, FLOATS | BF16)), _erf, "error function")


def round_half_even(b: Builder, x: Operand) -> Operand:
    """Round to the nearest integer, ties to even (see the module docstring)."""
    f = b.op("floor", x)
    d = b.op("sub", x, f)
    up = b.op("add", f, c(1, x))
    half = c(0.5, x)
    # f is even when f - 2*floor(f/2) == 0
    f_even = b.op("eq", b.op("sub", f, b.op("mul", c(2, x), b.op("floor", b.op("mul", f, half)))),
                  c(0, x))
    tie = b.op("select", f_even, f, up)
    lower = b.op("select", b.op("lt", d, half), f, tie)
    r = b.op("select", b.op("gt", d, half), up, lower)
    # a 0 takes x's sign: floor(-0.45) + 1 is +0.0, Round(-0.45) is -0.0
    return b.op("select", b.op("eq", r, c(0, x)), b.op("mul", x, c(0, x)), r)


_ROUND = ((11, FLOATS), (22, FLOATS | BF16))
unary("Round", (11, 22), _ROUND, lambda b, n, a: round_half_even(b, a[0]),
      "round to nearest, ties to even")

# --------------------------------------------------------------------------- hyperbolic

_H = ((9, FLOATS), (22, FLOATS | BF16))
_LN2 = math.log(2)
_LN2_HI = 0.693359375  # ln 2 to 9 bits: |x| - _LN2_HI is exact for |x| in [0.35, 2^15)
_HALF_E = math.exp(_LN2_HI - _LN2)  # e**a / 2 = e**(a - _LN2_HI) * _HALF_E
_BIG = 20.0  # beyond it e**-2a < 2**-57: sinh(a) = cosh(a) = e**a / 2 in f32 and f64
_HUGE = 2.0 ** 28  # beyond it sqrt(x*x +- 1) = x and asinh/acosh = log(x) + ln 2 in f64


def _tiny(x: Operand) -> float:
    """|x| below this: asinh, atanh = x correctly rounded (x**3/3 < half an ulp of x)."""
    return 2.0 ** -12 if x.dtype != DType.DOUBLE else 2.0 ** -27


#: p(u) ~ 1/u on [1, 2], relative error 1.7e-3 (Lawson's minimax, as tools/fit_math.py fits)
_RECIP = (2.8284227083040157, -2.9393410670620566, 1.3310222900007873, -0.22183703548769482)


def log1p(b: Builder, v: Operand) -> Operand:
    """log(1 + v) for v in [0, inf], relatively accurate near 0 (see `_log1p_or`)."""
    return _log1p_or(b, v, None, v)


def _log1p_or(b: Builder, v: Operand, huge: Operand | None, x: Operand) -> Operand:
    """log(1 + v) for v >= 0, or where `huge` log(x) + ln 2, with one log and no division:
    u = 1 + v rounds, and (v - d) / u with d = u - 1 (an exact numerator) corrects log(u) for
    that rounding. Where u < 2 the correction is below half an ulp of u but may be all of the
    result (u = 1), so 1/u = 1 - d/u is taken as 1 - d p(u), relatively exact as d -> 0;
    beyond 2 the uncorrected log(u) is already within a quarter ulp."""
    u = b.op("add", v, c(1, v))
    d = b.op("sub", u, c(1, v))
    acc: Operand = c(_RECIP[-1], v)
    for k in reversed(_RECIP[:-1]):
        acc = b.op("add", b.op("mul", acc, u), c(k, v))
    inv = b.op("sub", c(1, v), b.op("mul", d, acc))
    fix = b.op("select", b.op("lt", u, c(2, v)), b.op("mul", b.op("sub", v, d), inv), c(0, v))
    if huge is None:
        return b.op("add", b.op("log", u), fix)
    return b.op("add", b.op("log", b.op("select", huge, x, u)),
                b.op("select", huge, c(_LN2, x), fix))


def _odd(b: Builder, x: Operand, mag: Operand) -> Operand:
    """An odd function's value from its value `mag` at |x|: x itself where |x| is tiny (which
    keeps the sign of zero), else mag with x's sign."""
    signed = b.op("select", b.op("lt", x, c(0, x)), b.op("neg", mag), mag)
    return b.op("select", b.op("lt", b.op("abs", x), c(_tiny(x), x)), x, signed)


def _sinh(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    ax = b.op("abs", x)
    big = b.op("gt", ax, c(_BIG, x))
    # one expm1: of |x|, or beyond _BIG of |x| - ln2_hi (no overflow before the halving)
    em = b.op("expm1", b.op("select", big, b.op("sub", ax, c(_LN2_HI, x)), ax))
    e = b.op("add", em, c(1, x))
    small = b.op("mul", b.op("add", em, b.op("div", em, e)), c(0.5, x))
    return _odd(b, x, b.op("select", big, b.op("mul", e, c(_HALF_E, x)), small))


def _cosh(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    h = b.op("mul", b.op("exp", b.op("sub", b.op("abs", x), c(_LN2_HI, x))), c(_HALF_E, x))
    return b.op("add", h, b.op("div", c(0.25, x), h))  # e**|x|/2 + e**-|x|/2


def _asinh(b: Builder, node: Node, a: list[Operand]) -> Operand:
    # |x| + sqrt(x^2 + 1) = 1 + v, v = |x| + x^2 / (1 + sqrt(1 + x^2)): no cancellation
    x = a[0]
    ax = b.op("abs", x)
    one = c(1, x)
    sq = b.op("mul", ax, ax)
    v = b.op("add", ax, b.op("div", sq, b.op("add", b.op("sqrt", b.op("add", sq, one)), one)))
    return _odd(b, x, _log1p_or(b, v, b.op("gt", ax, c(_HUGE, x)), ax))


def _acosh(b: Builder, node: Node, a: list[Operand]) -> Operand:
    # x + sqrt(x^2 - 1) = 1 + v, v = t + sqrt(t (t + 2)) with t = x - 1 (exact near 1)
    x = a[0]
    t = b.op("sub", x, c(1, x))
    v = b.op("add", t, b.op("sqrt", b.op("mul", t, b.op("add", t, c(2, x)))))
    mag = _log1p_or(b, v, b.op("gt", x, c(_HUGE, x)), x)
    return b.op("select", b.op("ge", x, c(1, x)), mag, c(math.nan, x))  # x < 1, NaN: NaN


def _atanh(b: Builder, node: Node, a: list[Operand]) -> Operand:
    # 2 atanh|x| = log1p(v): v = 2|x| + |x| w below 1/2, else w, where w = 2|x| / (1 - |x|)
    x = a[0]
    ax = b.op("abs", x)
    w = b.op("div", b.op("add", ax, ax), b.op("sub", c(1, x), ax))  # inf at 1, NaN beyond
    v = b.op("select", b.op("lt", ax, c(0.5, x)), b.op("add", b.op("add", ax, ax),
                                                        b.op("mul", ax, w)), w)
    return _odd(b, x, b.op("mul", log1p(b, v), c(0.5, x)))


unary("Sinh", (9, 22), _H, in_f32(_sinh), "hyperbolic sine")
unary("Cosh", (9, 22), _H, in_f32(_cosh), "hyperbolic cosine")
unary("Asinh", (9, 22), _H, in_f32(_asinh), "inverse hyperbolic sine")
unary("Acosh", (9, 22), _H, in_f32(_acosh), "inverse hyperbolic cosine")
unary("Atanh", (9, 22), _H, in_f32(_atanh), "inverse hyperbolic tangent")
