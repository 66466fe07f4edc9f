"""Exact numpy conversions of the narrow float types (float16, bfloat16) used by the evaluator.

A narrow float is stored in 16 bits and computed in float32 (see `types.NARROW_FLOATS`). The
conversions here define the semantics code generation reproduces bit for bit:

- widening (f16/bf16 -> f32) is exact; bf16 -> f32 is the 16 bits shifted to the top of a word;
  f16 -> f32 quiets a signalling NaN (sets the quiet bit, keeps sign and payload), as the
  x86 conversion LLVM's `fpext half` compiles to (vcvtph2ps) does. numpy's `astype` keeps it
  signalling, and folded through libm's pow (numpy's loop on hosts without AVX-512) a
  float16 signalling NaN ** 0 was NaN where compiled code gives 1;
- f32 -> f16 is numpy's `astype(float16)`: round to nearest, ties to even, overflow to inf;
- f64 -> f16 rounds once, directly (numpy's cast; LLVM's `fptrunc double to half`);
- f32 -> bf16 rounds to nearest, ties to even, on the bit pattern: `(bits + 0x7FFF + lsb) >> 16`
  where lsb is bit 16 (a carry into the exponent gives the next binade or inf, as it should);
  NaN keeps its sign and top payload bits and gets the quiet bit (`bits >> 16 | 0x40`), so a
  NaN never rounds to inf;
- f64 and ints -> bf16 go through f32 first (two roundings), as ml_dtypes does.

Folds (`accumulator`): a sum over float16 values accumulates in f32 and rounds once at the
end, as numpy's half loops do (its pairwise sum and its matmul carry a float accumulator);
a sum over bfloat16 values rounds every step to bfloat16, as ml_dtypes' add loop does (numpy
has no wider accumulator for a user dtype). Reductions, the Softmax family, Attention's
softmax and depthwise Conv follow this rule, so they agree with numpy / onnx.reference.
"""

from __future__ import annotations

import numpy as np

from onnxjit.ir.types import DType


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """uint16 bit patterns of float32 `x` rounded to bfloat16 (see the module docstring)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = ((bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16)).astype(np.uint16)
    quiet = ((bits >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    return np.where(np.isnan(x), quiet, rounded)


def widen(x: np.ndarray) -> np.ndarray:
    """A float16/bfloat16 array as float32 (exact, a float16 signalling NaN quieted: see the
    module docstring); other arrays unchanged."""
    if x.dtype == np.float16:
        f = x.astype(np.float32)
        nan = np.isnan(f)
        if nan.any():
            quiet = (f.view(np.uint32) | np.uint32(0x00400000)).view(np.float32)
            f = np.where(nan, quiet, f)
        return f
    if _is_bf16(x.dtype):
        bits = np.ascontiguousarray(x).view(np.uint16).astype(np.uint32) << np.uint32(16)
        return bits.view(np.float32)
    return x


def narrow(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Round a float (or int) array to the narrow float `dtype` (see the module docstring)."""
    x = np.asarray(x)
    if dtype == DType.FLOAT16:
        with np.errstate(all="ignore"):
            if x.dtype.kind in "iub":
                return x.astype(np.float64).astype(np.float16)
            return widen(x).astype(np.float16)
    assert dtype == DType.BFLOAT16, dtype
    with np.errstate(all="ignore"):
        f = widen(x).astype(np.float32)
    return bf16_bits(f).view(DType.BFLOAT16.numpy)


def narrow_value(value: float, dtype: DType) -> float:
    """A Python float rounded to the narrow float `dtype`, as a Python float."""
    return float(widen(narrow(np.asarray([value], np.float64), dtype))[0])


def accumulator(dt: DType) -> DType:
    """The dtype a fold (sum, dot) over `dt` values accumulates in (module docstring)."""
    return DType.FLOAT if dt == DType.FLOAT16 else dt


