"""A float converted to an int type as C compiles it for x86-64 (`c_float_to_int`): what
onnxruntime and numpy (so onnx.reference) return where ONNX leaves the result undefined (NaN,
inf, out of range), used by Cast and by Pow of an int base with a float exponent.

Algorithm: a signed conversion of 32 bits (targets of 8-32 bits, then wrapped) or 64 bits
(int64, and uint32 wrapped) in which NaN and out-of-range values give the int's minimum
(x86's "integer indefinite"); uint64 converts x - 2^63 when x >= 2^63 and flips the top bit
back. Compares and selects around the scalar `cast` (which saturates, NaN -> 0: the rule the
compiler's own index arithmetic needs), so it vectorizes and folds like any scalar rule.
"""

from __future__ import annotations

from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Const, Operand
from onnxjit.ir.types import NARROW_FLOATS, DType

#: the int targets a float converts to as C does on x86-64 (`c_float_to_int`): (width of the
#: signed conversion, unsigned rule)
C_INTS = {DType.INT8: (32, False), DType.UINT8: (32, False), DType.INT16: (32, False),
          DType.UINT16: (32, False), DType.INT32: (32, False), DType.INT64: (64, False),
          DType.UINT32: (64, False), DType.UINT64: (64, True)}


def _cvt(b: Builder, x: Operand, width: int) -> Operand:
    """x (f32/f64) truncated to a signed int of `width` bits; NaN and out of range give the
    int's minimum (x86's "integer indefinite")."""
    half = float(2 ** (width - 1))
    ok = b.op("and", b.op("ge", x, Const(-half, x.dtype)), b.op("lt", x, Const(half, x.dtype)))
    it = DType.INT32 if width == 32 else DType.INT64
    v = b.cast(b.op("select", ok, x, Const(0.0, x.dtype)), it)
    return b.op("select", ok, v, Const(-(1 << (width - 1)), it))


def c_float_to_int(b: Builder, x: Operand, target: DType) -> Operand:
    """A float converted to an int type as C compiles it for x86-64, which is what onnxruntime
    and numpy (so onnx.reference) return where ONNX leaves the result undefined (NaN, inf, out
    of range): a signed conversion of 32 bits (8/16/32-bit targets, then wrapped) or 64 bits
    (int64, and uint32, wrapped); uint64 converts x - 2^63 when x >= 2^63 and flips the top
    bit back. In range it is truncation toward zero, like every rule. (onnxruntime's uint32
    from float32/float64 follows yet another rule for NaN and values below -2^31, which this
    does not copy.)"""
    if x.dtype in NARROW_FLOATS:
        x = b.cast(x, DType.FLOAT)  # exact
    width, unsigned = C_INTS[target]
    if not unsigned:
        return b.cast(_cvt(b, x, width), target)
    half = Const(float(2 ** (width - 1)), x.dtype)
    big = b.op("ge", x, half)
    v = _cvt(b, b.op("select", big, b.op("sub", x, half), x), width)
    v = b.op("select", big, b.op("xor", v, Const(-(1 << (width - 1)), v.dtype)), v)
    return b.cast(v, target)
