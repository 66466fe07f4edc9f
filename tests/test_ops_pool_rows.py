"""Pool rows that fold a column's taps at once (`ir/fused_rows.py`) and small pools run as
one flat loop per plane (`ir/flat.py`): each compared bit for bit with the general row
loops they replace (NaNs, infinities and signed zeros included), with onnxruntime, and checked
to apply exactly to the geometries meant. Model helpers come from `test_ops_pool_norm`."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from test_ops_pool_norm import RNG, check, model, x

import onnxjit
from onnxjit.ir.types import DType


@pytest.mark.parametrize("fused, shape, attrs", [
    (True, (1, 3, 12, 30), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    (True, (2, 2, 20, 20), dict(kernel_shape=[2, 2], strides=[2, 2])),
    (True, (1, 2, 33, 41), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                ceil_mode=1)),
    (True, (1, 2, 16, 40), dict(kernel_shape=[5, 5], pads=[2, 1, 2, 3], dilations=[1, 2])),
    (True, (1, 2, 9, 9), dict(kernel_shape=[3, 3])),
    (False, (1, 2, 7, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    (False, (1, 2, 20, 40), dict(kernel_shape=[6, 5], pads=[1, 1, 1, 1])),
])
@pytest.mark.parametrize("include", [0, 1])
def test_averagepool_fused_rows(fused: bool, shape: tuple, attrs: dict, include: int,
                                monkeypatch) -> None:
    """2-D average pools whose window rows are inside fold each column in one pass
    (`fused_rows.FUSED_ROWS`): compiled, the same bits as the general rows and close to
    onnxruntime; narrow rows with border columns and kernels of more than FUSED_TAPS taps keep
    the general rows (the same loop IR either way)."""
    from onnxjit import runtime
    from onnxjit.driver import import_model, lower_signature
    from onnxjit.ir.loop_printer import print_program
    from onnxjit.ir.ops.pooling import fused_rows
    from onnxjit.options import CompileOptions

    a = x(*shape)
    m = model("AveragePool", [a], 19, count_include_pad=include, **attrs)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"in0": a})[0]
    opts = CompileOptions.from_user({"cache_dir": False})
    got, texts = [], []
    for on in (False, True):
        monkeypatch.setattr(fused_rows, "FUSED_ROWS", on)
        runtime._MEMORY.clear()  # the process-wide artifact cache does not key on the switch
        got.append(onnxjit.compile(m, cache_dir=False)(a)[0])
        gm = import_model(m.SerializeToString(), opts)
        texts.append(print_program(lower_signature(gm, ((DType.FLOAT, shape),), opts)[1]))
    assert (texts[0] != texts[1]) == fused
    np.testing.assert_array_equal(got[1], got[0])
    np.testing.assert_allclose(got[1], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, attrs", [
    ((2, 3, 17, 40), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 9, 33), dict(kernel_shape=[3, 2])),
    ((1, 2, 20, 30), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 7, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], dilations=[1, 2])),
])
def test_maxpool_fused_rows_keep_nan_and_signed_zeros(shape: tuple, attrs: dict,
                                                      monkeypatch) -> None:
    """MaxPool's fused rows (`max_rule.fold_taps`) give the general rows' results: NaN taps by
    onnx.reference's rule (`pooling.max_rule`), the same signed zero on ties of -0 and +0,
    infinities; and onnxruntime's on NaN-free data."""
    from onnx.reference import ReferenceEvaluator

    from onnxjit import runtime
    from onnxjit.ir.ops.pooling import fused_rows

    a = x(*shape)
    flat = a.reshape(-1)
    pick = RNG.choice(flat.size, 40, replace=False)
    flat[pick[:8]] = np.nan
    flat[pick[8:20]] = -0.0
    flat[pick[20:32]] = 0.0
    flat[pick[32:36]] = np.inf
    flat[pick[36:]] = -np.inf
    a[..., 2:5, 1:5] = -0.0
    a[..., 3, 2] = 0.0
    # strides and dilations 1: NaN taps dropped (and onnx.reference raises on a window of
    # NaNs only); else a NaN first tap sticks, so these windows are NaN
    drop = all(v == 1 for v in attrs.get("strides", []) + attrs.get("dilations", []))
    if not drop:
        a[..., 5:8, :5] = np.nan
    m = model("MaxPool", [a], 12, **attrs)
    got = []
    for on in (False, True):
        monkeypatch.setattr(fused_rows, "FUSED_ROWS", on)
        runtime._MEMORY.clear()  # the process-wide artifact cache does not key on the switch
        got.append(onnxjit.compile(m, cache_dir=False)(a)[0])
    np.testing.assert_array_equal(got[1], got[0])  # NaNs in the same places
    kept = ~np.isnan(got[0])
    assert np.isnan(got[0]).any() != drop and (got[0][kept] == 0).any()
    np.testing.assert_array_equal(np.signbit(got[1][kept]), np.signbit(got[0][kept]))
    np.testing.assert_array_equal(got[1], ReferenceEvaluator(m).run(None, {"in0": a})[0])
    clean = np.nan_to_num(a, nan=0.5)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"in0": clean})[0]
    np.testing.assert_array_equal(onnxjit.compile(m, cache_dir=False)(clean)[0], want)


