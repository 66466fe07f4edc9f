"""Tier-0 kernels of the compute-heavy ops: products, convolutions, pooling, normalization.

numpy with ONNX semantics, for float32 and float64 (other types `Decline` to the host
evaluation). The products go to numpy's BLAS (`np.matmul`); a convolution becomes one: its input
windows are a strided view of the padded input (`as_strided`: kernel taps and output positions
as axes), copied once into columns and multiplied by the weights as an (M, C*K) matrix, per
group; a 1x1 convolution of stride 1 multiplies the input in place, and a depthwise one
accumulates its taps over the windows instead (no columns). Pooling folds the taps of the same
windows with max or add; average pooling without `count_include_pad` divides by the count of
real positions, which is the same window sum over an array of ones.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from onnxjit.ir.graph import Node
from onnxjit.tiered.kernels import _floats, _ints
from onnxjit.tiered.registry import Decline, kernel

# ------------------------------------------------------------------------------- products


@kernel("MatMul")
def _matmul(node: Node) -> Any:
    def run(a: np.ndarray, b: np.ndarray) -> list:
        if a.dtype != b.dtype or a.dtype.kind not in "fiu" or a.dtype.itemsize < 4:
            raise Decline  # float16 accumulates in float32 natively
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
        z = x - np.max(x, axis=ax, keepdims=True)
        with np.errstate(all="ignore"):
            e = np.exp(z)
            s = np.sum(e, axis=ax, keepdims=True)
            y = z - np.log(s) if log else e / s
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
        axes = tuple(range(axis % x.ndim, x.ndim))
        t = x.dtype.type
        mean = np.mean(x, axis=axes, keepdims=True)
        d = x - mean
        var = np.mean(d * d, axis=axes, keepdims=True)
        y = d / np.sqrt(var + t(eps))
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
def _geometry(node: Node, x: np.ndarray, w_shape: tuple | None) -> tuple:
    """(padded input, kernel, strides, dilations, output sizes) of a conv or pool."""
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


def _windows(xp: np.ndarray, k: tuple, strides: tuple, dil: tuple, out: tuple) -> np.ndarray:
    """View (N, C, *kernel, *out) of the windows of a padded input."""
    st = xp.strides
    r = len(k)
    return as_strided(xp, xp.shape[:2] + k + out,
                      st[:2] + tuple(st[2 + j] * dil[j] for j in range(r))
                      + tuple(st[2 + j] * strides[j] for j in range(r)), writeable=False)


def _pad(x: np.ndarray, pads: list, value: float = 0.0) -> np.ndarray:
    if not any(b or e for b, e in pads):
        return x
    return np.pad(x, [(0, 0), (0, 0)] + pads, constant_values=value)


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
        if g == c == m and w.shape[1] == 1 and c > 1:  # depthwise: taps over the windows
            win = _windows(_pad(x, pads), k, strides, dil, out)
            y = np.zeros((n, c) + out, x.dtype)
            wt = w.reshape(c, -1)
            for t, tap in enumerate(np.ndindex(*k)):
                y += win[(slice(None), slice(None)) + tap] * wt[:, t].reshape(
                    (1, c) + (1,) * len(out))
        else:
            kk = math.prod(k)
            if kk == 1 and all(s == 1 for s in strides) and not any(map(any, pads)):
                cols = x.reshape(n, g, c // g, p)
            else:
                win = _windows(_pad(x, pads), k, strides, dil, out)
                cols = np.ascontiguousarray(win).reshape(n, g, (c // g) * kk, p)
            wg = w.reshape(g, m // g, (c // g) * kk)
            y = np.matmul(wg, cols).reshape((n, m) + out)
        if bias is not None:
            y += bias.reshape((1, m) + (1,) * len(out))
        return [y]
    return run


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
        pads, k, strides, dil, out, _ = _geometry(node, x, None)
        fill = -np.inf if is_max else 0.0
        win = _windows(_pad(x, pads, fill), k, strides, dil, out)
        taps = list(np.ndindex(*k))
        lead = (slice(None), slice(None))
        y = np.array(win[lead + taps[0]])
        for tap in taps[1:]:
            if is_max:
                np.maximum(y, win[lead + tap], out=y)
            else:
                y += win[lead + tap]
        if not is_max:
            if include_pad or not any(map(any, pads)):
                y /= x.dtype.type(math.prod(k))
            else:
                ones = _pad(np.ones((1, 1) + x.shape[2:], x.dtype), pads)
                cnt = _windows(ones, k, strides, dil, out).sum(axis=tuple(range(2, 2 + len(k))))
                y /= cnt
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
