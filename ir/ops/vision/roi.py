"""RoiAlign (opsets 10, 16, 22), MaxRoiPool (1, 22) and AffineGrid (20).

RoiAlign: per region r (box x1, y1, x2, y2 in `rois[r]`, image `batch_indices[r]`) the box is
scaled by `spatial_scale` and shifted by -0.5 under `half_pixel` (the default from opset 16;
opset 10 and `output_half_pixel` do not shift but make the box at least 1x1). It is cut into
output_height x output_width bins; each bin takes a grid of sampling points (sampling_ratio
per side, or ceil(bin size) when it is 0) at the centres of a regular subdivision; each point
is bilinearly interpolated (a point beyond one pixel outside the image counts 0; coordinates
are clamped at 0 and at the last row/column) and the bin is the mean of its points (`avg`) or
the max over points of the max of the four weighted corners (`max`, as onnxruntime does).
Coordinates are computed in float64 (as the reference does) and the result cast to X's type.
Lowering: a loop over regions (parallel) x channels x bins x sampling points; the sampling
grid's size may depend on the box, so its loops have data-dependent bounds.

MaxRoiPool (Caffe's ROI pooling): box (batch, x1, y1, x2, y2) rounded after scaling, bins of
size (box + 1) / pooled; each output is the max over its bin (0 for an empty bin). Evaluated
in numpy (on the host when not constant).

AffineGrid: for size (N, C, [D,] H, W) the base grid holds, per spatial dim of length L, the
coordinates -1 + 2i / (L - 1) (align_corners; -1 when L == 1) or -1 + (2i + 1) / L; output
(N, [D,] H, W, r) = theta[n] @ (x, y, [z,] 1) with x along W. `size` must be known when the
node is lowered (a value input).
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Operand, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import (
    BF16,
    FLOATS,
    Types,
    accept,
    accept_same,
    arity,
    float_attr,
    int_attr,
)
from onnxjit.ir.ops.elementwise.inference import dims_of, tensor
from onnxjit.ir.ops.shape_utils import require_attr, tensor_input
from onnxjit.ir.types import DType

_TYPES: Types = ((1, FLOATS), (22, FLOATS | BF16))
F64 = DType.DOUBLE


# --------------------------------------------------------------------------- RoiAlign


def _roi_attrs(node: Node) -> tuple[bool, bool, int, int, int, float]:
    """(half_pixel, max mode, output_height, output_width, sampling_ratio, spatial_scale)."""
    ctm = node.attr("coordinate_transformation_mode", "half_pixel") if node.version >= 16 \
        else "output_half_pixel"
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise ModelError("attribute 'coordinate_transformation_mode' must be half_pixel or "
                         f"output_half_pixel, got {ctm!r}", where=node)
    mode = node.attr("mode", "avg")
    if mode not in ("avg", "max"):
        raise ModelError(f"attribute 'mode' must be avg or max, got {mode!r}", where=node)
    oh, ow = int_attr(node, "output_height", 1), int_attr(node, "output_width", 1)
    sr = int_attr(node, "sampling_ratio", 0)
    if oh < 1 or ow < 1 or sr < 0:
        raise ModelError(f"output_height/output_width must be >= 1 and sampling_ratio >= 0, "
                         f"got {oh}, {ow}, {sr}", where=node)
    return ctm == "half_pixel", mode == "max", oh, ow, sr, float_attr(node, "spatial_scale", 1.0)


def _roi_infer(node: Node) -> list:
    arity(node, 3)
    dt = accept_same(node, (0, 1), _TYPES)
    if tensor_input(node, 2).dtype != DType.INT64:
        raise ModelError(f"batch_indices must be int64, got {tensor_input(node, 2).dtype.short}",
                         where=node)
    _, _, oh, ow, _, _ = _roi_attrs(node)
    x, rois, bi = (tensor_input(node, i).shape for i in range(3))
    if x is not None and len(x) != 4:
        raise ModelError(f"X must be 4-D (N, C, H, W), got rank {len(x)}", where=node)
    if rois is not None and (len(rois) != 2 or (isinstance(rois[1], int) and rois[1] != 4)):
        raise ModelError(f"rois must have shape (num_rois, 4), got {list(rois)}", where=node)
    if bi is not None and len(bi) != 1:
        raise ModelError(f"batch_indices must be 1-D, got rank {len(bi)}", where=node)
    r = rois[0] if rois is not None else bi[0] if bi is not None else None
    return tensor(dt, (r, x[1] if x is not None else None, oh, ow))


def _bilinear_np(y: float, x: float, h: int, w: int) -> list[tuple[int, float]]:
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return [(0, 0.0)] * 4
    y, x = max(y, 0.0), max(x, 0.0)
    yl, xl = int(y), int(x)
    if yl >= h - 1:
        yl = yh = h - 1
        y = float(yl)
    else:
        yh = yl + 1
    if xl >= w - 1:
        xl = xh = w - 1
        x = float(xl)
    else:
        xh = xl + 1
    ly, lx = y - yl, x - xl
    hy, hx = 1.0 - ly, 1.0 - lx
    return [(yl * w + xl, hy * hx), (yl * w + xh, hy * lx), (yh * w + xl, ly * hx),
            (yh * w + xh, ly * lx)]


def _roi_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, rois, bidx = inputs
    half, is_max, oh, ow, sr, scale = _roi_attrs(node)
    n, c, h, w = x.shape
    y = np.zeros((len(rois), c, oh, ow), dtype=np.float64)
    flat = x.reshape(n, c, h * w).astype(np.float64)
    off = 0.5 if half else 0.0
    for r in range(len(rois)):
        b = int(bidx[r])
        if not 0 <= b < n:
            raise ModelError(f"batch_indices[{r}] = {b} is out of range [0, {n})", where=node)
        sw, sh, ew, eh = (float(v) * scale - off for v in rois[r])
        rw, rh = ew - sw, eh - sh
        if not half:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / oh, rw / ow
        gh = sr if sr > 0 else int(math.ceil(rh / oh))
        gw = sr if sr > 0 else int(math.ceil(rw / ow))
        count = max(gh * gw, 1)
        for ph in range(oh):
            for pw in range(ow):
                acc = None
                for iy in range(gh):
                    yy = sh + ph * bh + (iy + 0.5) * bh / gh
                    for ix in range(gw):
                        xx = sw + pw * bw + (ix + 0.5) * bw / gw
                        taps = _bilinear_np(yy, xx, h, w)
                        if is_max:
                            v = np.max([wt * flat[b, :, p] for p, wt in taps], axis=0)
                            acc = v if acc is None else np.maximum(acc, v)
                        else:
                            v = sum(wt * flat[b, :, p] for p, wt in taps)
                            acc = v if acc is None else acc + v
                if acc is not None:
                    y[r, :, ph, pw] = acc if is_max else acc / count
    return [y.astype(x.dtype)]


def _roi_lower(ctx: LowerContext, node: Node) -> None:
    xb, rb, ib, yb = (ctx.buf(v) for v in (*node.inputs, node.outputs[0]))
    if yb.numel == 0:
        return
    half, is_max, oh, ow, sr, scale = _roi_attrs(node)
    n, c, h, w = xb.shape
    f = lambda v: const(v, F64)  # noqa: E731
    b = Builder()
    with b.loop(0, rb.shape[0], parallel=True, hint="r") as r:
        bi = b.load(ib, r)
        b.check(b.op("and", b.op("ge", bi, i64(0)), b.op("lt", bi, i64(n))),
                f"RoiAlign node {node.name!r}: a batch index is out of range [0, {n})")
        box = [b.op("sub", b.op("mul", b.cast(b.load(rb, b.iadd(b.imul(r, 4), i64(k))), F64),
                                f(scale)), f(0.5 if half else 0.0)) for k in range(4)]
        sw, sh, ew, eh = box
        rw, rh = b.op("sub", ew, sw), b.op("sub", eh, sh)
        if not half:
            rw, rh = b.op("max", rw, f(1.0)), b.op("max", rh, f(1.0))
        bh, bw = b.op("div", rh, f(oh)), b.op("div", rw, f(ow))
        if sr > 0:
            gh: Operand = i64(sr)
            gw: Operand = i64(sr)
        else:
            gh = b.cast(b.op("ceil", b.op("div", rh, f(oh))), DType.INT64)
            gw = b.cast(b.op("ceil", b.op("div", rw, f(ow))), DType.INT64)
        count = b.cast(b.op("max", b.op("mul", gh, gw), i64(1)), F64)
        step_h, step_w = b.op("div", bh, b.cast(gh, F64)), b.op("div", bw, b.cast(gw, F64))
        with b.loop(0, c, hint="c") as ci, b.loop(0, oh, hint="ph") as ph, \
                b.loop(0, ow, hint="pw") as pw:
            plane = b.imul(b.iadd(b.imul(bi, c), ci), h * w)
            acc = b.var(f(0.0), hint="acc")
            first = b.var(const(True, DType.BOOL), hint="first")
            y0 = b.op("add", sh, b.op("mul", b.cast(ph, F64), bh))
            x0 = b.op("add", sw, b.op("mul", b.cast(pw, F64), bw))
            with b.loop(0, gh, hint="iy") as iy:
                yy = b.op("add", y0, b.op("mul", b.op("add", b.cast(iy, F64), f(0.5)), step_h))
                with b.loop(0, gw, hint="ix") as ix:
                    xx = b.op("add", x0,
                              b.op("mul", b.op("add", b.cast(ix, F64), f(0.5)), step_w))
                    v = _bilinear(b, xb, plane, yy, xx, h, w, is_max)
                    if is_max:
                        b.assign(acc, "select", first, v, b.op("max", acc, v))
                        b.assign(first, "copy", const(False, DType.BOOL))
                    else:
                        b.assign(acc, "add", acc, v)
            out = acc if is_max else b.op("div", acc, count)
            idx = b.iadd(b.imul(b.iadd(b.imul(b.iadd(b.imul(r, c), ci), oh), ph), ow), pw)
            b.store(yb, idx, b.cast(out, yb.dtype))
    ctx.kernel("roialign", b.body)


def _bilinear(b: Builder, xb, plane: Operand, y: Operand, x: Operand, h: int, w: int,
              is_max: bool) -> Operand:
    """One sampling point (see `_bilinear_np`): sum, or max, of the weighted corners."""
    f = lambda v: const(v, F64)  # noqa: E731
    outside = b.op("or", b.op("or", b.op("lt", y, f(-1.0)), b.op("gt", y, f(h))),
                   b.op("or", b.op("lt", x, f(-1.0)), b.op("gt", x, f(w))))
    coords = []
    for v, size in ((y, h), (x, w)):
        v = b.op("min", b.op("max", v, f(0.0)), f(size))  # clamp: the cast stays in range
        lo = b.cast(v, DType.INT64)
        last = b.op("ge", lo, i64(size - 1))
        lo = b.op("select", last, i64(size - 1), lo)
        hi = b.op("select", last, lo, b.op("add", lo, i64(1)))
        v = b.op("select", last, b.cast(lo, F64), v)
        frac = b.op("sub", v, b.cast(lo, F64))
        coords.append((lo, hi, frac, b.op("sub", f(1.0), frac)))
    (yl, yh, ly, hy), (xl, xh, lx, hx) = coords
    corners = [(yl, xl, hy, hx), (yl, xh, hy, lx), (yh, xl, ly, hx), (yh, xh, ly, lx)]
    out: Operand | None = None
    for yi, xi, wy, wx in corners:
        val = b.cast(b.load(xb, b.iadd(plane, b.iadd(b.imul(yi, w), xi))), F64)
        term = b.op("mul", b.op("mul", wy, wx), val)
        out = term if out is None else b.op("max" if is_max else "add", out, term)
    assert out is not None
    return b.op("select", outside, f(0.0), out)


op("RoiAlign", (10, 16, 22), infer=_roi_infer, evaluate=_roi_evaluate, lower=_roi_lower,
   doc="bilinear region-of-interest pooling (avg or max) over bins of each box")

# --------------------------------------------------------------------------- MaxRoiPool


def _pool_shape(node: Node) -> tuple[int, int]:
    ps = require_attr(node, "pooled_shape")
    if not isinstance(ps, (list, tuple)) or len(ps) != 2 or any(int(p) < 1 for p in ps):
        raise ModelError(f"attribute 'pooled_shape' must be two ints >= 1, got {ps!r}",
                         where=node)
    return int(ps[0]), int(ps[1])


def _maxroi_infer(node: Node) -> list:
    arity(node, 2)
    dt = accept_same(node, (0, 1), _TYPES)
    ph, pw = _pool_shape(node)
    float_attr(node, "spatial_scale", 1.0)
    x, rois = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if x is not None and len(x) != 4:
        raise ModelError(f"X must be 4-D (N, C, H, W), got rank {len(x)}", where=node)
    if rois is not None and (len(rois) != 2 or (isinstance(rois[1], int) and rois[1] != 5)):
        raise ModelError(f"rois must have shape (num_rois, 5), got {list(rois)}", where=node)
    return tensor(dt, (rois[0] if rois is not None else None,
                       x[1] if x is not None else None, ph, pw))


def _maxroi_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, rois = inputs
    ph, pw = _pool_shape(node)
    scale = float_attr(node, "spatial_scale", 1.0)
    n, c, h, w = x.shape
    y = np.zeros((len(rois), c, ph, pw), dtype=x.dtype)
    for r, roi in enumerate(rois):
        b = int(roi[0])
        if not 0 <= b < n:
            raise ModelError(f"rois[{r}] names batch {b}, out of range [0, {n})", where=node)
        # Caffe rounds half away from zero.
        sw, sh, ew, eh = (int(math.floor(abs(float(v) * scale) + 0.5)) * (1 if v >= 0 else -1)
                          for v in roi[1:])
        bin_h = max(eh - sh + 1, 1) / ph
        bin_w = max(ew - sw + 1, 1) / pw
        for i in range(ph):
            hs = min(max(int(math.floor(i * bin_h)) + sh, 0), h)
            he = min(max(int(math.ceil((i + 1) * bin_h)) + sh, 0), h)
            for j in range(pw):
                ws = min(max(int(math.floor(j * bin_w)) + sw, 0), w)
                we = min(max(int(math.ceil((j + 1) * bin_w)) + sw, 0), w)
                if he > hs and we > ws:
                    y[r, :, i, j] = x[b, :, hs:he, ws:we].max(axis=(1, 2))
    return [y]


op("MaxRoiPool", (1, 22), infer=_maxroi_infer, evaluate=_maxroi_evaluate,
   doc="Caffe ROI max pooling over rounded boxes (evaluated on the host)")

# --------------------------------------------------------------------------- AffineGrid


def _affine_sizes(node: Node) -> tuple | None:
    size = dims_of(node.input(1))
    if size is not None and len(size) not in (4, 5):
        raise ModelError(f"size must hold 4 or 5 values (N, C, [D,] H, W), got {list(size)}",
                         where=node)
    return size


def _affine_infer(node: Node) -> list:
    arity(node, 2)
    dt = accept(node, 0, ((20, FLOATS | BF16),))
    if tensor_input(node, 1).dtype != DType.INT64:
        raise ModelError("size must be int64", where=node)
    int_attr(node, "align_corners", 0, (0, 1))
    theta = tensor_input(node, 0).shape
    size = _affine_sizes(node)
    if theta is not None and len(theta) != 3:
        raise ModelError(f"theta must be 3-D (N, r, r + 1), got rank {len(theta)}", where=node)
    if size is None:
        s = tensor_input(node, 1).shape
        r = s[0] - 2 if s is not None and isinstance(s[0], int) else None
        if r is None and theta is not None and isinstance(theta[1], int):
            r = theta[1]
        return tensor(dt, None if r is None else (theta[0] if theta else None,) + (None,) * r
                      + (r,))
    r = len(size) - 2
    if theta is not None and any(isinstance(t, int) and t != e for t, e in
                                 zip(theta, (size[0], r, r + 1))):
        raise ModelError(f"theta has shape {list(theta)}, expected ({size[0]}, {r}, {r + 1}) "
                         f"for size {list(size)}", where=node)
    return tensor(dt, (size[0], *size[2:], r))


def _base(length: int, align: bool) -> np.ndarray:
    i = np.arange(length, dtype=np.float64)
    if align:
        return -1 + 2 * i / (length - 1) if length > 1 else np.full(length, -1.0)
    return -1 + (2 * i + 1) / length


def _affine_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    theta, size = inputs
    align = int_attr(node, "align_corners", 0) == 1
    spatial = [int(s) for s in size[2:]]
    axes = np.meshgrid(*[_base(n, align) for n in spatial], indexing="ij")
    homo = np.stack([*axes[::-1], np.ones(spatial)], axis=-1).reshape(-1, len(spatial) + 1)
    out = np.einsum("nkj,pj->npk", theta.astype(np.float64), homo)
    return [out.reshape(theta.shape[0], *spatial, len(spatial)).astype(theta.dtype)]


def _affine_lower(ctx: LowerContext, node: Node) -> None:
    tb, ob = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    if ob.numel == 0:
        return
    align = int_attr(node, "align_corners", 0) == 1
    n, *spatial, r = ob.shape
    dt = ob.dtype
    b = Builder()
    with b.loop(0, n, parallel=True, hint="n") as ni, b.nest(spatial) as idx:
        coords = []
        for i, length in zip(idx, spatial):
            fi = b.cast(i, dt)
            if align:
                v = b.op("sub", b.op("mul", fi, const(2 / (length - 1), dt)), const(1, dt)) \
                    if length > 1 else const(-1, dt)
            else:
                v = b.op("sub", b.op("div", b.op("add", b.op("mul", fi, const(2, dt)),
                                                 const(1, dt)), const(length, dt)),
                         const(1, dt))
            coords.append(v)
        homo = coords[::-1]
        pos = b.linear([ni, *idx], [math.prod(spatial)] + [math.prod(spatial[k + 1:])
                                                          for k in range(len(spatial))])
        for k in range(r):
            row = b.iadd(b.imul(ni, r * (r + 1)), i64(k * (r + 1)))
            acc = b.load(tb, b.iadd(row, i64(r)))
            for j in range(r):
                acc = b.op("add", acc, b.op("mul", b.load(tb, b.iadd(row, i64(j))), homo[j]))
            b.store(ob, b.iadd(b.imul(pos, r), i64(k)), acc)
    ctx.kernel("affinegrid", b.body)


op("AffineGrid", (20,), infer=_affine_infer, evaluate=_affine_evaluate, lower=_affine_lower,
   value_inputs=(1,), doc="sampling grid theta @ (x, y, [z,] 1) over a normalised base grid")
