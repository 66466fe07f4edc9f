"""Normalization ops: shape rules and numpy semantics (lowerings in `normalization.lowering`).

Row normalizers view the input as `rows` independent rows of `n` contiguous elements and
normalize each: y = (x - mean) / sqrt(var + epsilon) * scale + bias (population variance):
- LayerNormalization (17): rows = prod(shape[:axis]), a row = the dims from `axis` on; Scale
  and B broadcast against those dims; optional outputs Mean and InvStdDev (shape[:axis] + 1s,
  element type `stash_type`); statistics are computed in f32 (f64 for f64 inputs);
- RMSNormalization (23): y = x / sqrt(mean(x^2) + epsilon) * scale, same rows as LayerNorm;
- InstanceNormalization: one row per (n, c) over the spatial dims, scale/B per channel;
- GroupNormalization: one row per (n, group) over its channels and spatial dims; scale/bias per
  group at opset 18, per channel from opset 21.
BatchNormalization (inference): y = x * a[c] + b[c] with a = scale / sqrt(var + epsilon) and
b = B - mean * a, per channel (per activation with the legacy spatial=0); with training_mode=1
(opset 14+) the batch statistics over every axis but 1 replace mean/var and the running outputs
are mean * momentum + batch_mean * (1 - momentum) (likewise var).
LRN: y = x / (bias + alpha / size * sum of x^2 over a window of channels)^beta.
MeanVarianceNormalization: (x - mean) / (sqrt(var) + 1e-9) over `axes` (default [0, 2, 3]).
LpNormalization: x / ||x||_p along `axis` (p 1 or 2), 0 where the norm is 0.
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
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
from onnxjit.ir.ops.shape_utils import normalize_axis, tensor_input
from onnxjit.ir.types import DType, TensorType

D = DType
_F: Types = ((1, FLOATS),)
_FB: Types = ((1, FLOATS | BF16),)


def stash_dtype(node: Node, x: DType) -> DType:
    """The element type statistics are computed in (see module docstring). GroupNormalization
    from opset 21 keeps to `stash_type` even for double inputs (its function body casts X to
    it: float32 by default, as onnxruntime and onnx.reference compute); LayerNormalization
    computes double inputs in double (as both references do)."""
    st = int_attr(node, "stash_type", 1)
    if st not in (1, 11, 16):
        raise ModelError(f"attribute 'stash_type' must be 1 (float), 11 (double) or 16 "
                         f"(bfloat16), got {st}", where=node)
    if node.op == "GroupNormalization" and node.version >= 21:
        return D.DOUBLE if st == 11 else D.FLOAT
    return D.DOUBLE if x == D.DOUBLE or st == 11 else D.FLOAT


def _shape(node: Node, i: int) -> tuple | None:
    return tensor_input(node, i).shape


def _rank_at_least(node: Node, shape: tuple | None, r: int) -> None:
    if shape is not None and len(shape) < r:
        raise ModelError(f"{node.op} needs an input of rank >= {r}, got rank {len(shape)}",
                         where=node)


def _check_len(node: Node, i: int, want: object, what: str) -> None:
    """Input i is 1-D of `want` elements (when both are known)."""
    s = _shape(node, i)
    if s is None or not isinstance(want, int):
        return
    if len(s) != 1 or (isinstance(s[0], int) and s[0] != want):
        raise ModelError(f"input {i} must have shape [{want}] ({what}), got "
                         f"{list(s)}", where=node)


# --------------------------------------------------------------------------- LayerNorm / RMS


def norm_axis(node: Node, rank: int) -> int:
    return normalize_axis(int_attr(node, "axis", -1), rank, node)


def param_strides_ok(node: Node, i: int, xshape: tuple, axis: int) -> None:
    """Scale/B of LayerNorm/RMSNorm broadcast against x and vary only along dims >= axis."""
    s = _shape(node, i)
    if s is None:
        return
    if len(s) > len(xshape):
        raise ModelError(f"input {i} has rank {len(s)} > the rank {len(xshape)} of X",
                         where=node)
    lead = len(xshape) - len(s)
    for k, d in enumerate(s):
        xd = xshape[lead + k]
        if isinstance(d, int) and isinstance(xd, int) and d not in (1, xd):
            raise ModelError(f"input {i} of shape {list(s)} does not broadcast to X "
                             f"{list(xshape)}", where=node)
        if lead + k < axis and d != 1:
            raise UnsupportedError(f"input {i} of shape {list(s)} varies along a dim before "
                                   f"axis {axis}", where=node)


def layer_infer(node: Node) -> list:
    rms = node.op == "RMSNormalization"
    arity(node, 2, 2 if rms else 3)
    dt = accept(node, 0, _FB)
    sdt = accept(node, 1, _FB)
    if not rms:
        if sdt != dt:
            raise ModelError(f"Scale is {sdt.short} but X is {dt.short}", where=node)
        if node.input(2) is not None and accept(node, 2, _FB) != dt:
            raise ModelError("B must have the element type of X", where=node)
    float_attr(node, "epsilon", 1e-5)
    stash_dtype(node, dt)
    shape = _shape(node, 0)
    out = tensor(sdt if rms else dt, shape)
    if shape is None:
        return out + [TensorType(D(int_attr(node, "stash_type", 1)), None)] * (
            len(node.outputs) - 1)
    axis = norm_axis(node, len(shape))
    for i in (1, 2):
        if node.input(i) is not None:
            param_strides_ok(node, i, shape, axis)
    if rms:
        return out
    stats = TensorType(D(int_attr(node, "stash_type", 1)),
                       shape[:axis] + (1,) * (len(shape) - axis))
    return out + [stats] * (len(node.outputs) - 1)


def layer_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    axis = norm_axis(node, x.ndim)
    eps = float_attr(node, "epsilon", 1e-5)
    cdt = stash_dtype(node, D.from_numpy(x.dtype)).numpy
    axes = tuple(range(axis, x.ndim))
    xc = x.astype(cdt)
    if node.op == "RMSNormalization":
        inv = 1 / np.sqrt((xc * xc).mean(axis=axes, keepdims=True) + eps)
        return [(xc * inv * scale).astype(scale.dtype)]
    mean = xc.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(((xc - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    y = (xc - mean) * inv * scale
    if bias is not None:
        y = y + bias
    udt = D(int_attr(node, "stash_type", 1)).numpy
    return [y.astype(x.dtype), mean.astype(udt), inv.astype(udt)][:len(node.outputs)]


# --------------------------------------------------------------------------- Instance / Group


def instance_infer(node: Node) -> list:
    arity(node, 3)
    dt = accept(node, 0, _F if node.version < 22 else _FB)
    for i in (1, 2):
        if accept(node, i, _F if node.version < 22 else _FB) != dt:
            raise ModelError(f"input {i} must have the element type of the input", where=node)
    shape = _shape(node, 0)
    _rank_at_least(node, shape, 3 if node.op == "InstanceNormalization" else 2)
    float_attr(node, "epsilon", 1e-5)
    c = None if shape is None else shape[1]
    if node.op == "GroupNormalization":
        g = groups(node)
        if isinstance(c, int) and c % g:
            raise ModelError(f"the {c} channels do not split into num_groups={g} groups",
                             where=node)
        want = c if node.version >= 21 else g
        stash_dtype(node, dt)
    else:
        want = c
    _check_len(node, 1, want, "scale")
    _check_len(node, 2, want, "bias")
    return tensor(dt, shape)


def groups(node: Node) -> int:
    if "num_groups" not in node.attrs:
        raise ModelError("missing required attribute 'num_groups'", where=node)
    g = int_attr(node, "num_groups", 1)
    if g < 1:
        raise ModelError(f"attribute 'num_groups' must be >= 1, got {g}", where=node)
    return g


def instance_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, scale, bias = inputs
    eps = float_attr(node, "epsilon", 1e-5)
    n, c = x.shape[:2]
    bshape = (1, c) + (1,) * (x.ndim - 2)
    g = groups(node) if node.op == "GroupNormalization" else c
    cdt = np.float64 if x.dtype == np.float64 else np.float32
    if node.op == "GroupNormalization":
        cdt = stash_dtype(node, D.from_numpy(x.dtype)).numpy
    r = x.astype(cdt).reshape(n, g, (c // g) * math.prod(x.shape[2:]))  # n may be 0
    with np.errstate(all="ignore"):
        mean = r.mean(axis=2, keepdims=True)
        count = r.dtype.type(r.shape[2])
        if node.op == "GroupNormalization":  # the spec body's E[x^2] - E[x]^2 (lowering)
            var = (r * r).sum(axis=2, keepdims=True) / count - mean * mean
        else:
            var = ((r - mean) ** 2).sum(axis=2, keepdims=True) / count
        inv = 1 / np.sqrt(var + eps)
        y = ((r - mean) * inv).reshape(x.shape)
    if node.op == "GroupNormalization" and node.version < 21:
        scale, bias = np.repeat(scale, c // g), np.repeat(bias, c // g)
    return [(y * scale.reshape(bshape) + bias.reshape(bshape)).astype(x.dtype)]


# --------------------------------------------------------------------------- BatchNormalization


def bn_training(node: Node) -> bool:
    return node.version >= 14 and int_attr(node, "training_mode", 0, (0, 1)) == 1


def bn_per_activation(node: Node, xshape: tuple) -> bool:
    """Legacy spatial=0 (opset < 9): one set of parameters per (c, spatial...) element."""
    if node.version >= 9 or int_attr(node, "spatial", 1, (0, 1)) == 1:
        return False
    s = _shape(node, 1)
    return s is not None and len(s) > 1 or len(xshape) > 2 and s == tuple(xshape[1:])


def bn_infer(node: Node) -> list:
    arity(node, 5)
    ft = ((1, FLOATS), (14, FLOATS | BF16))  # bfloat16 since 14 (T and U)
    dt = accept(node, 0, ft)
    pdt = [accept(node, i, ft) for i in range(1, 5)]
    # Before 14 every input is T; at 14 scale/B are T and mean/var a separate U.
    if node.version < 15 and any(p != dt for p in pdt[:2 if node.version == 14 else 4]):
        raise ModelError("every input must have the element type of X", where=node)
    if pdt[0] != pdt[1] or pdt[2] != pdt[3]:
        raise ModelError("scale/B and mean/var must share element types", where=node)
    float_attr(node, "epsilon", 1e-5)
    float_attr(node, "momentum", 0.9)
    shape = _shape(node, 0)
    _rank_at_least(node, shape, 2)
    train = bn_training(node)
    n_out = len(node.outputs)
    if not train and n_out > 1:
        if node.version >= 14:
            raise ModelError("running_mean/running_var outputs need training_mode=1",
                             where=node)
        raise UnsupportedError(f"BatchNormalization training outputs (opset {node.version}, "
                               f"{n_out} outputs) are not supported; only the inference "
                               "form with one output", where=node)
    if shape is not None and not bn_per_activation(node, shape):
        for i in range(1, 5):
            _check_len(node, i, shape[1], "one value per channel")
    out = tensor(dt, shape)
    for _ in range(n_out - 1):
        out += tensor(pdt[2], _shape(node, 3))
    return out


def bn_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, scale, bias, mean, var = inputs
    eps = float_attr(node, "epsilon", 1e-5)
    mom = float_attr(node, "momentum", 0.9)
    if bn_per_activation(node, x.shape):
        pshape = (1,) + x.shape[1:]
    else:
        pshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    cdt = x.dtype
    outs = []
    if bn_training(node):
        axes = (0,) + tuple(range(2, x.ndim))
        bm, bv = x.mean(axis=axes), x.var(axis=axes)
        outs = [(mean * mom + bm * (1 - mom)).astype(mean.dtype),
                (var * mom + bv * (1 - mom)).astype(var.dtype)]
        mean, var = bm, bv
    a = scale.astype(cdt) / np.sqrt(var.astype(cdt) + cdt.type(eps))
    b = bias.astype(cdt) - mean.astype(cdt) * a
    y = x * a.reshape(pshape) + b.reshape(pshape)
    return [y.astype(x.dtype)] + outs[:len(node.outputs) - 1]


# --------------------------------------------------------------------------- LRN / MVN / Lp


def unary_infer(node: Node) -> list:
    arity(node, 1)
    types = _F if (node.op == "LRN" and node.version < 13) or (
        node.op == "LpNormalization" and node.version < 22) or (
        node.op == "MeanVarianceNormalization" and node.version < 13) else _FB
    dt = accept(node, 0, types)
    shape = _shape(node, 0)
    if node.op == "LRN":
        _rank_at_least(node, shape, 2)
        lrn_size(node)
        for a in ("alpha", "beta", "bias"):
            float_attr(node, a, 1.0)
    elif node.op == "LpNormalization":
        int_attr(node, "p", 2, (1, 2))
        if shape is not None:
            norm_axis(node, len(shape))
    elif shape is not None:
        mvn_axes(node, len(shape))
    return tensor(dt, shape)


def lrn_size(node: Node) -> int:
    if "size" not in node.attrs:
        raise ModelError("missing required attribute 'size'", where=node)
    n = int_attr(node, "size", 1)
    if n < 1:
        raise ModelError(f"attribute 'size' must be >= 1, got {n}", where=node)
    return n


def mvn_axes(node: Node, rank: int) -> list[int]:
    axes = node.attr("axes", (0, 2, 3))
    out = sorted({normalize_axis(int(a), rank, node, "axes entry") for a in axes})
    if len(out) != len(axes):
        raise ModelError(f"attribute 'axes' repeats an axis: {list(axes)}", where=node)
    return out


def unary_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    dtype = x.dtype
    with np.errstate(all="ignore"):
        if node.op == "LRN":
            size = lrn_size(node)
            x = x.astype(np.float32) if x.dtype.itemsize < 4 else x  # as the lowering
            sq = np.zeros_like(x)
            c = x.shape[1]
            for k in range(c):
                lo, hi = max(0, k - (size - 1) // 2), min(c, k + math.ceil((size - 1) / 2) + 1)
                sq[:, k] = (x[:, lo:hi] ** 2).sum(axis=1)
            alpha, beta = float_attr(node, "alpha", 1e-4), float_attr(node, "beta", 0.75)
            y = x / (float_attr(node, "bias", 1.0) + alpha / size * sq) ** beta
        elif node.op == "LpNormalization":
            axis = norm_axis(node, x.ndim)
            p = int_attr(node, "p", 2)
            w = x.astype(np.float32) if x.dtype.itemsize < 4 else x  # as the lowering
            nrm = np.abs(w).sum(axis=axis, keepdims=True) if p == 1 else np.sqrt(
                (w * w).sum(axis=axis, keepdims=True))
            y = np.where(nrm == 0, 0, w / nrm)
        else:
            axes = tuple(mvn_axes(node, x.ndim))
            w = x.astype(np.float32) if x.dtype.itemsize < 4 else x  # as the lowering
            mean = w.mean(axis=axes, keepdims=True)
            std = np.sqrt(((w - mean) ** 2).mean(axis=axes, keepdims=True))
            y = (w - mean) / (std + 1e-9)
    return [np.asarray(y, dtype=dtype)]
