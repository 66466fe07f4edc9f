"""The benchmark models, built in code with `onnx.helper` (no downloads).

Each builder takes `tiny` (a few-element version of the same graph, for the smoke test) and
returns a `BenchModel`: the ModelProto (ir_version 10, opset 17, so onnxruntime loads it), the
feeds, a one-line note, the model's FLOP count where a GFLOP/s figure means something, and the
thread count when a benchmark pins it (the single-thread GEMM). Weights are seeded random
initializers scaled by 1/sqrt(fan_in) so activations stay O(1) through deep stacks and the
onnxruntime comparison is meaningful. The `light` models of the ONNX backend data are loaded
from the installed onnx package as they are (their weights come from ConstantOfShape).
The larger networks (BERT-tiny, MobileNetV2-like, ResNet-like) are in `bench_nets`.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

try:
    import onnx  # noqa: TID251 - benchmarks build models with the test extra
    from onnx import TensorProto, helper, numpy_helper  # noqa: TID251
except ImportError:
    raise SystemExit("onnxjit bench needs the test extra: pip install -e '.[test]'") from None

OPSET = 17


@dataclass
class BenchModel:
    """One benchmark: a model, its feeds, and how to judge and report it."""

    name: str
    model: Any  # onnx.ModelProto
    feeds: dict[str, np.ndarray]
    note: str
    flops: float = 0.0  # multiply-adds x 2 of one call; 0: no GFLOP/s column
    threads: int | None = None  # None: onnxjit default threads, onnxruntime 2 intra-op threads
    rtol: float = 1e-3  # max |a - b| <= rtol * max |b| + atol
    atol: float = 1e-5
    tags: list[str] = field(default_factory=list)


class GraphBuilder:
    """Appends nodes and seeded initializers; names are generated (`t0`, `t1`, ...)."""

    def __init__(self, seed: int = 0):
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.rng = np.random.default_rng(seed)
        self._n = 0

    def fresh(self, hint: str = "t") -> str:
        self._n += 1
        return f"{hint}{self._n}"

    def const(self, arr: np.ndarray, hint: str = "c") -> str:
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def weight(self, shape: tuple[int, ...], fan_in: int, hint: str = "w") -> str:
        w = self.rng.standard_normal(shape) / np.sqrt(fan_in)
        return self.const(w.astype(np.float32), hint)

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs: Any) -> Any:
        outs = [self.fresh(op_type.lower()[:4]) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name: str, inputs: list[tuple[str, int, list]], out: str | list[str],
              ) -> Any:
        outs = [out] if isinstance(out, str) else out
        g = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
            self.inits)
        return with_output_shapes(make_model(g))

    # layers shared by the CNNs ---------------------------------------------------------
    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
             bias: bool = True) -> str:
        w = self.weight((cout, cin // group, k, k), cin // group * k * k)
        ins = [x, w] + ([self.const(np.zeros(cout, np.float32), "b")] if bias else [])
        return self.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[k // 2] * 4, group=group)

    def bn(self, x: str, c: int) -> str:
        r = self.rng
        return self.op("BatchNormalization", [
            x, self.const((1 + 0.1 * r.standard_normal(c)).astype(np.float32), "g"),
            self.const((0.1 * r.standard_normal(c)).astype(np.float32), "be"),
            self.const((0.1 * r.standard_normal(c)).astype(np.float32), "mu"),
            self.const((1 + 0.1 * r.random(c)).astype(np.float32), "var")], epsilon=1e-5)


def make_model(graph: Any) -> Any:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 10  # the newest onnxruntime accepts
    return m


def with_output_shapes(model: Any) -> Any:
    """`model` with its graph outputs typed by onnx's shape inference (onnxjit requires
    graph outputs of known rank)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    types = {v.name: v for v in inferred.graph.value_info}
    types.update({v.name: v for v in inferred.graph.output})
    outs = [types[o.name] if o.name in types else o for o in model.graph.output]
    del model.graph.output[:]
    model.graph.output.extend(outs)
    return model


