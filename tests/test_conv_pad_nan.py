"""Depthwise convs with infinite or NaN weights next to padding (`conv.pad_nan`): a tap on
the padding adds 0 * w, which is NaN for such a weight in onnxruntime and onnx.reference; the
depthwise nests skip those taps, so a fix-up stores the NaN. Constant finite weights keep
their nests unchanged (no fix-up kernel)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.driver import import_model, lower_signature
from onnxjit.ir.types import DType
from onnxjit.options import CompileOptions


def _model(attrs: dict, xs: tuple, w: np.ndarray, const: bool, sym: bool, relu: bool):
    t = helper.np_dtype_to_tensor_dtype(w.dtype)
    dims = list(xs) if not sym else ["N", xs[1], *[f"s{i}" for i in range(len(xs) - 2)]]
    ins = [helper.make_tensor_value_info("x", t, dims)]
    inits = [numpy_helper.from_array(w, "w")] if const else []
    if not const:
        ins.append(helper.make_tensor_value_info("w", t, list(w.shape)))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], **attrs)]
    inits.append(numpy_helper.from_array(np.full(w.shape[0], 0.5, w.dtype), "b"))
    if relu:  # a fused epilogue
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", t, None)],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


DW1 = (dict(kernel_shape=[3], pads=[1, 2], group=4), (2, 4, 30), (4, 1, 3))
DW2 = (dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8), (1, 8, 20, 24), (8, 1, 3, 3))
PHASED = (dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=16, strides=[2, 2]),
          (1, 16, 8, 8), (16, 1, 3, 3))
TINY = (dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=32), (1, 32, 4, 4), (32, 1, 3, 3))
MULT = (dict(kernel_shape=[2, 5], dilations=[2, 1], auto_pad="SAME_UPPER", group=3),
        (1, 3, 7, 12), (6, 1, 2, 5))  # a channel multiplier of 2
DW3 = (dict(kernel_shape=[2, 2, 3], pads=[1, 0, 1, 0, 1, 1], group=2), (1, 2, 4, 4, 5),
       (2, 1, 2, 2, 3))


@pytest.mark.parametrize("geom, const, sym, relu", [
    (DW1, True, False, False), (DW2, False, False, True), (DW2, True, True, False),
    (PHASED, True, False, True), (TINY, False, False, False), (MULT, False, True, True),
    (DW3, False, False, True)])
def test_nonfinite_weights_next_to_padding(geom, const, sym, relu) -> None:
    """The NaN where an inf/NaN weight's tap lies on the padding, as onnx.reference has it,
    and its values elsewhere: constant and run-time weights, fixed and symbolic sizes, with
    and without a fused epilogue."""
    attrs, xs, ws = geom
    rng = np.random.default_rng(len(xs) * 100 + xs[-1])
    w = rng.random(ws).astype(np.float32)
    w.reshape(-1)[rng.choice(w.size, w.size // 20, replace=False)] = np.inf
    w.reshape(-1)[0], w.reshape(-1)[-1] = -np.inf, np.inf  # (a NaN weight: its channel NaN)
    x = rng.random(xs).astype(np.float32)
    m = _model(attrs, xs, w, const, sym, relu)
    feeds = {"x": x} if const else {"x": x, "w": w}
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(m).run(None, feeds)[0]
    fn = onnxjit.compile(m, cache_dir=False, specialize="dynamic" if sym else "auto")
    got = fn.run(None, feeds)[0]
    assert np.isnan(want).any() and not np.isnan(want).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_finite_constant_weights_keep_their_nests() -> None:
    """No fix-up kernel for constant finite weights (the fast path as it was); one for
    constant non-finite and run-time weights, which is a no-op for finite ones."""
    xs, attrs = (1, 8, 20, 24), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8)
    w = np.random.default_rng(1).random((8, 1, 3, 3)).astype(np.float32)
    bad = w.copy()
    bad[3, 0, 0, 0] = np.inf
    opts = CompileOptions.from_user({"cache_dir": False})
    for weights, const, fixes in ((w, True, False), (bad, True, True), (w, False, True)):
        m = _model(attrs, xs, weights, const, False, False)
        sig = ((DType.FLOAT, xs),) + (() if const else ((DType.FLOAT, weights.shape),))
        prog = lower_signature(import_model(m.SerializeToString(), opts), sig, opts)[1]
        assert any(k.name.startswith("conv_pad_nan") for k in prog.kernels) == fixes
    x = np.random.default_rng(2).random(xs).astype(np.float32)
    m = _model(attrs, xs, w, False, False, False)
    np.testing.assert_allclose(onnxjit.compile(m, cache_dir=False).run(None, {"x": x, "w": w})[0],
                               ReferenceEvaluator(m).run(None, {"x": x, "w": w})[0], rtol=1e-5)