def is_narrow_array(x: np.ndarray) -> bool:
    return x.dtype == np.float16 or _is_bf16(x.dtype)


def _is_bf16(dt: np.dtype) -> bool:
    # by name: comparing with ml_dtypes' dtype would import it (milliseconds) for every
    # compile, and an array can only be bfloat16 once ml_dtypes is loaded
    return dt.name == "bfloat16" and dt.kind == "V"


# --------------------------------------------------------------------------- cast-only types
#
# The float8 family, float4e2m1 and the 4-/2-bit ints are held one element per byte, as
# ml_dtypes holds them (a sub-byte int's byte is its value's low bits). No arithmetic is
# defined on them: Cast/CastLike convert through f32 (floats) or a plain int (ints), with the
# integer bit manipulation code generation emits (`codegen/scalar.py`), so the two agree bit
# for bit; tests check both against ml_dtypes on every byte pattern.
#
# f32 -> small float (ml_dtypes' `astype`, i.e. ONNX `saturate=0`): round to nearest even.
# A result below the target's smallest normal is rounded by the FPU: adding the "magic" float
# whose ulp is the target's subnormal ulp leaves the rounded count of ulps in the low bits.
# Otherwise the f32 bits are rebiased and rounded at the target's mantissa width by
# `(a + half - 1 + lsb) >> shift` (a carry moves into the exponent, as it should). Overflow and
# specials per type: e4m3fn -> NaN (0x7F, keeps the sign); fnuz -> their one NaN 0x80 (and a
# zero result is +0: 0x80 is not -0); e5m2 -> inf (NaN is 0x7E); float4 saturates to +-6 and
# maps NaN to -0/+0 (ml_dtypes' choice). ONNX `saturate=1` is a clamp to +-max in the source
# type before the cast (`elementwise.cast.py`): NaN stays NaN, inf becomes max, like
# onnx.numpy_helper.saturate_cast. f64 sources are first rounded to f32 *to odd*, so rounding
# once more to <= 4 mantissa bits is the correct rounding of the double.
#
# small float -> f32 is exact: normal numbers rebias the exponent field; subnormals are
# `mantissa * 2**(1 - bias - m)` computed in f32; specials per type as above.
#
# float -> 4-/2-bit int truncates toward zero and keeps the low bits (two's complement wrap,
# as ml_dtypes does); NaN, inf and |x| >= 2**62 give 0 (such floats are multiples of 16).
#
# float8e8m0 (a power of two, 2**(b - 127), 255 is NaN) is reached through f32 and implements
# Cast's defaults only (round_mode "up", saturate), as onnx.numpy_helper.to_float8e8m0; it is
# cast-only once `types.CAST_ONLY_DTYPES` lists it.


#: (exponent bits, mantissa bits, bias, special-value rule) of each small float.
FLOAT_FORMATS: dict[DType, tuple[int, int, int, str]] = {
    DType.FLOAT8E4M3FN: (4, 3, 7, "fn"),
    DType.FLOAT8E4M3FNUZ: (4, 3, 8, "fnuz"),
    DType.FLOAT8E5M2: (5, 2, 15, "ieee"),
    DType.FLOAT8E5M2FNUZ: (5, 2, 16, "fnuz"),
    DType.FLOAT4E2M1: (2, 1, 1, "f4"),
}
#: Value bits of each sub-byte int, and whether it is signed.
SMALL_INTS: dict[DType, tuple[int, bool]] = {
    DType.INT4: (4, True), DType.UINT4: (4, False), DType.INT2: (2, True), DType.UINT2: (2, False),
}
#: Float targets that saturate by default (Cast's `saturate` attribute applies to them).
SATURATING = frozenset(t for t, f in FLOAT_FORMATS.items() if f[3] != "f4")


