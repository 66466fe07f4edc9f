"""Constant folding (`OpDef.evaluate`) on the shapes where it used to part from the lowered
kernels (issue 26): each case runs one model twice, its inputs as initializers (folded at
compile time) and as graph inputs (lowered, run natively), and compares both with
onnxruntime. The class-wide sweep over every op is tests/test_fold_vs_runtime.py.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import onnxjit
from onnxjit.driver import import_model
from onnxjit.options import CompileOptions

RNG = np.random.default_rng(11)


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _model(op: str, arrays: dict, as_inputs: bool, out_rank: int, opset: int = 18,
           **attrs) -> onnx.ModelProto:
    """One `op` node over `arrays` (name -> value, in input order), all graph inputs or all
    initializers; the output has the given rank and unknown sizes."""
    ins, inits = [], []
    for name, a in arrays.items():
        if as_inputs:
            ins.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
        else:
            inits.append(numpy_helper.from_array(a, name))
    elem = helper.np_dtype_to_tensor_dtype(next(iter(arrays.values())).dtype)
    g = helper.make_graph([helper.make_node(op, list(arrays), ["y"], **attrs)], "g", ins,
                          [helper.make_tensor_value_info("y", elem, [None] * out_rank)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _both_paths(op: str, arrays: dict, out_rank: int, opset: int = 18, **attrs) -> None:
    """Folded and lowered results both equal onnxruntime's (dtype, shape, values)."""
    runtime = _model(op, arrays, True, out_rank, opset, **attrs)
    sess = ort.InferenceSession(runtime.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, arrays)[0]
    folded = _model(op, arrays, False, out_rank, opset, **attrs)
    graph = import_model(folded.SerializeToString(), CompileOptions.from_user({}))
    assert graph.graph.nodes == [], "the folded variant must fold"
    fn = onnxjit.compile(runtime, cache_dir=False)
    for what, got in (("folded", onnxjit.compile(folded, cache_dir=False)()[0]),
                      ("lowered", fn(**arrays)[0])):
        assert got.dtype == want.dtype and got.shape == want.shape, \
            f"{what}: {got.dtype}{got.shape}, want {want.dtype}{want.shape}"
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)
    fn.ir("loops")  # the lowered variant ran as native code


# GatherElements: the output is shaped like the indices, which may be smaller than the data
# on the other dims (size 1 there used to be broadcast to the data's size, silently).
@pytest.mark.parametrize("data_shape, idx, axis", [
    ((3, 4), [[0, 2], [1, 0]], 1),
    ((3, 4), [[0], [3]], 1),
    ((3, 4), [[3, -1, 0]], 1),
    ((4, 3), [[1], [0]], 0),
    ((2, 3, 4), [[[0, 1]], [[3, 2]]], 2),
    ((3, 4), np.zeros((0, 2), np.int64), 1),
])
def test_gather_elements_indices_smaller_than_data(data_shape, idx, axis):
    arrays = {"d": _f(*data_shape), "i": np.asarray(idx, np.int64)}
    _both_paths("GatherElements", arrays, len(data_shape), axis=axis)
