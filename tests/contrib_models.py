"""Small float models laid out as exporters write them, for onnxruntime's own tools to fuse or
quantize into contrib ops inside the tests (tests/test_contrib_ops.py): a BERT encoder (as
PyTorch exports BertModel), GPT-2 MLP blocks (tanh Gelu), an MLP, an LSTM, and a graph with the
patterns onnxruntime's level-2 optimizer fuses (FusedMatMul, FusedConv, BiasGelu, QuickGelu), and a
small CNN for the static quantizer.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper


class _Builder:
    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.inits: list = []
        self.nodes: list = []

    def w(self, name: str, *shape: int, scale: float = 0.1) -> str:
        arr = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def c(self, name: str, value: object, dtype: object = np.float32) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def n(self, op: str, inputs: list, **attrs: object) -> str:
        out = f"{op}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def layer_norm(self, x: str, p: str, width: int, eps: float) -> str:
        return self.n("LayerNormalization", [x, self.w(p + "g", width, scale=1.0),
                                             self.w(p + "b", width)], axis=-1, epsilon=eps)

    def linear(self, x: str, p: str, i: int, o: int) -> str:
        return self.n("Add", [self.n("MatMul", [x, self.w(p + "w", i, o)]), self.w(p + "b", o)])

    def model(self, name: str, inputs: list, out: str, out_info: object,
              opset: int = 17) -> onnx.ModelProto:
        self.nodes.append(helper.make_node("Identity", [out], [out_info.name]))
        g = helper.make_graph(self.nodes, name, inputs, [out_info], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return m


def bert(hidden: int = 32, heads: int = 4, seq: int = 8, layers: int = 1) -> onnx.ModelProto:
    """Embeddings, attention with the exported additive mask, erf Gelu, post-LayerNorms."""
    b = _Builder(0)
    d = hidden // heads
    emb = b.n("Add", [b.n("Gather", [b.w("word", 50, hidden), "input_ids"]),
                      b.n("Gather", [b.w("pos", seq, hidden),
                                     b.c("pos_ids", np.arange(seq)[None], np.int64)])])
    emb = b.n("Add", [emb, b.n("Gather", [b.w("type", 2, hidden), "token_type_ids"])])
    x = b.layer_norm(emb, "emb_ln", hidden, 1e-12)
    m = b.n("Unsqueeze", ["attention_mask", b.c("ax1", [1], np.int64)])
    m = b.n("Cast", [b.n("Unsqueeze", [m, b.c("ax2", [2], np.int64)])], to=T.FLOAT)
    mask = b.n("Mul", [b.n("Sub", [b.c("one", 1.0), m]), b.c("neg", -10000.0)])
    shape4 = b.c("shape4", [0, 0, heads, d], np.int64)
    shape3 = b.c("shape3", [0, 0, hidden], np.int64)
    for k in range(layers):
        p = f"l{k}"

        def heads_of(name: str, perm: list, p: str = p, x: str = x) -> str:
            r = b.n("Reshape", [b.linear(x, p + name, hidden, hidden), shape4])
            return b.n("Transpose", [r], perm=perm)

        q, kt, v = heads_of("q", [0, 2, 1, 3]), heads_of("k", [0, 2, 3, 1]), \
            heads_of("v", [0, 2, 1, 3])
        s = b.n("Div", [b.n("MatMul", [q, kt]), b.c(p + "sqrt_d", np.sqrt(d))])
        probs = b.n("Softmax", [b.n("Add", [s, mask])], axis=-1)
        ctx = b.n("Transpose", [b.n("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = b.linear(b.n("Reshape", [ctx, shape3]), p + "o", hidden, hidden)
        x = b.layer_norm(b.n("Add", [ctx, x]), p + "ln1", hidden, 1e-12)
        h = b.linear(x, p + "i", hidden, 4 * hidden)
        erf = b.n("Erf", [b.n("Div", [h, b.c(p + "sqrt2", np.sqrt(2.0))])])
        h = b.n("Mul", [b.n("Mul", [h, b.n("Add", [erf, b.c(p + "one", 1.0)])]),
                        b.c(p + "half", 0.5)])
        x = b.layer_norm(b.n("Add", [b.linear(h, p + "out", 4 * hidden, hidden), x]),
                         p + "ln2", hidden, 1e-12)
    ins = [helper.make_tensor_value_info(n, T.INT64, ["batch", seq])
           for n in ("input_ids", "token_type_ids", "attention_mask")]
    return b.model("bert", ins, x, helper.make_tensor_value_info("hidden", T.FLOAT,
                                                                 ["batch", seq, hidden]))


def gpt2_mlp(hidden: int = 32, seq: int = 8, layers: int = 2) -> onnx.ModelProto:
    """GPT-2's pre-LayerNorm MLP blocks with the tanh Gelu, residual adds, a final LayerNorm."""
    b = _Builder(1)
    x = "x"
    for k in range(layers):
        p = f"l{k}"
        h = b.linear(b.layer_norm(x, p + "ln", hidden, 1e-5), p + "fc", hidden, 4 * hidden)
        cube = b.n("Mul", [b.n("Pow", [h, b.c(p + "three", 3.0)]), b.c(p + "k", 0.044715)])
        t = b.n("Tanh", [b.n("Mul", [b.n("Add", [h, cube]), b.c(p + "s", np.sqrt(2 / np.pi))])])
        h = b.n("Mul", [b.n("Mul", [h, b.c(p + "half", 0.5)]),
                        b.n("Add", [t, b.c(p + "one", 1.0)])])
        x = b.n("Add", [x, b.linear(h, p + "proj", 4 * hidden, hidden)])
    x = b.layer_norm(x, "lnf", hidden, 1e-5)
    return b.model("gpt2", [helper.make_tensor_value_info("x", T.FLOAT, ["batch", seq, hidden])],
                   x, helper.make_tensor_value_info("y", T.FLOAT, ["batch", seq, hidden]))


