"""Attention and its relatives.

    attention      Attention (opsets 23-25): masks, GQA, KV cache; shapes and lowering
    reference      Attention's numpy semantics (constant folding)
    narrow_floats  Attention on float16/bfloat16 in the ONNX reference's rounding order
    flex           FlexAttention (ai.onnx.preview), with score/prob subgraphs, on the host
    linear         LinearAttention: recurrent linear attention with a per-head state
    rotary         RotaryEmbedding
"""
