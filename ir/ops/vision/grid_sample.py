"""GridSample (opsets 16, 20, 22): sample X at the normalised positions a grid gives.

X is (N, C, D1..Dr), grid is (N, O1..Or', r) with the coordinates in reverse dim order (the
last component indexes the last spatial dim, i.e. x for W); Y is (N, C, O1..Or'). Per output
position and spatial dim k (size d), following the reference (PyTorch's GridSampler.h):

1. denormalise g: align_corners -> x = (g + 1) / 2 * (d - 1), else x = ((g + 1) * d - 1) / 2;
   `nearest` rounds x half-to-even (torch's rint);
2. a coordinate outside [lo, hi] (lo, hi = 0, d-1 with align_corners, else -0.5, d-0.5) is
   clamped to [0, d-1] (`border`) or reflected into [lo, hi] (`reflection`);
3. taps: nearest -> trunc(x) with weight 1; linear -> floor(x) + {0, 1} with weights (1-t, t);
   cubic -> floor(x) + {-1, 0, 1, 2} with Keys' cubic coefficients (alpha -0.75) of t, where
   t = x - floor(x);
4. a tap index outside [0, d) reads 0 (`zeros`), the clamped index (`border`), or the index
   reflected into [lo, hi] and truncated (`reflection`);
5. Y = sum over the tap combinations of the product of the per-dim weights times X there.

`reflect(x)` mirrors at the near border until inside: with n = floor(dist / (hi - lo)) and
r = dist - n (hi - lo), the result is lo + r or hi - r by the parity of n.

Lowering: a loop over (n, output position) (parallel over n) computes the taps of every dim
once (scalar ops: floor, rem, select), the flat offset and weight of each combination, then a
loop over channels sums the weighted loads; under `zeros` a select zeroes taps outside X.
The numpy `evaluate` does the same arithmetic vectorised over the output positions.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const, row_major_strides
from onnxjit.ir.loops import Operand, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import (
    BF16,
    FLOATS,
    NUMERIC,
    Types,
    accept,
    arity,
    int_attr,
)
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType

_X_TYPES: Types = ((16, NUMERIC | frozenset({DType.BOOL})),)
_GRID_TYPES: Types = ((16, FLOATS), (22, FLOATS | BF16))
_ALPHA = -0.75
_MODES_16 = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
_MODES_20 = {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}


def _attrs(node: Node) -> tuple[str, str, bool]:
    """(mode in {nearest, linear, cubic}, padding mode, align_corners)."""
    modes = _MODES_16 if node.version < 20 else _MODES_20
    mode = node.attr("mode", "bilinear" if node.version < 20 else "linear")
    if mode not in modes:
        raise ModelError(f"attribute 'mode' must be one of {sorted(modes)}, got {mode!r}",
                         where=node)
    pad = node.attr("padding_mode", "zeros")
    if pad not in ("zeros", "border", "reflection"):
        raise ModelError("attribute 'padding_mode' must be zeros, border or reflection, got "
                         f"{pad!r}", where=node)
    return modes[mode], pad, int_attr(node, "align_corners", 0, (0, 1)) == 1


def _infer(node: Node) -> list:
    arity(node, 2)
    dt = accept(node, 0, _X_TYPES)
    accept(node, 1, _GRID_TYPES)
    _attrs(node)
    x, g = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if x is not None and len(x) < 3:
        raise ModelError(f"X must have rank >= 3 (N, C, spatial...), got rank {len(x)}",
                         where=node)
    if node.version < 20 and x is not None and len(x) != 4:
        raise ModelError(f"GridSample-16 takes a 4-D X, got rank {len(x)}", where=node)
    if x is not None and g is not None:
        if len(g) != len(x):
            raise ModelError(f"grid has rank {len(g)} but X has rank {len(x)}; they must match",
                             where=node)
        r = len(x) - 2
        if isinstance(g[-1], int) and g[-1] != r:
            raise ModelError(f"the last dim of grid must be {r} (one coordinate per spatial "
                             f"dim of X), got {g[-1]}", where=node)
        if isinstance(x[0], int) and isinstance(g[0], int) and x[0] != g[0]:
            raise ModelError(f"X has batch {x[0]} but grid has batch {g[0]}", where=node)
    if x is None or g is None:
        return tensor(dt, None)
    return tensor(dt, (x[0], x[1], *g[1:-1]))


def _bounds(d: int, align: bool) -> tuple[float, float]:
    return (0.0, d - 1.0) if align else (-0.5, d - 0.5)


def _cubic(t: np.ndarray) -> list[np.ndarray]:
    a = _ALPHA
    return [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
            ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a]


# --------------------------------------------------------------------------- numpy


def _np_reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    rng = hi - lo
    if rng <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dist = np.where(below, lo - x, x - hi)
    n = np.floor(dist / rng)
    r = dist - n * rng
    even = np.fmod(n, 2) == 0
    return np.where(below, np.where(even, lo + r, hi - r),
                    np.where(above, np.where(even, hi - r, lo + r), x))


def _np_taps(g: np.ndarray, d: int, mode: str, pad: str, align: bool
             ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(index, weight, valid) of each tap of one dim, arrays over the output positions."""
    x = (g + 1) / 2 * (d - 1) if align else ((g + 1) * d - 1) / 2
    if mode == "nearest":
        x = np.rint(x)
    lo, hi = _bounds(d, align)
    if pad == "border":
        x = np.where((x < lo) | (x > hi), np.clip(x, 0, d - 1), x)
    elif pad == "reflection":
        x = _np_reflect(x, lo, hi)
    x = np.clip(np.nan_to_num(x, nan=0.0), -1e9, 1e9)
    if mode == "nearest":
        taps = [(np.trunc(x), np.ones_like(x))]
    else:
        f = np.floor(x)
        t = x - f
        ws = [1 - t, t] if mode == "linear" else _cubic(t)
        first = 0 if mode == "linear" else -1
        taps = [(f + first + k, w) for k, w in enumerate(ws)]
    out = []
    for i, w in taps:
        valid = np.ones(i.shape, bool)
        if pad == "zeros":
            valid = (i >= 0) & (i < d)
            i = np.clip(i, 0, d - 1)
        elif pad == "border":
            i = np.clip(i, 0, d - 1)
        else:
            i = np.clip(np.trunc(_np_reflect(i, lo, hi)), 0, d - 1)
        out.append((i.astype(np.int64), w, valid))
    return out


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, grid = inputs[0], inputs[1]
    mode, pad, align = _attrs(node)
    n, c, *dims = x.shape
    out_sp = grid.shape[1:-1]
    ct = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
    y = np.zeros((n, c, math.prod(out_sp)), dtype=ct)
    if y.size == 0:
        return [y.astype(x.dtype).reshape((n, c, *out_sp))]
    g = grid.reshape(n, -1, len(dims)).astype(ct)
    per_dim = [_np_taps(g[:, :, len(dims) - 1 - k], d, mode, pad, align)
               for k, d in enumerate(dims)]
    flat = x.reshape(n, c, -1).astype(ct)
    strides = row_major_strides(dims)
    with np.errstate(all="ignore"):
        for combo in itertools.product(*per_dim):
            off = sum(i * s for (i, _, _), s in zip(combo, strides))
            w = math.prod(t[1] for t in combo)
            valid = np.logical_and.reduce([t[2] for t in combo])
            v = np.take_along_axis(flat, np.broadcast_to(off[:, None, :], y.shape), axis=2)
            y += np.where(valid[:, None, :], w[:, None, :] * v, 0)
    return [y.astype(x.dtype).reshape((n, c, *out_sp))]


