"""Expansion of onnxruntime's contrib Attention with past state (GPT-2 after
`onnxruntime.transformers`' optimizer), for `contrib_transformer`'s Attention.

Attention(input, weights, bias, mask_index, past, attention_bias) -> (output, present), with
past [2, B, heads, P, D] (keys then values) and present [2, B, heads, P + S, D]:
1) Q, K, V as without past (MatMul + bias, Split: `contrib_transformer._attention`);
2) past split into past_key and past_value [B, heads, P, D];
3) the standard Attention (opset 23) with past_key/past_value, whose present_key and
   present_value are the concatenations past ++ new keys/values;
4) an additive float mask [B or 1, 1, S, P + S]: with `unidirectional`, query s sees key j
   only when j <= P + s (causal, aligned to the end, as onnxruntime's kernel masks with past:
   the standard `is_causal` aligns to the start) with the lowest float, plus the mask_index
   (raw [B, P + S] or [B, S, P + S]) mask with `mask_filter_value`, as onnxruntime masks
   (a row whose every key is masked then attends to its padded keys, not its future ones);
5) present = the two presents stacked on a new axis 0.
An empty past (P = 0) works the same way. MultiHeadAttention(query, key, value, bias,
key_padding_mask, attention_bias, past_key, past_value) -> (output, present_key,
present_value) takes steps 3-4 (`emit_with_past`). Not supported: masks of key lengths
(rank 1) with past, past_sequence_length (input 6: a shared past buffer).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.errors import UnsupportedError
from onnxjit.ir.graph import Node, Value
from onnxjit.passes.contrib_mask import attention_mask as _attention_mask
from onnxjit.passes.contrib_mask import f32 as _f32


def attention_with_past(e: Any, q: Value, k: Value, v: Value, heads: int) -> None:
    """Steps 2-5 of the module docstring for the contrib Attention node `e.node`."""
    n = e.node
    if n.input(6) is not None:
        raise UnsupportedError("Attention with past_sequence_length (a shared past buffer) "
                               "is not supported", where=n)
    halves = [e.value("past_k2"), e.value("past_v2")]
    e.nodes.append(Node("Split", [n.inputs[4]], halves, {"axis": 0, "num_outputs": 2}, "", 18,
                        e.name("split_past")))
    axis0 = e.const(np.array([0], np.int64), "axis0")
    pk, pv = (e.emit("Squeeze", 13, [h, axis0], f"past_{p}") for h, p in zip(halves, "kv"))
    pres = [e.value("present_k"), e.value("present_v")]
    emit_with_past(e, q, k, v, pk, pv, pres, heads, n.input(3), n.input(5))
    if len(n.outputs) > 1 and n.outputs[1].name:
        stacked = [e.emit("Unsqueeze", 13, [p, axis0], f"stack_{s}")
                   for p, s in zip(pres, "kv")]
        e.emit("Concat", 13, stacked, "present", out=n.outputs[1], axis=0)


def emit_with_past(e: Any, q: Value, k: Value, v: Value, pk: Value, pv: Value,
                   presents: list[Value], heads: int, mask_index: Value | None,
                   bias: Value | None) -> None:
    """The standard Attention with past_key/past_value [B, heads, P, D] (the presents into
    `presents`), its mask built as in step 4 of the module docstring; also MultiHeadAttention
    with past (`contrib_transformer`)."""
    n = e.node
    if mask_index is not None and (mask_index.shape is None or len(mask_index.shape) == 1):
        raise UnsupportedError(f"{n.op} with past and a mask of key lengths (rank 1) is not "
                               "supported (raw masks of rank 2 or 3 are)", where=n)
    mask = _causal(e, q, pk, _f32) if int(n.attr("unidirectional", 0)) else None
    if mask_index is not None:
        m = _attention_mask(e, mask_index, q, k)
        mask = m if mask is None else e.emit("Add", 14, [mask, m], "masks")
    if bias is not None:
        mask = bias if mask is None else e.emit("Add", 14, [mask, bias], "bias")
    attrs: dict[str, Any] = {"q_num_heads": heads, "kv_num_heads": heads}
    if float(n.attr("scale", 0.0)) != 0.0:
        attrs["scale"] = float(n.attr("scale"))
    e.nodes.append(Node("Attention", [q, k, v, mask, pk, pv], [n.outputs[0], *presents],
                        attrs, "", 23, e.name("attention")))


def _causal(e: Any, q: Value, past_k: Value, f32: Any) -> Value:
    """The additive [1, 1, S, P + S] mask: 0 where key j <= P + query s, else the fill."""
    fill = float(np.finfo(np.float32).min)  # as onnxruntime: a padded key beats a future one

    def length(x: Value, axis: int, hint: str) -> Value:
        d = e.emit("Shape", 15, [x], hint, start=axis, end=axis + 1)
        return e.emit("Squeeze", 13, [d, e.const(np.array([0], np.int64), "ax0")], hint)

    s, p = length(q, 1, "q_len"), length(past_k, 2, "past_len")
    zero, one = (e.const(np.array(x, np.int64), h) for x, h in ((0, "zero"), (1, "one")))
    qpos = e.emit("Add", 14, [e.emit("Range", 11, [zero, s, one], "q_range"), p], "q_pos")
    kpos = e.emit("Range", 11, [zero, e.emit("Add", 14, [p, s], "total"), one], "k_pos")
    qcol = e.emit("Unsqueeze", 13, [qpos, e.const(np.array([1], np.int64), "ax1")], "q_col")
    seen = e.emit("LessOrEqual", 16, [kpos, qcol], "causal")
    add = e.emit("Where", 16, [seen, f32(e, 0.0, "zero_f"), f32(e, fill, "fill")], "causal_f")
    return e.emit("Unsqueeze", 13, [add, e.const(np.array([0, 1], np.int64), "ax01")],
                  "causal4")
