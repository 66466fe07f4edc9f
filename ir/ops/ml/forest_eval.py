"""Numpy semantics of tree ensembles: `predict_raw` walks every row through a `Forest` at
once (one vectorized step per tree level), `post_transform` applies the ONNX-ML post
transforms, `erfinv` is onnxruntime's approximation behind PROBIT.

Used by constant folding and by the host path (a node that cannot be compiled); the native
walk (`tree_lower`) follows the same rules.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import InputError
from onnxjit.ir.ops.ml.forest import LE, LT, Forest


def predict_raw(f: Forest, x: np.ndarray, out_dtype) -> np.ndarray:
    """Aggregated scores [N, n_targets] (base values added, no post transform)."""
    x = np.asarray(x).astype(f.thr_dtype).reshape(len(x), -1)
    n = x.shape[0]
    if f.n_features_used > x.shape[1]:
        raise_missing_features(f, x.shape[1])
    acc = np.full((n, f.n_targets), {"MIN": np.inf, "MAX": -np.inf}.get(f.aggregate, 0.0))
    rows = np.arange(n)
    for r, d in zip(f.roots, f.depth):
        idx = np.full(n, r, dtype=np.int64)
        for _ in range(int(d)):
            v = x[rows, f.feature[idx]]
            t = f.threshold[idx]
            mode = f.mode[idx]
            with np.errstate(invalid="ignore"):
                cond = np.where(mode == LE, v <= t, np.where(mode == LT, v < t, v == t))
            cond = np.where(np.isnan(v), f.nan_true[idx], cond)
            idx = np.where(cond, f.true_child[idx], f.false_child[idx])
        w = f.weights[idx]
        if f.aggregate == "MIN":
            acc = np.minimum(acc, w)
        elif f.aggregate == "MAX":
            acc = np.maximum(acc, w)
        else:
            acc += w
    acc[np.isinf(acc)] = 0.0  # MIN/MAX of a target no leaf names
    if f.base_values is not None:
        acc += f.base_values.reshape(1, -1)[:, :f.n_targets]
    return acc.astype(out_dtype)


def raise_missing_features(f: Forest, have: int) -> None:
    raise InputError(f"the tree ensemble reads feature {f.n_features_used - 1} but X has "
                     f"{have} features")


def erfinv(x: np.ndarray) -> np.ndarray:
    """onnxruntime's approximation of erf^-1 (Winitzki), used by PROBIT."""
    sgn = np.where(x < 0, -1.0, 1.0)
    y = (1.0 - x) * (1.0 + x)
    with np.errstate(divide="ignore", invalid="ignore"):
        lg = np.log(y)
        v = 2.0 / (np.pi * 0.147) + 0.5 * lg
        v2 = lg / 0.147
        return sgn * np.sqrt(-v + np.sqrt(v * v - v2))


def post_transform(s: np.ndarray, how: str) -> np.ndarray:
    """The ONNX-ML post transforms on scores [N, C] (float64 math)."""
    s = s.astype(np.float64)
    if how == "NONE":
        return s
    if how == "LOGISTIC":
        return 1.0 / (1.0 + np.exp(-s))
    if how == "SOFTMAX":
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if how == "SOFTMAX_ZERO":
        mx = s.max(axis=1, keepdims=True)
        e = np.where(np.abs(s) > 1e-7, np.exp(s - mx), s * np.exp(-mx))
        tot = e.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(tot == 0, 0.5, e / tot)
    if how == "PROBIT":
        return 1.41421356 * erfinv(s * 2 - 1)
    raise ValueError(how)
