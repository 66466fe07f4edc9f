"""numpy semantics of Attention (constant folding; see attention.attention for the algorithm).

Registers no op: it is the `evaluate` rule of `attention.attention`, kept apart so that file stays
small. It follows the same steps as the lowering: heads split from 3-D inputs, the cache
concatenated, GQA heads repeated, S = scale * Q K^T, softcap, the additive bias (mask, causal,
window, nonpad), a softmax whose fully-masked rows are zero, Y = P V.
For float16/bfloat16 it follows the reference's rounding order (`attention.narrow_floats`):
Q and K each pre-scaled by sqrt(scale), the softmax in softmax_precision's type if given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.ir.narrow import is_narrow_array
from onnxjit.ir.ops.attention.narrow_floats import scale_root, softmax_type
from onnxjit.ir.types import DType


def _heads(x: np.ndarray, h: int) -> np.ndarray:
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hd = x.shape
    return x.reshape(b, s, h, hd // h).transpose(0, 2, 1, 3)


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Any, past_k: Any,
                        past_v: Any, nonpad: Any, at: Any) -> list[np.ndarray]:
    """[Y, present_key, present_value, qk_matmul_output] of one Attention node."""
    rank = q.ndim
    if rank == 3:
        q, k, v = _heads(q, at.hq), _heads(k, at.hkv), _heads(v, at.hkv)
    if past_k is not None:
        k = np.concatenate([past_k, k], axis=2)
        v = np.concatenate([past_v, v], axis=2)
    present_k, present_v = k, v
    bsz, hq, sq, dh = q.shape
    t = k.shape[2]
    groups = hq // k.shape[1]
    if groups > 1:
        k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    scale = at.scale if at.scale is not None else 1.0 / np.sqrt(dh)
    with np.errstate(all="ignore"):
        if is_narrow_array(q):  # the reference's rounding order (attention.narrow_floats)
            r = q.dtype.type(scale_root(at.scale, dh))
            s = np.matmul(q * r, (k * r).transpose(0, 1, 3, 2)).astype(q.dtype)
        else:  # Q scaled first, as the native code (`narrow_floats.prescaled` of Q) does
            s = (q * q.dtype.type(scale)) @ k.transpose(0, 1, 3, 2)
        raw = s
        if at.softcap > 0:
            cap = q.dtype.type(at.softcap) if is_narrow_array(q) else at.softcap
            s = np.tanh(s / cap) * cap
        capped = s
        bias = np.zeros((bsz, hq, sq, t), q.dtype)
        ok = np.ones((bsz, hq, sq, t), bool)
        if mask is not None:
            m = np.broadcast_to(mask, (bsz, hq, sq, mask.shape[-1]))
            pad = t - m.shape[-1]
            if m.dtype == np.bool_:
                ok &= np.pad(m, [(0, 0)] * 3 + [(0, pad)], constant_values=False)
            else:
                bias = bias + np.pad(m, [(0, 0)] * 3 + [(0, pad)], constant_values=-np.inf)
        i = np.arange(sq)[:, None]
        j = np.arange(t)[None, :]
        if at.causal or at.left >= 0 or at.right >= 0:
            off = (nonpad.reshape(-1, 1, 1, 1) - sq) if nonpad is not None else \
                (past_k.shape[2] if past_k is not None else 0)
            p = i + off
            if at.causal:
                ok &= j <= p
            if at.left >= 0:
                ok &= p - j <= at.left
            if at.right >= 0:
                ok &= j - p <= at.right
        if nonpad is not None:
            ok &= j < nonpad.reshape(-1, 1, 1, 1)
        with np.errstate(invalid="ignore"):  # +inf in a float mask where a rule masks: NaN
            bias = (bias + np.where(ok, 0, -np.inf)).astype(q.dtype)
        s = s + bias
        biased = s
        pt = np.float64 if at.precision == 11 else q.dtype
        if is_narrow_array(q):
            pt = softmax_type(DType.from_numpy(q.dtype), at.precision).numpy
        sp = s.astype(pt)
        mx = sp.max(axis=-1, keepdims=True) if t else np.zeros(sp.shape[:-1] + (1,), pt)
        mx = np.where(np.isneginf(mx), 0, mx)
        e = np.exp(sp - mx)
        tot = e.sum(axis=-1, keepdims=True)
        prob = e / np.where(tot == 0, 1, tot)
        all_masked = ~np.any(bias != -np.inf, axis=-1, keepdims=True)  # a NaN bias counts
        prob = np.where(all_masked, 0, prob).astype(q.dtype)
        y = np.matmul(prob, v).astype(q.dtype)
    if rank == 3:
        y = y.transpose(0, 2, 1, 3).reshape(bsz, sq, y.shape[1] * y.shape[3])
    qk = [raw, capped, biased, prob][at.mode]
    return [y, present_k, present_v, qk]
