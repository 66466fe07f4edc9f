"""The benchmark registry and its small models, built in code (no downloads).

`registry()` maps each benchmark's name to its builder, in the report's order. Each builder
takes `tiny` (a few-element version of the same graph, for the smoke test) and returns a
`BenchModel` (`builder`): the ModelProto, the feeds, a one-line note, the model's FLOP count
where a GFLOP/s figure means something, and the thread count when a benchmark pins it (the
single-thread GEMM). The small models (MLPs, GEMMs, one Add, an elementwise chain, single
convs, LSTMs, a magika-like bytes classifier) are here; the larger networks (BERT-tiny,
MobileNetV2-like, ResNet-like) are in `networks`, the 8-bit ones in `quantized`. The `light`
models of the ONNX backend data are loaded from the installed onnx package as they are (their
weights come from ConstantOfShape).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable

import numpy as np

from onnxjit.bench import networks, quantized, trees

# onnx through `builder`, whose import says what to install when the test extra is missing
from onnxjit.bench.builder import BenchModel, GraphBuilder, TensorProto, helper, onnx, randn


def mlp(batch: int, tiny: bool = False, sizes: tuple[int, ...] = (784, 512, 512, 10),
        act: str = "Relu") -> BenchModel:
    b = GraphBuilder()
    x, flops = "x", 0.0
    for k, (a, c) in enumerate(zip(sizes[:-1], sizes[1:])):
        x = b.op("Add", [b.op("MatMul", [x, b.weight((a, c), a)]),
                         b.const(np.zeros(c, np.float32), "b")])
        flops += 2.0 * batch * a * c
        if k < len(sizes) - 2:
            x = b.op(act, [x])
    m = b.model("mlp", [("x", TensorProto.FLOAT, ["N", sizes[0]])], x)
    shape = "-".join(map(str, sizes))
    return BenchModel(f"mlp_b{batch}", m, {"x": randn((batch, sizes[0]))},
                      f"MLP {shape}{'' if act == 'Relu' else ' ' + act}, batch {batch}", flops)


def gemm(m_: int, k: int, n: int, threads: int | None = None, tiny: bool = False
         ) -> BenchModel:
    if tiny:
        m_, k, n = min(m_, 8), min(k, 16), min(n, 16)
    b = GraphBuilder()
    y = b.op("MatMul", ["a", b.weight((k, n), k)])
    model = b.model("gemm", [("a", TensorProto.FLOAT, [m_, k])], y)
    where = "one thread both engines, " if threads == 1 else ""
    return BenchModel(f"gemm_{m_}x{k}x{n}", model, {"a": randn((m_, k))},
                      f"MatMul {m_}x{k} @ {k}x{n}, {where}constant B", 2.0 * m_ * k * n, threads)


def add4(tiny: bool = False) -> BenchModel:
    """Call overhead: one Add on 4 floats (the work is nothing; the time is the call)."""
    b = GraphBuilder()
    y = b.op("Add", ["a", "b"])
    model = b.model("add4", [("a", TensorProto.FLOAT, [4]), ("b", TensorProto.FLOAT, [4])], y)
    return BenchModel("add4", model, {"a": randn((4,)), "b": randn((4,), 2)},
                      "call overhead: one Add on 4 floats")


def chain(tiny: bool = False) -> BenchModel:
    n = 4096 if tiny else 4 * 1024 * 1024
    b = GraphBuilder()
    t = b.op("Add", [b.op("Mul", ["x", b.const(np.float32(0.5), "s")]),
                     b.const(np.float32(0.1), "b")])
    t = b.op("Sigmoid", [b.op("Erf", [b.op("Tanh", [t])])])
    y = b.op("Mul", [t, "x"])
    model = b.model("chain", [("x", TensorProto.FLOAT, [n])], y)
    return BenchModel("elementwise_chain_4M", model, {"x": randn((n,))},
                      f"Mul, Add, Tanh, Erf, Sigmoid, Mul over {n} floats")


def conv(name: str, cin: int, cout: int, k: int, hw: int, group: int = 1, tiny: bool = False
         ) -> BenchModel:
    if tiny:
        hw = 6
    b = GraphBuilder()
    y = b.conv("x", cin, cout, k, group=group)
    model = b.model(name, [("x", TensorProto.FLOAT, [1, cin, hw, hw])], y)
    flops = 2.0 * cout * (cin // group) * k * k * hw * hw
    kind = "depthwise " if group > 1 else ""
    return BenchModel(name, model, {"x": randn((1, cin, hw, hw))},
                      f"{kind}Conv {k}x{k} {cin}->{cout} at {hw}x{hw}, pad {k // 2}", flops)


def conv1d(name: str, batch: int, length: int, tiny: bool = False) -> BenchModel:
    """An audio front end computing a spectrogram as a convolution: 1 input channel, 257
    outputs, a 512-tap kernel at stride 160 (`conv.strided_windows`)."""
    if tiny:
        length = 512 + 160 * 3
    b = GraphBuilder()
    w = b.weight((257, 1, 512), 512)
    y = b.op("Conv", ["x", w, b.const(np.zeros(257, np.float32), "b")], kernel_shape=[512],
             strides=[160])
    model = b.model(name, [("x", TensorProto.FLOAT, [batch, 1, length])], y)
    p = (length - 512) // 160 + 1
    return BenchModel(name, model, {"x": randn((batch, 1, length))},
                      f"Conv1d 1->257, 512 taps, stride 160, {batch}x{length} samples",
                      2.0 * batch * 257 * 512 * p)


def bytes_classifier(batch: int, tiny: bool = False) -> BenchModel:
    """magika's shape (a file-type classifier over 2048 bytes): jax's one-hot of the bytes
    (Equal with 0..256, Cast) times a 257x64 embedding, regrouped into 512 positions of 256,
    a 5-tap 256->512 1-D conv, Relu, a global max pool (`onehot-gather`, the conv's form)."""
    n, pos, ch = (64, 16, 16) if tiny else (2048, 512, 512)
    b = GraphBuilder()
    x = b.op("Unsqueeze", ["x", b.const(np.array([2], np.int64))])
    hot = b.op("Cast", [b.op("Equal", [x, b.const(np.arange(257, dtype=np.int32)
                                                  .reshape(1, 1, 257))])], to=TensorProto.FLOAT)
    e = b.op("MatMul", [hot, b.weight((257, 64), 1)])
    e = b.op("Reshape", [e, b.const(np.array([batch, pos, n * 64 // pos], np.int64))])
    e = b.op("Transpose", [e], perm=[0, 2, 1])
    y = b.op("Relu", [b.op("Conv", [e, b.weight((ch, n * 64 // pos, 5), 5 * n * 64 // pos)],
                           kernel_shape=[5])])
    y = b.op("GlobalMaxPool", [y])
    model = b.model(f"bytes_classifier_b{batch}", [("x", TensorProto.INT32, [batch, n])], y)
    feeds = {"x": np.random.default_rng(2).integers(0, 257, (batch, n)).astype(np.int32)}
    flops = 2.0 * batch * ch * (n * 64 // pos) * 5 * (pos - 4)
    return BenchModel(f"bytes_classifier_b{batch}", model, feeds,
                      f"magika-like: one-hot bytes @ 257x64, 5-tap conv 256->512, batch {batch}",
                      flops)


def nbits(m_: int, k: int, n: int, tiny: bool = False) -> BenchModel:
    """MatMulNBits (com.microsoft) as onnxruntime's 4-bit quantizer writes it: A [m, K] by
    4-bit weights in blocks of 32 along K, a float scale and a 4-bit zero point a block."""
    if tiny:
        m_, k, n = min(m_, 2), 64, 48
    rng, blocks = np.random.default_rng(3), k // 32
    q = rng.integers(0, 16, (n, blocks, 32), dtype=np.uint8)
    zp = rng.integers(6, 10, (n, blocks), dtype=np.uint8)
    zp = np.pad(zp, ((0, 0), (0, blocks % 2)))
    inits = [helper.make_tensor("B", TensorProto.UINT8, (n, blocks, 16),
                                (q[..., 0::2] | (q[..., 1::2] << 4)).tobytes(), raw=True),
             helper.make_tensor("scales", TensorProto.FLOAT, (n * blocks,),
                                (rng.random(n * blocks) * 0.02 + 0.01).astype(np.float32)),
             helper.make_tensor("zp", TensorProto.UINT8, (zp.size // 2,),
                                (zp[:, 0::2] | (zp[:, 1::2] << 4)).tobytes(), raw=True)]
    node = helper.make_node("MatMulNBits", ["a", "B", "scales", "zp"], ["y"],
                            domain="com.microsoft", K=k, N=n, bits=4, block_size=32)
    g = helper.make_graph([node], "nbits", [helper.make_tensor_value_info(
        "a", TensorProto.FLOAT, ["M", k])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["M", n])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return BenchModel(f"nbits_{m_}x{k}x{n}", model, {"a": randn((m_, k))},
                      f"MatMulNBits 4-bit, block 32: {m_}x{k} @ {k}x{n}", 2.0 * m_ * k * n)


def lstm(tiny: bool = False, dims: tuple[int, int, int, int] = (64, 8, 128, 256)
         ) -> BenchModel:
    seq, batch, inp, hid = (4, 2, 8, 16) if tiny else dims
    b = GraphBuilder()
    w = b.weight((1, 4 * hid, inp), inp)
    r = b.weight((1, 4 * hid, hid), hid)
    bias = b.const((0.1 * b.rng.standard_normal((1, 8 * hid))).astype(np.float32), "b")
    y, yh = b.op("LSTM", ["x", w, r, bias], n_out=2, hidden_size=hid)
    model = b.model("lstm", [("x", TensorProto.FLOAT, [seq, batch, inp])], [y, yh])
    flops = 2.0 * seq * batch * 4 * hid * (inp + hid)
    return BenchModel("lstm", model, {"x": randn((seq, batch, inp))},
                      f"LSTM seq {seq}, batch {batch}, input {inp}, hidden {hid}", flops)


LIGHT_NAMES = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
               "shufflenet", "squeezenet", "vgg19", "zfnet512")


def light_dir() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light(name: str, tiny: bool = False) -> BenchModel:
    """A `light` model of the ONNX backend data as it is; its inputs from the input info
    (graph inputs that are also initializers are weights, not feeds)."""
    path = os.path.join(light_dir(), f"light_{name}.onnx")
    model = onnx.load(path)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for k, vi in enumerate(model.graph.input):
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        shape = tuple(d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[vi.name] = randn(shape, seed=k + 1).astype(dtype)
    return BenchModel(f"light_{name}", model, feeds,
                      f"ONNX backend data light_{name}.onnx", rtol=1e-3, tags=["light"])


def light_available() -> list[str]:
    found = {os.path.basename(p)[6:-5] for p in glob.glob(os.path.join(light_dir(), "*.onnx"))}
    return [n for n in LIGHT_NAMES if n in found]


def registry() -> dict[str, Callable[[bool], BenchModel]]:
    """Benchmark name -> builder(tiny). Order is the report's order."""
    reg: dict[str, Callable[[bool], BenchModel]] = {
        "add4": add4,
        "mlp_b1": lambda t: mlp(1, t),
        "mlp_b32": lambda t: mlp(32, t),
        "gemm_1024x1024x1024": lambda t: gemm(1024, 1024, 1024, 1, t),
        "gemm_64x784x512": lambda t: gemm(64, 784, 512, None, t),
        "gemm_1x512x512": lambda t: gemm(1, 512, 512, None, t),
        "bert_tiny": networks.bert_tiny,
        "mobilenetv2_like": networks.mobilenet_v2,
        "lcnet_like": networks.lcnet_like,
        "resnet_like": networks.resnet_blocks,
        "lstm": lstm,
        # shapes where a split was missing (hidden 64: the steps ran on one thread; 32x100x200
        # products: one block)
        "lstm_h64": lambda t: lstm(t, (128, 16, 64, 64)),
        "mlp_tanh_b32": lambda t: mlp(32, t, (100, 200, 100, 1), "Tanh"),
        "elementwise_chain_4M": chain,
        "conv3x3_64_56": lambda t: conv("conv3x3_64_56", 64, 64, 3, 56, tiny=t),
        "conv1x1_256to64_56": lambda t: conv("conv1x1_256to64_56", 256, 64, 1, 56, tiny=t),
        "dwconv3x3_144_56": lambda t: conv("dwconv3x3_144_56", 144, 144, 3, 56, 144, t),
        # 8-bit: the dynamically quantized product, and BERT-tiny by quantize_dynamic
        "int8_matmul_96x512x2048": lambda t: quantized.int8_matmul(96, 512, 2048, t),
        "int8_encoder": quantized.int8_encoder,
        "conv1d_spectrogram_16k": lambda t: conv1d("conv1d_spectrogram_16k", 1, 16000, t),
        "conv1d_spectrogram_4x48k": lambda t: conv1d("conv1d_spectrogram_4x48k", 4, 48000, t),
        "bytes_classifier_b1": lambda t: bytes_classifier(1, t),
        "nbits_1x2048x2048": lambda t: nbits(1, 2048, 2048, t),
        "nbits_1x4096x4096": lambda t: nbits(1, 4096, 4096, t),
        "nbits_128x2048x2048": lambda t: nbits(128, 2048, 2048, t),
        # tree ensembles (ai.onnx.ml): a LightGBM-style and a random-forest-style regressor
        "trees_lgbm500_b1": lambda t: trees.lgbm_like(1, t),
        "trees_lgbm500_b10000": lambda t: trees.lgbm_like(10000, t),
        "trees_rf100_b1": lambda t: trees.forest_like(1, t),
        "trees_rf100_b10000": lambda t: trees.forest_like(10000, t),
    }
    for n in light_available():
        reg[f"light_{n}"] = lambda t, n=n: light(n, t)
    return reg


def build(name: str, tiny: bool = False) -> BenchModel:
    """The benchmark `name`, built; the result's name is always `name`."""
    bm = registry()[name](tiny)
    bm.name = name
    return bm
