"""Exact numpy conversions of the narrow float types (float16, bfloat16) used by the evaluator.

A narrow float is stored in 16 bits and computed in float32 (see `types.NARROW_FLOATS`). The
conversions here define the semantics code generation reproduces bit for bit:

- widening (f16/bf16 -> f32) is exact; bf16 -> f32 is the 16 bits shifted to the top of a word;
- f32 -> f16 is numpy's `astype(float16)`: round to nearest, ties to even, overflow to inf;
- f64 -> f16 rounds once, directly (numpy's cast; LLVM's `fptrunc double to half`);
- f32 -> bf16 rounds to nearest, ties to even, on the bit pattern: `(bits + 0x7FFF + lsb) >> 16`
  where lsb is bit 16 (a carry into the exponent gives the next binade or inf, as it should);
  NaN keeps its sign and top payload bits and gets the quiet bit (`bits >> 16 | 0x40`), so a
  NaN never rounds to inf;
- f64 and ints -> bf16 go through f32 first (two roundings), as ml_dtypes does.
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
    """A float16/bfloat16 array as float32 (exact); other arrays unchanged."""
    if x.dtype == np.float16:
        return x.astype(np.float32)
    if x.dtype == _BF16:
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
    return bf16_bits(f).view(_BF16)


def narrow_value(value: float, dtype: DType) -> float:
    """A Python float rounded to the narrow float `dtype`, as a Python float."""
    return float(widen(narrow(np.asarray([value], np.float64), dtype))[0])


def is_narrow_array(x: np.ndarray) -> bool:
    return x.dtype == np.float16 or x.dtype == _BF16


try:
    _BF16 = DType.BFLOAT16.numpy
except KeyError:  # pragma: no cover - without ml_dtypes no array is bfloat16
    _BF16 = np.dtype([("bf16", np.uint16)])
