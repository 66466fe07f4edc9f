"""Resize with run-time sizes: the tables of `vision.resize_tables`, computed at each call.

In a symbolic program the resized dims are `Sym`s: the output dim is floor(d * scale) for a
constant scale that is a small fraction p/q (`sym_out_dim`: (d*p) // q, exact), and the
interpolation tables (`resize_tables.axis_tables`: per output position its source indices
and weights) cannot be built at compile time. Algorithm:
1) one kernel per resized axis fills run-time tables in scratch: for output position o,
   the source coordinate x (float64, the reference's formula for the coordinate mode), its
   floor xi and ratio r = x - xi; nearest: the one source index (xi, or xi + 1 when the
   nearest mode rounds r up; xi for an integer x), linear: indices xi, xi + 1 and weights
   1 - r, r (rounded to the input's type as the constant tables are); indices clamped to
   [0, d - 1];
2) one nest over the output, parallel over its outer dim: nearest copies x at the table's
   indices (exact), linear sums prod(weights) * x over the 2^k corners, in the order of
   `resize._blend`.
Linear on float32/float16 data in a layout onnxruntime has a kernel for (`resize_ort.ort_axes`)
follows onnxruntime's arithmetic instead, bit for bit (`_ort_tables`): every axis it
interpolates takes part (scale 1 too), the coordinate is float32 (exactly o when the scale is
1), clamped into [0, d - 1] before x1 = trunc, x2 = min(x1 + 1, d - 1) and the weights
|x - x2|, |x - x1| (0.5 each when x1 = x2) are taken, the blend is float32 with the weights
multiplied innermost axis first; and when every output dim equals its input dim the input is
copied, as onnxruntime does.
Taken for Resize-11+ with constant scales, modes nearest and linear (no antialias, no
exclude_outside) and coordinate modes half_pixel, pytorch_half_pixel, asymmetric,
align_corners and half_pixel_symmetric on float inputs; anything else is left to the
shape-specialised program (a TypeError, which `lower_to_loops` turns into NotSymbolic).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.geometry import operand
from onnxjit.ir.ops.tensor.indexing import row_strides
from onnxjit.ir.ops.vision.resize_ort import ort_axes, ort_follows_spec
from onnxjit.ir.types import Dim, DType, Sym

_COORDS = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners",
           "half_pixel_symmetric")
F64 = DType.DOUBLE


def sym_out_dim(d: Sym, scale: float) -> Dim:
    """floor(d * scale) for a symbolic d, when scale is exactly p/q (q <= 64); else None."""
    f = Fraction(scale).limit_denominator(64)
    if float(f) != scale:
        return None
    return (d * f.numerator) // f.denominator


def lower_resize_runtime(ctx: LowerContext, node: object, x: Buffer, y: Buffer,
                         settings: object, scales: list[float]) -> None:
    """Resize of run-time sizes (see the module docstring)."""
    s = settings
    if not (s.mode in ("nearest", "linear") and s.coord in _COORDS  # type: ignore[attr-defined]
            and not s.antialias and not s.exclude  # type: ignore[attr-defined]
            and x.dtype.is_float and node.op == "Resize"  # type: ignore[attr-defined]
            and node.version >= 11):  # type: ignore[attr-defined]
        raise TypeError("this Resize has no lowering for run-time sizes")
    nearest = s.mode == "nearest"  # type: ignore[attr-defined]
    ort = None if nearest else ort_axes(s.mode, x.shape, scales, False,  # type: ignore
                                        x.dtype.numpy)
    if ort is not None and ort_follows_spec(s.coord, x.shape, y.shape, scales,  # type: ignore
                                            None, ort):
        axes = list(ort)
        tabs = {a: _ort_tables(ctx, s, x.shape[a], y.shape[a], scales[a]) for a in axes}
    else:
        axes = [a for a in range(len(x.shape))
                if not (scales[a] == 1.0 and x.shape[a] == y.shape[a])]
        tabs = {a: _tables(ctx, s, x.shape[a], y.shape[a], scales[a], nearest, x.dtype)
                for a in axes}
        ort = None
    cdt = DType.FLOAT if ort is not None else x.dtype
    in_st, out_st = row_strides(list(x.shape)), row_strides(list(y.shape))
    b = Builder()
    with b.nest(list(y.shape), parallel_outer=True) as idx:
        base: Operand = i64(0)
        for k in range(len(y.shape)):
            if k not in tabs:
                base = b.iadd(base, b.imul(idx[k], in_st[k]))
        dst = b.linear(idx, out_st)
        if nearest:
            src = base
            for a in axes:
                src = b.iadd(src, b.imul(b.load(tabs[a][0], idx[a]), in_st[a]))
            b.store(y, dst, b.load(x, src))
        else:
            corners = [[(b.imul(b.load(tabs[a][c], idx[a]), in_st[a]),
                         b.load(tabs[a][2 + c], idx[a])) for c in range(2)] for a in axes]
            total: Operand | None = None
            for combo in itertools.product(*corners):
                src, w = base, None
                for off, _ in combo:
                    src = b.iadd(src, off)
                for _, wk in reversed(combo):  # innermost axis first, as onnxruntime
                    w = wk if w is None else b.op("mul", w, wk)
                term = b.op("mul", w, b.cast(b.load(x, src), cdt))  # type: ignore[arg-type]
                total = term if total is None else b.op("add", total, term)
            if ort is not None and _may_copy(scales, axes):
                total = b.op("select", _same_dims(b, x, y), b.cast(b.load(x, dst), cdt), total)
            b.store(y, dst, b.cast(total, y.dtype))  # type: ignore[arg-type]
    ctx.kernel("resize", b.body)


def _tables(ctx: LowerContext, s: object, d: Dim, out: Dim, scale: float, nearest: bool,
            dt: DType) -> list[Buffer]:
    """[index] (nearest) or [index0, index1, weight0, weight1] (linear) of one axis."""
    n = 1 if nearest else 4
    bufs = [ctx.scratch("rs_idx", DType.INT64, (out,)) for _ in range(1 if nearest else 2)]
    bufs += [ctx.scratch("rs_w", dt, (out,)) for _ in range(n - len(bufs))]
    b = Builder()
    df = b.cast(operand(d), F64)
    out_f = b.op("mul", const(scale, F64), df)
    last = b.op("sub", operand(d), i64(1))
    with b.loop(0, out, parallel=True, hint="o") as o:
        x = _coord(b, s.coord, b.cast(o, F64), scale, df, out_f, out)  # type: ignore
        xf = b.op("floor", x)
        xi = b.cast(xf, DType.INT64)
        r = b.op("sub", x, xf)

        def clamp(v: Operand) -> Operand:
            return b.op("min", b.op("max", v, i64(0)), last)

        if nearest:
            up = {"round_prefer_floor": b.op("gt", r, const(0.5, F64)),
                  "round_prefer_ceil": b.op("ge", r, const(0.5, F64)),
                  "floor": const(False, DType.BOOL),
                  "ceil": b.op("gt", r, const(0.0, F64))}[s.nearest]  # type: ignore
            b.store(bufs[0], o, clamp(b.op("select", up, b.iadd(xi, i64(1)), xi)))
        else:
            b.store(bufs[0], o, clamp(xi))
            b.store(bufs[1], o, clamp(b.iadd(xi, i64(1))))
            b.store(bufs[2], o, b.cast(b.op("sub", const(1.0, F64), r), dt))
            b.store(bufs[3], o, b.cast(r, dt))
    ctx.kernel("resize_tables", b.body)
    return bufs


def _may_copy(scales: list[float], axes: list[int]) -> bool:
    """Every output dim can equal its input dim with a scale other than 1 (floor(d * s) = d
    needs 1 <= s < 2): onnxruntime then copies the input instead of interpolating."""
    return all(scales[a] >= 1 for a in axes) and any(1 < scales[a] < 2 for a in axes)


def _same_dims(b: Builder, x: Buffer, y: Buffer) -> Operand:
    same: Operand = const(True, DType.BOOL)
    for dx, dy in zip(x.shape, y.shape):
        if dx != dy:
            same = b.op("and", same, b.op("eq", operand(dx), operand(dy)))
    return same


def _ort_tables(ctx: LowerContext, s: object, d: Dim, out: Dim, scale: float) -> list[Buffer]:
    """[index1, index2, weight1, weight2] of one axis, by onnxruntime's float32 arithmetic."""
    f32 = DType.FLOAT
    bufs = [ctx.scratch("rs_idx", DType.INT64, (out,)) for _ in range(2)]
    bufs += [ctx.scratch("rs_w", f32, (out,)) for _ in range(2)]
    b = Builder()
    ln, lo = b.cast(operand(d), f32), b.cast(operand(out), f32)  # type: ignore[arg-type]
    last = b.op("sub", operand(d), i64(1))
    with b.loop(0, out, parallel=True, hint="o") as o:
        yo = b.cast(o, f32)
        x = yo if np.float32(scale) == 1 else _ort_coord(b, s.coord, yo, scale, ln, lo)  # type: ignore
        xc = b.op("max", const(0.0, f32), b.op("min", x, b.cast(last, f32)))
        x1 = b.op("min", b.cast(xc, DType.INT64), last)
        x2 = b.op("min", b.iadd(x1, i64(1)), last)
        same = b.op("eq", x1, x2)
        half = const(0.5, f32)
        b.store(bufs[0], o, x1)
        b.store(bufs[1], o, x2)
        b.store(bufs[2], o, b.op("select", same, half,
                                 b.op("abs", b.op("sub", xc, b.cast(x2, f32)))))
        b.store(bufs[3], o, b.op("select", same, half,
                                 b.op("abs", b.op("sub", xc, b.cast(x1, f32)))))
    ctx.kernel("resize_tables", b.body)
    return bufs


