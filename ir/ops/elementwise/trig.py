"""Trigonometric ops Sin Cos Tan Asin Acos Atan, composed from the loop IR's scalar ops.

The loop IR has no trigonometric scalar ops, so each is a polynomial evaluated in f64 (f32
inputs are widened and the result rounded back once, which makes the f32 results correctly
rounded in practice and keeps one code path):

- Sin/Cos/Tan: Cody-Waite reduction r = x - k*pi/2 with k = round(x * 2/pi), pi/2 split in
  three 33-bit parts so k*part is exact for |k| < 2**20 (accuracy degrades slowly beyond
  |x| ~ 1.6e6); then Taylor series of sin r and cos r on |r| <= pi/4 (terms to r**17 / r**18,
  truncation error < 1e-18) and the quadrant q = k mod 4 picks +-sin r or +-cos r;
  Tan = Sin / Cos of the same reduction. inf and NaN give NaN.
- Atan: a = |x|, flipped to 1/a when a > 1 (atan x = pi/2 - atan(1/x)), then three half-angle
  steps t -> t / (1 + sqrt(1 + t*t)) bring it under tan(pi/32) ~ 0.098, where the odd Taylor
  series to t**19 is exact to f64 precision; the result is 8 * that, sign restored.
- Asin x = atan(x / sqrt((1-x)(1+x))), Acos x = 2 atan(sqrt((1-x)/(1+x))): no cancellation
  near |x| = 1, and |x| > 1 gives NaN through the square root.
"""

from __future__ import annotations

import math

from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Operand
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, c, unary
from onnxjit.ir.types import DType

F64 = DType.DOUBLE
_T = ((7, FLOATS), (22, FLOATS | BF16))
# fdlibm's split of pi/2: each part has 33 significant bits.
_PIO2 = (1.57079632673412561417e+00, 6.07710050630396597660e-11, 2.02226624871116645580e-21)


def _wide(b: Builder, x: Operand) -> Operand:
    return b.cast(x, F64)


def _horner(b: Builder, t: Operand, coeffs: list[float]) -> Operand:
    """coeffs[0] + coeffs[1] t + coeffs[2] t**2 + ..."""
    acc: Operand = c(coeffs[-1], F64)
    for k in reversed(coeffs[:-1]):
        acc = b.op("add", b.op("mul", acc, t), c(k, F64))
    return acc


_SIN = [(-1) ** n / math.factorial(2 * n + 1) for n in range(9)]
_COS = [(-1) ** n / math.factorial(2 * n) for n in range(10)]


def _reduce(b: Builder, x: Operand) -> tuple[Operand, Operand, Operand]:
    """(sin r, cos r, q) with x = r + k*pi/2, |r| <= pi/4, q = k mod 4."""
    k = b.op("floor", b.op("add", b.op("mul", x, c(2 / math.pi, F64)), c(0.5, F64)))
    r = x
    for part in _PIO2:
        r = b.op("sub", r, b.op("mul", k, c(part, F64)))
    r2 = b.op("mul", r, r)
    s = b.op("mul", _horner(b, r2, _SIN), r)
    co = _horner(b, r2, _COS)
    q = b.op("sub", k, b.op("mul", b.op("floor", b.op("mul", k, c(0.25, F64))), c(4, F64)))
    return s, co, q


def _quadrant(b: Builder, q: Operand, v0: Operand, v1: Operand, v2: Operand, v3: Operand
              ) -> Operand:
    out = b.op("select", b.op("eq", q, c(2, F64)), v2, v3)
    out = b.op("select", b.op("eq", q, c(1, F64)), v1, out)
    return b.op("select", b.op("eq", q, c(0, F64)), v0, out)


def _sin_cos(b: Builder, x: Operand) -> tuple[Operand, Operand]:
    s, co, q = _reduce(b, x)
    ns, nc = b.op("neg", s), b.op("neg", co)
    return _quadrant(b, q, s, co, ns, nc), _quadrant(b, q, co, ns, nc, s)


def _sin(b: Builder, node: Node, a: list[Operand]) -> Operand:
    return b.cast(_sin_cos(b, _wide(b, a[0]))[0], a[0].dtype)


def _cos(b: Builder, node: Node, a: list[Operand]) -> Operand:
    return b.cast(_sin_cos(b, _wide(b, a[0]))[1], a[0].dtype)


def _tan(b: Builder, node: Node, a: list[Operand]) -> Operand:
    s, co = _sin_cos(b, _wide(b, a[0]))
    return b.cast(b.op("div", s, co), a[0].dtype)


_ATAN = [(-1) ** n / (2 * n + 1) for n in range(10)]


def atan64(b: Builder, x: Operand) -> Operand:
    """atan of an f64 operand (see the module docstring)."""
    one = c(1, F64)
    ax = b.op("abs", x)
    flip = b.op("gt", ax, one)
    t = b.op("select", flip, b.op("div", one, ax), ax)
    for _ in range(3):
        t = b.op("div", t, b.op("add", one, b.op("sqrt", b.op("add", one, b.op("mul", t, t)))))
    small = b.op("mul", b.op("mul", _horner(b, b.op("mul", t, t), _ATAN), t), c(8, F64))
    mag = b.op("select", flip, b.op("sub", c(math.pi / 2, F64), small), small)
    return b.op("select", b.op("lt", x, c(0, F64)), b.op("neg", mag), mag)


def _atan(b: Builder, node: Node, a: list[Operand]) -> Operand:
    return b.cast(atan64(b, _wide(b, a[0])), a[0].dtype)


def _asin(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = _wide(b, a[0])
    one = c(1, F64)
    root = b.op("sqrt", b.op("mul", b.op("sub", one, x), b.op("add", one, x)))
    return b.cast(atan64(b, b.op("div", x, root)), a[0].dtype)


def _acos(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = _wide(b, a[0])
    one = c(1, F64)
    ratio = b.op("div", b.op("sub", one, x), b.op("add", one, x))
    return b.cast(b.op("mul", atan64(b, b.op("sqrt", ratio)), c(2, F64)), a[0].dtype)


unary("Sin", (7, 22), _T, _sin, "sine")
unary("Cos", (7, 22), _T, _cos, "cosine")
unary("Tan", (7, 22), _T, _tan, "tangent")
unary("Asin", (7, 22), _T, _asin, "inverse sine")
unary("Acos", (7, 22), _T, _acos, "inverse cosine")
unary("Atan", (7, 22), _T, _atan, "inverse tangent")