@pytest.mark.parametrize("op, shape, attrs, flat", [
    ("MaxPool", (1, 4, 27, 27), dict(kernel_shape=[3, 3], strides=[2, 2]), True),
    ("MaxPool", (2, 3, 13, 13), dict(kernel_shape=[3, 3], strides=[2, 2]), True),
    ("MaxPool", (1, 3, 17, 24), dict(kernel_shape=[3, 3], strides=[2, 3], dilations=[2, 1]),
     True),
    ("AveragePool", (2, 3, 13, 13), dict(kernel_shape=[3, 3], strides=[2, 2]), True),
    ("AveragePool", (1, 2, 23, 23), dict(kernel_shape=[5, 3], strides=[2, 2]), True),
    ("MaxPool", (1, 2, 14, 14), dict(kernel_shape=[2, 2], strides=[2, 2]), False),
    ("MaxPool", (1, 2, 27, 27), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
     False),
    ("MaxPool", (1, 2, 28, 28), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), False),
])
def test_pool_flat_planes(op: str, shape: tuple, attrs: dict, flat: bool, monkeypatch) -> None:
    """Short rows of pools whose windows all lie inside run as one flat loop per plane
    (`pooling.flat`): the same bits as the row loops (NaNs, infinities and signed zeros
    included) and onnxruntime's results; padded, ceil-mode and 2-wide pools keep the rows."""
    from onnxjit import runtime
    from onnxjit.driver import import_model, lower_signature
    from onnxjit.ir.ops.pooling import flat as pool_flat
    from onnxjit.options import CompileOptions

    a = x(*shape)
    if op == "MaxPool":
        pick = RNG.choice(a.size, 24, replace=False)
        a.reshape(-1)[pick] = np.repeat([np.nan, -0.0, 0.0, np.inf, -np.inf, -0.0], 4)
    m = model(op, [a], 19 if op == "AveragePool" else 12, **attrs)
    opts = CompileOptions.from_user({"cache_dir": False})
    got = []
    for on in (False, True):
        monkeypatch.setattr(pool_flat, "FLAT", on)
        runtime._MEMORY.clear()  # the process-wide artifact cache does not key on the switch
        got.append(onnxjit.compile(m, cache_dir=False)(a)[0])
        prog = lower_signature(import_model(m.SerializeToString(), opts),
                               ((DType.FLOAT, shape),), opts)[1]
        assert any(k.name.endswith("_flat") for k in prog.kernels) == (on and flat)
    np.testing.assert_array_equal(got[1], got[0])
    np.testing.assert_array_equal(np.signbit(got[1]), np.signbit(got[0]))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    if op == "MaxPool":  # NaN taps by onnx.reference's rule (`pooling.max_rule`)
        from onnx.reference import ReferenceEvaluator

        np.testing.assert_array_equal(got[1], ReferenceEvaluator(m).run(None, {"in0": a})[0])
    clean = np.nan_to_num(a, nan=0.5, posinf=7.0, neginf=-7.0)
    np.testing.assert_allclose(onnxjit.compile(m, cache_dir=False)(clean)[0],
                               sess.run(None, {"in0": clean})[0], rtol=1e-6, atol=1e-6)


def test_maxpool_flat_planes_of_ints() -> None:
    a = RNG.integers(-128, 128, (2, 3, 13, 13)).astype(np.int8)
    check("MaxPool", [a], 12, kernel_shape=[3, 3], strides=[2, 2])
