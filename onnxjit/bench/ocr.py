"""OCR-shaped convolutional models whose input height and width vary, for the shape streams.

Built the way PaddleOCR's PP-OCR models are put together (no downloads, seeded weights, see
`builder.GraphBuilder`), with batch, height and width left symbolic as their exports do:

- `text_recognizer`: a text line of 3 x 48 x W. A PP-LCNet-like backbone of depthwise-separable
  blocks (3x3 depthwise + BN + HardSwish, 1x1 pointwise + BN + HardSwish) halves the width once
  and the height four times (strides (2, 1) keep the width: one feature column per 4 pixels),
  an average pool folds the last 3 rows, then the columns become a sequence (Squeeze, Transpose)
  for a CTC head: two MatMuls over the characters (6625 classes, PP-OCR's Chinese dictionary)
  and a Softmax. Output: batch x W/4 x 6625.
- `text_detector`: a page of 3 x H x W (multiples of 32). The same kind of backbone down to
  1/32, an FPN (1x1 convolutions to 96 channels, nearest x2 Resizes added top-down, each level
  brought to 1/4 by a Resize and concatenated) and a DB head: 3x3 convolution, two stride-2
  ConvTransposes back to full size, Sigmoid. Output: batch x 1 x H x W (a probability map).
"""

from __future__ import annotations

import numpy as np

from onnxjit.bench.builder import GraphBuilder, TensorProto

CLASSES = 6625


def _conv(b: GraphBuilder, x: str, cin: int, cout: int, k: int, stride: tuple[int, int],
          group: int = 1) -> str:
    w = b.weight((cout, cin // group, k, k), cin // group * k * k)
    y = b.op("Conv", [x, w], kernel_shape=[k, k], strides=list(stride), pads=[k // 2] * 4,
             group=group)
    return b.op("HardSwish", [b.bn(y, cout)])


def _separable(b: GraphBuilder, x: str, cin: int, cout: int, stride: tuple[int, int]) -> str:
    return _conv(b, _conv(b, x, cin, cin, 3, stride, group=cin), cin, cout, 1, (1, 1))


def _backbone(b: GraphBuilder, x: str, plan: list[tuple[int, tuple[int, int]]]
              ) -> tuple[str, int, list[tuple[str, int]]]:
    """Stem, then one separable block per (channels, stride); returns the last feature, its
    channels and the feature before every stride of 2 in width (the FPN's taps)."""
    y, c = _conv(b, x, 3, 16, 3, (2, 2)), 16
    taps = []
    for cout, stride in plan:
        if stride[1] == 2:
            taps.append((y, c))
        y, c = _separable(b, y, c, cout, stride), cout
    return y, c, taps


def text_recognizer(tiny: bool = False) -> object:
    b = GraphBuilder(seed=21)
    wide = [(32, (1, 1)), (64, (2, 1)), (64, (1, 1)), (128, (2, 1)), (128, (1, 1)),
            (256, (2, 1)), (256, (1, 1))]
    plan = wide[:4] + [(64, (2, 1))] if tiny else wide
    y, c, _ = _backbone(b, "x", plan)
    y = b.op("AveragePool", [y], kernel_shape=[3, 2], strides=[3, 2])  # 1 x W/4
    seq = b.op("Transpose", [b.op("Squeeze", [y, b.const(np.array([2], np.int64), "ax")])],
               perm=[0, 2, 1])
    hid = 64 if tiny else 256
    h = b.op("HardSwish", [b.op("Add", [b.op("MatMul", [seq, b.weight((c, hid), c)]),
                                        b.const(np.zeros(hid, np.float32), "b")])])
    classes = 97 if tiny else CLASSES
    logits = b.op("Add", [b.op("MatMul", [h, b.weight((hid, classes), hid)]),
                          b.const(np.zeros(classes, np.float32), "b")])
    probs = b.op("Softmax", [logits], axis=2)
    return b.model("text_recognizer", [("x", TensorProto.FLOAT, ["batch", 3, 48, "width"])],
                   probs)


def _resize(b: GraphBuilder, x: str, scale: int) -> str:
    scales = b.const(np.array([1, 1, scale, scale], np.float32), "sc")
    return b.op("Resize", [x, "", scales], mode="nearest")


def text_detector(tiny: bool = False) -> object:
    b = GraphBuilder(seed=22)
    plan = [(32, (1, 1)), (64, (2, 2)), (64, (1, 1)), (128, (2, 2)), (128, (1, 1)),
            (256, (2, 2)), (256, (1, 1)), (512, (2, 2)), (512, (1, 1))]
    if tiny:
        plan = [(16, (1, 1)), (16, (2, 2)), (32, (2, 2)), (32, (2, 2)), (64, (2, 2))]
    y, c, taps = _backbone(b, "x", plan)
    levels = [t for t, _ in taps[1:]] + [y]  # 1/4, 1/8, 1/16, 1/32
    chans = [ch for _, ch in taps[1:]] + [c]
    f = 24 if tiny else 96

    def lateral(x: str, cin: int) -> str:
        return b.op("Conv", [x, b.weight((f, cin, 1, 1), cin)], kernel_shape=[1, 1])

    top = lateral(levels[-1], chans[-1])
    merged = [top]
    for x, cin in zip(reversed(levels[:-1]), reversed(chans[:-1])):
        top = b.op("Add", [lateral(x, cin), _resize(b, top, 2)])
        merged.append(top)
    outs = []
    for k, m in enumerate(reversed(merged)):  # 1/4 first
        z = b.op("Conv", [m, b.weight((f // 4, f, 3, 3), f * 9)], kernel_shape=[3, 3],
                 pads=[1] * 4)
        outs.append(_resize(b, z, 2 ** k) if k else z)
    fuse = b.op("Concat", outs, axis=1)
    q = f // 4
    h = b.op("Relu", [b.bn(b.op("Conv", [fuse, b.weight((q, f, 3, 3), f * 9)],
                                kernel_shape=[3, 3], pads=[1] * 4), q)])
    h = b.op("Relu", [b.bn(b.op("ConvTranspose", [h, b.weight((q, q, 2, 2), q * 4)],
                                kernel_shape=[2, 2], strides=[2, 2]), q)])
    h = b.op("ConvTranspose", [h, b.weight((q, 1, 2, 2), q * 4)], kernel_shape=[2, 2],
             strides=[2, 2])
    prob = b.op("Sigmoid", [h])
    return b.model("text_detector", [("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
                   prob)
