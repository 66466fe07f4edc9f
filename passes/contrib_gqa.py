"""Expansion of onnxruntime's GroupQueryAttention (com.microsoft) into the standard Attention,
for the `expand-contrib` pass.

GroupQueryAttention(query, key, value, past_key, past_value, seqlens_k, total_sequence_length,
cos_cache, sin_cache) -> (output, present_key, present_value), with `num_heads` query heads
sharing `kv_num_heads` key/value heads. Algorithm:
1) with `do_rotary`, query and key get the standard RotaryEmbedding at positions
   past + [0, S), past = total_sequence_length - S (what onnxruntime computes for every batch
   row when all rows have the same length);
2) the standard Attention (opset 23) on 3-D query/key/value with `q_num_heads`/`kv_num_heads`,
   past_key/past_value (its present outputs are the concatenations onnxruntime writes when
   the past buffer holds exactly the past), `scale` and `softcap`, and a boolean mask: query s
   sees key j when j <= past + s (causal, aligned to the end) and, with `local_window_size`
   w > 0, j > past + s - w.
Not supported: packed QKV (no key/value), past buffers longer than the past (shared buffers),
rows of different lengths in one batch (per-row seqlens_k), smooth_softmax / head_sink.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node, Value

__all__ = ["EXPANSIONS", "NOTES"]


def _i64(e: Any, x: Any, hint: str) -> Value:
    return e.const(np.array(x, np.int64), hint)


def _scalar_len(e: Any, x: Value, axis: int, hint: str) -> Value:
    s = e.emit("Shape", 15, [x], hint + "_shape", start=axis, end=axis + 1)
    return e.emit("Squeeze", 13, [s, _i64(e, [0], "axis0")], hint)


def _positions(e: Any, q: Value, past: Value) -> Value:
    """past + [0, S) as [B, S] (the rotary position ids)."""
    s = _scalar_len(e, q, 1, "s")
    r = e.emit("Add", 14, [e.emit("Range", 11, [_i64(e, 0, "zero"), s, _i64(e, 1, "one")],
                                  "range"), past], "positions")
    batch = e.emit("Shape", 15, [q], "batch", start=0, end=1)
    shape = e.emit("Concat", 13, [batch, e.emit("Shape", 15, [r], "r_len")], "bs", axis=0)
    return e.emit("Expand", 13, [r, shape], "position_ids")


def _mask(e: Any, q: Value, total: Value, past: Value, window: int) -> Value:
    """[S, T] booleans: key j visible to query s."""
    s = _scalar_len(e, q, 1, "s_len")
    qpos = e.emit("Add", 14, [e.emit("Range", 11, [_i64(e, 0, "z"), s, _i64(e, 1, "o")],
                                     "q_range"), past], "q_pos")
    qpos = e.emit("Unsqueeze", 13, [qpos, _i64(e, [1], "ax1")], "q_col")
    kpos = e.emit("Range", 11, [_i64(e, 0, "z2"), total, _i64(e, 1, "o2")], "k_pos")
    seen = e.emit("LessOrEqual", 16, [kpos, qpos], "causal")
    if window > 0:
        lo = e.emit("Sub", 14, [qpos, _i64(e, window, "window")], "lo")
        seen = e.emit("And", 7, [seen, e.emit("Greater", 13, [kpos, lo], "in_window")],
                      "local")
    return seen


def _rotary(e: Any, x: Value, pos: Value, heads: int, n: Node, which: str) -> Value:
    return e.emit("RotaryEmbedding", 23, [x, n.inputs[7], n.inputs[8], pos], f"rotary_{which}",
                  num_heads=heads, interleaved=int(n.attr("rotary_interleaved", 0)))


def _group_query_attention(e: Any) -> None:
    n = e.node
    q, k, v = n.input(0), n.input(1), n.input(2)
    if q is None or k is None or v is None:
        raise UnsupportedError("GroupQueryAttention with packed QKV is not supported", where=n)
    if n.input(6) is None:
        raise ModelError("input 6 (total_sequence_length) is required", where=n)
    if int(n.attr("smooth_softmax", 0)) or n.input(11) is not None:
        raise UnsupportedError("GroupQueryAttention smooth_softmax/head_sink", where=n)
    if n.input(9) is not None or n.input(10) is not None:
        raise UnsupportedError("GroupQueryAttention position_ids/attention_bias", where=n)
    heads, kv_heads = int(n.attr("num_heads", 0)), int(n.attr("kv_num_heads", 0))
    total = e.emit("Cast", 13, [e.emit("Reshape", 14, [n.inputs[6], _i64(e, [], "scalar")],
                                       "total_scalar")], "total", to=7)
    past = e.emit("Sub", 14, [total, _scalar_len(e, q, 1, "q_len")], "past")
    if int(n.attr("do_rotary", 0)):
        if n.input(7) is None or n.input(8) is None:
            raise ModelError("do_rotary needs cos_cache and sin_cache", where=n)
        pos = _positions(e, q, past)
        q, k = _rotary(e, q, pos, heads, n, "q"), _rotary(e, k, pos, kv_heads, n, "k")
    mask = _mask(e, q, total, past, int(n.attr("local_window_size", -1)))
    attrs: dict[str, Any] = {"q_num_heads": heads, "kv_num_heads": kv_heads}
    if float(n.attr("scale", 0.0)) != 0.0:
        attrs["scale"] = float(n.attr("scale"))
    if float(n.attr("softcap", 0.0)) != 0.0:
        attrs["softcap"] = float(n.attr("softcap"))
    outs = [n.outputs[0]]
    has_past = n.input(3) is not None and n.input(4) is not None
    for i in (1, 2):
        named = i < len(n.outputs) and n.outputs[i].name
        outs.append(n.outputs[i] if named else e.value(f"present{i}"))
    ins = [q, k, v, mask] + ([n.inputs[3], n.inputs[4]] if has_past else [])
    e.nodes.append(Node("Attention", ins, outs, attrs, "", 23, e.name("attention")))
    if not has_past:  # present = the new keys/values in [B, kv_heads, S, D]
        e.nodes[-1].outputs = outs[:1]
        for i, x in ((1, k), (2, v)):
            if i < len(n.outputs) and n.outputs[i].name:
                _heads_first(e, x, kv_heads, n.outputs[i])


def _heads_first(e: Any, x: Value, heads: int, out: Value) -> None:
    r = e.emit("Reshape", 14, [x, _i64(e, [0, 0, heads, -1], "bshd")], "split_heads")
    e.emit("Transpose", 13, [r], "heads_first", out=out, perm=(0, 2, 1, 3))


EXPANSIONS = {"GroupQueryAttention": _group_query_attention}

NOTES = {"GroupQueryAttention": "standard Attention with past, end-aligned causal mask, "
                                "optional rotary/local window/softcap (equal-length rows, "
                                "past buffer = the past; no packed QKV)"}