# --------------------------------------------------------------------------- loop IR


def _reflect(b: Builder, x: Operand, lo: float, hi: float) -> Operand:
    dt = x.dtype
    rng = hi - lo
    if rng <= 0:
        return const(lo, dt)
    lo_c, hi_c = const(lo, dt), const(hi, dt)
    below, above = b.op("lt", x, lo_c), b.op("gt", x, hi_c)
    dist = b.op("select", below, b.op("sub", lo_c, x), b.op("sub", x, hi_c))
    n = b.op("floor", b.op("div", dist, const(rng, dt)))
    r = b.op("sub", dist, b.op("mul", n, const(rng, dt)))
    even = b.op("eq", b.op("rem", n, const(2, dt)), const(0, dt))
    lo_r, hi_r = b.op("add", lo_c, r), b.op("sub", hi_c, r)
    return b.op("select", below, b.op("select", even, lo_r, hi_r),
                b.op("select", above, b.op("select", even, hi_r, lo_r), x))


def _rint(b: Builder, x: Operand) -> Operand:
    """Round half to even: floor, +1 when the fraction is > 0.5 or == 0.5 with odd floor."""
    dt = x.dtype
    f = b.op("floor", x)
    frac = b.op("sub", x, f)
    half = const(0.5, dt)
    odd = b.op("ne", b.op("rem", f, const(2, dt)), const(0, dt))
    up = b.op("or", b.op("gt", frac, half), b.op("and", b.op("eq", frac, half), odd))
    return b.op("select", up, b.op("add", f, const(1, dt)), f)


