"""Transformer models with dynamic dims, built as the PyTorch exporter emits them.

Both models take their sizes from the inputs at run time the way `torch.onnx.export` with
`dynamic_axes` writes them: `Shape -> Gather -> Unsqueeze -> Concat -> Reshape` chains for the
head splits, `Slice` of a constant position table by the sequence length, `Range` for
positions after a KV cache, and a causal mask sliced out of a constant lower triangle.

- `sentence_encoder`: a MiniLM-style BERT (inputs input_ids, attention_mask, both
  [batch, sequence]): embeddings + LayerNormalization, `layers` encoder layers (multi-head
  self-attention with the additive mask, GELU feed-forward, post-LayerNorm), then mean pooling
  over the unmasked tokens -> [batch, hidden].
- `gpt_decoder`: a GPT-2-style decoder with a KV cache (inputs input_ids [batch, sequence] and
  per layer past_key/past_value [batch, heads, past, head_dim]; outputs logits [batch,
  sequence, vocab] and present_key/present_value [batch, heads, past + sequence, head_dim]):
  positions past .. past + sequence, pre-LayerNorm blocks, causal attention over the cache
  and the new tokens (an empty cache at the first step: past = 0).

Weights are seeded random (scaled by 1/sqrt(fan_in)); `tiny` shrinks widths for smoke tests.
"""

from __future__ import annotations

import numpy as np

from onnxjit.bench.builder import GraphBuilder, TensorProto, helper, make_model, onnx

I64 = TensorProto.INT64


def _i64(b: GraphBuilder, values: list[int], hint: str = "c") -> str:
    return b.const(np.array(values, np.int64), hint)


def _dim(b: GraphBuilder, x: str, axis: int) -> str:
    """Shape(x)[axis] as a 1-D int64 tensor (Shape -> Gather -> Unsqueeze, as exported)."""
    g = b.op("Gather", [b.op("Shape", [x]), b.const(np.array(axis, np.int64), "ax")], axis=0)
    return b.op("Unsqueeze", [g, _i64(b, [0], "zero")])


def _linear(b: GraphBuilder, x: str, a: int, c: int) -> str:
    return b.op("Add", [b.op("MatMul", [x, b.weight((a, c), a)]),
                        b.const((0.02 * b.rng.standard_normal(c)).astype(np.float32), "b")])


def _layer_norm(b: GraphBuilder, x: str, h: int) -> str:
    return b.op("LayerNormalization", [x, b.const(np.ones(h, np.float32), "g"),
                                       b.const(np.zeros(h, np.float32), "be")],
                axis=-1, epsilon=1e-12)


def _gelu(b: GraphBuilder, x: str) -> str:
    e = b.op("Erf", [b.op("Div", [x, b.const(np.float32(1.4142135), "sqrt2")])])
    t = b.op("Mul", [x, b.op("Add", [e, b.const(np.float32(1.0), "one")])])
    return b.op("Mul", [t, b.const(np.float32(0.5), "half")])


def _heads(b: GraphBuilder, x: str, heads: int, dh: int, perm: list[int]) -> str:
    """[B, S, heads*dh] -> Transpose(Reshape(x, [B, S, heads, dh]), perm)."""
    shape = b.op("Concat", [_dim(b, x, 0), _dim(b, x, 1), _i64(b, [heads], "nh"),
                            _i64(b, [dh], "dh")], axis=0)
    return b.op("Transpose", [b.op("Reshape", [x, shape])], perm=perm)


def _merge(b: GraphBuilder, ctx: str, h: int) -> str:
    """[B, heads, S, dh] -> [B, S, heads*dh]."""
    t = b.op("Transpose", [ctx], perm=[0, 2, 1, 3])
    shape = b.op("Concat", [_dim(b, t, 0), _dim(b, t, 1), _i64(b, [h], "hid")], axis=0)
    return b.op("Reshape", [t, shape])


def sentence_encoder(layers: int = 6, hidden: int = 384, heads: int = 12, inter: int = 1536,
                     vocab: int = 1000, max_len: int = 512, seed: int = 11) -> object:
    """The ModelProto of the MiniLM-style encoder (see the module docstring)."""
    b = GraphBuilder(seed)
    dh = hidden // heads
    seq = _dim(b, "input_ids", 1)
    pos_table = b.const(np.arange(max_len, dtype=np.int64)[None, :], "position_ids")
    pos = b.op("Slice", [pos_table, _i64(b, [0], "zero"), seq, _i64(b, [1], "one")])
    emb = b.op("Add", [b.op("Gather", [b.weight((vocab, hidden), 1), "input_ids"], axis=0),
                       b.op("Gather", [b.weight((max_len, hidden), 1), pos], axis=0)])
    x = _layer_norm(b, emb, hidden)
    m = b.op("Cast", [b.op("Unsqueeze", ["attention_mask", _i64(b, [1, 2], "ax12")])],
             to=TensorProto.FLOAT)
    bias = b.op("Mul", [b.op("Sub", [b.const(np.float32(1.0), "one"), m]),
                        b.const(np.float32(-3.4028234663852886e38), "fmin")])
    scale = b.const(np.float32(np.sqrt(dh)), "scale")
    for _ in range(layers):
        q = _heads(b, _linear(b, x, hidden, hidden), heads, dh, [0, 2, 1, 3])
        k = _heads(b, _linear(b, x, hidden, hidden), heads, dh, [0, 2, 3, 1])
        v = _heads(b, _linear(b, x, hidden, hidden), heads, dh, [0, 2, 1, 3])
        scores = b.op("Add", [b.op("Div", [b.op("MatMul", [q, k]), scale]), bias])
        ctx = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
        att = _linear(b, _merge(b, ctx, hidden), hidden, hidden)
        x = _layer_norm(b, b.op("Add", [att, x]), hidden)
        ff = _linear(b, _gelu(b, _linear(b, x, hidden, inter)), inter, hidden)
        x = _layer_norm(b, b.op("Add", [ff, x]), hidden)
    mask = b.op("Cast", [b.op("Expand", [b.op("Unsqueeze", ["attention_mask",
                                                            _i64(b, [-1], "last")]),
                                         b.op("Shape", [x])])], to=TensorProto.FLOAT)
    total = b.op("ReduceSum", [b.op("Mul", [x, mask]), _i64(b, [1], "one")], keepdims=0)
    count = b.op("Clip", [b.op("ReduceSum", [mask, _i64(b, [1], "one")], keepdims=0),
                          b.const(np.float32(1e-9), "eps")])
    out = b.op("Div", [total, count])
    return _finish(b, "sentence_encoder", [("input_ids", I64, ["batch", "sequence"]),
                                           ("attention_mask", I64, ["batch", "sequence"])],
                   [(out, TensorProto.FLOAT, ["batch", hidden])])


