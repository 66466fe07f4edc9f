"""Resize's linear and cubic arithmetic in onnxruntime's order of operations, bit for bit.

The ONNX reference interpolates in float64, onnxruntime's CPU kernel in float32; both are
right to within rounding, but a float32 result one ulp off onnxruntime shows once a later op
magnifies it (Exp, or a Cast to double compared at double precision). Where onnxruntime has
a kernel (float32 and float16 data, no antialias) its arithmetic is the one to follow:

1) the axes it interpolates (`ort_axes`), where its coordinates are the spec's
   (`ort_follows_spec`): linear: rank 2 (bilinear), rank 3 (trilinear),
   rank 4 with scales[0] = 1 and scales[1] = 1 (NCHW: axes 2, 3) or scales[3] = 1 (NHWC:
   axes 1, 2), rank 5 with scales[0] = scales[1] = 1 (axes 2, 3, 4); cubic: rank 2, or rank 4
   with scales[0] = scales[1] = 1. An interpolated axis of scale 1 still takes part (weights
   1 and 0: an inf neighbour makes NaN there too). Other layouts onnxruntime rejects: the
   reference's float64 tables (`resize_tables`) stay;
2) the source coordinate in float32 (`_coord`), from the float32 scale, the output position
   and the dims as floats; exactly y when the scale is 1;
3) linear: the coordinate clamped into [0, d - 1], x1 = trunc, x2 = min(x1 + 1, d - 1),
   weights |x - x2| for x1 and |x - x1| for x2 (0.5 each when x1 = x2); the blend multiplies
   the axes' weights innermost axis first and adds the 2^k corners innermost-fastest, in
   float32 (float16 data is converted to float32 and the sum rounded once);
4) cubic: the Keys coefficients of s = x - floor(x) evaluated in float32 in onnxruntime's
   expression order, taps floor(x) - 1 .. floor(x) + 2 clamped into the axis; with
   exclude_outside the weights of taps outside are zeroed and divided by their float32 sum.
   The inner (x) axis' weights are c / sum (one rounding); the outer (y) axis multiplies the
   row's 1-D result by c and divides by its sum (`AxisTables.div`), as onnxruntime does;
5) tf_crop_and_resize: a position whose unclamped coordinate lies outside [0, d - 1] takes
   extrapolation_value.
`ort_evaluate` is the same arithmetic in numpy, for constant folding.
"""

from __future__ import annotations

import itertools

import numpy as np

from onnxjit.ir.ops.vision.resize_tables import AxisTables

F32 = np.float32


def ort_axes(mode: str, shape: tuple[int, ...], scales: list[float], antialias: bool,
             dtype: np.dtype) -> tuple[int, ...] | None:
    """The axes onnxruntime interpolates, or None when it has no such kernel."""
    if antialias or mode not in ("linear", "cubic") or dtype not in (np.float32, np.float16):
        return None
    s = [F32(v) for v in scales]
    r = len(shape)
    if r == 2:
        return (0, 1)
    if mode == "cubic":
        return (2, 3) if r == 4 and s[0] == 1 and s[1] == 1 else None
    if r == 3:
        return (0, 1, 2)
    if r == 4 and s[0] == 1:
        return (2, 3) if s[1] == 1 else (1, 2) if s[3] == 1 else None
    if r == 5 and s[0] == 1 and s[1] == 1:
        return (2, 3, 4)
    return None


