"""Softmax and LogSoftmax rows with NaN, +-inf and all -inf, against numpy's formula, and the
shape of the row max and sum: the ordered max (`Lanes` "fmax": select of a greater-than, not
the NaN-propagating `max` op, since the NaN reaches every output through the sum anyway) and
the sum in `fold` loops that LLVM vectorizes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxjit


def _model(op: str, n: int):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], axis=-1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, n])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _numpy(op: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        d = x - x.max(axis=1, keepdims=True)
        e = np.exp(d)
        s = e.sum(axis=1, keepdims=True)
        return e / s if op == "Softmax" else d - np.log(s)


@pytest.mark.parametrize("tail", ["masked", "remainder"])  # `folds.fold_md`, either host
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("n", [7, 40, 133])  # one lane, the lanes, lanes and a tail
def test_rows_with_nan_and_inf(op, n, tail, monkeypatch):
    from onnxjit import runtime
    from onnxjit.codegen import folds

    monkeypatch.setattr(folds, "PREDICATE_MIN_VECTOR_BYTES", 0 if tail == "masked" else 1 << 20)
    runtime._MEMORY.clear()
    x = np.random.default_rng(n).standard_normal((5, n)).astype(np.float32) * 4
    x[0, n // 2] = np.nan  # a NaN inside the lanes
    x[1, n - 1] = np.nan  # a NaN in the tail
    x[2, 0] = np.inf  # +inf: NaN for the inf element (inf - inf), 0 or -inf elsewhere
    x[3, :] = -np.inf  # all -inf: NaN throughout
    y = onnxjit.compile(_model(op, n), cache_dir=False)(x)[0]
    np.testing.assert_allclose(y, _numpy(op, x), rtol=1e-5, atol=1e-6)
    assert np.isnan(y[:2]).all() and np.isnan(y[3]).all()


def test_row_max_and_sum_are_vectorizable_fold_loops(monkeypatch):
    # the row max is the ordered fold (select of a greater-than, not the NaN-propagating `max`
    # op) and, like the sum, one accumulator in a `fold` loop, emitted as the reductions LLVM
    # vectorizes (`codegen.folds`); without FOLD_LOOPS, 16 scalar lanes and neither form
    import onnxjit.ir.ops.reductions.lowering as lowering
    from onnxjit import runtime

    x = np.random.default_rng(1).standard_normal((5, 133)).astype(np.float32)
    outs = []
    for on in (True, False):
        monkeypatch.setattr(lowering, "FOLD_LOOPS", on)
        runtime._MEMORY.clear()
        fn = onnxjit.compile(_model("Softmax", 133), cache_dir=False)
        outs.append(fn(x)[0])
        text, llvm = fn.ir("loops"), fn.ir("llvm")
        assert "= max " not in text  # no NaN-propagating max op
        assert (text.count(" fold {") == 2) == on  # the max, and the exp with its sum
        assert (text.count("= select ") == 1) == on  # one accumulator, or 16 lanes
        assert ("fadd reassoc nsz" in llvm and "llvm.maxnum" in llvm) == on
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(outs[0], _numpy("Softmax", x), rtol=1e-5, atol=1e-7)
