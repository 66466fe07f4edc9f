"""Conversions of the cast-only types (float8, float4e2m1, float8e8m0, 4-/2-bit ints) in LLVM IR.

Registers hold the storage byte (i8); a cast decodes it exactly to f32 (small floats) or i8
(sub-byte ints) and encodes an f32 back, mirroring `onnxjit.ir.narrow` operation for operation
(its comments give the algorithm: FPU rounding of the subnormal range by adding a "magic"
float, integer round-to-nearest-even of the rebiased bits otherwise, then selects for the
specials of each type). Only integer ops, one fadd/fmul and selects: no branches or
libcalls, so loops over these types vectorize.
"""

from __future__ import annotations

from llvmlite import ir

from onnxjit.ir.narrow import FLOAT_FORMATS, SMALL_INTS, max_finite_bits
from onnxjit.ir.types import DType

I8 = ir.IntType(8)
I32 = ir.IntType(32)
F32 = ir.FloatType()


def _c32(v: int) -> ir.Constant:
    v &= 0xFFFFFFFF
    return ir.Constant(I32, v - (1 << 32) if v >= 1 << 31 else v)


def _c8(v: int) -> ir.Constant:
    v &= 0xFF
    return ir.Constant(I8, v - 256 if v >= 128 else v)


def encode_small_float(b: ir.IRBuilder, x: ir.Value, dt: DType) -> ir.Value:
    """An f32 value as the i8 bits of the small float `dt` (narrow.encode_small_float)."""
    e, m, bias, kind = FLOAT_FORMATS[dt]
    u = b.bitcast(x, I32)
    sign = b.lshr(u, _c32(31))
    a = b.and_(u, _c32(0x7FFFFFFF))
    magic = ((127 - bias) + (23 - m) + 1) << 23
    summed = b.fadd(b.bitcast(a, F32), b.bitcast(_c32(magic), F32))
    sub = b.sub(b.bitcast(summed, I32), _c32(magic))
    shift = 23 - m
    rebias = ((bias - 127) << 23) + (1 << (shift - 1)) - 1
    lsb = b.and_(b.lshr(a, _c32(shift)), _c32(1))
    norm = b.lshr(b.add(b.add(a, _c32(rebias)), lsb), _c32(shift))
    mag = b.select(b.icmp_unsigned("<", a, _c32((128 - bias) << 23)), sub, norm)
    special = b.icmp_unsigned(">=", a, _c32(0x7F800000))
    isnan = b.icmp_unsigned(">", a, _c32(0x7F800000))
    top = max_finite_bits(dt)
    over = b.or_(b.icmp_unsigned(">", mag, _c32(top)), special)
    sbit = b.shl(sign, _c32(e + m))
    if kind == "fn":
        out = b.or_(b.select(over, _c32(top + 1), mag), sbit)
    elif kind == "fnuz":
        signed = b.select(b.icmp_unsigned("==", mag, _c32(0)), _c32(0), b.or_(mag, sbit))
        out = b.select(over, _c32(0x80), signed)
    elif kind == "ieee":
        out = b.or_(b.select(isnan, _c32(0x7E), b.select(over, _c32(0x7C), mag)), sbit)
    else:
        nan = b.shl(b.sub(_c32(1), sign), _c32(3))
        out = b.select(isnan, nan, b.or_(b.select(over, _c32(top), mag), sbit))
    return b.trunc(out, I8)


def decode_small_float(b: ir.IRBuilder, x: ir.Value, dt: DType) -> ir.Value:
    """The exact f32 value of small-float bits `x` (i8; narrow.decode_small_float)."""
    e, m, bias, kind = FLOAT_FORMATS[dt]
    u = b.zext(x, I32)
    sign = b.and_(b.lshr(u, _c32(e + m)), _c32(1))
    mag = b.and_(u, _c32((1 << (e + m)) - 1))
    ex = b.lshr(mag, _c32(m))
    man = b.and_(mag, _c32((1 << m) - 1))
    normal = b.or_(b.shl(b.add(ex, _c32(127 - bias)), _c32(23)), b.shl(man, _c32(23 - m)))
    scaled = b.fmul(b.uitofp(man, F32), ir.Constant(F32, 2.0 ** (1 - bias - m)))
    sub = b.bitcast(scaled, I32)
    val = b.or_(b.select(b.icmp_unsigned("==", ex, _c32(0)), sub, normal),
                b.shl(sign, _c32(31)))
    if kind == "fn":
        val = b.select(b.icmp_unsigned("==", mag, _c32((1 << (e + m)) - 1)),
                       _c32(0x7FC00000), val)
    elif kind == "fnuz":
        val = b.select(b.icmp_unsigned("==", u, _c32(0x80)), _c32(0x7FC00000), val)
    elif kind == "ieee":
        special = b.or_(b.select(b.icmp_unsigned("==", man, _c32(0)), _c32(0x7F800000),
                                 _c32(0x7FC00000)), b.shl(sign, _c32(31)))
        val = b.select(b.icmp_unsigned("==", ex, _c32((1 << e) - 1)), special, val)
    return b.bitcast(val, F32)


def encode_e8m0(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """f32 -> float8e8m0 bits, rounding up and saturating (narrow.encode_e8m0)."""
    u = b.bitcast(x, I32)
    ex = b.and_(b.lshr(u, _c32(23)), _c32(0xFF))
    frac = b.icmp_unsigned("!=", b.and_(u, _c32(0x7FFFFF)), _c32(0))
    up = b.and_(frac, b.icmp_unsigned("<", ex, _c32(0xFE)))
    out = b.select(b.icmp_unsigned("==", ex, _c32(0xFF)), _c32(0xFF), b.add(ex, b.zext(up, I32)))
    return b.trunc(out, I8)


def decode_e8m0(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """float8e8m0 bits -> f32 (narrow.decode_e8m0)."""
    u = b.zext(x, I32)
    val = b.select(b.icmp_unsigned("==", u, _c32(0)), _c32(0x00400000),
                   b.select(b.icmp_unsigned("==", u, _c32(0xFF)), _c32(0x7FC00000),
                            b.shl(u, _c32(23))))
    return b.bitcast(val, F32)


def decode_small_int(b: ir.IRBuilder, x: ir.Value, dt: DType) -> ir.Value:
    """The i8 value of a sub-byte int's byte (only its low bits are read)."""
    nbits, signed = SMALL_INTS[dt]
    if signed:  # shift the value's sign bit to the top, then back arithmetically
        return b.ashr(b.shl(x, _c8(8 - nbits)), _c8(8 - nbits))
    return b.and_(x, _c8((1 << nbits) - 1))