def _taps(b: Builder, g: Operand, d: int, mode: str, pad: str, align: bool
          ) -> list[tuple[Operand, Operand, Operand | None]]:
    """Loop-IR version of `_np_taps`: (i64 index, weight, valid bool or None) per tap."""
    dt = g.dtype
    one = const(1, dt)
    gp1 = b.op("add", g, one)
    if align:
        x = b.op("mul", b.op("div", gp1, const(2, dt)), const(d - 1, dt))
    else:
        x = b.op("div", b.op("sub", b.op("mul", gp1, const(d, dt)), one), const(2, dt))
    if mode == "nearest":
        x = _rint(b, x)
    lo, hi = _bounds(d, align)
    if pad == "border":
        out = b.op("or", b.op("lt", x, const(lo, dt)), b.op("gt", x, const(hi, dt)))
        clamped = b.op("min", b.op("max", x, const(0, dt)), const(d - 1, dt))
        x = b.op("select", out, clamped, x)
    elif pad == "reflection":
        x = _reflect(b, x, lo, hi)
    # Keep huge or NaN coordinates inside the i64 range before the casts below.
    x = b.op("select", b.op("isnan", x), const(0, dt), x)
    x = b.op("min", b.op("max", x, const(-1e9, dt)), const(1e9, dt))
    if mode == "nearest":
        taps = [(b.cast(x, DType.INT64), one)]
    else:
        f = b.op("floor", x)
        t = b.op("sub", x, f)
        fi = b.cast(f, DType.INT64)
        if mode == "linear":
            taps = [(fi, b.op("sub", one, t)), (b.op("add", fi, i64(1)), t)]
        else:
            a = _ALPHA
            t1, s1, s2 = b.op("add", t, one), b.op("sub", one, t), b.op("sub", const(2, dt), t)

            def poly_out(u: Operand) -> Operand:  # ((a u - 5a) u + 8a) u - 4a
                p = b.op("sub", b.op("mul", const(a, dt), u), const(5 * a, dt))
                p = b.op("add", b.op("mul", p, u), const(8 * a, dt))
                return b.op("sub", b.op("mul", p, u), const(4 * a, dt))

            def poly_in(u: Operand) -> Operand:  # ((a+2) u - (a+3)) u u + 1
                p = b.op("sub", b.op("mul", const(a + 2, dt), u), const(a + 3, dt))
                return b.op("add", b.op("mul", b.op("mul", p, u), u), one)

            ws = [poly_out(t1), poly_in(t), poly_in(s1), poly_out(s2)]
            taps = [(b.op("add", fi, i64(k - 1)), w) for k, w in enumerate(ws)]
    out: list[tuple[Operand, Operand, Operand | None]] = []
    for i, w in taps:
        valid = None
        if pad == "zeros":
            valid = b.op("and", b.op("ge", i, i64(0)), b.op("lt", i, i64(d)))
        elif pad == "reflection":
            i = b.cast(_reflect(b, b.cast(i, dt), lo, hi), DType.INT64)
        i = b.op("min", b.op("max", i, i64(0)), i64(d - 1))
        out.append((i, w, valid))
    return out


def _lower(ctx: LowerContext, node: Node) -> None:
    xb, gb, yb = (ctx.buf(v) for v in (node.inputs[0], node.inputs[1], node.outputs[0]))
    if yb.numel == 0:
        return
    mode, pad, align = _attrs(node)
    n, c, *dims = xb.shape
    r = len(dims)
    p_count = math.prod(gb.shape[1:-1])
    spatial = math.prod(dims)
    ct = xb.dtype if xb.dtype.is_float else DType.DOUBLE
    strides = row_major_strides(dims)
    b = Builder()
    with b.loop(0, n, parallel=True, hint="n") as ni, b.loop(0, p_count, hint="p") as pi:
        base = b.imul(b.iadd(b.imul(ni, p_count), pi), r)
        per_dim = []
        for k, d in enumerate(dims):
            g = b.cast(b.load(gb, b.iadd(base, i64(r - 1 - k))), ct)
            per_dim.append(_taps(b, g, d, mode, pad, align))
        combos = []
        for combo in itertools.product(*per_dim):
            off: Operand = i64(0)
            w: Operand | None = None
            valid: Operand | None = None
            for (i, wk, vk), s in zip(combo, strides):
                off = b.iadd(off, b.imul(i, s))
                w = wk if w is None else b.op("mul", w, wk)
                if vk is not None:
                    valid = vk if valid is None else b.op("and", valid, vk)
            assert w is not None
            combos.append((off, w, valid))
        with b.loop(0, c, hint="c") as ci:
            nc = b.iadd(b.imul(ni, c), ci)
            plane = b.imul(nc, spatial)
            acc = b.var(const(0, ct), hint="acc")
            for off, w, valid in combos:
                v = b.cast(b.load(xb, b.iadd(plane, off)), ct)
                term = b.op("mul", w, v)
                if valid is not None:
                    term = b.op("select", valid, term, const(0, ct))
                b.assign(acc, "add", acc, term)
            b.store(yb, b.iadd(b.imul(nc, p_count), pi), b.cast(acc, yb.dtype))
    ctx.kernel("gridsample", b.body)


op("GridSample", (16, 20, 22), infer=_infer, evaluate=_evaluate, lower=_lower,
   doc="sample X at grid positions (nearest/linear/cubic; zeros/border/reflection padding)")
