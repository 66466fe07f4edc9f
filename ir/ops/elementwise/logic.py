"""Comparison, logic, selection and bitwise ops: Equal Less Greater LessOrEqual GreaterOrEqual,
Not And Or Xor, Where, IsNaN IsInf, BitwiseAnd BitwiseOr BitwiseXor BitwiseNot, BitShift.

All are elementwise `scalar` rules (registration and dtype checks from `elementwise.arithmetic`).
Comparisons are ordered (false when a NaN is involved), as ONNX/numpy give.

BitShift has no scalar op of its own; it is composed from integer pow/mul/div, which wrap:
left = x * 2**y; right on unsigned = x / 2**y; right on signed (opset 28: arithmetic) = floor
of x / 2**y (truncating division, minus one for an inexact negative quotient). A shift amount
outside [0, bits) gives the sign fill (-1 for a right shift of a negative x, else 0), as the
opset-28 text specifies; for a signed right shift, bits-1 already is the sign fill, which
avoids 2**(bits-1) wrapping to a negative divisor.
"""

from __future__ import annotations

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Operand
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.elementwise.arithmetic import (
    BF16,
    BOOL,
    FLOATS,
    INTS,
    NUMERIC,
    UNSIGNED,
    Types,
    accept,
    accept_same,
    arity,
    binary,
    c,
    int_attr,
    simple,
    unary,
)
from onnxjit.ir.ops.elementwise.inference import out_shape, tensor
from onnxjit.ir.types import DType

B = DType.BOOL

# --------------------------------------------------------------------------- comparisons

_STRING = frozenset({DType.STRING})
_EQ: Types = ((1, BOOL | {DType.INT32, DType.INT64}), (11, BOOL | FLOATS | INTS),
              (13, BOOL | NUMERIC), (19, BOOL | NUMERIC | _STRING))
_ORDER: Types = ((1, FLOATS), (9, FLOATS | INTS), (13, NUMERIC))

binary("Equal", (1, 7, 11, 13, 19), _EQ, simple("eq"), "a == b", out=B)
binary("Less", (1, 7, 9, 13), _ORDER, simple("lt"), "a < b", out=B)
binary("Greater", (1, 7, 9, 13), _ORDER, simple("gt"), "a > b", out=B)
binary("LessOrEqual", (12, 16), _ORDER, simple("le"), "a <= b", out=B)
binary("GreaterOrEqual", (12, 16), _ORDER, simple("ge"), "a >= b", out=B)

# --------------------------------------------------------------------------- boolean logic

_BOOL: Types = ((1, BOOL),)
unary("Not", (1,), _BOOL, simple("not"), "logical not")
binary("And", (1, 7), _BOOL, simple("and"), "logical and")
binary("Or", (1, 7), _BOOL, simple("or"), "logical or")
binary("Xor", (1, 7), _BOOL, simple("xor"), "logical xor")


def _where_infer(node: Node) -> list:
    arity(node, 3)
    accept(node, 0, _BOOL)
    any_type = BOOL | NUMERIC | _STRING | {DType.COMPLEX64, DType.COMPLEX128}
    dt = accept_same(node, (1, 2), ((9, any_type),))
    return tensor(dt, out_shape(node, (0, 1, 2)))


op("Where", (9, 16), infer=_where_infer,
   scalar=lambda b, n, a: b.op("select", a[0], a[1], a[2]),
   doc="cond ? x : y, all three broadcast")

# --------------------------------------------------------------------------- float classes

_NAN: Types = ((9, FLOATS), (13, FLOATS | BF16))
unary("IsNaN", (9, 13, 20), _NAN, simple("isnan"), "x != x", out=B)


def _isinf_check(node: Node) -> None:
    int_attr(node, "detect_positive", 1, (0, 1))
    int_attr(node, "detect_negative", 1, (0, 1))


def _isinf(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    tests = []
    if node.attr("detect_positive", 1):
        tests.append(b.op("eq", x, c(float("inf"), x)))
    if node.attr("detect_negative", 1):
        tests.append(b.op("eq", x, c(float("-inf"), x)))
    if not tests:
        return b.op("copy", c(False, B))
    return tests[0] if len(tests) == 1 else b.op("or", tests[0], tests[1])


unary("IsInf", (10, 20), ((10, frozenset({DType.FLOAT, DType.DOUBLE})), (20, FLOATS | BF16)),
      _isinf, "x is +inf and/or -inf", out=B, check=_isinf_check)

# --------------------------------------------------------------------------- bitwise

_BITS: Types = ((18, INTS),)
binary("BitwiseAnd", (18,), _BITS, simple("and"), "a & b")
binary("BitwiseOr", (18,), _BITS, simple("or"), "a | b")
binary("BitwiseXor", (18,), _BITS, simple("xor"), "a ^ b")
unary("BitwiseNot", (18,), _BITS, simple("not"), "~x")


def _direction(node: Node) -> str:
    d = node.attr("direction")
    d = d.decode() if isinstance(d, bytes) else d
    if d not in ("LEFT", "RIGHT"):
        raise ModelError(f"attribute 'direction' must be 'LEFT' or 'RIGHT', got {d!r}",
                         where=node)
    return d


def _bitshift_infer(node: Node) -> list:
    arity(node, 2)
    dt = accept_same(node, (0, 1), ((11, UNSIGNED), (28, INTS)))
    _direction(node)
    return tensor(dt, out_shape(node, (0, 1)))


def _bitshift(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x, y = a
    dt = x.dtype
    bits = dt.itemsize * 8
    zero = c(0, x)
    left = _direction(node) == "LEFT"
    signed_right = dt not in UNSIGNED and not left
    # Shift amounts for which the pow/div composition is exact (see the module docstring).
    limit = bits - 1 if signed_right else bits
    p = b.op("pow", c(2, x), y)
    if left:
        shifted = b.op("mul", x, p)
    else:
        shifted = b.op("div", x, p)
        if signed_right:
            inexact = b.op("ne", b.op("mul", shifted, p), x)
            down = b.op("and", inexact, b.op("lt", x, zero))
            shifted = b.op("select", down, b.op("sub", shifted, c(1, x)), shifted)
    in_range = b.op("lt", y, c(limit, y))
    if dt not in UNSIGNED:
        in_range = b.op("and", in_range, b.op("ge", y, zero))
    fill: Operand = zero
    if signed_right:
        fill = b.op("select", b.op("lt", x, zero), c(-1, x), zero)
    return b.op("select", in_range, shifted, fill)


op("BitShift", (11, 28), infer=_bitshift_infer, scalar=_bitshift,
   doc="x << y or x >> y (arithmetic for signed types)")
