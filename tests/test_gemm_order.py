"""The tiled GEMM's two loop orders (`matmul_kernel.PANELS_OUTER`: panels outside the row
tiles, depth blocks of KC_OUTER, when A is not a constant): ragged products match a float64
product in both orders, concrete and run-time m, and a constant B (prepacked at compile time)
gives the same bits as the same B passed as an input (packed per call in the same order)."""

from __future__ import annotations

import numpy as np
import pytest
from models import finish
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit import runtime
from onnxjit.codegen import matmul_kernel


def _model(m: int | str, k: int, n: int, w: np.ndarray | None):
    vi = helper.make_tensor_value_info
    ins = [vi("x", TensorProto.FLOAT, [m, k])]
    if w is None:
        ins.append(vi("w", TensorProto.FLOAT, [k, n]))
    return finish(helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", ins,
                                    [vi("y", TensorProto.FLOAT, [m, n])],
                                    [] if w is None else [numpy_helper.from_array(w, "w")]))


@pytest.mark.parametrize("outer", [True, False])
@pytest.mark.parametrize("m,k,n", [(200, 1536, 384), (7, 300, 130), (65, 129, 70)])
def test_both_orders_match_and_prepacked_b_gives_the_same_bits(monkeypatch, outer, m, k, n):
    monkeypatch.setenv("ONNXJIT_COMPILE_JOBS", "0")  # code generation in this process
    monkeypatch.setattr(matmul_kernel, "PANELS_OUTER", outer)
    runtime._MEMORY.clear()
    seen: list[bool] = []  # the order each emitted product took (A is an input here)
    emit = matmul_kernel.TileGemm.emit
    monkeypatch.setattr(matmul_kernel.TileGemm, "emit",
                        lambda self: seen.append(self.outer) or emit(self))
    rng = np.random.default_rng(m + k + n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    want = x.astype(np.float64) @ w
    outs = []
    for dim, const in ((m, True), ("M", True), (m, False)):
        fn = onnxjit.compile(_model(dim, k, n, w if const else None), cache_dir=False,
                             tiered=False, num_threads=1)
        outs.append(fn(x)[0] if const else fn(x, w)[0])
        np.testing.assert_allclose(outs[-1], want, rtol=1e-4, atol=1e-3 * np.sqrt(k))
    np.testing.assert_array_equal(outs[0], outs[2])
    assert seen and set(seen) == {outer}