def ort_follows_spec(coord: str, shape: tuple, out: list, scales: list[float],
                     roi: list | None, axes: tuple[int, ...], sizes: bool = False) -> bool:
    """onnxruntime's coordinates are the spec's on these axes. It takes length_resized as the
    integer output size where the spec has scale * d (align_corners, pytorch_half_pixel's
    test, tf_crop_and_resize), and the identity on an axis of scale 1 whatever the roi: the
    ONNX backend tests hold the spec's values there, so those cases keep the reference's
    tables. `out` may hold symbolic dims: then only integer scales are safe. Given `sizes`,
    the spec's length is the size itself: exact."""
    for a in axes:
        sc = float(np.float32(scales[a]))
        exact = sizes or (sc * shape[a] == out[a] if isinstance(out[a], int) and isinstance(
            shape[a], int) else sc.is_integer())
        if coord in ("align_corners", "tf_crop_and_resize") and not exact:
            return False
        if coord == "pytorch_half_pixel" and not exact and not (
                isinstance(out[a], int) and (out[a] > 1) == (sc * shape[a] > 1)):
            return False
        if coord == "tf_crop_and_resize" and sc == 1 and tuple(
                float(v) for v in roi[a]) != (0.0, 1.0):  # type: ignore[index]
            return False
    return True


def _coord(mode: str, y: np.ndarray, scale: np.float32, out: int, d: int,
           roi: tuple | None) -> np.ndarray:
    """onnxruntime's source coordinates (float32) of output positions y (float32)."""
    lo, ln, half = F32(out), F32(d), F32(0.5)
    if mode == "asymmetric":
        return y / scale
    if mode == "pytorch_half_pixel":
        return (y + half) / scale - half if lo > 1 else np.zeros_like(y)
    if mode == "tf_half_pixel_for_nn":
        return (y + half) / scale
    if mode == "align_corners":
        return np.zeros_like(y) if lo == 1 else y * (ln - F32(1)) / (lo - F32(1))
    if mode == "tf_crop_and_resize":
        rs, re = F32(roi[0]), F32(roi[1])  # type: ignore[index]
        if lo > 1:
            return rs * (ln - F32(1)) + (y * (re - rs) * (ln - F32(1))) / (lo - F32(1))
        v = 0.5 * float(rs + re) * float(ln - F32(1))  # in double, as onnxruntime
        return np.full_like(y, F32(v))
    if mode == "half_pixel_symmetric":
        width = scale * ln
        offset = (ln / F32(2)) * (F32(1) - lo / width)
        v = float(offset) + (y.astype(np.float64) + 0.5) / float(scale) - 0.5  # double
        return v.astype(F32)
    return (y + half) / scale - half  # half_pixel


def _cubic_coeffs(s: np.ndarray, a: np.float32) -> np.ndarray:
    """(n, 4) Keys coefficients in onnxruntime's float32 expression order."""
    s = np.abs(s)
    one, two = F32(1), F32(2)
    f5, f8, f4 = F32(5) * a, F32(8) * a, F32(4) * a
    p, q = a + two, a + F32(3)
    c0 = ((a * (s + one) - f5) * (s + one) + f8) * (s + one) - f4
    c1 = ((p * s - q) * s) * s + one
    c2 = ((p * (one - s) - q) * (one - s)) * (one - s) + one
    c3 = ((a * (two - s) - f5) * (two - s) + f8) * (two - s) - f4
    return np.stack([c0, c1, c2, c3], axis=1).astype(F32)


def ort_axis_tables(mode: str, coord: str, d: int, out: int, scale: float, roi: tuple | None,
                    cubic_a: float, exclude: bool, inner: bool) -> AxisTables:
    """One interpolated axis' tables as onnxruntime computes them (`inner`: the cubic x
    axis, whose weights fold in the division by their sum)."""
    with np.errstate(all="ignore"):
        y = np.arange(out, dtype=F32)
        sc = F32(scale)
        x = y.copy() if sc == 1 else _coord(coord, y, sc, out, d, roi).astype(F32)
        ext = (x < 0) | (x > F32(d - 1)) if coord == "tf_crop_and_resize" else None
        if mode == "linear":
            xc = np.maximum(F32(0), np.minimum(x, F32(d - 1)))
            x1 = np.minimum(xc.astype(np.int64), d - 1)
            x2 = np.minimum(x1 + 1, d - 1)
            w = np.stack([np.abs(xc - x2.astype(F32)), np.abs(xc - x1.astype(F32))], axis=1)
            w[x1 == x2] = F32(0.5)
            return AxisTables(np.stack([x1, x2], axis=1), w.astype(F32), ext)
        xi = np.floor(x)
        c = _cubic_coeffs((x - xi).astype(F32), F32(cubic_a))
        idx = xi.astype(np.int64)[:, None] + np.arange(-1, 3)[None, :]
        total = np.ones(out, F32)
        if exclude:
            c = np.where((idx < 0) | (idx >= d), F32(0), c).astype(F32)
            total = F32(0) + c[:, 0] + c[:, 1] + c[:, 2] + c[:, 3]
        idx = np.clip(idx, 0, d - 1)
        if inner:
            return AxisTables(idx, (c / total[:, None]).astype(F32), ext)
        return AxisTables(idx, c, ext, div=total.astype(F32) if exclude else None)


