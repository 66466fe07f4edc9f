"""MatMulInteger on the 8-bit kernels (`codegen.int8_gemm`, `codegen.amx_gemm`,
`ir.ops.linalg.matmul_integer`): exact int32 results on odd shapes (M, N, K tails, K not a
multiple of 4: the VNNI kernel, else AMX where the host has it), zero points per tensor, per
row and per column, the four sign combinations, a batched A, a symbolic M, the VNNI kernel
with AMX off, the emulation used without VNNI, the quad layout, the loop IR text of the 8-bit
Matmul, and DynamicQuantizeLinear (its range pass in chunks) + MatMulInteger bit-identical to
onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxjit
from onnxjit.codegen import amx_gemm, int8_gemm
from onnxjit.codegen.kernel_shapes import has_vnni
from onnxjit.ir.loop_parser import parse_program
from onnxjit.ir.loop_printer import print_program
from onnxjit.ir.quad_panels import pack_quads, unpack_quads

pytestmark = pytest.mark.skipif(not has_vnni(), reason="the 8-bit kernel is used only on "
                                                       "hosts with AVX-512 VNNI")
RNG = np.random.default_rng(8)
NP = {T.UINT8: np.uint8, T.INT8: np.int8}


def _values(dt: int, shape) -> np.ndarray:
    info = np.iinfo(NP[dt])
    return RNG.integers(info.min, info.max + 1, shape).astype(NP[dt])


def _model(a_shape: list, k: int, n: int, adt: int, bdt: int, za, zb):
    w = _values(bdt, (k, n))
    inits, ins = [numpy_helper.from_array(w, "w")], ["a", "w"]
    if za is not None:
        inits.append(numpy_helper.from_array(np.asarray(za, NP[adt]), "za"))
    ins.append("za" if za is not None else "")
    if zb is not None:
        inits.append(numpy_helper.from_array(np.asarray(zb, NP[bdt]), "zb"))
        ins.append("zb")
    g = helper.make_graph([helper.make_node("MatMulInteger", ins, ["y"])], "g",
                          [helper.make_tensor_value_info("a", adt, a_shape)],
                          [helper.make_tensor_value_info("y", T.INT32, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m, w


def _llvm(dump) -> str:
    """The LLVM IR the compile wrote under `dump_ir` (asking `fn.ir` would compile again)."""
    return "".join(p.read_text() for p in dump.rglob("*-llvm.ll"))


def _reference(a: np.ndarray, w: np.ndarray, za, zb) -> np.ndarray:
    za = np.zeros(1) if za is None else np.asarray(za)
    za = za.reshape(-1, 1) if za.size > 1 else za
    zb = 0 if zb is None else np.asarray(zb)
    return ((a.astype(np.int64) - za.astype(np.int64)) @ (w.astype(np.int64) - zb)
            ).astype(np.int32)


CASES = [  # (a shape, k, n, A type, B type, a zero point, b zero point)
    ((7, 13), 13, 70, T.UINT8, T.INT8, 200, -5),
    ((13, 5), 5, 130, T.UINT8, T.INT8, None, "col"),
    ((1, 3), 3, 1, T.UINT8, T.INT8, None, None),
    ((11, 33), 33, 65, T.INT8, T.INT8, -3, 7),
    ((11, 33), 33, 65, T.INT8, T.UINT8, -3, "col"),
    ((11, 33), 33, 65, T.UINT8, T.UINT8, "row", 200),
    ((3, 5, 17), 17, 33, T.UINT8, T.INT8, 9, 2),
    ((37, 96), 96, 130, T.UINT8, T.INT8, 7, "col"),  # K = 64 + 32: VNNI (AMX takes whole chunks)
    ((18, 128), 128, 70, T.INT8, T.INT8, -2, None),  # AMX: whole chunks
]


@pytest.mark.parametrize("a_shape, k, n, adt, bdt, za, zb", CASES)
def test_exact(a_shape, k, n, adt, bdt, za, zb):
    if za == "row":
        za = _values(adt, (a_shape[-2],))
    if zb == "col":
        zb = _values(bdt, (n,))
    model, w = _model(list(a_shape), k, n, adt, bdt, za, zb)
    a = _values(adt, a_shape)
    got = onnxjit.compile(model, cache_dir=False)(a)[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _reference(a, w, za, zb))


@pytest.mark.parametrize("k", [21, 24])  # VNNI; AMX where the host has it
def test_symbolic_rows(k):
    model, w = _model(["M", k], k, 70, T.UINT8, T.INT8, 17, 3)
    fn = onnxjit.compile(model, cache_dir=False, specialize="dynamic")
    for m in (1, 6, 197):  # a row tail, one tile, two blocks of rows and a tail
        a = _values(T.UINT8, (m, k))
        np.testing.assert_array_equal(fn(a)[0], _reference(a, w, 17, 3))
    text = fn.ir("loops")
    assert "matmul %" in text and "rank1 = " in text


def test_emulation_without_vnni(monkeypatch, tmp_path):
    """The code used on hosts without VNNI computes the same (a model of its own: the
    compiled kernels are cached by content)."""
    monkeypatch.setattr(int8_gemm, "VNNI", False)
    model, w = _model([9, 23], 23, 20, T.INT8, T.UINT8, -7, None)
    model.graph.name = "emulated"
    fn = onnxjit.compile(model, cache_dir=False, dump_ir=str(tmp_path))
    a = _values(T.INT8, (9, 23))
    np.testing.assert_array_equal(fn(a)[0], _reference(a, w, -7, None))
    assert ".emul" in _llvm(tmp_path)


def test_vnni_kernel_without_amx(monkeypatch, tmp_path):
    """K a multiple of 4 goes to AMX on hosts that have it: here the VNNI kernel takes it."""
    monkeypatch.setattr(amx_gemm, "AMX", False)
    model, w = _model([23, 64], 64, 20, T.UINT8, T.INT8, 5, 4)
    model.graph.name = "vnni_only"
    fn = onnxjit.compile(model, cache_dir=False, dump_ir=str(tmp_path))
    a = _values(T.UINT8, (23, 64))
    np.testing.assert_array_equal(fn(a)[0], _reference(a, w, 5, 4))
    text = _llvm(tmp_path)
    assert "tdpbusd" not in text and "vpdpbusd" in text


def test_quad_layout_round_trip():
    b = _values(T.INT8, (13, 70))
    flat = pack_quads(b, 64)
    assert flat.size == 2 * 64 * 16  # two panels, depth padded to 16
    assert flat[64 * 4 + 5 * 4 + 2] == b[6, 5]  # quad 1, column 5, depth 4 + 2
    np.testing.assert_array_equal(unpack_quads(flat, 13, 70, 64), b)


def test_loop_ir_text_round_trip():
    model, _ = _model([5, 8], 8, 20, T.UINT8, T.INT8, 3, 1)
    fn = onnxjit.compile(model, cache_dir=False)
    fn(_values(T.UINT8, (5, 8)))
    text = fn.ir("loops")
    assert "^P" in text and "rank1 = " in text
    assert print_program(parse_program(text)) == text


def test_dynamic_quantize_matmul_matches_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    w = _values(T.INT8, (128, 130))  # K = 128: AMX where the host has it (whole chunks)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [37, 128])],
                          [helper.make_tensor_value_info("y", T.INT32, None),
                           helper.make_tensor_value_info("xq", T.UINT8, None)],
                          [numpy_helper.from_array(w, "w"),
                           numpy_helper.from_array(_values(T.INT8, (130,)), "wz")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    x = (RNG.standard_normal((37, 128)) * 3).astype(np.float32)
    x[0, :4] = [0.5, 1.5, -2.5, 0.0]  # ties of the rounding
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = onnxjit.compile(m, cache_dir=False, dump_ir=str(tmp_path))(x)
    for g_, w_ in zip(got, want):
        np.testing.assert_array_equal(g_, w_)
    assert ("tdpbusd" in _llvm(tmp_path)) == amx_gemm.has_amx()


def test_dynamic_quantize_range_over_chunks():
    """The range pass runs in parallel chunks (`quantized_matmul.RANGE_CHUNK`): extremes in
    the last chunk's tail and in the middle one, against onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    g = helper.make_graph([helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"])],
                          "g", [helper.make_tensor_value_info("x", T.FLOAT, [7, 14287])],
                          [helper.make_tensor_value_info(v, t, None)
                           for v, t in (("q", T.UINT8), ("s", T.FLOAT), ("z", T.UINT8))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    x = RNG.standard_normal((7, 14287)).astype(np.float32)
    x.flat[-1], x.flat[x.size // 2] = 9.0, -7.5
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g_, w_ in zip(onnxjit.compile(m, cache_dir=False)(x), want):
        np.testing.assert_array_equal(g_, w_)
