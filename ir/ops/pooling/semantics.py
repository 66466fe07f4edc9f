"""Pooling ops: MaxPool, AveragePool, LpPool and their Global forms (shape rules and numpy).

Geometry (`geometry`), per spatial dim of an (N, C, D1..Dk) input: kernel K, stride s, dilation
d (window extent E = (K - 1) * d + 1) and pads (begin pb, end pe). Output window o covers input
positions o * s - pb + t * d for taps t < K; positions outside [0, D) are padding. Output size:
- explicit pads (auto_pad NOTSET): floor((D + pb + pe - E) / s) + 1, or ceil(...) + 1 with
  ceil_mode, dropping a last window that would start inside the end padding (onnxruntime's and
  the reference's rule);
- VALID: no pads, floor((D - E) / s) + 1;
- SAME_UPPER / SAME_LOWER: total pad T = (ceil(D / s) - 1) * s + K - D, pb = T / 2 (UPPER) or
  (T + 1) / 2 (LOWER) rounded toward zero (negative when s > K + 1: windows start later, as
  in onnxruntime's AveragePool), pe = max(0, T - pb); output
  (D + T - E) / s + 1 rounded toward zero (up with ceil_mode, as for explicit pads), which is
  ceil(D / s) when d = 1. With d > 1 the spec pads for the dilated extent E and keeps
  ceil(D / s) windows, but onnxruntime and onnx.reference pad for the undilated K and keep the
  windows that fit: theirs is the rule here (a model's results are onnxruntime's).
Padding never contributes a value: MaxPool ignores it, AveragePool divides by the number of
real taps, or with count_include_pad by the taps inside [-pb, D + pe), LpPool adds zeros.
MaxPool's Indices output is the flat index of the maximum in the input (first maximum in
window order), row-major or, with storage_order=1, column-major over the spatial dims. NaN
taps follow onnx.reference's rule (`pooling.max_rule`).

`evaluate` (constant folding) pads the input to cover every window, takes strided sliding
windows, and reduces each under a mask of real (or counted) positions, adding taps in window
order (`_in_order`). Lowerings live in
`pooling.lowering`; the Global forms lower to the reduction nests of `reductions.lowering`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir import symbolic
from onnxjit.ir.graph import Node
from onnxjit.ir.ops.elementwise.arithmetic import (
    BF16,
    FLOATS,
    Types,
    accept,
    arity,
    float_attr,
    int_attr,
)
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.pooling.max_rule import drops_nan, window_max
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import Dim, DType, Sym, TensorType, sym_max, sym_min

D = DType
_FLOAT_TYPES: Types = ((1, FLOATS), (22, FLOATS | BF16))
_MAX_TYPES: Types = ((1, FLOATS), (12, FLOATS | {D.INT8, D.UINT8}),
                     (22, FLOATS | BF16 | {D.INT8, D.UINT8}))
_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _tdiv(a: int, b: int) -> int:
    """a / b rounded toward zero (C's division, b > 0)."""
    return a // b if a >= 0 else -(-a // b)


@dataclass(frozen=True)
class Geometry:
    """Window parameters per spatial dim; `pb`/`pe` are None where a SAME pad depends on a
    symbolic input dim; `out` are the output spatial dims."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pb: tuple[int | None, ...]
    pe: tuple[int | None, ...]
    out: tuple[Dim, ...]

    def extent(self, i: int) -> int:
        return (self.kernel[i] - 1) * self.dilations[i] + 1


def ints(node: Node, name: str, n: int, default: int | None, minimum: int) -> tuple[int, ...]:
    """An ints attribute of length n (default: n copies of `default`), each >= minimum."""
    v = node.attr(name)
    if v is None:
        if default is None:
            raise ModelError(f"missing required attribute '{name}'", where=node)
        return (default,) * n
    vals = tuple(int(x) for x in (v if isinstance(v, (tuple, list, np.ndarray)) else (v,)))
    if len(vals) != n:
        raise ModelError(f"attribute '{name}' has {len(vals)} values, expected {n} "
                         f"(one per spatial dim{', twice' if name == 'pads' else ''})",
                         where=node)
    if any(x < minimum for x in vals):
        raise ModelError(f"attribute '{name}' must hold values >= {minimum}, got "
                         f"{list(vals)}", where=node)
    return vals


def geometry(node: Node, spatial: tuple[Dim, ...]) -> Geometry:
    """The pooling geometry of a node for input spatial dims `spatial` (see docstring)."""
    k = len(spatial)
    kernel = ints(node, "kernel_shape", k, None, 1)
    strides = ints(node, "strides", k, 1, 1)
    dil = ints(node, "dilations", k, 1, 1)
    auto = node.attr("auto_pad", "NOTSET")
    if auto not in _AUTO_PADS:
        raise ModelError(f"attribute 'auto_pad' must be one of {list(_AUTO_PADS)}, got "
                         f"{auto!r}", where=node)
    pads = ints(node, "pads", 2 * k, 0, 0)
    ceil = int_attr(node, "ceil_mode", 0, (0, 1)) == 1
    pb: list[int | None] = []
    pe: list[int | None] = []
    out: list[Dim] = []
    for i, d in enumerate(spatial):
        e, s = (kernel[i] - 1) * dil[i] + 1, strides[i]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = None if d is None else (d + s - 1) // s
            if isinstance(d, int) and isinstance(o, int):
                total = (o - 1) * s + kernel[i] - d
                head = _tdiv(total + (auto == "SAME_LOWER"), 2)
                pb.append(head)  # < 0 (strides past the kernel): the windows start later
                pe.append(max(0, total - head))
                if dil[i] > 1:  # the undilated pads leave fewer windows (docstring)
                    span = d + total - e
                    o = (-(-span // s) if ceil else _tdiv(span, s)) + 1
                    if ceil and o > 1 and (o - 1) * s >= d + head:
                        o -= 1  # the last window would start in the end padding
            elif isinstance(o, Sym) and symbolic.active() and (
                    s == 1 or dil[i] == 1 and kernel[i] >= s - 1):  # then T >= -1, pb >= 0
                total_s = kernel[i] - 1 if s == 1 else sym_max(0, (o - 1) * s + (kernel[i] - d))
                small_s = total_s // 2
                pb.append(small_s if auto == "SAME_UPPER" else total_s - small_s)
                pe.append(total_s - pb[-1])
                if dil[i] > 1:
                    o = d + kernel[i] - e
            else:  # specialised: pads and (with dilations) the output size need d
                pb.append(None)
                pe.append(None)
                if dil[i] > 1:
                    o = None
        else:
            a, z = (0, 0) if auto == "VALID" else (pads[i], pads[k + i])
            pb.append(a)
            pe.append(z)
            span = None if d is None else d + a + z - e
            if span is None:
                o = None
            elif not ceil:
                o = span // s + 1
            elif isinstance(span, int):
                o = -(-span // s) + 1
                if (o - 1) * s >= d + a:  # the last window would start in the end padding
                    o -= 1
            elif symbolic.active():  # the same rule: the last window starts before d + a
                o = sym_min((span + (s - 1)) // s + 1, (d + (a + s - 1)) // s)
            else:
                o = None  # the drop-the-last-window rule needs the concrete size
        if isinstance(o, int) and o < 0:  # 0 windows (an empty output) is a valid pooling
            raise ModelError(f"pooling window (extent {e}) does not fit spatial dim {i} of "
                             f"size {d} with pads ({pb[-1]}, {pe[-1]})", where=node)
        if isinstance(o, Sym) and symbolic.active():  # a call breaking it is specialised,
            symbolic.assume_equal(sym_max(o, 1), o,  # which names the error
                                  f"{node.op} output dim {i} >= 1")
        out.append(o)
    return Geometry(kernel, strides, dil, tuple(pb), tuple(pe), tuple(out))


def _spatial_input(node: Node) -> TensorType:
    t = tensor_input(node, 0)
    if t.shape is not None and len(t.shape) < 3:
        raise ModelError(f"{node.op} needs an input of rank >= 3 (N, C, spatial...), got rank "
                         f"{len(t.shape)}", where=node)
    return t


def pool_infer(node: Node) -> list:
    arity(node, 1)
    dt = accept(node, 0, _MAX_TYPES if node.op == "MaxPool" else _FLOAT_TYPES)
    t = _spatial_input(node)
    _lp_p(node)
    if node.op == "AveragePool":
        int_attr(node, "count_include_pad", 0, (0, 1))
    if node.op == "MaxPool":
        int_attr(node, "storage_order", 0, (0, 1))
    if t.shape is None:
        ks = node.attr("kernel_shape")
        if ks is None:
            raise ModelError("missing required attribute 'kernel_shape'", where=node)
        shape = None
    else:
        g = geometry(node, t.shape[2:])
        shape = t.shape[:2] + g.out
    outs = tensor(dt, shape)
    if node.op == "MaxPool" and len(node.outputs) > 1:
        if node.version < 8:
            raise ModelError("MaxPool has an Indices output from opset 8 on", where=node)
        outs += tensor(D.INT64, shape)
    return outs


def _lp_p(node: Node) -> float:
    if node.op not in ("LpPool", "GlobalLpPool"):
        return 1.0
    # Opset 1 declares p a float, later opsets an int; both read as a number.
    p = float_attr(node, "p", 2.0)
    if p <= 0:
        raise ModelError(f"attribute 'p' must be positive, got {p}", where=node)
    return p


def global_infer(node: Node) -> list:
    arity(node, 1)
    dt = accept(node, 0, _FLOAT_TYPES)
    t = _spatial_input(node)
    _lp_p(node)
    shape = None if t.shape is None else t.shape[:2] + (1,) * (len(t.shape) - 2)
    return tensor(dt, shape)


# --------------------------------------------------------------------------- numpy semantics


def pool_numpy(node: Node, x: np.ndarray) -> list[np.ndarray]:
    """MaxPool/AveragePool/LpPool of a concrete array (see module docstring)."""
    g = geometry(node, x.shape[2:])
    k = x.ndim - 2
    spatial = x.shape[2:]
    if 0 in g.out:  # no window (the window overhangs the input by less than a stride)
        shape = x.shape[:2] + tuple(int(o) for o in g.out)
        return [np.zeros(shape, x.dtype), np.zeros(shape, np.int64)][:len(node.outputs)]
    lengths = [(int(g.out[i]) - 1) * g.strides[i] + g.extent(i) for i in range(k)]
    widths = [(0, 0), (0, 0)] + [(max(0, g.pb[i]), max(0, lengths[i] - g.pb[i] - spatial[i]))
                                  for i in range(k)]
    crop = (slice(None), slice(None)) + tuple(slice(max(0, -g.pb[i]), max(0, -g.pb[i]) + n)
                                              for i, n in enumerate(lengths))
    # Positions per dim (input coordinates) of the padded, cropped frame.
    pos = [np.arange(lengths[i]) - g.pb[i] for i in range(k)]
    real = np.ones((1, 1) + tuple(lengths), dtype=bool)
    counted = np.ones_like(real)
    for i in range(k):
        view = (1,) * (2 + i) + (lengths[i],) + (1,) * (k - i - 1)
        real = real & ((pos[i] >= 0) & (pos[i] < spatial[i])).reshape(view)
        counted = counted & (pos[i] < spatial[i] + g.pe[i]).reshape(view)
    xp = np.pad(x, widths)[crop]

    def windows(a: np.ndarray) -> np.ndarray:
        axes = tuple(range(2, 2 + k))
        w = np.lib.stride_tricks.sliding_window_view(a, [g.extent(i) for i in range(k)], axes)
        sel = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in g.strides)
        sel += tuple(slice(None, None, d) for d in g.dilations)
        w = w[sel]
        # the window's size spelled out: with an empty batch numpy cannot infer a -1
        return w.reshape(w.shape[:2 + k] + (math.prod(w.shape[2 + k:]),))

    w, m = windows(xp), windows(np.broadcast_to(real, xp.shape))
    if node.op == "MaxPool":  # NaN taps: `pooling.max_rule`
        y, t = window_max(w, m, drops_nan(g))
        if len(node.outputs) < 2:
            return [y]
        t = np.unravel_index(t, g.kernel)
        grid = np.meshgrid(*[np.arange(int(o)) for o in g.out], indexing="ij")
        coords = [grid[i] * g.strides[i] - g.pb[i] + t[i] * g.dilations[i] for i in range(k)]
        order = range(k) if int_attr(node, "storage_order", 0) == 0 else range(k - 1, -1, -1)
        flat = np.zeros_like(coords[0], dtype=np.int64)
        for i in order:
            flat = flat * spatial[i] + coords[i]
        plane = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[:2] + (1,) * k)
        flat = flat + plane * math.prod(spatial)
        return [y, np.where(m.any(axis=-1), flat, 0).astype(np.int64)]  # padding only: 0
    with np.errstate(all="ignore"):
        if node.op == "AveragePool":
            cnt_mask = m
            if int_attr(node, "count_include_pad", 0) == 1:
                cnt_mask = windows(np.broadcast_to(counted, xp.shape))
            y = _in_order(np.where(m, w, 0)) / cnt_mask.sum(axis=-1)
        else:
            p = _lp_p(node)
            y = _in_order(np.abs(np.where(m, w, 0)) ** p) ** (1.0 / p)
    return [np.asarray(y, dtype=x.dtype)]


def _in_order(taps: np.ndarray) -> np.ndarray:
    """The sum over the last axis (a window's taps) one tap after another, in window order:
    the native code's and onnxruntime's order. numpy's pairwise sum overflowed differently
    near float max (3.4e38 + 3.4e38 = inf before a -inf: NaN, where in order -inf; a 3-D
    AveragePool of 125 taps, fuzz seed 10130262)."""
    y = np.array(taps[..., 0]) if taps.shape[-1] else np.zeros(taps.shape[:-1], taps.dtype)
    for t in range(1, taps.shape[-1]):
        y += taps[..., t]
    return y


def pool_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    if node.op != "MaxPool" and x.dtype.kind == "f" and x.dtype.itemsize < 4 or \
            x.dtype.name == "bfloat16":  # as the lowering: sum in f32, round once
        return [y.astype(x.dtype) for y in pool_numpy(node, x.astype(np.float32))]
    return pool_numpy(node, x)


def global_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    axes = tuple(range(2, x.ndim))
    if node.op == "GlobalAveragePool":
        y = x.mean(axis=axes, keepdims=True)
    elif node.op == "GlobalMaxPool":
        y = x.max(axis=axes, keepdims=True)
    else:
        p = _lp_p(node)
        y = (np.abs(x) ** p).sum(axis=axes, keepdims=True) ** (1.0 / p)
    return [np.asarray(y, dtype=x.dtype)]


# --------------------------------------------------------------------------- MaxUnpool


def unpool_shape(node: Node, inferred: bool = False) -> tuple[Dim, ...] | None:
    """MaxUnpool's output shape: the `output_shape` input's value when given, else per spatial
    dim (D - 1) * s - (pb + pe) + K (the shape MaxPool's input had without ceil/auto pads).
    The indices address the latter (`inferred=True`); a larger output_shape holds it in its
    leading corner (the reference's rule)."""
    shape = tensor_input(node, 0).shape
    if node.input(2) is not None and not inferred:
        c = node.input(2).const
        dims = node.input(2).sym_value
        if c is not None:
            dims = tuple(int(v) for v in np.asarray(c).reshape(-1))
        if dims is None:
            return None
        if shape is not None and len(dims) != len(shape):
            raise ModelError(f"output_shape has {len(dims)} values for an input of rank "
                             f"{len(shape)}", where=node)
        return tuple(dims)
    if shape is None:
        return None
    k = len(shape) - 2
    kernel = ints(node, "kernel_shape", k, None, 1)
    strides = ints(node, "strides", k, 1, 1)
    pads = ints(node, "pads", 2 * k, 0, 0)
    out: list[Dim] = list(shape[:2])
    for i, d in enumerate(shape[2:]):
        out.append(None if d is None else (d - 1) * strides[i] - pads[i] - pads[k + i]
                   + kernel[i])
    return tuple(out)


def unpool_infer(node: Node) -> list:
    arity(node, 2, 3)
    dt = accept(node, 0, _FLOAT_TYPES)
    _spatial_input(node)
    for i, what in ((1, "I"), (2, "output_shape")):
        if node.input(i) is not None and tensor_input(node, i).dtype != D.INT64:
            raise ModelError(f"input {i} ({what}) must be int64, got "
                             f"{tensor_input(node, i).dtype.short}", where=node)
    xs, ish = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if xs is not None and ish is not None and len(xs) == len(ish) and any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(xs, ish)):
        raise ModelError(f"indices shape {list(ish)} differs from X's {list(xs)}", where=node)
    out, base = unpool_shape(node), unpool_shape(node, inferred=True)
    if out is not None and base is not None and any(
            isinstance(a, int) and isinstance(b, int) and a < b for a, b in zip(out, base)):
        raise ModelError(f"output_shape {list(out)} is smaller than the unpooled shape "
                         f"{list(base)}", where=node)
    return tensor(dt, out)


def unpool_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, ind = inputs[0], inputs[1]
    base = tuple(int(d) for d in unpool_shape(node, inferred=True))  # type: ignore[union-attr]
    shape = base if len(inputs) < 3 or inputs[2] is None else tuple(
        int(v) for v in inputs[2])
    y = np.zeros(math.prod(base), dtype=x.dtype)
    flat = ind.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= y.size):
        raise ModelError(f"an index in I is outside the output of {y.size} elements",
                         where=node)
    y[flat] = x.reshape(-1)
    out = np.zeros(shape, dtype=x.dtype)
    out[tuple(slice(0, d) for d in base)] = y.reshape(base)
    return [out]