def mlp(k: int = 64, hidden: int = 128, n: int = 32) -> onnx.ModelProto:
    b = _Builder(2)
    h = b.n("Relu", [b.linear("x", "fc1", k, hidden)])
    y = b.n("MatMul", [h, b.w("fc2w", hidden, n)])
    return b.model("mlp", [helper.make_tensor_value_info("x", T.FLOAT, ["batch", k])], y,
                   helper.make_tensor_value_info("y", T.FLOAT, ["batch", n]))


def lstm(hidden: int = 16, inp: int = 8, seq: int = 5, direction: str = "forward",
         lens: bool = False) -> onnx.ModelProto:
    """An LSTM; with `lens`, a sequence_lens input "lens" (int32 [batch])."""
    b = _Builder(3)
    dirs = 2 if direction == "bidirectional" else 1
    ins = ["x", b.w("W", dirs, 4 * hidden, inp, scale=0.3),
           b.w("R", dirs, 4 * hidden, hidden, scale=0.3), b.w("B", dirs, 8 * hidden)]
    node = helper.make_node("LSTM", ins + (["lens"] if lens else []), ["Y", "Y_h", "Y_c"],
                            hidden_size=hidden, direction=direction)
    inputs = [helper.make_tensor_value_info("x", T.FLOAT, [seq, "batch", inp])]
    if lens:
        inputs.append(helper.make_tensor_value_info("lens", T.INT32, ["batch"]))
    g = helper.make_graph([node], "lstm", inputs,
                          [helper.make_tensor_value_info(n, T.FLOAT, None)
                           for n in ("Y", "Y_h", "Y_c")], b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return m


def level2_patterns() -> onnx.ModelProto:
    """Conv + Relu, a transposed and scaled MatMul, erf Gelu after a bias, x * sigmoid(1.702x):
    onnxruntime's extended optimizer makes FusedConv, FusedMatMul, BiasGelu and QuickGelu."""
    b = _Builder(4)
    c = b.n("Conv", ["img", b.w("cw", 4, 3, 3, 3, scale=0.3), b.w("cb", 4)], pads=[1, 1, 1, 1])
    c = b.n("Relu", [c])
    m = b.n("MatMul", [b.n("Transpose", ["x"], perm=[0, 2, 1]), b.w("mw", 8, 16, scale=0.3)])
    a = b.n("Add", [b.n("Mul", [m, b.c("alpha", 0.5)]), b.w("mb", 16, scale=1.0)])
    erf = b.n("Erf", [b.n("Div", [a, b.c("sqrt2", np.sqrt(2.0))])])
    g = b.n("Mul", [b.n("Mul", [a, b.n("Add", [erf, b.c("one", 1.0)])]), b.c("half", 0.5)])
    y = b.n("Mul", [g, b.n("Sigmoid", [b.n("Mul", [g, b.c("qa", 1.702)])])])
    b.nodes.append(helper.make_node("Identity", [c], ["conv"]))
    inputs = [helper.make_tensor_value_info("x", T.FLOAT, [2, 8, 5]),
              helper.make_tensor_value_info("img", T.FLOAT, [1, 3, 6, 6])]
    m = b.model("patterns", inputs, y, helper.make_tensor_value_info("y", T.FLOAT, None))
    m.graph.output.append(helper.make_tensor_value_info("conv", T.FLOAT, None))
    return m


def cnn() -> onnx.ModelProto:
    """Conv, Relu, a residual Add, SiLU (Sigmoid * x), MaxPool, GlobalAveragePool, Gemm,
    Softmax: a static quantizer's QOperator output uses most of the QLinear contrib ops."""
    b = _Builder(5)
    r = b.n("Relu", [b.n("Conv", ["x", b.w("cw", 8, 3, 3, 3, scale=0.3), b.w("cb", 8)],
                         pads=[1, 1, 1, 1])])
    s = b.n("Add", [b.n("Conv", [r, b.w("cw2", 8, 8, 3, 3, scale=0.2)], pads=[1, 1, 1, 1]), r])
    s = b.n("Mul", [s, b.n("Sigmoid", [s])])
    p = b.n("GlobalAveragePool", [b.n("MaxPool", [s], kernel_shape=[2, 2], strides=[2, 2])])
    y = b.n("Softmax", [b.n("Gemm", [b.n("Flatten", [p]), b.w("fw", 8, 10, scale=0.3),
                                     b.w("fb", 10)])])
    return b.model("cnn", [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, 16, 16])], y,
                   helper.make_tensor_value_info("y", T.FLOAT, [1, 10]))
