"""Building benchmark models in code: `BenchModel` (a model, its feeds, how to judge and report
it) and `GraphBuilder` (nodes and seeded weights with generated names, plus the conv and
BatchNormalization layers the CNNs share), on `onnx.helper` (no downloads).

Weights are seeded random initializers scaled by 1/sqrt(fan_in) so activations stay O(1)
through deep stacks and the onnxruntime comparison is meaningful. Models are written at
ir_version 10, opset 17, so onnxruntime loads them; graph outputs are typed by onnx's shape
inference. `models` and `networks` build the benchmarks with these.
"""

from __future__ import annotations

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


def randn(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