def _randn(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


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
    return BenchModel(f"mlp_b{batch}", m, {"x": _randn((batch, sizes[0]))},
                      f"MLP {shape}{'' if act == 'Relu' else ' ' + act}, batch {batch}", flops)


def gemm(m_: int, k: int, n: int, threads: int | None = None, tiny: bool = False
         ) -> BenchModel:
    if tiny:
        m_, k, n = min(m_, 8), min(k, 16), min(n, 16)
    b = GraphBuilder()
    y = b.op("MatMul", ["a", b.weight((k, n), k)])
    model = b.model("gemm", [("a", TensorProto.FLOAT, [m_, k])], y)
    where = "one thread both engines, " if threads == 1 else ""
    return BenchModel(f"gemm_{m_}x{k}x{n}", model, {"a": _randn((m_, k))},
                      f"MatMul {m_}x{k} @ {k}x{n}, {where}constant B", 2.0 * m_ * k * n, threads)


def add4(tiny: bool = False) -> BenchModel:
    """Call overhead: one Add on 4 floats (the work is nothing; the time is the call)."""
    b = GraphBuilder()
    y = b.op("Add", ["a", "b"])
    model = b.model("add4", [("a", TensorProto.FLOAT, [4]), ("b", TensorProto.FLOAT, [4])], y)
    return BenchModel("add4", model, {"a": _randn((4,)), "b": _randn((4,), 2)},
                      "call overhead: one Add on 4 floats")


def chain(tiny: bool = False) -> BenchModel:
    n = 4096 if tiny else 4 * 1024 * 1024
    b = GraphBuilder()
    t = b.op("Add", [b.op("Mul", ["x", b.const(np.float32(0.5), "s")]),
                     b.const(np.float32(0.1), "b")])
    t = b.op("Sigmoid", [b.op("Erf", [b.op("Tanh", [t])])])
    y = b.op("Mul", [t, "x"])
    model = b.model("chain", [("x", TensorProto.FLOAT, [n])], y)
    return BenchModel("elementwise_chain_4M", model, {"x": _randn((n,))},
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
    return BenchModel(name, model, {"x": _randn((1, cin, hw, hw))},
                      f"{kind}Conv {k}x{k} {cin}->{cout} at {hw}x{hw}, pad {k // 2}", flops)


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
    return BenchModel("lstm", model, {"x": _randn((seq, batch, inp))},
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
        feeds[vi.name] = _randn(shape, seed=k + 1).astype(dtype)
    return BenchModel(f"light_{name}", model, feeds,
                      f"ONNX backend data light_{name}.onnx", rtol=1e-3, tags=["light"])


def light_available() -> list[str]:
    found = {os.path.basename(p)[6:-5] for p in glob.glob(os.path.join(light_dir(), "*.onnx"))}
    return [n for n in LIGHT_NAMES if n in found]


def registry() -> dict[str, Callable[[bool], BenchModel]]:
    """Benchmark name -> builder(tiny). Order is the report's order."""
    from onnxjit import bench_nets

    reg: dict[str, Callable[[bool], BenchModel]] = {
        "add4": add4,
        "mlp_b1": lambda t: mlp(1, t),
        "mlp_b32": lambda t: mlp(32, t),
        "gemm_1024x1024x1024": lambda t: gemm(1024, 1024, 1024, 1, t),
        "gemm_64x784x512": lambda t: gemm(64, 784, 512, None, t),
        "gemm_1x512x512": lambda t: gemm(1, 512, 512, None, t),
        "bert_tiny": bench_nets.bert_tiny,
        "mobilenetv2_like": bench_nets.mobilenet_v2,
        "resnet_like": bench_nets.resnet_blocks,
        "lstm": lstm,
        # shapes where a split was missing (hidden 64: the steps ran on one thread; 32x100x200
        # products: one block)
        "lstm_h64": lambda t: lstm(t, (128, 16, 64, 64)),
        "mlp_tanh_b32": lambda t: mlp(32, t, (100, 200, 100, 1), "Tanh"),
        "elementwise_chain_4M": chain,
        "conv3x3_64_56": lambda t: conv("conv3x3_64_56", 64, 64, 3, 56, tiny=t),
        "conv1x1_256to64_56": lambda t: conv("conv1x1_256to64_56", 256, 64, 1, 56, tiny=t),
        "dwconv3x3_144_56": lambda t: conv("dwconv3x3_144_56", 144, 144, 3, 56, 144, t),
    }
    for n in light_available():
        reg[f"light_{n}"] = lambda t, n=n: light(n, t)
    return reg


def build(name: str, tiny: bool = False) -> BenchModel:
    """The benchmark `name`, built; the result's name is always `name`."""
    bm = registry()[name](tiny)
    bm.name = name
    return bm