def max_finite(dtype: DType) -> float:
    """The largest finite value of a small float type."""
    e, m, bias, kind = FLOAT_FORMATS[dtype]
    top = (1 << (e + m)) - 1  # all exponent and mantissa bits set
    mag = {"fn": top - 1, "fnuz": top, "ieee": top - (1 << m), "f4": top}[kind]
    return float(decode_small_float(np.asarray([mag], np.uint8), dtype)[0])


def max_finite_bits(dtype: DType) -> int:
    e, m, _, kind = FLOAT_FORMATS[dtype]
    top = (1 << (e + m)) - 1
    return {"fn": top - 1, "fnuz": top, "ieee": top - (1 << m), "f4": top}[kind]


def f64_to_f32_odd(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded to odd (toward zero, last bit set when inexact)."""
    t = x.astype(np.float32)
    back = t.astype(np.float64)
    bits = t.view(np.uint32)
    away = np.abs(back) > np.abs(x)
    bits = np.where(away, bits - np.uint32(1), bits)
    bits = np.where(back != x, bits | np.uint32(1), bits).astype(np.uint32)
    return bits.view(np.float32)


def encode_small_float(x: np.ndarray, dtype: DType) -> np.ndarray:
    """uint8 bit patterns of float32 `x` converted to a small float (ml_dtypes semantics)."""
    e, m, bias, kind = FLOAT_FORMATS[dtype]
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    sign = (u >> np.uint32(31)).astype(np.uint32)
    a = u & np.uint32(0x7FFFFFFF)
    magic = np.uint32(((127 - bias) + (23 - m) + 1) << 23)
    with np.errstate(all="ignore"):  # NaN inputs are replaced below
        sub = (a.view(np.float32) + magic.view(np.float32)).view(np.uint32) - magic
    shift = 23 - m
    rebias = np.uint32((((bias - 127) << 23) + (1 << (shift - 1)) - 1) & 0xFFFFFFFF)
    norm = (a + rebias + ((a >> np.uint32(shift)) & np.uint32(1))) >> np.uint32(shift)
    mag = np.where(a < np.uint32((128 - bias) << 23), sub, norm)
    special = a >= np.uint32(0x7F800000)
    isnan = a > np.uint32(0x7F800000)
    top = max_finite_bits(dtype)
    over = (mag > top) | special
    sbit = sign << np.uint32(e + m)
    if kind == "fn":
        out = np.where(over, top + 1, mag) | sbit
    elif kind == "fnuz":
        out = np.where(over, 0x80, np.where(mag == 0, 0, mag | sbit))
    elif kind == "ieee":
        out = np.where(isnan, 0x7E, np.where(over, 0x7C, mag)) | sbit
    else:
        out = np.where(isnan, (1 - sign) << 3, np.where(over, top, mag) | sbit)
    return out.astype(np.uint8)


def decode_small_float(bits: np.ndarray, dtype: DType) -> np.ndarray:
    """float32 values of small-float bit patterns (exact)."""
    e, m, bias, kind = FLOAT_FORMATS[dtype]
    b = np.asarray(bits).astype(np.uint32)
    sign = (b >> np.uint32(e + m)) & np.uint32(1)
    mag = b & np.uint32((1 << (e + m)) - 1)
    ex = mag >> np.uint32(m)
    man = mag & np.uint32((1 << m) - 1)
    normal = ((ex + np.uint32(127 - bias)) << np.uint32(23)) | (man << np.uint32(23 - m))
    sub = (man.astype(np.float32) * np.float32(2.0 ** (1 - bias - m))).view(np.uint32)
    val = np.where(ex == 0, sub, normal) | (sign << np.uint32(31))
    if kind == "fn":
        val = np.where(mag == (1 << (e + m)) - 1, 0x7FC00000, val)
    elif kind == "fnuz":
        val = np.where(b == 0x80, 0x7FC00000, val)
    elif kind == "ieee":
        top = (1 << e) - 1
        val = np.where(ex == top, np.where(man == 0, 0x7F800000, 0x7FC00000)
                       | (sign << np.uint32(31)), val)
    return np.asarray(val, dtype=np.uint32).view(np.float32)


def encode_small_int(x: np.ndarray, dtype: DType) -> np.ndarray:
    """uint8 bytes (low bits of the value) of any numeric array cast to a 4-/2-bit int."""
    nbits, _ = SMALL_INTS[dtype]
    x = np.asarray(x)
    if x.dtype.kind == "f":
        ok = np.abs(x) < 2.0 ** 62  # false for NaN
        v = np.where(ok, np.trunc(np.where(ok, x, 0)), 0).astype(np.int64)
    else:
        v = x.astype(np.int64)
    return (v & ((1 << nbits) - 1)).astype(np.uint8)


def decode_small_int(bits: np.ndarray, dtype: DType) -> np.ndarray:
    """int8 values of 4-/2-bit int bytes (only the low bits are read)."""
    nbits, signed = SMALL_INTS[dtype]
    v = np.asarray(bits).astype(np.uint8) & np.uint8((1 << nbits) - 1)
    out = v.astype(np.int8)
    if signed:
        out = np.where(v >= (1 << (nbits - 1)), out - np.int8(1 << nbits), out)
    return out.astype(np.int8)


def encode_e8m0(x: np.ndarray) -> np.ndarray:
    """uint8 bits of float32 `x` as float8e8m0 with ONNX Cast's defaults (round_mode "up",
    saturate): the f32 exponent field (the sign is dropped), plus one when any mantissa bit is
    set, except at the largest exponent 0xFE; NaN and inf give 0xFF (NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    ex = (u >> np.uint32(23)) & np.uint32(0xFF)
    up = ((u & np.uint32(0x7FFFFF)) != 0) & (ex < 0xFE)
    return np.where(ex == 0xFF, 0xFF, ex + up).astype(np.uint8)


def decode_e8m0(bits: np.ndarray) -> np.ndarray:
    """float32 values of float8e8m0 bits: 2**(b - 127); 0 is the subnormal 2**-127, 255 NaN."""
    b = np.asarray(bits).astype(np.uint32)
    val = np.where(b == 0, 0x00400000, np.where(b == 0xFF, 0x7FC00000, b << np.uint32(23)))
    return np.asarray(val, dtype=np.uint32).view(np.float32)


def to_cast_only(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Any numeric array cast to a cast-only type, as an array of its ml_dtypes dtype."""
    x = np.asarray(x)
    if x.dtype == np.bool_:
        x = x.astype(np.int8)
    if dtype in SMALL_INTS:
        out = encode_small_int(widen(x), dtype)
    elif dtype == DType.FLOAT8E8M0:  # through f32 rounded to nearest, as the reference does
        with np.errstate(all="ignore"):
            out = encode_e8m0(widen(x).astype(np.float32))
    else:
        if x.dtype == np.float64:
            f = f64_to_f32_odd(x)
        else:
            with np.errstate(all="ignore"):
                f = widen(x).astype(np.float32)
        out = encode_small_float(f, dtype)
    return out.reshape(x.shape).view(dtype.numpy)


def from_cast_only(x: np.ndarray) -> np.ndarray:
    """A cast-only array as float32 (small floats) or int8 (sub-byte ints), exactly."""
    dtype = DType.from_numpy(x.dtype)
    bits = np.ascontiguousarray(x).view(np.uint8)
    if dtype in SMALL_INTS:
        return decode_small_int(bits, dtype).reshape(x.shape)
    if dtype == DType.FLOAT8E8M0:
        return decode_e8m0(bits).reshape(x.shape)
    return decode_small_float(bits, dtype).reshape(x.shape)


def is_cast_only_array(x: np.ndarray) -> bool:
    try:
        dt = DType.from_numpy(x.dtype)
    except KeyError:
        return False
    return dt in FLOAT_FORMATS or dt in SMALL_INTS or dt == DType.FLOAT8E8M0