def _ort_coord(b: Builder, mode: str, yo: Operand, scale: float, ln: Operand,
               lo: Operand) -> Operand:
    """onnxruntime's float32 source coordinate (`resize_ort._coord`)."""
    f32 = DType.FLOAT
    sc, half, one = const(float(np.float32(scale)), f32), const(0.5, f32), const(1.0, f32)
    if mode == "asymmetric":
        return b.op("div", yo, sc)
    hp = b.op("sub", b.op("div", b.op("add", yo, half), sc), half)
    if mode == "half_pixel":
        return hp
    if mode == "pytorch_half_pixel":
        return b.op("select", b.op("gt", lo, one), hp, const(0.0, f32))
    if mode == "align_corners":
        num = b.op("mul", yo, b.op("sub", ln, one))
        return b.op("select", b.op("eq", lo, one), const(0.0, f32),
                    b.op("div", num, b.op("sub", lo, one)))
    # half_pixel_symmetric: float32 offset, the rest in double
    adj = b.op("div", lo, b.op("mul", sc, ln))
    offset = b.op("mul", b.op("div", ln, const(2.0, f32)), b.op("sub", one, adj))
    yd = b.op("div", b.op("add", b.cast(yo, F64), const(0.5, F64)), const(float(sc.value), F64))
    return b.cast(b.op("sub", b.op("add", b.cast(offset, F64), yd), const(0.5, F64)), f32)


def _coord(b: Builder, mode: str, yo: Operand, scale: float, df: Operand, out_f: Operand,
           out: Dim) -> Operand:
    """The source coordinate of output position yo (float64), as `source_coords`."""
    sc = const(scale, F64)
    half = b.op("sub", b.op("div", b.op("add", yo, const(0.5, F64)), sc), const(0.5, F64))
    one = b.op("eq", out_f, const(1.0, F64))
    if mode == "asymmetric":
        return b.op("div", yo, sc)
    if mode == "half_pixel":
        return half
    if mode == "pytorch_half_pixel":
        return b.op("select", one, const(-0.5, F64), half)
    if mode == "align_corners":
        num = b.op("mul", yo, b.op("sub", df, const(1.0, F64)))
        return b.op("select", one, const(0.0, F64),
                    b.op("div", num, b.op("sub", out_f, const(1.0, F64))))
    # half_pixel_symmetric
    ratio = b.op("div", b.cast(operand(out), F64), out_f)  # type: ignore[arg-type]
    offset = b.op("mul", b.op("div", df, const(2.0, F64)), b.op("sub", const(1.0, F64), ratio))
    return b.op("add", offset, half)
