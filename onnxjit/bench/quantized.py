"""8-bit benchmarks: the dynamically quantized product and an int8 transformer encoder.

- `int8_matmul`: DynamicQuantizeLinear of float activations, then MatMulInteger by constant
  int8 weights (zero point from the quantization for A, 0 for B: what onnxruntime's
  `quantize_dynamic` writes), an int32 result compared exactly.
- `int8_encoder`: the BERT-tiny encoder of `networks` quantized by onnxruntime's own
  `quantize_dynamic` (QInt8 weights: each MatMul becomes DynamicQuantizeLinear, MatMulInteger,
  Cast and the scale products), built here in a temporary folder, so the row needs
  onnxruntime to build as well as to compare.

Both are compared with onnxruntime, whose u8 x s8 products are exact only with VNNI: without it
its x86 kernels (`vpmaddubsw`) add each pair of products in int16 with saturation, so sums of
full-range weights can come out wrong by thousands (255 * 127 * 2 > 32767). On such hosts
(`ort_u8s8_saturates`) the weights are drawn, or quantized (`reduce_range`), in 7 bits, where
no pair can saturate; VNNI hosts keep the full 8 bits.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from onnxjit.bench import networks
from onnxjit.bench.builder import (
    BenchModel,
    GraphBuilder,
    TensorProto,
    helper,
    make_model,
    onnx,
    randn,
)


def ort_u8s8_saturates() -> bool:
    """Whether onnxruntime's u8 x s8 products may saturate here (see the module docstring): an
    x86 host without AVX-512 VNNI or AVX-VNNI (onnxruntime's exact kernels need one)."""
    from onnxjit.codegen.target import host

    triple, _, features = host()
    have = set(features.split(","))
    return triple.startswith(("x86_64", "i386", "i686")) and not (
        {"+avx512vnni", "+avxvnni"} & have)


def int8_matmul(m: int, k: int, n: int, tiny: bool = False) -> BenchModel:
    if tiny:
        m, k, n = min(m, 8), min(k, 16), min(n, 16)
    b = GraphBuilder(seed=7)
    lim = 64 if ort_u8s8_saturates() else 128
    w = b.const(b.rng.integers(-lim, lim, (k, n)).astype(np.int8), "w")
    xq, _, xz = b.op("DynamicQuantizeLinear", ["x"], n_out=3)
    y = b.op("MatMulInteger", [xq, w, xz, b.const(np.int8(0), "wz")])
    graph = helper.make_graph(b.nodes, "int8_matmul",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info(y, TensorProto.INT32, [m, n])],
                              b.inits)
    model = make_model(graph)
    return BenchModel(f"int8_matmul_{m}x{k}x{n}", model, {"x": randn((m, k))},
                      f"DynamicQuantizeLinear + MatMulInteger {m}x{k} @ {k}x{n} int8 weights",
                      2.0 * m * k * n, rtol=0.0, atol=0.0)


def int8_encoder(tiny: bool = False) -> BenchModel:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp = networks.bert_tiny(tiny)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "fp32.onnx"), os.path.join(tmp, "int8.onnx")
        onnx.save(fp.model, src)
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8,
                         reduce_range=ort_u8s8_saturates())
        model = onnx.load(dst)
    model.ir_version = min(model.ir_version, 10)
    # quantization of activations flips near-ties differently after float reassociation:
    # each flip moves an output by about one quantization step
    return BenchModel("int8_encoder", model, fp.feeds,
                      f"{fp.note}, int8 by onnxruntime quantize_dynamic", fp.flops,
                      rtol=2e-2, atol=1e-3)
