"""The 8-bit products as a host without AVX-512 VNNI runs them, checked on every host.

`test_int8_gemm` and `test_conv_integer_vnni` run on VNNI hosts only; here `has_vnni` is
forced (where the lowerings and the kernel consult it, each model under a graph name of its
own: compiled programs are cached in memory by content) so that any host checks:
- the VNNI lowering on the kernel's emulation (`int8_gemm`'s ".emul" microkernels, which a
  host without VNNI runs for DynamicQuantizeLSTM's recurrent products): MatMulInteger,
  DynamicQuantizeLinear + MatMulInteger (the `int8_matmul` bench shape, full-range weights)
  and ConvInteger, exact against numpy;
- the lowering without VNNI (the scalar nests of `linalg.matmul_integer` and `conv.integer`),
  the same checks;
- onnxruntime as a reference: its u8 x s8 products saturate without VNNI (`vpmaddubsw` adds
  pairs of products in int16), which made full-range int8 models "mismatch" on such hosts
  while onnxjit was exact; tests comparing with it use 7-bit weights there
  (`bench.quantized.ort_u8s8_saturates`), and this checks that assumption.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxjit
from onnxjit.bench.quantized import ort_u8s8_saturates
from onnxjit.codegen import amx_gemm, int8_gemm
from onnxjit.ir.ops.conv import integer_vnni
from onnxjit.ir.ops.linalg import matmul_integer

RNG = np.random.default_rng(80)
NP = {T.UINT8: np.uint8, T.INT8: np.int8}


@pytest.fixture(params=["emulated", "scalar"])
def mode(request, monkeypatch) -> str:
    """"emulated": the VNNI lowering on the emulated instruction; "scalar": no VNNI at all."""
    lowered = request.param == "emulated"
    monkeypatch.setattr(matmul_integer, "has_vnni", lambda: lowered)
    monkeypatch.setattr(integer_vnni, "has_vnni", lambda: lowered)
    monkeypatch.setattr(int8_gemm, "has_vnni", lambda: False)
    monkeypatch.setattr(amx_gemm, "AMX", False)
    return request.param


def _values(dt: int, shape) -> np.ndarray:
    info = np.iinfo(NP[dt])
    return RNG.integers(info.min, info.max + 1, shape).astype(NP[dt])


def _model(name: str, nodes: list, inputs: list, outputs: list, inits: dict):
    g = helper.make_graph(nodes, name, inputs, outputs,
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _llvm(dump) -> str:
    """The LLVM IR a run's compile wrote under `dump_ir`."""
    return "".join(p.read_text() for p in dump.rglob("*-llvm.ll"))


def _check_path(mode: str, fn, llvm: str) -> None:
    """The product ran where `mode` says: the emulated kernel, or the scalar nest."""
    assert llvm and "vpdpbusd" not in llvm and "tdpbusd" not in llvm
    assert (".emul" in llvm) == (mode == "emulated")
    assert ("matmul %" in fn.ir("loops")) == (mode == "emulated")


@pytest.mark.parametrize("m, k, n, adt, bdt, za, zb", [
    (7, 13, 70, T.UINT8, T.INT8, 200, -5),      # K tail, a second partial panel
    (11, 33, 65, T.INT8, T.INT8, -3, "col"),    # i8 A: shifted by 128
    (11, 33, 65, T.INT8, T.UINT8, None, 200),   # u8 B: shifted by -128
    (13, 64, 130, T.UINT8, T.UINT8, "row", "col"),
])
def test_matmul_integer_exact(mode, tmp_path, m, k, n, adt, bdt, za, zb):
    w = _values(bdt, (k, n))
    za = _values(adt, (m,)) if za == "row" else za
    zb = _values(bdt, (n,)) if zb == "col" else zb
    inits = {"w": w}
    if za is not None:
        inits["za"] = np.asarray(za, NP[adt])
    if zb is not None:
        inits["zb"] = np.asarray(zb, NP[bdt])
    node = helper.make_node("MatMulInteger", ["a", "w", "za" if za is not None else "",
                                              "zb" if zb is not None else ""], ["y"])
    model = _model(f"mmi_{mode}_{m}_{k}_{n}_{adt}_{bdt}", [node],
                   [helper.make_tensor_value_info("a", adt, [m, k])],
                   [helper.make_tensor_value_info("y", T.INT32, None)], inits)
    a = _values(adt, (m, k))
    fn = onnxjit.compile(model, cache_dir=False, dump_ir=str(tmp_path))
    zav = 0 if za is None else np.asarray(za, np.int64).reshape((-1, 1) if np.size(za) > 1 else ())
    want = (a.astype(np.int64) - zav) @ (
        w.astype(np.int64) - (0 if zb is None else np.asarray(zb).astype(np.int64)))
    np.testing.assert_array_equal(fn(a)[0], want.astype(np.int32))
    _check_path(mode, fn, _llvm(tmp_path))