def ort_plan(s: object, shape: tuple[int, ...], out: list[int], scales: list[float],
             roi: list | None, axes: tuple[int, ...]) -> dict[int, AxisTables]:
    """The tables of onnxruntime's axes (see the module docstring)."""
    tabs = {}
    for a in axes:
        r = roi[a] if roi is not None else None
        tabs[a] = ort_axis_tables(s.mode, s.coord, shape[a], out[a], scales[a],  # type: ignore
                                  r, s.cubic_a, s.exclude, a == axes[-1])  # type: ignore
    return tabs


def ort_evaluate(x: np.ndarray, out: list[int], tabs: dict[int, AxisTables], cubic: bool,
                 extrapolation: float) -> np.ndarray:
    """Resize x (float32/float16) with onnxruntime's tables and summation order."""
    axes = sorted(tabs)
    if np.prod(out) == 0:
        return np.zeros(out, x.dtype)
    res = None
    xf = x.astype(F32)
    with np.errstate(all="ignore"):
        if cubic:
            res = _cubic_blend(xf, tabs, axes)
        else:
            for combo in itertools.product(*[range(2)] * len(axes)):
                w, g = None, xf
                for a, t in reversed(list(zip(axes, combo))):
                    col = tabs[a].w[:, t]
                    shp = [1] * x.ndim
                    shp[a] = len(col)
                    w = col.reshape(shp) if w is None else (w * col.reshape(shp)).astype(F32)
                for a, t in zip(axes, combo):
                    g = np.take(g, tabs[a].idx[:, t], axis=a)
                t = (w * g).astype(F32)
                res = t if res is None else (res + t).astype(F32)
        for a in axes:
            if tabs[a].ext is not None:
                shp = [1] * x.ndim
                shp[a] = out[a]
                res = np.where(tabs[a].ext.reshape(shp), F32(extrapolation), res).astype(F32)
    return res.astype(x.dtype)


def _cubic_blend(xf: np.ndarray, tabs: dict[int, AxisTables], axes: list[int]) -> np.ndarray:
    """sum_j ((sum_i wx_i * X[y_j, x_i]) * cy_j) / div_y, in onnxruntime's order."""
    ay, ax = axes
    ty, tx = tabs[ay], tabs[ax]
    res = None
    for j in range(4):
        rows = np.take(xf, ty.idx[:, j], axis=ay)
        inner = None
        for i in range(4):
            shp = [1] * xf.ndim
            shp[ax] = len(tx.w)
            t = (tx.w[:, i].reshape(shp) * np.take(rows, tx.idx[:, i], axis=ax)).astype(F32)
            inner = (F32(0) + t if inner is None else inner + t).astype(F32)  # from 0.0f
        shp = [1] * xf.ndim
        shp[ay] = len(ty.w)
        term = (inner * ty.w[:, j].reshape(shp)).astype(F32)  # type: ignore[union-attr]
        if ty.div is not None:
            term = (term / ty.div.reshape(shp)).astype(F32)
        res = (F32(0) + term if res is None else res + term).astype(F32)
    return res  # type: ignore[return-value]