def gpt_decoder(layers: int = 2, hidden: int = 256, heads: int = 4, vocab: int = 2000,
                max_len: int = 1024, seed: int = 13) -> object:
    """The ModelProto of the GPT-2-style decoder with a KV cache (see the module docstring)."""
    b = GraphBuilder(seed)
    dh = hidden // heads
    cache = ["batch", heads, "past", dh]
    inputs = [("input_ids", I64, ["batch", "sequence"])]
    outputs = []
    past = b.op("Gather", [b.op("Shape", ["past_key_0"]), b.const(np.array(2, np.int64), "ax")],
                axis=0)
    seq = b.op("Gather", [b.op("Shape", ["input_ids"]), b.const(np.array(1, np.int64), "ax")],
               axis=0)
    total = b.op("Add", [past, seq])
    pos = b.op("Unsqueeze", [b.op("Range", [past, total, b.const(np.array(1, np.int64), "d")]),
                             _i64(b, [0], "zero")])
    x = b.op("Add", [b.op("Gather", [b.weight((vocab, hidden), 1), "input_ids"], axis=0),
                     b.op("Gather", [b.weight((max_len, hidden), 1), pos], axis=0)])
    tri = b.const(np.tril(np.ones((max_len, max_len), bool))[None, None], "causal")
    unsq = [b.op("Unsqueeze", [t, _i64(b, [0], "zero")]) for t in (past, total)]
    rows = b.op("Slice", [tri, unsq[0], unsq[1], _i64(b, [2], "ax2")])
    causal = b.op("Slice", [rows, _i64(b, [0], "zero"), unsq[1], _i64(b, [3], "ax3")])
    neg = b.const(np.float32(-3.4028234663852886e38), "fmin")
    scale = b.const(np.float32(np.sqrt(dh)), "scale")
    for i in range(layers):
        inputs += [(f"past_key_{i}", TensorProto.FLOAT, cache),
                   (f"past_value_{i}", TensorProto.FLOAT, cache)]
        y = _layer_norm(b, x, hidden)
        q = _heads(b, _linear(b, y, hidden, hidden), heads, dh, [0, 2, 1, 3])
        k = b.op("Concat", [f"past_key_{i}",
                            _heads(b, _linear(b, y, hidden, hidden), heads, dh, [0, 2, 1, 3])],
                 axis=2)
        v = b.op("Concat", [f"past_value_{i}",
                            _heads(b, _linear(b, y, hidden, hidden), heads, dh, [0, 2, 1, 3])],
                 axis=2)
        outputs += [(k, TensorProto.FLOAT, ["batch", heads, "total", dh]),
                    (v, TensorProto.FLOAT, ["batch", heads, "total", dh])]
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        scores = b.op("Where", [causal, b.op("Div", [b.op("MatMul", [q, kt]), scale]), neg])
        ctx = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
        x = b.op("Add", [x, _linear(b, _merge(b, ctx, hidden), hidden, hidden)])
        ff = _linear(b, _gelu(b, _linear(b, _layer_norm(b, x, hidden), hidden, 4 * hidden)),
                     4 * hidden, hidden)
        x = b.op("Add", [x, ff])
    logits = b.op("MatMul", [_layer_norm(b, x, hidden), b.weight((hidden, vocab), hidden)])
    return _finish(b, "gpt_decoder", inputs,
                   [(logits, TensorProto.FLOAT, ["batch", "sequence", vocab])] + outputs)


def _finish(b: GraphBuilder, name: str, inputs: list, outputs: list) -> object:
    g = helper.make_graph(
        b.nodes, name, [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(o, t, s) for o, t, s in outputs], b.inits)
    model = make_model(g)
    onnx.checker.check_model(model)
    return model


def decoder_feeds(model: object, batch: int, past: int, seq: int, vocab: int = 2000,
                  seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of `gpt_decoder` for a cache of `past` tokens and `seq` new ones."""
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64)}
    for vi in model.graph.input[1:]:  # type: ignore[attr-defined]
        d = vi.type.tensor_type.shape.dim
        feeds[vi.name] = (0.5 * rng.standard_normal(
            (batch, d[1].dim_value, past, d[3].dim_value))).astype(np.float32)
    return feeds
