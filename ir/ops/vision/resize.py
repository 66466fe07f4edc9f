"""Resize (opsets 10, 11, 13, 18, 19) and Upsample (7, 9; deprecated in 10).

Algorithm:
1) read the request: scales (Upsample attribute or input, Resize-10 input 1, Resize-11+ input 2)
   or sizes (Resize-11+ input 3), optionally only for `axes` (18), with
   `keep_aspect_ratio_policy` (18) turning sizes into one common scale. These set the output
   shape, so they must be compile-time constants (else the dims stay unknown at inference and
   lowering raises UnsupportedError naming the node and input). Output dim: floor(d * scale)
   for scales; the size itself (or round(scale * d) under a policy) for sizes.
2) per resized axis, build interpolation tables with numpy (`vision.resize_tables`: source
   indices, weights, extrapolation mask), mirroring the ONNX reference; an axis whose scale is
   1 and size unchanged is not resized. Upsample and Resize-10 use the asymmetric transform and
   onnxruntime's legacy nearest rule (floor when upsampling, ceil when downsampling). Linear
   and cubic on float32/float16 data in a layout onnxruntime has a kernel for take its float32
   tables and order of operations instead (`vision.resize_ort`), bit for bit, except where
   its coordinates depart from the spec.
3) lower to one nest over the output: the tables are const buffers (a symbolic program's
   resized dims are `Sym`s: `vision.resize_runtime` computes the tables at each call). When
   every table is one-hot (nearest) the element is a pure gather (exact for every dtype);
   otherwise the taps of each resized axis accumulate prod(weights) * x
   (`vision.resize_blend`), in float32 on onnxruntime's path, else in the input's float type
   (float64 for integer inputs, whose results round half to even and
   saturate, as the reference's saturate_cast does). In tf_crop_and_resize mode an output
   position extrapolated along any axis is `extrapolation_value`.
Constant folding applies the same tables one axis at a time in float64 (the reference's order),
or onnxruntime's arithmetic in numpy (`resize_ort.ort_evaluate`) on its path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Operand, i64
from onnxjit.ir.opdef import LowerContext, op, since_version
from onnxjit.ir.ops.elementwise.arithmetic import float_attr, int_attr
from onnxjit.ir.ops.elementwise.inference import check_dtype, tensor
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.ops.tensor.indexing import PARALLEL_MIN, axes_list, row_strides
from onnxjit.ir.ops.tensor.pad_tables import const_buffer
from onnxjit.ir.ops.vision.resize_blend import blend, cubic_blend, round_half_even
from onnxjit.ir.ops.vision.resize_ort import ort_axes, ort_evaluate, ort_follows_spec, ort_plan
from onnxjit.ir.ops.vision.resize_runtime import lower_resize_runtime, sym_out_dim
from onnxjit.ir.ops.vision.resize_tables import (
    AxisTables,
    apply_axis,
    axis_tables,
    cubic_coeffs,
    linear_coeffs,
    nearest_coeffs,
    saturate,
)
from onnxjit.ir.types import Dim, DType, ValueType


def _str(node: Node, name: str, default: str, allowed: tuple[str, ...]) -> str:
    v = node.attr(name, default)
    v = v.decode() if isinstance(v, bytes) else str(v)
    if v not in allowed:
        raise ModelError(f"attribute '{name}' must be one of {list(allowed)} (opset "
                         f"{node.version}), got '{v}'", where=node)
    return v


@dataclass
class Settings:
    mode: str
    coord: str
    nearest: str
    cubic_a: float
    exclude: bool
    extrapolation: float
    antialias: bool
    policy: str


def _settings(node: Node) -> Settings:
    ver = since_version(node)
    legacy = node.op == "Upsample" or ver < 11
    if node.op == "Upsample" and ver >= 10:
        raise ModelError("Upsample is deprecated since opset 10; use Resize", where=node)
    modes = ("nearest", "linear", "bilinear") if node.op == "Upsample" else \
        ("nearest", "linear") if legacy else ("nearest", "linear", "cubic")
    mode = _str(node, "mode", "nearest", modes).replace("bilinear", "linear")
    if legacy:
        return Settings(mode, "asymmetric", "simple", -0.75, False, 0.0, False, "stretch")
    coords = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
              "tf_crop_and_resize"] + (["tf_half_pixel_for_nn"] if ver < 13 else []) + \
        (["half_pixel_symmetric"] if ver >= 19 else [])
    coord = _str(node, "coordinate_transformation_mode", "half_pixel", tuple(coords))
    nearest = _str(node, "nearest_mode", "round_prefer_floor",
                   ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"))
    antialias = ver >= 18 and int_attr(node, "antialias", 0, (0, 1)) == 1
    policy = _str(node, "keep_aspect_ratio_policy", "stretch",
                  ("stretch", "not_larger", "not_smaller")) if ver >= 18 else "stretch"
    return Settings(mode, coord, nearest, float_attr(node, "cubic_coeff_a", -0.75),
                    int_attr(node, "exclude_outside", 0, (0, 1)) == 1,
                    float_attr(node, "extrapolation_value", 0.0), antialias, policy)


def _given(node: Node, i: int) -> bool:
    """Input i is present and not an empty placeholder tensor."""
    v = node.input(i)
    if v is None:
        return False
    if v.const is not None:
        return np.asarray(v.const).size > 0
    shape = v.shape
    return not (shape is not None and len(shape) == 1 and shape[0] == 0)


@dataclass
class Request:
    kind: str  # "scales" | "sizes"
    input: int  # position of the input holding the values (-1: attribute)
    values: tuple | None  # None: not a compile-time constant
    axes: list[int]


def _request(node: Node, rank: int) -> Request:
    ver = since_version(node)
    if node.op == "Upsample" and ver < 9:
        vals = node.attr("scales")
        if vals is None:
            raise ModelError("missing required attribute 'scales'", where=node)
        return Request("scales", -1, tuple(float(s) for s in vals), list(range(rank)))
    axes = list(range(rank))
    if ver >= 18 and node.attr("axes") is not None:
        axes = axes_list([int(a) for a in node.attr("axes")], rank, node)
    if node.op == "Upsample" or ver < 11:
        pos, kind = 1, "scales"
    else:
        has_scales, has_sizes = _given(node, 2), _given(node, 3)
        if has_scales == has_sizes:
            raise ModelError("exactly one of scales and sizes must be given", where=node)
        pos, kind = (2, "scales") if has_scales else (3, "sizes")
    v = node.input(pos)
    if v is None:
        raise ModelError(f"required input {pos} ({kind}) is missing", where=node)
    vals = None if v.const is None else tuple(np.asarray(v.const).reshape(-1).tolist())
    if vals is not None and len(vals) != len(axes):
        raise ModelError(f"{kind} has {len(vals)} values; expected {len(axes)}", where=node)
    return Request(kind, pos, vals, axes)


#: the most elements an output (or one of its dims, beside a 0 dim) may have: more (2^40
#: float32 values are 4 TiB) is a scales or sizes value gone wrong, said as such rather than
#: as a failed allocation
MAX_ELEMENTS = 1 << 40


def _out_dims(node: Node, shape: tuple[Dim, ...], req: Request, s: Settings
              ) -> tuple[list[Dim], list[float]]:
    """Output dims and per-axis scale factors (None dims when unknown)."""
    out, scales = _dims_and_scales(node, shape, req, s)
    known = [d for d in out if isinstance(d, int)]
    if math.prod(known) > MAX_ELEMENTS or max(known, default=0) > MAX_ELEMENTS:
        raise ModelError(f"output dims {out} exceed {MAX_ELEMENTS} elements: check the "
                         f"{req.kind}", where=node)
    return out, scales


def _dims_and_scales(node: Node, shape: tuple[Dim, ...], req: Request, s: Settings
                     ) -> tuple[list[Dim], list[float]]:
    out: list[Dim] = list(shape)
    scales = [1.0] * len(shape)
    if req.values is None:
        for a in req.axes:
            out[a] = None
        return out, scales
    if req.kind == "scales":
        for a, sc in zip(req.axes, req.values):
            if not 0 < sc < math.inf:  # NaN and inf too (an infinite size is no size)
                raise ModelError(f"scales must be positive and finite, got {sc}", where=node)
            scales[a] = float(sc)
            d = shape[a]
            out[a] = int(sc * d) if isinstance(d, int) else d if sc == 1 else \
                None if d is None else sym_out_dim(d, float(sc))
        return out, scales
    for a, sz in zip(req.axes, req.values):
        if int(sz) < 0:
            raise ModelError(f"sizes must be >= 0, got {sz}", where=node)
        out[a] = int(sz)
    dims = [shape[a] for a in req.axes]
    if not all(isinstance(d, int) for d in dims):
        if s.policy != "stretch":
            for a in req.axes:
                out[a] = None
        return out, scales
    if any(d == 0 for d in dims):
        raise ModelError(f"cannot resize an empty axis to sizes {list(req.values)}", where=node)
    for a in req.axes:
        scales[a] = out[a] / shape[a]  # type: ignore[operator]
    if s.policy != "stretch":
        pick = min if s.policy == "not_larger" else max
        sc = pick(scales[a] for a in req.axes)
        for a in req.axes:
            scales[a] = sc
            out[a] = int(sc * shape[a] + 0.5)  # type: ignore[operator]
    return out, scales


def _infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    s = _settings(node)
    shape = tensor_input(node, 0).shape
    if shape is None:
        return tensor(dt, None)
    if len(shape) == 0:
        raise ModelError(f"{node.op} needs an input of rank >= 1", where=node)
    out, _ = _out_dims(node, shape, _request(node, len(shape)), s)
    return tensor(dt, tuple(out))


def _roi(node: Node, req: Request, rank: int, s: Settings) -> list[tuple[float, float]] | None:
    if s.coord != "tf_crop_and_resize":
        return None
    v = node.input(1)
    if v is None or not _given(node, 1):
        raise ModelError("tf_crop_and_resize needs a roi input", where=node)
    if v.const is None:
        raise UnsupportedError(f"input 1 (roi, {v.describe()}) of {node.op} is not a "
                               "compile-time constant; the interpolation tables depend on it",
                               where=node)
    # Kept as numpy scalars of the roi's own dtype: the reference computes roi[1] - roi[0]
    # in that precision, and which positions extrapolate depends on it.
    vals = np.asarray(v.const).reshape(-1)
    n = len(req.axes)
    if vals.size != 2 * n:
        raise ModelError(f"roi has {vals.size} values; expected {2 * n}", where=node)
    roi: list = [(0.0, 1.0)] * rank
    for j, a in enumerate(req.axes):
        roi[a] = (vals[j], vals[n + j])
    return roi


def plan(node: Node, shape: tuple[int, ...], dtype: np.dtype | None = None
         ) -> tuple[list[int], dict[int, AxisTables], float, str | None]:
    """Output shape, tables of the resized axes, the extrapolation value, and which blend
    they are for: None (the reference's tables), "linear" or "cubic" (onnxruntime's
    arithmetic, `resize_ort`, for data of `dtype` where onnxruntime has a kernel)."""
    s = _settings(node)
    req = _request(node, len(shape))
    if req.values is None:
        v = node.inputs[req.input]
        raise UnsupportedError(
            f"input {req.input} ({req.kind}, {v.describe()}) of {node.op} is not a "  # type: ignore
            "compile-time constant; the output shape depends on its value, which is not "
            "supported yet", where=node)
    out, scales = _out_dims(node, shape, req, s)
    roi = _roi(node, req, len(shape), s)
    for a, d in enumerate(shape):
        if d == 0 and out[a]:
            raise ModelError(f"cannot resize an empty axis {a} to {out[a]}", where=node)
    sizes = req.kind == "sizes" and s.policy == "stretch"
    ort = ort_axes(s.mode, shape, scales, s.antialias, np.dtype(dtype)) \
        if dtype is not None and node.op == "Resize" and since_version(node) >= 11 else None
    # from sizes onnxruntime's scale is the float32 quotient (the spec's length is the size
    # itself, which onnxruntime's coordinates use too)
    sc = [float(np.float32(o) / np.float32(d)) if d else 1.0
          for o, d in zip(out, shape)] if sizes else scales  # type: ignore[arg-type]
    if ort is not None and ort_follows_spec(s.coord, shape, out, sc, roi, ort, sizes):
        if list(out) == list(shape):  # onnxruntime copies the input
            return out, {}, s.extrapolation, None  # type: ignore[return-value]
        tabs = ort_plan(s, shape, out, sc, roi, ort)  # type: ignore[arg-type]
        return out, tabs, s.extrapolation, s.mode  # type: ignore[return-value]
    coeffs = nearest_coeffs(s.nearest) if s.mode == "nearest" else \
        linear_coeffs(s.antialias) if s.mode == "linear" else cubic_coeffs(s.cubic_a, s.antialias)
    tables: dict[int, AxisTables] = {}
    for a, d in enumerate(shape):
        r = roi[a] if roi is not None else None
        if math.isclose(scales[a], 1.0) and out[a] == d and (
                r is None or math.isclose(float(r[0]), 0.0) and math.isclose(float(r[1]), 1.0)):
            continue
        tables[a] = axis_tables(s.coord, coeffs, d, out[a], scales[a], r,  # type: ignore
                                s.exclude)
    return out, tables, s.extrapolation, None  # type: ignore[return-value]


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    out, tables, ev, ort = plan(node, x.shape, x.dtype)
    if ort is not None:
        return [ort_evaluate(x, out, tables, ort == "cubic", ev)]
    r = x.astype(np.float64)
    for a in sorted(tables):
        r = apply_axis(r, a, tables[a], ev)
    return [saturate(r, x.dtype).reshape(out)]


def _lower(ctx: LowerContext, node: Node) -> None:
    x = ctx.buf(node.inputs[0])  # type: ignore[arg-type]
    if not x.is_static:  # a symbolic program: tables computed at each call
        s = _settings(node)
        req = _request(node, len(x.shape))
        if req.kind != "scales" or req.values is None:
            raise TypeError("Resize to sizes has no lowering for run-time sizes")
        _, scales = _out_dims(node, x.shape, req, s)
        lower_resize_runtime(ctx, node, x, ctx.buf(node.outputs[0]), s, scales)
        return
    out_shape, tables, ev, ort = plan(node, x.shape, x.dtype.numpy)
    y = ctx.buf(node.outputs[0])
    if y.numel == 0:
        return
    # Leading axes that are not resized merge into one (e.g. N*C), so the parallel outer loop
    # has enough iterations; the tables' axis numbers shift accordingly.
    lead = 0
    while lead < len(x.shape) and lead not in tables:
        lead += 1
    xs, ys = list(x.shape), list(y.shape)
    if lead > 1:
        xs, ys = [math.prod(xs[:lead])] + xs[lead:], [math.prod(ys[:lead])] + ys[lead:]
        tables = {a - lead + 1: t for a, t in tables.items()}
    in_st, out_st = row_strides(xs), row_strides(ys)
    axes = sorted(tables)
    gather = all(tables[a].one_hot and tables[a].ext is None for a in axes)
    cdt = DType.FLOAT if ort else x.dtype if x.dtype.is_float else DType.DOUBLE
    offs, pos = {}, 0
    for a in axes:
        offs[a] = pos
        pos += tables[a].idx.size if not gather else len(tables[a].idx)
    parts = [tables[a].picks() if gather else tables[a].idx.reshape(-1) for a in axes]
    itab = const_buffer(ctx, np.concatenate(parts) if parts else np.zeros(1, np.int64))
    wtab = itab if gather else const_buffer(
        ctx, np.concatenate([tables[a].w.reshape(-1) for a in axes]).astype(cdt.numpy))
    ext_axes = [a for a in axes if tables[a].ext is not None]
    if ext_axes:
        eoff = {a: sum(len(tables[c].ext) for c in ext_axes[:j])  # type: ignore[arg-type]
                for j, a in enumerate(ext_axes)}
        etab = const_buffer(ctx, np.concatenate([tables[a].ext for a in ext_axes]))
    divs = [tables[a].div for a in axes if tables[a].div is not None]
    dtab = const_buffer(ctx, divs[0]) if divs else None
    b = Builder()
    with b.nest(ys, parallel_outer=y.numel >= PARALLEL_MIN) as idx:
        base: Operand = i64(0)
        for k in range(len(ys)):
            if k not in tables:
                base = b.iadd(base, b.imul(idx[k], in_st[k]))
        dst = b.linear(idx, out_st)
        if gather:  # nearest: one source element per output element, copied exactly
            src = base
            for a in axes:
                at = b.load(itab, b.iadd(idx[a], i64(offs[a])))
                src = b.iadd(src, b.imul(at, in_st[a]))
            b.store(y, dst, b.load(x, src))
        else:
            res = cubic_blend(b, x, in_st, tables, axes, idx, base, itab, wtab, offs, dtab) \
                if ort == "cubic" else \
                blend(b, x, in_st, tables, axes, idx, base, itab, wtab, offs, cdt)
            if ext_axes:
                e: Operand | None = None
                for a in ext_axes:
                    ea = b.load(etab, b.iadd(idx[a], i64(eoff[a])))
                    e = ea if e is None else b.op("or", e, ea)
                res = b.op("select", e, const(ev, cdt), res)  # type: ignore[arg-type]
            if y.dtype.is_int:
                res = round_half_even(b, res)
            if y.dtype == DType.BOOL:
                res = b.op("ne", res, const(0, cdt))
            b.store(y, dst, b.cast(res, y.dtype))
    ctx.kernel(node.op.lower(), b.body)


op("Resize", (10, 11, 13, 18, 19), infer=_infer, evaluate=_evaluate, lower=_lower,
   value_inputs=(1, 2, 3), symbolic=True,
   doc="resize by scales or to sizes: nearest / linear / cubic, every coordinate transform")
op("Upsample", (7, 9, 10), infer=_infer, evaluate=_evaluate, lower=_lower,
   value_inputs=(1,),
   doc="deprecated nearest/linear upsampling by scales (asymmetric coordinates)")
