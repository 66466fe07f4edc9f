"""Tier-0 kernels of the compute-heavy ops: products, convolutions, pooling, normalization.

numpy with ONNX semantics, for float32 and float64 (other types `Decline` to the host
evaluation). The products go to numpy's BLAS (`np.matmul`; a stack of matrices times one matrix
as a single product of its rows); a convolution becomes products three ways. A 2-D one of
stride 1 over 32 or more channels a group reads each kernel tap as a contiguous range of
columns of the flattened padded input (outputs laid on the padded width, whose surplus columns
are dropped: `windows.flat_taps`) and sums one product per tap, with no im2col copy; other
convolutions copy their input windows (a strided view of the padded input, `windows.windows`: kernel
taps and output positions as axes) once into columns, multiplied by the weights as an (M, C*K)
matrix per group; a 1x1 convolution of stride 1 multiplies the input in place. A depthwise one
accumulates its taps over the windows instead (on the flat columns at stride 1). Pooling folds
the taps of the same windows with max or add; average pooling without `count_include_pad`
divides by the count of real positions, the same window sum over ones. Softmax and
LayerNormalization make one fresh array and run their other passes in place.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np

from onnxjit.ir.graph import Node
from onnxjit.ir.ops.pooling.max_rule import drops_nan
from onnxjit.ir.ops.pooling.semantics import geometry
from onnxjit.tiered.depthwise import depthwise
from onnxjit.tiered.kernels import _floats
from onnxjit.tiered.kernels_shape import _ints
from onnxjit.tiered.registry import Decline, kernel
from onnxjit.tiered.windows import flat_taps, pad, windows

# ------------------------------------------------------------------------------- products


@kernel("MatMul")
def _matmul(node: Node) -> Any:
    def run(a: np.ndarray, b: np.ndarray) -> list:
        if a.dtype != b.dtype or a.dtype.kind not in "fiu" or a.dtype.itemsize < 4:
            raise Decline  # float16 accumulates in float32 natively
        if b.ndim == 2 and a.ndim > 2 and a.size and a.flags.c_contiguous:
            # a stack of rows times one matrix is one product: numpy would call BLAS per
            # matrix of the stack (MiniLM's batch of 8 x 64 tokens: 1.6x slower)
            rows = np.matmul(a.reshape(-1, a.shape[-1]), b)
            return [rows.reshape(a.shape[:-1] + b.shape[1:])]
        return [np.matmul(a, b)]
    return run


@kernel("Gemm")
def _gemm(node: Node) -> Any:
    ta, tb = int(node.attr("transA", 0)), int(node.attr("transB", 0))
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    if node.version < 7:
        return None

    def run(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> list:
        _floats(a, b)
        if a.dtype != b.dtype or (c is not None and c.dtype != a.dtype):
            raise Decline
        t = a.dtype.type
        y = np.matmul(a.T if ta else a, b.T if tb else b)
        if alpha != 1.0:
            y *= t(alpha)
        if c is not None and beta != 0.0:
            y += c * t(beta) if beta != 1.0 else c
        return [y]
    return run


# ------------------------------------------------------------------------------- normalization
@kernel("Softmax", "LogSoftmax")
def _softmax(node: Node) -> Any:
    new = node.version >= 13
    axis = int(node.attr("axis", -1 if new else 1))
    log = node.op == "LogSoftmax"

    def run(x: np.ndarray) -> list:
        _floats(x)
        shape = x.shape
        ax = axis % max(x.ndim, 1)
        if not new:  # opset < 13: the input coerced to 2-D at `axis`
            x = x.reshape(math.prod(shape[:ax]), math.prod(shape[ax:]))
            ax = 1
        # one fresh array, every pass after the subtraction in place (exp is most of the time)
        y = np.subtract(x, np.maximum.reduce(x, axis=ax, keepdims=True))
        e = np.exp(y) if log else np.exp(y, out=y)
        s = np.add.reduce(e, axis=ax, keepdims=True)
        if log:
            y -= np.log(s, out=s)
        else:
            y *= np.reciprocal(s, out=s)
        return [y.reshape(shape)]
    return run


@kernel("LayerNormalization")
def _layer_norm(node: Node) -> Any:
    if len(node.outputs) > 1:
        return None  # Mean and InvStdDev outputs: the host evaluation has them
    axis = int(node.attr("axis", -1))
    eps = float(node.attr("epsilon", 1e-5))

    def run(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None = None) -> list:
        _floats(x)
        if x.size == 0:
            raise Decline
        # rows of the normalized axes: two reductions and in-place passes on one fresh array
        # (np.mean costs several microseconds of Python on the decoder's (1, 1, 256) rows)
        shape = x.shape
        n = math.prod(shape[axis % x.ndim:])
        rows = x.reshape(-1, n)
        inv_n = 1.0 / n
        mean = np.add.reduce(rows, axis=1, keepdims=True)
        d = np.subtract(rows, np.multiply(mean, inv_n, out=mean))
        var = np.add.reduce(np.square(d), axis=1, keepdims=True)
        var *= inv_n
        var += eps
        d /= np.sqrt(var, out=var)
        y = d.reshape(shape)
        y *= scale
        if bias is not None:
            y += bias
        return [y]
    return run


@kernel("BatchNormalization")
def _batch_norm(node: Node) -> Any:
    if len(node.outputs) > 1 or node.version < 9 or int(node.attr("training_mode", 0)):
        return None
    eps = float(node.attr("epsilon", 1e-5))

    def run(x: np.ndarray, scale: np.ndarray, b: np.ndarray, mean: np.ndarray,
            var: np.ndarray) -> list:
        _floats(x)
        if not all(p.dtype == x.dtype for p in (scale, b, mean, var)):
            raise Decline
        shape = (1, -1) + (1,) * (x.ndim - 2)
        k = scale / np.sqrt(var + x.dtype.type(eps))
        return [x * k.reshape(shape) + (b - mean * k).reshape(shape)]
    return run


_REDUCE = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max,
           "ReduceMin": np.min}


@kernel(*_REDUCE)
def _reduce(node: Node) -> Any:
    f = _REDUCE[node.op]
    axes_input = node.version >= (13 if node.op == "ReduceSum" else 18)
    attr_axes = None if axes_input else node.attr("axes", None)
    keep = bool(node.attr("keepdims", 1))
    noop = bool(node.attr("noop_with_empty_axes", 0))

    def run(x: np.ndarray, axes: np.ndarray | None = None) -> list:
        _floats(x)
        if x.size == 0:
            raise Decline  # empty reductions: the host evaluation has their identities
        ax = list(attr_axes) if attr_axes is not None else _ints(axes)
        if not ax:
            if noop:
                return [x]
            ax = list(range(x.ndim))
        return [np.asarray(f(x, axis=tuple(a % x.ndim for a in ax), keepdims=keep))]
    return run


@kernel("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(node: Node) -> Any:
    f = np.mean if node.op == "GlobalAveragePool" else np.max

    def run(x: np.ndarray) -> list:
        _floats(x)
        if x.size == 0:
            raise Decline
        return [f(x, axis=tuple(range(2, x.ndim)), keepdims=True)]
    return run


# ------------------------------------------------------------------------------- windows
def _geometry(node: Node, x: np.ndarray, w_shape: tuple) -> tuple:
    """(pads, kernel, strides, dilations, output sizes, group) of a conv (a pool's are
    `pooling.semantics.geometry`: its SAME rule is onnxruntime's, not the conv's)."""
    from onnxjit.ir.ops.conv.attrs import conv_attrs, conv_pads

    a = conv_attrs(node, x.ndim - 2, w_shape)
    begin, end = conv_pads(a, x.shape[2:])
    k = tuple(int(v) for v in a.kernel)
    out = tuple((d + b + e - dl * (kk - 1) - 1) // s + 1 for d, b, e, kk, s, dl
                in zip(x.shape[2:], begin, end, k, a.strides, a.dilations))
    if min(out, default=1) < 1:
        raise Decline
    pads = list(zip(begin, end))
    return pads, k, a.strides, a.dilations, out, a.group


def _conv_flat(x: np.ndarray, w: np.ndarray, pads: list, k: tuple, dil: tuple, out: tuple,
               g: int) -> np.ndarray:
    """A stride-1 2-D conv as one product per tap on flat columns (`windows.flat_taps`), summed:
    no im2col copy (80 MB for a 96-channel 208x112 detector map, more than the products)."""
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // g, m // g
    flat, offs, length, wp = flat_taps(pad(x, pads), k, dil, out)
    wt = np.ascontiguousarray(w.reshape(g, mg, cg, -1).transpose(3, 0, 1, 2))  # (taps, g, .)
    y = np.empty((n, m, out[0] * wp), x.dtype)
    tmp = np.empty((mg, length), x.dtype)
    for b in range(n):
        for gi in range(g):
            acc = y[b, gi * mg:(gi + 1) * mg, :length]
            src = flat[b, gi * cg:(gi + 1) * cg]
            np.matmul(wt[0, gi], src[:, offs[0]:offs[0] + length], out=acc)
            for t in range(1, len(offs)):
                acc += np.matmul(wt[t, gi], src[:, offs[t]:offs[t] + length], out=tmp)
    return y.reshape(n, m, out[0], wp)[:, :, :, :out[1]]


@kernel("Conv")
def _conv(node: Node) -> Any:
    def run(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> list:
        _floats(x)
        if w.dtype != x.dtype or x.ndim < 3:
            raise Decline
        pads, k, strides, dil, out, g = _geometry(node, x, tuple(w.shape))
        n, c = x.shape[:2]
        m = w.shape[0]
        p = math.prod(out)
        kk = math.prod(k)
        if g == c == m and w.shape[1] == 1 and c > 1:
            y = depthwise(x, w, pads, k, strides, dil, out)
        elif kk > 1 and len(k) == 2 and c // g >= 32 and all(s == 1 for s in strides):
            y = _conv_flat(x, w, pads, k, dil, out, g)
        else:
            if kk == 1 and all(s == 1 for s in strides) and not any(map(any, pads)):
                cols = x.reshape(n, g, c // g, p)
            else:
                win = windows(pad(x, pads), k, strides, dil, out)
                cols = np.ascontiguousarray(win).reshape(n, g, (c // g) * kk, p)
            wg = w.reshape(g, m // g, (c // g) * kk)
            y = np.matmul(wg, cols).reshape((n, m) + out)
        if bias is not None:
            y += bias.reshape((1, m) + (1,) * len(out))
        return [y]
    return run


def _inside(spatial: tuple, pads: list, geo: tuple, dtype: Any = bool) -> np.ndarray:
    """The windows (`windows.windows` of geometry `geo` = (k, strides, dil, out)) of a padded map of
    ones: 1 where a tap is inside the input, 0 on padding."""
    return windows(pad(np.ones((1, 1) + tuple(spatial), dtype), pads), *geo)


def _max_taps(win: np.ndarray, taps: list, pads: list, spatial: tuple, geo: tuple,
              drop: bool) -> np.ndarray:
    """MaxPool's windows by the native code's NaN rule (`pooling.max_rule`): DROP (strides and
    dilations all 1; `win` padded with NaN) is the max of the non-NaN taps, NaN when all are
    NaN; FIRST (`win` padded with -inf) takes the first real tap, then each later tap that is
    greater, so a NaN counts only as a window's first real tap. A window of padding only
    gives -inf."""
    lead = (slice(None), slice(None))
    if drop:
        y = np.array(win[lead + taps[0]])
        for tap in taps[1:]:
            np.fmax(y, win[lead + tap], out=y)
        if any(b or e for b, e in pads):  # a window of padding only
            inside = _inside(spatial, pads, geo)
            y[..., ~inside.any(axis=tuple(range(2, 2 + len(taps[0]))))[0, 0]] = -np.inf
        return y
    if not any(b or e for b, e in pads):
        y = np.array(win[lead + taps[0]])
        for tap in taps[1:]:
            t = win[lead + tap]
            np.copyto(y, t, where=t > y)
        return y
    inside = _inside(spatial, pads, geo)
    y = np.full(win.shape[:2] + win.shape[2 + len(taps[0]):], -np.inf, win.dtype)
    seen = np.zeros(y.shape[2:], bool)
    for tap in taps:
        t, v = win[lead + tap], inside[(0, 0) + tap]
        np.copyto(y, t, where=v & (~seen | (t > y)))
        seen |= v
    return y


@kernel("MaxPool", "AveragePool")
def _pool(node: Node) -> Any:
    if len(node.outputs) > 1 or int(node.attr("ceil_mode", 0)) or node.version < 7:
        return None
    if int(node.attr("storage_order", 0)):
        return None
    is_max = node.op == "MaxPool"
    include_pad = bool(node.attr("count_include_pad", 0))

    def run(x: np.ndarray) -> list:
        _floats(x)
        g = geometry(node, x.shape[2:])  # the pool's own SAME rule, not the conv's
        if min(g.pb) < 0:  # windows that start past the input's start: drop what they skip
            x = x[(slice(None), slice(None)) + tuple(slice(max(0, -b), None) for b in g.pb)]
        pads = [(max(0, b), e) for b, e in zip(g.pb, g.pe)]
        k, strides, dil, out = g.kernel, g.strides, g.dilations, g.out
        if min(out, default=1) < 1 or any(  # a window past the padding: host evaluation
                (o - 1) * st + (kk - 1) * dl + 1 > n + b + e
                for o, st, kk, dl, n, (b, e) in zip(out, strides, k, dil, x.shape[2:], pads)):
            raise Decline
        drop = drops_nan(SimpleNamespace(strides=strides, dilations=dil))
        fill = (np.nan if drop else -np.inf) if is_max else 0.0
        win = windows(pad(x, pads, fill), k, strides, dil, out)
        taps = list(np.ndindex(*k))
        lead = (slice(None), slice(None))
        if is_max:
            return [_max_taps(win, taps, pads, x.shape[2:], (k, strides, dil, out), drop)]
        y = np.array(win[lead + taps[0]])
        for tap in taps[1:]:
            y += win[lead + tap]
        if not is_max:
            if include_pad or not any(map(any, pads)):
                y /= x.dtype.type(math.prod(k))
            else:
                inside = _inside(x.shape[2:], pads, (k, strides, dil, out), x.dtype)
                y /= inside.sum(axis=tuple(range(2, 2 + len(k))))
        return [y]
    return run


@kernel("Resize")
def _resize(node: Node) -> Any:
    """Nearest-neighbour resizes as one gather per resized axis (the op's own tables,
    `vision.resize.plan`; exact for every dtype); blends stay with the host evaluation."""
    from onnxjit.ir.ops.vision.resize import plan

    def run(x: np.ndarray, *_: Any) -> list:
        out, tables, _ev, ort = plan(node, x.shape, x.dtype)
        if ort is not None or not all(t.ext is None and t.one_hot for t in tables.values()):
            raise Decline
        for a in sorted(tables):
            x = np.take(x, tables[a].picks(), axis=a)
        return [x.reshape(out)]
    return run
