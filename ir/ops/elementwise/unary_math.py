"""Elementwise floating-point math: Exp Log Sqrt Floor Ceil Round Erf Sigmoid Tanh, and the
hyperbolic functions Sinh Cosh Asinh Acosh Atanh.

Each op is a `scalar` rule over the loop IR's scalar ops (see `elementwise.arithmetic` for the
shared registration and dtype checks). Ops without a scalar op of their own are composed:

- Round (half to even): f = floor(x), d = x - f; d > 0.5 -> f + 1, d < 0.5 -> f, a tie -> the
  even one of f and f + 1 (inf/NaN fall through to f + 1, which is inf/NaN again);
- Sinh/Asinh/Atanh: for |x| < 0.1 a Taylor polynomial (the closed forms cancel catastrophically
  near 0), else the exp/log closed form; Asinh/Acosh switch to log(2|x|) for huge |x| so that
  x*x cannot overflow;
- Erf-9 also accepts integers: computed in f64 and truncated back.
"""

from __future__ import annotations

from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Operand
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, INTS, c, simple, unary
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
    return b.op("select", b.op("gt", d, half), up, lower)


_ROUND = ((11, FLOATS), (22, FLOATS | BF16))
unary("Round", (11, 22), _ROUND, lambda b, n, a: round_half_even(b, a[0]),
      "round to nearest, ties to even")

# --------------------------------------------------------------------------- hyperbolic

_H = ((9, FLOATS), (22, FLOATS | BF16))
_SMALL = 0.1


def _poly(b: Builder, x: Operand, coeffs: list[float]) -> Operand:
    """x * (c0 + c1 x^2 + c2 x^4 + ...) by Horner's rule in x^2."""
    x2 = b.op("mul", x, x)
    acc: Operand = c(coeffs[-1], x)
    for k in reversed(coeffs[:-1]):
        acc = b.op("add", b.op("mul", acc, x2), c(k, x))
    return b.op("mul", acc, x)


def _small(b: Builder, x: Operand) -> Operand:
    return b.op("lt", b.op("abs", x), c(_SMALL, x))


def _sinh(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    e = b.op("exp", x)
    big = b.op("mul", b.op("sub", e, b.op("div", c(1, x), e)), c(0.5, x))
    # The series' next term at |x| = 0.1 is ~2.5e-19 relative: exact in f64.
    series = _poly(b, x, [1.0, 1 / 6, 1 / 120, 1 / 5040, 1 / 362880])
    return b.op("select", _small(b, x), series, big)


def _cosh(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    e = b.op("exp", b.op("abs", x))  # exp(|x|) keeps 1/e finite for very negative x
    return b.op("mul", b.op("add", e, b.op("div", c(1, x), e)), c(0.5, x))


_HUGE = 1e15  # beyond this x*x + 1 == x*x in f64 and log(2|x|) is exact enough


def _asinh(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    ax = b.op("abs", x)
    root = b.op("sqrt", b.op("add", b.op("mul", ax, ax), c(1, x)))
    mid = b.op("log", b.op("add", ax, root))
    huge = b.op("add", b.op("log", ax), c(0.6931471805599453, x))
    mag = b.op("select", b.op("gt", ax, c(_HUGE, x)), huge, mid)
    signed = b.op("select", b.op("lt", x, c(0, x)), b.op("neg", mag), mag)
    series = _poly(b, x, [1.0, -1 / 6, 3 / 40, -15 / 336, 105 / 3456, -945 / 42240])
    return b.op("select", _small(b, x), series, signed)


def _acosh(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    root = b.op("sqrt", b.op("sub", b.op("mul", x, x), c(1, x)))  # NaN for x < 1, as it must
    mid = b.op("log", b.op("add", x, root))
    huge = b.op("add", b.op("log", x), c(0.6931471805599453, x))
    return b.op("select", b.op("gt", x, c(_HUGE, x)), huge, mid)


def _atanh(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    one = c(1, x)
    ratio = b.op("div", b.op("add", one, x), b.op("sub", one, x))
    big = b.op("mul", b.op("log", ratio), c(0.5, x))
    series = _poly(b, x, [1.0, 1 / 3, 1 / 5, 1 / 7, 1 / 9, 1 / 11, 1 / 13])
    return b.op("select", _small(b, x), series, big)


unary("Sinh", (9, 22), _H, _sinh, "hyperbolic sine")
unary("Cosh", (9, 22), _H, _cosh, "hyperbolic cosine")
unary("Asinh", (9, 22), _H, _asinh, "inverse hyperbolic sine")
unary("Acosh", (9, 22), _H, _acosh, "inverse hyperbolic cosine")
unary("Atanh", (9, 22), _H, _atanh, "inverse hyperbolic tangent")
