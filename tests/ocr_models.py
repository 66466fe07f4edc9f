"""OCR-shaped models built in code (random weights) with symbolic batch, height and width.

`crnn`: a CRNN recognizer (conv stack with BatchNormalization, 2x2 then (2,1) max pools,
a 2x2 valid conv to height 1, Squeeze and Transpose to a (T, N, C) sequence, then a
bidirectional LSTM or two MatMuls, Softmax over the classes); input (N, 1, 32, W).
`db_detector`: a DB-style text detector (three strided convs, nearest and linear x2 Resize
back up with Concat skips, a conv head with BatchNormalization, two ConvTransposes, Sigmoid);
input (N, 3, H, W), H and W multiples of 8 (the skips' Concat needs equal sizes).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


class _Graph:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: dict = {}

    def w(self, *shape: int, scale: float = 1.0) -> str:
        fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        v = (self.rng.standard_normal(shape) * scale / np.sqrt(fan)).astype(np.float32)
        return self.const(v)

    def const(self, v: np.ndarray) -> str:
        name = f"c{len(self.inits)}"
        self.inits[name] = np.asarray(v)
        return name

    def node(self, op: str, ins: list, **attrs) -> str:
        out = f"{op.lower()}{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int = 3, s: int = 1, pad: int | None = None,
             bn: bool = False) -> str:
        p = k // 2 if pad is None else pad
        y = self.node("Conv", [x, self.w(cout, cin, k, k), self.w(cout, scale=0.1)],
                      strides=[s, s], pads=[p] * 4)
        if bn:
            y = self.node("BatchNormalization", [
                y, self.const(1 + 0.1 * self.rng.standard_normal(cout).astype(np.float32)),
                self.w(cout, scale=0.1), self.w(cout, scale=0.1),
                self.const((1 + np.abs(self.rng.standard_normal(cout))).astype(np.float32))])
        return self.node("Relu", [y])

    def model(self, x_dims: list, out: str, rank: int):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)
        y = helper.make_tensor_value_info(out, TensorProto.FLOAT, [None] * rank)
        g = helper.make_graph(self.nodes, "g", [x], [y],
                              [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m


def crnn(classes: int = 11, lstm: bool = False, seed: int = 0):
    """The CRNN of the module docstring; output (T, N, classes), T = W/4 - 1."""
    g = _Graph(seed)
    x = g.conv("x", 1, 8)
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.conv(x, 8, 16)
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.conv(g.conv(x, 16, 24, bn=True), 24, 24)
    x = g.node("MaxPool", [x], kernel_shape=[2, 1], strides=[2, 1])
    x = g.conv(x, 24, 24, bn=True)
    x = g.node("MaxPool", [x], kernel_shape=[2, 1], strides=[2, 1])
    x = g.conv(x, 24, 24, k=2, pad=0)
    x = g.node("Squeeze", [x, g.const(np.array([2], np.int64))])
    x = g.node("Transpose", [x], perm=[2, 0, 1])
    if lstm:
        h = 8
        x = g.node("LSTM", [x, g.w(2, 4 * h, 24), g.w(2, 4 * h, h), g.w(2, 8 * h, scale=0.1)],
                   hidden_size=h, direction="bidirectional")
        x = g.node("Reshape", [g.node("Transpose", [x], perm=[0, 2, 1, 3]),
                               g.const(np.array([0, 0, -1], np.int64))])
        feat = 2 * h
    else:
        x = g.node("Relu", [g.node("Add", [g.node("MatMul", [x, g.w(24, 16)]),
                                           g.w(16, scale=0.1)])])
        feat = 16
    x = g.node("Add", [g.node("MatMul", [x, g.w(feat, classes)]), g.w(classes, scale=0.1)])
    return g.model(["N", 1, 32, "W"], g.node("Softmax", [x], axis=2), 3)


def db_detector(seed: int = 0):
    """The DB-style detector of the module docstring; output (N, 1, H, W)."""
    g = _Graph(seed)
    c1 = g.conv("x", 3, 8, s=2)
    c2 = g.conv(c1, 8, 12, s=2)
    c3 = g.conv(c2, 12, 16, s=2)
    two = g.const(np.array([1, 1, 2, 2], np.float32))
    up3 = g.node("Resize", [c3, "", two], mode="nearest")
    p2 = g.conv(g.node("Concat", [up3, c2], axis=1), 28, 12)
    up2 = g.node("Resize", [p2, "", two], mode="linear")
    p1 = g.conv(g.node("Concat", [up2, c1], axis=1), 20, 8, bn=True)
    h = g.node("ConvTranspose", [p1, g.w(8, 8, 2, 2), g.w(8, scale=0.1)], strides=[2, 2])
    h = g.node("ConvTranspose", [g.node("Relu", [h]), g.w(8, 1, 3, 3)], pads=[1, 1, 1, 1])
    return g.model(["N", 3, "H", "W"], g.node("Sigmoid", [h]), 4)