def test_dynamic_quantize_matmul_exact(mode, tmp_path):
    """The `int8_matmul_96x512x2048` bench model with full-range weights: exact against
    numpy on the quantized activations (which match onnxruntime's: no product there)."""
    m, k, n = 96, 512, 2048
    w = _values(T.INT8, (k, n))
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["y"])]
    model = _model(f"dql_{mode}", nodes, [helper.make_tensor_value_info("x", T.FLOAT, [m, k])],
                   [helper.make_tensor_value_info(v, t, None) for v, t in
                    (("y", T.INT32), ("xq", T.UINT8), ("xs", T.FLOAT), ("xz", T.UINT8))],
                   {"w": w, "wz": np.int8(0)})
    x = RNG.standard_normal((m, k)).astype(np.float32)
    fn = onnxjit.compile(model, cache_dir=False, dump_ir=str(tmp_path))
    y, xq, xs, xz = fn(x)
    dql = _model("dql_ort", nodes[:1], model.graph.input, list(model.graph.output)[1:], {})
    want = ort.InferenceSession(dql.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for got, ref in zip((xq, xs, xz), want):
        np.testing.assert_array_equal(got, ref)
    exact = (xq.astype(np.int64) - int(xz)) @ w.astype(np.int64)
    np.testing.assert_array_equal(y, exact.astype(np.int32))
    _check_path(mode, fn, _llvm(tmp_path))


@pytest.mark.parametrize("x_dt, w_dt", [(T.UINT8, T.INT8), (T.INT8, T.UINT8)])
@pytest.mark.parametrize("stride", [1, 2])
def test_conv_integer_exact(mode, tmp_path, x_dt, w_dt, stride):
    x, w = _values(x_dt, (2, 5, 9, 8)), _values(w_dt, (70, 5, 3, 3))
    xz, wz = np.asarray(3, NP[x_dt]), np.asarray(126, NP[w_dt]) if w_dt == T.UINT8 else \
        np.asarray(-2, NP[w_dt])
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1],
                            strides=[stride, stride])
    model = _model(f"conv_{mode}_{x_dt}_{w_dt}_{stride}", [node],
                   [helper.make_tensor_value_info("x", x_dt, list(x.shape))],
                   [helper.make_tensor_value_info("y", T.INT32, None)],
                   {"w": w, "xz": xz, "wz": wz})
    fn = onnxjit.compile(model, cache_dir=False, dump_ir=str(tmp_path))
    # the spec: zero padding of (x - xz), then the windows' sums in int64
    xs = np.pad(x.astype(np.int64) - int(xz), [(0, 0), (0, 0), (1, 1), (1, 1)])
    win = sliding_window_view(xs, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
    want = np.einsum("ncyxij,ocij->noyx", win, w.astype(np.int64) - int(wz))
    np.testing.assert_array_equal(fn(x)[0], want.astype(np.int32))
    llvm = _llvm(tmp_path)
    assert ("convinteger_im2col" in fn.ir("loops")) == (mode == "emulated")
    assert llvm and "vpdpbusd" not in llvm and (".emul" in llvm) == (mode == "emulated")


def test_onnxruntime_saturation_assumption():
    """Where `ort_u8s8_saturates` is False onnxruntime's u8 x s8 product is exact (tests use
    it as the reference at full range); where True, it is exact on 7-bit weights."""
    a = np.full((8, 16), 255, np.uint8)
    for lim in (128, 64):
        if lim == 128 and ort_u8s8_saturates():
            continue
        w = np.full((16, 16), lim - 1, np.int8)
        w[::3] = -lim
        model = _model(f"ort_{lim}", [helper.make_node("MatMulInteger", ["a", "w"], ["y"])],
                       [helper.make_tensor_value_info("a", T.UINT8, [8, 16])],
                       [helper.make_tensor_value_info("y", T.INT32, None)], {"w": w})
        got = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
        np.testing.assert_array_equal(got, a.astype(np.int32) @ w.astype(np.int32))
