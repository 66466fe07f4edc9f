"""Trigonometric ops Sin Cos Tan Asin Acos Atan.

Sin, Cos and Tan are the loop IR's scalar ops `sin`/`cos`/`tan`: code generation computes them
in f64 with an exact argument reduction over the whole range (`codegen/mathlib_trig.py`), so f32
results are correctly rounded in practice; f16/bf16 compute in f32 and round once. The inverse
functions are compositions of the loop IR's scalar ops, evaluated in f64 (f32 inputs are
widened and the result rounded back once):

- Atan: a = |x|, flipped to 1/a when a > 1 (atan x = pi/2 - atan(1/x)), then three half-angle
  steps t -> t / (1 + sqrt(1 + t*t)) bring it under tan(pi/32) ~ 0.098, where the odd Taylor
  series to t**19 is exact to f64 precision; the result is 8 * that, sign restored (x itself
  where |x| < 2**-27: atan(-0) = -0, and subnormals are not halved three times).
- Asin x = atan(x / sqrt((1-x)(1+x))), Acos x = 2 atan(sqrt((1-x)/(1+x))): no cancellation
  near |x| = 1, and |x| > 1 gives NaN through the square root.
"""

from __future__ import annotations

import math

from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Operand
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, c, simple, unary
from onnxjit.ir.types import DType

F64 = DType.DOUBLE
_T = ((7, FLOATS), (22, FLOATS | BF16))


def _wide(b: Builder, x: Operand) -> Operand:
    return b.cast(x, F64)


def _horner(b: Builder, t: Operand, coeffs: list[float]) -> Operand:
    """coeffs[0] + coeffs[1] t + coeffs[2] t**2 + ..."""
    acc: Operand = c(coeffs[-1], F64)
    for k in reversed(coeffs[:-1]):
        acc = b.op("add", b.op("mul", acc, t), c(k, F64))
    return acc


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
    signed = b.op("select", b.op("lt", x, c(0, F64)), b.op("neg", mag), mag)
    # atan x = x - x**3/3 rounds to x below 2**-27 (and keeps -0 and subnormals exact)
    return b.op("select", b.op("lt", ax, c(2.0 ** -27, F64)), x, signed)


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


unary("Sin", (7, 22), _T, simple("sin"), "sine")
unary("Cos", (7, 22), _T, simple("cos"), "cosine")
unary("Tan", (7, 22), _T, simple("tan"), "tangent")
unary("Asin", (7, 22), _T, _asin, "inverse sine")
unary("Acos", (7, 22), _T, _acos, "inverse cosine")
unary("Atan", (7, 22), _T, _atan, "inverse tangent")
