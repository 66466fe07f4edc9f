"""Expansions of onnxruntime's transformer contrib ops (com.microsoft) into standard ONNX ops,
for the `expand-contrib` pass.

`onnxruntime.transformers.optimizer` fuses exported BERT/GPT-2 graphs into these ops; each is
rewritten into the standard ops it fused, which run on onnxjit's own kernels (LayerNormalization,
RMSNormalization, Gelu, the opset-23 Attention, MatMul with prepacked weights):

    Gelu / BiasGelu / FastGelu(x, bias)  -> Gelu(x [+ bias]) (tanh form for FastGelu)
    QuickGelu(x; alpha)                  -> x * Sigmoid(alpha * x)
    BiasAdd(x, bias, skip)               -> x + bias + skip
    SkipLayerNormalization(x, skip, gamma, beta, bias) -> LayerNormalization(x + skip [+ bias]);
        output 3 is the sum; Skip/SimplifiedLayerNormalization the same with RMSNormalization
    EmbedLayerNormalization              -> Gathers of the three embeddings, their sum, a
        LayerNormalization; mask_index = the mask's row sums (int32)
    Attention(x, W, bias, mask_index, past, attention_bias) -> MatMul + Add, Split into Q, K, V
        (3-D), the standard Attention with an additive float mask built from mask_index (key
        positions a mask excludes get `mask_filter_value`, -10000 by default, as onnxruntime's
        kernel adds) and `is_causal` for `unidirectional`; with a `past` input (and present
        output), `contrib_past`.
    MultiHeadAttention(q, k, v, bias, key_padding_mask, attention_bias, past_key, past_value)
        -> [bias Adds,] the standard Attention (3-D query/key/value, with past: `contrib_past`;
        packed forms are not supported)
    RotaryEmbedding(x, position_ids, cos, sin) -> the standard RotaryEmbedding (an offset
        position_ids of shape [1] becomes offset + [0, S) per batch row)
    FusedMatMul(a, b; alpha, transA, transB) -> [Transpose] MatMul [* alpha]
    FusedConv(x, w, b, z; activation)    -> Conv [+ z], then the activation

Each expansion writes the contrib node's own output values, so readers need no rewrite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node, Value
from onnxjit.passes.contrib_mask import attention_mask as _attention_mask
from onnxjit.passes.contrib_mask import f32 as _f32

__all__ = ["EXPANSIONS", "ONNX_DOMAIN_EXPANSIONS"]


def _out(node: Node, i: int) -> Value | None:
    """The i-th output when the node names it (an omitted one has an empty name)."""
    if i < len(node.outputs) and node.outputs[i].name:
        return node.outputs[i]
    return None


def _req(node: Node, i: int, what: str) -> Value:
    v = node.input(i)
    if v is None:
        raise ModelError(f"input {i} ({what}) is required", where=node)
    return v


def _gelu(approximate: str, with_bias: bool) -> Callable[[Any], None]:
    def expand(e: Any) -> None:
        n = e.node
        x = _req(n, 0, "X")
        if with_bias and n.input(1) is not None:
            x = e.emit("Add", 14, [x, n.inputs[1]], "bias")
        e.emit("Gelu", 20, [x], "gelu", out=n.outputs[0], approximate=approximate)

    return expand


def _quick_gelu(e: Any) -> None:
    n = e.node
    x = _req(n, 0, "X")
    ax = e.emit("Mul", 14, [x, _f32(e, float(n.attr("alpha", 1.702)), "alpha")], "ax")
    e.emit("Mul", 14, [x, e.emit("Sigmoid", 13, [ax], "sigmoid")], "quick_gelu",
           out=n.outputs[0])


def _bias_add(e: Any) -> None:
    n = e.node
    s = e.emit("Add", 14, [_req(n, 0, "X"), _req(n, 1, "bias")], "bias")
    e.emit("Add", 14, [s, _req(n, 2, "skip")], "skip", out=n.outputs[0])


def _skip_norm(simplified: bool) -> Callable[[Any], None]:
    """Skip[Simplified]LayerNormalization(input, skip, gamma, [beta,] bias)."""

    def expand(e: Any) -> None:
        n = e.node
        bias = n.input(3 if simplified else 4)
        total = _out(n, 3)
        s = e.emit("Add", 14, [_req(n, 0, "input"), _req(n, 1, "skip")], "skip",
                   out=total if bias is None else None)
        if bias is not None:
            s = e.emit("Add", 14, [s, bias], "bias", out=total)
        _norm(e, s, _req(n, 2, "gamma"), None if simplified else n.input(3), simplified)

    return expand


def _norm(e: Any, x: Value, gamma: Value, beta: Value | None, simplified: bool) -> None:
    n = e.node
    eps = float(n.attr("epsilon", 1e-12 if not simplified else 1e-6))
    if simplified:
        e.emit("RMSNormalization", 23, [x, gamma], "rms_norm", out=n.outputs[0], axis=-1,
               epsilon=eps)
    else:
        e.emit("LayerNormalization", 17, [x, gamma, beta], "layer_norm", out=n.outputs[0],
               axis=-1, epsilon=eps)


def _simplified_norm(e: Any) -> None:
    """SimplifiedLayerNormalization (onnxruntime registers it in the ONNX domain)."""
    n = e.node
    if _out(n, 1) is not None:
        raise UnsupportedError("the inv_std_var output of SimplifiedLayerNormalization is not "
                               "supported", where=n)
    e.emit("RMSNormalization", 23, [_req(n, 0, "X"), _req(n, 1, "scale")], "rms_norm",
           out=n.outputs[0], axis=int(n.attr("axis", -1)),
           epsilon=float(n.attr("epsilon", 1e-5)))


def _seq_range(e: Any, ids: Value) -> Value:
    """[0, S) for ids of shape [B, S]."""
    shape = e.emit("Shape", 15, [ids], "ids_shape", start=1, end=2)
    length = e.emit("Squeeze", 13, [shape, e.const(np.array([0], np.int64), "axis0")], "len")
    return e.emit("Range", 11, [e.const(np.array(0, np.int64), "zero"), length,
                                e.const(np.array(1, np.int64), "one")], "positions")


def _embed_layer_norm(e: Any) -> None:
    """EmbedLayerNormalization(input_ids, segment_ids, word, position, segment, gamma, beta,
    mask, position_ids) -> (output, mask_index, embedding_sum)."""
    n = e.node
    ids = _req(n, 0, "input_ids")
    s = e.emit("Gather", 13, [_req(n, 2, "word_embedding"), ids], "word")
    pos_ids = n.input(8) if n.input(8) is not None else _seq_range(e, ids)
    s = e.emit("Add", 14, [s, e.emit("Gather", 13, [_req(n, 3, "position_embedding"),
                                                    pos_ids], "position")], "add_pos")
    if n.input(1) is not None and n.input(4) is not None:
        seg = e.emit("Gather", 13, [n.inputs[4], n.inputs[1]], "segment")
        s = e.emit("Add", 14, [s, seg], "add_segment", out=_out(n, 2))
    elif _out(n, 2) is not None:
        s = e.emit("Identity", 16, [s], "sum", out=_out(n, 2))
    _norm(e, s, _req(n, 5, "gamma"), _req(n, 6, "beta"), False)
    mask_index = _out(n, 1)
    if mask_index is None:
        return
    if n.input(7) is not None:
        m = e.emit("Cast", 13, [n.inputs[7]], "mask_i32", to=6)
        e.emit("ReduceSum", 13, [m, e.const(np.array([1], np.int64), "axis1")], "mask_index",
               out=mask_index, keepdims=0)
    else:  # no mask: zeros of shape [B], as onnxruntime writes
        b = e.emit("Shape", 15, [ids], "batch", start=0, end=1)
        e.emit("ConstantOfShape", 9, [b], "mask_index", out=mask_index,
               value=np.zeros(1, np.int32))


def _attention(e: Any) -> None:
    n = e.node
    past = n.input(4) is not None
    if _out(n, 1) is not None and not past:
        raise UnsupportedError("Attention with a present output needs a past input", where=n)
    heads = int(n.attr("num_heads", 0))
    w = _req(n, 1, "weights")
    if heads <= 0 or w.shape is None or not isinstance(w.shape[-1], int):
        raise ModelError("Attention needs num_heads and weights of a known shape", where=n)
    sizes = [int(s) for s in n.attr("qkv_hidden_sizes", ())] or [w.shape[-1] // 3] * 3
    qkv = e.emit("MatMul", 13, [_req(n, 0, "input"), w], "qkv")
    if n.input(2) is not None:
        qkv = e.emit("Add", 14, [qkv, n.inputs[2]], "qkv_bias")
    split = e.const(np.array(sizes, np.int64), "sizes")
    q, k, v = (e.value(p) for p in "qkv")
    e.nodes.append(Node("Split", [qkv, split], [q, k, v], {"axis": -1}, "", 13,
                        e.name("split")))
    if past:
        from onnxjit.passes.contrib_past import attention_with_past

        attention_with_past(e, q, k, v, heads)
        return
    mask = None
    if n.input(3) is not None:
        mask = _attention_mask(e, n.inputs[3], q, k)
    _emit_attention(e, q, k, v, mask, heads)


def _emit_attention(e: Any, q: Any, k: Any, v: Any, mask: Any, heads: int) -> None:
    """The standard Attention of a contrib attention node: its mask plus its attention bias
    (input 5), its heads, causality and scale."""
    n = e.node
    if n.input(5) is not None:
        mask = n.inputs[5] if mask is None else e.emit("Add", 14, [mask, n.inputs[5]], "bias")
    attrs: dict[str, Any] = {"q_num_heads": heads, "kv_num_heads": heads,
                             "is_causal": int(n.attr("unidirectional", 0))}
    if float(n.attr("scale", 0.0)) != 0.0:
        attrs["scale"] = float(n.attr("scale"))
    e.emit("Attention", 23, [q, k, v] + ([mask] if mask is not None else []), "attention",
           out=n.outputs[0], **attrs)


def _multi_head_attention(e: Any) -> None:
    """MultiHeadAttention(query, key, value, bias, key_padding_mask, attention_bias,
    past_key, past_value) with 3-D query, key and value (not packed; past: `contrib_past`)."""
    n = e.node
    past = n.input(6) is not None and n.input(7) is not None
    if any(n.input(i) is not None for i in (8, 9)) or \
            (not past and (n.input(6) or n.input(7) or _out(n, 1) or _out(n, 2))):
        raise UnsupportedError("MultiHeadAttention with past needs past_key and past_value "
                               "(and no past_sequence_length or cache_indirection)", where=n)
    q, k, v = _req(n, 0, "query"), n.input(1), n.input(2)
    if k is None or v is None or any(x.shape is None or len(x.shape) != 3 for x in (q, k, v)):
        raise UnsupportedError("MultiHeadAttention is supported with 3-D query, key and "
                               "value (not packed)", where=n)
    heads = int(n.attr("num_heads", 0))
    if n.input(3) is not None:
        parts = [e.value(f"bias_{p}") for p in "qkv"]
        e.nodes.append(Node("Split", [n.inputs[3]], parts, {"axis": 0, "num_outputs": 3},
                            "", 18, e.name("split_bias")))
        q, k, v = (e.emit("Add", 14, [x, b], f"add_{p}") for x, b, p in zip((q, k, v), parts,
                                                                          "qkv"))
    if past:
        from onnxjit.passes.contrib_past import emit_with_past

        pres = [_out(n, i) or e.value(f"present{i}") for i in (1, 2)]
        emit_with_past(e, q, k, v, n.inputs[6], n.inputs[7], pres, heads, n.input(4),
                       n.input(5))
        return
    mask = _attention_mask(e, n.inputs[4], q, k) if n.input(4) is not None else None
    _emit_attention(e, q, k, v, mask, heads)


def _rotary_embedding(e: Any) -> None:
    """RotaryEmbedding(input, position_ids, cos_cache, sin_cache): the standard op (inputs
    reordered); position_ids of shape [1] is an offset: positions offset + [0, S)."""
    n = e.node
    x, pos = _req(n, 0, "input"), _req(n, 1, "position_ids")
    if int(n.attr("is_packed_batching", 0)):
        raise UnsupportedError("RotaryEmbedding with is_packed_batching", where=n)
    if x.shape is None or pos.shape is None:
        raise ModelError("RotaryEmbedding needs the ranks of input and position_ids", where=n)
    if len(pos.shape) == 1:
        seq_axis = 1 if len(x.shape) == 3 else 2
        t = e.emit("Shape", 15, [x], "s_len", start=seq_axis, end=seq_axis + 1)
        t = e.emit("Squeeze", 13, [t, e.const(np.array([0], np.int64), "axis0")], "s")
        r = e.emit("Range", 11, [e.const(np.array(0, np.int64), "zero"), t,
                                 e.const(np.array(1, np.int64), "one")], "range")
        r = e.emit("Add", 14, [r, pos], "offset")
        batch = e.emit("Shape", 15, [x], "batch", start=0, end=1)
        shape = e.emit("Concat", 13, [batch, e.emit("Shape", 15, [r], "r_len")], "bs", axis=0)
        pos = e.emit("Expand", 13, [r, shape], "positions")
    attrs = {k: n.attrs[k] for k in ("interleaved", "num_heads", "rotary_embedding_dim")
             if k in n.attrs}
    e.emit("RotaryEmbedding", 23, [x, _req(n, 2, "cos_cache"), _req(n, 3, "sin_cache"), pos],
           "rotary", out=n.outputs[0], **attrs)


def _fused_matmul(e: Any) -> None:
    n = e.node
    a, b = _req(n, 0, "A"), _req(n, 1, "B")
    if int(n.attr("transBatchA", 0)) or int(n.attr("transBatchB", 0)):
        raise UnsupportedError("FusedMatMul with transBatchA/transBatchB", where=n)
    for flag, name in ((int(n.attr("transA", 0)), "a"), (int(n.attr("transB", 0)), "b")):
        if flag:
            x = a if name == "a" else b
            rank = len(x.shape) if x.shape is not None else None
            if rank is None or rank < 2:
                raise ModelError("FusedMatMul transposes need operands of a known rank >= 2",
                                 where=n)
            t = e.emit("Transpose", 13, [x], f"t_{name}",
                       perm=(*range(rank - 2), rank - 1, rank - 2))
            a, b = (t, b) if name == "a" else (a, t)
    alpha = float(n.attr("alpha", 1.0))
    if alpha == 1.0:
        e.emit("MatMul", 13, [a, b], "matmul", out=n.outputs[0])
        return
    y = e.emit("MatMul", 13, [a, b], "matmul")
    e.emit("Mul", 14, [y, _f32(e, alpha, "alpha")], "alpha", out=n.outputs[0])


_ACTIVATIONS = {"Relu": (), "Tanh": (), "Sigmoid": (), "LeakyRelu": ("alpha",),
                "HardSigmoid": ("alpha", "beta")}


def _fused_conv(e: Any) -> None:
    n = e.node
    act = n.attr("activation", "")
    act = act.decode() if isinstance(act, bytes) else act
    conv_attrs = {k: v for k, v in n.attrs.items()
                  if k in ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")}
    y = e.emit("Conv", 11, [_req(n, 0, "X"), _req(n, 1, "W"), n.input(2)], "conv",
               out=n.outputs[0] if not act and n.input(3) is None else None, **conv_attrs)
    if n.input(3) is not None:
        y = e.emit("Add", 14, [y, n.inputs[3]], "sum", out=None if act else n.outputs[0])
    if not act:
        return
    params = [float(p) for p in n.attr("activation_params", ())]
    if act == "Clip":
        lo, hi = (params + [-np.inf, np.inf])[:2] if params else (-np.inf, np.inf)
        e.emit("Clip", 13, [y, _f32(e, lo, "min"), _f32(e, hi, "max")], "clip",
               out=n.outputs[0])
    elif act in _ACTIVATIONS:
        e.emit(act, 13 if act != "LeakyRelu" else 16, [y], act.lower(), out=n.outputs[0],
               **dict(zip(_ACTIVATIONS[act], params)))
    else:
        raise UnsupportedError(f"FusedConv activation '{act}' is not supported", where=n)


EXPANSIONS: dict[str, Callable[[Any], None]] = {
    "Gelu": _gelu("none", False),
    "BiasGelu": _gelu("none", True),
    "FastGelu": _gelu("tanh", True),
    "QuickGelu": _quick_gelu,
    "BiasAdd": _bias_add,
    "SkipLayerNormalization": _skip_norm(False),
    "SkipSimplifiedLayerNormalization": _skip_norm(True),
    "SimplifiedLayerNormalization": _simplified_norm,
    "EmbedLayerNormalization": _embed_layer_norm,
    "Attention": _attention,
    "MultiHeadAttention": _multi_head_attention,
    "RotaryEmbedding": _rotary_embedding,
    "FusedMatMul": _fused_matmul,
    "FusedConv": _fused_conv,
}

#: Contrib ops onnxruntime registers in the ONNX domain itself.
ONNX_DOMAIN_EXPANSIONS: dict[str, Callable[[Any], None]] = {
    "SimplifiedLayerNormalization": _simplified_norm,
}

#: What each op becomes, for docs/supported_ops.md.
NOTES = {
    "Attention": "MatMul + bias, Split, standard Attention (mask_index of rank 1-3, "
                 "attention_bias, unidirectional; past/present with raw masks)",
    "BiasAdd": "x + bias + skip",
    "MultiHeadAttention": "[bias Adds,] standard Attention (3-D query/key/value, "
                          "key_padding_mask, attention_bias, past; no packed forms)",
    "RotaryEmbedding": "standard RotaryEmbedding (position_ids [B, S] or an offset [1])",
    "BiasGelu": "Gelu(a + b)",
    "EmbedLayerNormalization": "Gathers + LayerNormalization; mask_index = mask row sums",
    "FastGelu": "Gelu(x + bias), tanh form",
    "FusedConv": "Conv [+ Z] + activation (Relu, Tanh, Sigmoid, LeakyRelu, HardSigmoid, Clip)",
    "FusedMatMul": "MatMul with transA/transB and alpha (not transBatch)",
    "Gelu": "Gelu",
    "QuickGelu": "x * Sigmoid(alpha * x)",
    "SimplifiedLayerNormalization": "RMSNormalization (onnxruntime's ai.onnx-domain op)",
    "SkipLayerNormalization": "Add(s) + LayerNormalization; the sum as output 3",
    "SkipSimplifiedLayerNormalization": "Add(s) + RMSNormalization; the sum as output 3",
}
