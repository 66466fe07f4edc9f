"""Per-axis interpolation tables of Resize/Upsample, computed with numpy at compile time.

Resize is separable: along each resized axis, output position y reads `n` input positions
idx[y, t] (clamped into the axis: edge padding) weighted by w[y, t], and in
tf_crop_and_resize mode an output position whose source coordinate falls outside the input is
the extrapolation value (ext[y]). This module mirrors the ONNX reference implementation
(onnx/reference/ops/op_resize.py) step by step, in float64:

1) source coordinate x = transform(y) per `coordinate_transformation_mode`;
2) ratio = x - floor(x), or 1 when x is an integer (the reference prefers the left pixel);
3) coefficients from the mode: nearest (one-hot, by nearest_mode), linear (1-r, r), cubic
   (Keys kernel with cubic_coeff_a), or the antialiased linear/cubic kernels whose footprint
   widens by 1/scale when downsampling;
4) the n nearest neighbours of x (ties to the smaller index), clamped; with exclude_outside
   the weights of neighbours outside the input are zeroed and the rest renormalised.

`apply_axis` applies one axis' tables to an array (the numpy semantics used by constant
folding); the lowering multiplies the weights of all resized axes in one gather-blend nest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Coeffs = Callable[[float, float], np.ndarray]


@dataclass
class AxisTables:
    """Interpolation along one axis: idx/w are (out, n); ext is (out,) or None; div (out,)
    divides the row's weighted sum (onnxruntime's cubic outer axis with exclude_outside)."""

    idx: np.ndarray
    w: np.ndarray
    ext: np.ndarray | None
    div: np.ndarray | None = None

    @property
    def one_hot(self) -> bool:
        """Every row reads exactly one input element with weight 1 (nearest: a pure gather)."""
        return bool(((self.w == 0) | (self.w == 1)).all() and (self.w.sum(axis=1) == 1).all())

    def picks(self) -> np.ndarray:
        """The one index each row reads (only when `one_hot`)."""
        return self.idx[np.arange(len(self.idx)), np.argmax(self.w, axis=1)]


def nearest_coeffs(mode: str) -> Coeffs:
    """One-hot [left, right] choice by nearest_mode ("simple": opset < 11 / Upsample rule,
    floor when upsampling and ceil when downsampling, as onnxruntime does)."""

    def fn(ratio: float, scale: float) -> np.ndarray:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        m = mode if mode != "simple" else "floor" if scale >= 1 else "ceil"
        right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                 "floor": False, "ceil": True}[m]
        return np.array([0.0, 1.0]) if right else np.array([1.0, 0.0])

    return fn


def linear_coeffs(antialias: bool) -> Coeffs:
    def plain(ratio: float, scale: float) -> np.ndarray:
        return np.array([1 - ratio, ratio])

    def smooth(ratio: float, scale: float) -> np.ndarray:
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * scale
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()

    return smooth if antialias else plain


def cubic_coeffs(a: float, antialias: bool) -> Coeffs:
    def plain(r: float, scale: float) -> np.ndarray:
        s = 1 - r
        return np.array([((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                         ((a + 2) * r - (a + 3)) * r * r + 1,
                         ((a + 2) * s - (a + 3)) * s * s + 1,
                         ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a])

    def kernel(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x * x + 1
        if x < 2:
            return a * x ** 3 - 5 * a * x * x + 8 * a * x - 4 * a
        return 0.0

    def smooth(r: float, scale: float) -> np.ndarray:
        scale = min(scale, 1.0)
        lo = int(np.floor(-2 / scale) + 1)
        c = np.array([kernel(scale * (i - r)) for i in range(lo, 2 - lo)])
        return c / c.sum()

    return smooth if antialias else plain


def source_coords(mode: str, out_int: int, scale: float, d: int,
                  roi: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Source coordinate of every output position, and the extrapolation mask (crop mode)."""
    y = np.arange(out_int, dtype=np.float64)
    out_f = scale * d
    ext = None
    if mode == "align_corners":
        x = np.zeros(out_int) if out_f == 1 else y * (d - 1) / (out_f - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    elif mode == "tf_crop_and_resize":
        assert roi is not None
        if out_f == 1:
            x = np.full(out_int, (roi[1] - roi[0]) * (d - 1) / 2)
        else:
            x = y * (roi[1] - roi[0]) * (d - 1) / (out_f - 1)
        x = x + roi[0] * (d - 1)
        ext = (x < 0) | (x > d - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_int, -0.5) if out_f == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = d / 2 * (1 - out_int / out_f)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(mode)
    return x, ext


def axis_tables(coord_mode: str, coeffs: Coeffs, d: int, out_int: int, scale: float,
                roi: tuple[float, float] | None, exclude_outside: bool) -> AxisTables:
    """The tables of one axis (see the module docstring)."""
    x, ext = source_coords(coord_mode, out_int, scale, d, roi)
    if out_int == 0:
        return AxisTables(np.zeros((0, 1), np.int64), np.zeros((0, 1)), ext)
    xi = np.floor(x).astype(np.int64)
    ratios = np.where(x == xi, 1.0, x - xi)
    w = np.stack([np.asarray(coeffs(float(r), scale), dtype=np.float64) for r in ratios])
    n = w.shape[1]
    pad = int(math.ceil(n / 2))
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        start = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        start = np.where(frac <= 0.5, base, base + 1)
    idx = (p + start)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= d), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return AxisTables(np.clip(idx, 0, max(d - 1, 0)).astype(np.int64), w, ext)


def apply_axis(data: np.ndarray, axis: int, t: AxisTables, extrapolation: float) -> np.ndarray:
    """Interpolate a float64 array along one axis with its tables."""
    out_n = t.idx.shape[0]
    if out_n == 0 or data.size == 0:
        shape = list(data.shape)
        shape[axis] = out_n
        return np.zeros(shape, dtype=np.float64)
    gathered = np.take(data, t.idx, axis=axis)  # (..., out, n, ...)
    shape = (1,) * axis + t.w.shape + (1,) * (data.ndim - axis - 1)
    result = (gathered * t.w.reshape(shape)).sum(axis=axis + 1)
    if t.ext is not None and t.ext.any():
        mask = t.ext.reshape((1,) * axis + (out_n,) + (1,) * (data.ndim - axis - 1))
        result = np.where(mask, extrapolation, result)
    return result


def saturate(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 results to the output dtype: ints round half to even and saturate."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.round(x), info.min, info.max).astype(dtype)
    if dtype == np.bool_:
        return x != 0
    return x.astype(dtype)
