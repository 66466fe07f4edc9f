"""sink-reshape: a Squeeze/Reshape dropping unit dims between a Conv/MatMul and its
elementwise tail moves below the tail, which then fuses as the producer's epilogue; checked
against onnxruntime (loop IR and native) with test_graph_opt's builder."""

from __future__ import annotations

import numpy as np
from test_graph_opt import G, _rand, check

from onnxjit.passes.sink_reshape import unit_drop

F = np.float32


def test_unit_drop_maps_kept_axes():
    assert unit_drop((1, 8, 1, 32), (1, 8, 32)) == [0, 1, 3]
    assert unit_drop((1, 8, 1, 32), (8, 32)) == [1, 3]
    assert unit_drop((1, 1), (1,)) == [0]
    assert unit_drop((2, 3), (6,)) is None  # merges dims: not a unit drop
    assert unit_drop((1, 8, 32), (1, 8, 32)) is None
    assert unit_drop((1, 3, 2), (1, 2, 3)) is None


def test_conv1d_squeeze_bias_gelu_fuses():
    # tf2onnx's Conv1d: Unsqueeze -> Conv (2-D) -> Squeeze -> Add (bias) -> Gelu
    g = G()
    u = g.node("Unsqueeze", ["x", g.init(np.array([2], np.int64))])
    c = g.node("Conv", [u, g.init(_rand(8, 4, 1, 3, scale=0.3))], pads=[0, 1, 0, 1])
    s = g.node("Squeeze", [c, g.init(np.array([2], np.int64))])
    a = g.node("Add", [s, g.init(_rand(8, 1))])
    g.node("Gelu", [a], "y")
    text, _, nk = check(g.model({"x": (1, 4, 32)}, ["y"], opset=20), [_rand(1, 4, 32)])
    # the conv, then the copy into the graph output the (aliasing) Reshape leaves
    assert "Conv+Add+Gelu" in text and nk == 2


def test_matmul_reshape_tail_with_runtime_extra_fuses():
    # the residual r is not a constant: it gets a Reshape of its own to the product's rank
    g = G()
    m = g.node("MatMul", ["x", g.init(_rand(16, 8, scale=0.3))])
    s = g.node("Reshape", [m, g.init(np.array([8], np.int64))])
    a = g.node("Add", [g.node("Add", [s, g.init(_rand(8))]), "r"])
    g.node("Relu", [a], "y")
    text, _, _ = check(g.model({"x": (1, 16), "r": (8,)}, ["y"]), [_rand(1, 16), _rand(8)])
    assert "MatMul+Add+Add+Relu" in text


def test_squeeze_kept_when_product_has_another_reader():
    g = G()
    c = g.node("Conv", ["x", g.init(_rand(4, 3, 1, 1))], "c")
    s = g.node("Squeeze", [c, g.init(np.array([0], np.int64))])
    g.node("Relu", [s], "y")
    text, _, _ = check(g.model({"x": (1, 3, 5, 5)}, ["y", "c"]), [_rand(1, 3, 5, 5)])
    assert "Squeeze" in text and "Conv+Relu" not in text
