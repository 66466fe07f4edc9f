"""Constant folding (`OpDef.evaluate`) on the shapes where it used to part from the lowered
kernels (issue 26): each case runs one model twice, its inputs as initializers (folded at
compile time) and as graph inputs (lowered, run natively), and compares both with
onnxruntime, or with onnx.reference where onnxruntime refuses the case (each says why). Some
cases pin a lowering found wrong on the way (an output left unwritten when the main output
is empty, a float16 sum rounded per step). The class-wide sweep over every op is
tests/fold_compare.py (run by the empty and broadcast audits); index extremes are
tests/test_index_extremes.py.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import onnxjit
from onnxjit.driver import import_model
from onnxjit.errors import InputError, ModelError
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


# MaxPool folded on a zero-size constant: the windows were reshaped with -1, which numpy cannot
# infer for zero elements ("cannot reshape"); AveragePool shared the code.
@pytest.mark.parametrize("op, shape, attrs", [
    ("MaxPool", (0, 1, 4, 4), {"kernel_shape": [2, 2]}),
    ("MaxPool", (0, 3, 5), {"kernel_shape": [3], "strides": [2]}),
    ("AveragePool", (0, 2, 4, 4), {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}),
])
def test_pool_folded_on_empty_constant(op, shape, attrs):
    _both_paths(op, {"x": _f(*shape)}, len(shape), **attrs)


# CumSum exclusive=1 folded on an empty axis: the identity row was taken from the (empty)
# result with np.take(r, [0]), an IndexError.
@pytest.mark.parametrize("shape, axis, reverse", [
    ((0,), 0, 0), ((0,), 0, 1), ((2, 0), 1, 0), ((2, 0), 1, 1), ((0, 3), 1, 0), ((0, 3), 0, 1),
])
def test_cumsum_exclusive_folded_on_empty_constant(shape, axis, reverse):
    _both_paths("CumSum", {"x": _f(*shape), "a": np.asarray(axis, np.int64)}, len(shape),
                exclusive=1, reverse=reverse)


# --------------------------------------------------------------------------- multi-output cases


def _graph_model(node: onnx.NodeProto, arrays: dict, outs: list, as_inputs: bool,
                 opset: int) -> onnx.ModelProto:
    """`node` over `arrays` (graph inputs or initializers); `outs` are (element type, rank)."""
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in arrays.items()] if as_inputs else []
    inits = [] if as_inputs else [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(o, e, [None] * r)
                                             for o, (e, r) in zip(node.output, outs)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _all_paths(node: onnx.NodeProto, arrays: dict, outs: list, opset: int,
               oracle: str = "ort") -> None:
    """Every output, folded and lowered, equals the oracle's ("ort" or "ref":
    onnx.reference, where onnxruntime refuses the case)."""
    from op_audit import assert_same, reference

    runtime = _graph_model(node, arrays, outs, True, opset)
    if oracle == "ort":
        want = ort.InferenceSession(runtime.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, arrays)
    else:
        want = reference(runtime, arrays)
    folded = _graph_model(node, arrays, outs, False, opset)
    assert import_model(folded.SerializeToString(), CompileOptions.from_user({})).graph.nodes \
        == [], "the folded variant must fold"
    for what, got in (("folded", onnxjit.compile(folded, cache_dir=False).run(None, {})),
                      ("lowered", onnxjit.compile(runtime, cache_dir=False).run(None, arrays))):
        assert_same(got, want, what)


_FLT = onnx.TensorProto.FLOAT


# GatherND with an empty batch (batch_dims=1) or empty index tuples (m = 0: each index row
# takes the whole data) failed to fold: reshape(-1) on zero elements, and a 0-tuple index
# returning one slab instead of one per row. onnx.reference fails on both (reshape -1).
@pytest.mark.parametrize("data, idx, bd", [
    (_f(0, 3, 4), np.zeros((0, 2, 1), np.int64), 1),
    (_f(2, 3), np.zeros((4, 0), np.int64), 0),
    (_f(2, 3, 4), np.zeros((2, 0, 2), np.int64), 1),
    (_f(2, 3, 4), np.array([[[1], [-1]], [[0], [2]]], np.int64), 1),
])
def test_gather_nd_folded_on_empty_shapes(data, idx, bd):
    node = helper.make_node("GatherND", ["d", "i"], ["y"], batch_dims=bd)
    rank = idx.ndim - 1 + data.ndim - bd - idx.shape[-1]
    _all_paths(node, {"d": data, "i": idx}, [(_FLT, rank)], 13)


# Attention (3-D inputs) folded with an empty batch or query sequence: the heads were merged
# with reshape(bsz, sq, -1). onnxruntime refuses empty Q; onnx.reference has the same bug.
@pytest.mark.parametrize("b, sq", [(0, 3), (1, 0)])
def test_attention_3d_folded_on_empty_batch_or_query(b, sq):
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=2, kv_num_heads=2)
    arrays = {"q": _f(b, sq, 8), "k": _f(b, 5, 8), "v": _f(b, 5, 8)}
    runtime = _graph_model(node, arrays, [(_FLT, 3)], True, 23)
    folded = _graph_model(node, arrays, [(_FLT, 3)], False, 23)
    for got in (onnxjit.compile(folded, cache_dir=False).run(None, {})[0],
                onnxjit.compile(runtime, cache_dir=False).run(None, arrays)[0]):
        assert got.shape == (b, sq, 8) and got.dtype == np.float32


# float16 reductions compute in f32 from the element transform to the final step and round
# once, as onnxruntime does: ReduceL2([300, 400, -541.5]) is 737, while squares kept in
# float16 overflow (300^2 > 65504) to inf. Where the f32 result itself overflows float16
# (ReduceSumSquare here), inf is the answer on both sides.
_F16 = np.array([300, 400, -541.5], np.float16)


@pytest.mark.parametrize("op, x", [
    ("ReduceL2", _F16),
    ("ReduceL2", np.array([[300, 400, -541.5], [1, 2, 3]], np.float16).T),
    ("ReduceSumSquare", np.array([3e2, 4e1, 1e-2], np.float16)),
    ("ReduceSumSquare", _F16),
    ("ReduceL1", np.full(3, 30000, np.float16)),
    ("ReduceMean", np.full(4, 60000, np.float16)),
    ("ReduceLogSumExp", np.full(4, 12, np.float16)),
    ("ReduceLogSum", np.full(4, 30000, np.float16)),
    ("ReduceSum", _F16),
    ("ReduceProd", np.array([300, 400, 0.001], np.float16)),
])
def test_float16_reduction_computes_in_f32(op, x):
    _both_paths(op, {"x": x}, x.ndim, keepdims=1)


@pytest.mark.parametrize("op", ["ReduceL2", "ReduceSumSquare", "ReduceMean", "ReduceL1"])
def test_float16_reduction_over_rows_computes_in_f32(op):
    """Reducing the outer axis of (rows, cols) used to accumulate straight into the float16
    output; the f32 accumulator must be kept in registers instead."""
    x = np.array([[300, 1, 3e4], [400, 2, 3e4], [-541.5, 3, 3e4]], np.float16)
    _both_paths(op, {"x": x}, 2, opset=13, axes=[0], keepdims=1)


# Outputs that stay non-empty when the main output is empty: the lowering returned early and
# left them unwritten. (Attention's scores with a V head size of 0, LayerNormalization's
# Mean/InvStdDev over an empty normalized axis, BatchNormalization's running statistics in
# training mode with an empty batch.) onnxruntime refuses the first two.
def test_attention_scores_with_empty_value_heads():
    node = helper.make_node("Attention", ["q", "k", "v"], ["y", "pk", "pv", "qk"],
                            qk_matmul_output_mode=0)
    arrays = {"q": _f(1, 2, 3, 4), "k": _f(1, 2, 5, 4), "v": _f(1, 2, 5, 0)}
    _all_paths(node, arrays, [(_FLT, 4)] * 4, 23, oracle="ref")


def test_layer_norm_statistics_over_empty_axis():
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "m", "i"], axis=1)
    _all_paths(node, {"x": _f(3, 0), "s": _f(0), "b": _f(0)}, [(_FLT, 2)] * 3, 17,
               oracle="ref")


def test_batch_norm_training_statistics_with_empty_batch():
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                            training_mode=1)
    arrays = {"x": _f(0, 3, 2), "s": _f(3), "b": _f(3), "m": _f(3), "v": np.abs(_f(3))}
    _all_paths(node, arrays, [(_FLT, 3), (_FLT, 1), (_FLT, 1)], 15)


# ReverseSequence over an empty time axis still has one length per batch row, which must be 0:
# the lowering skipped the check (the fold raised). onnxruntime refuses it too.
def test_reverse_sequence_empty_time_axis_checks_lengths():
    node = helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=0, batch_axis=1)
    arrays = {"x": _f(0, 2, 3), "l": np.array([1, 0], np.int64)}
    with pytest.raises(InputError, match="ReverseSequence"):
        onnxjit.compile(_graph_model(node, arrays, [(_FLT, 3)], True, 10),
                        cache_dir=False).run(None, arrays)
    with pytest.raises(ModelError, match="ReverseSequence"):
        onnxjit.compile(_graph_model(node, arrays, [(_FLT, 3)], False, 10), cache_dir=False)
    arrays["l"][0] = 0
    _all_paths(node, arrays, [(_FLT, 3)], 10)


# Narrow floats in folding: numpy's einsum has no bfloat16 loops (Conv, ConvTranspose and
# Einsum folds raised TypeError), MaxPool's fold took np.iinfo of bfloat16, and float16
# Conv/Einsum folds summed in float16 (overflowing where the lowering's f32 sum does not).
# They now compute in f32 and round once, like the lowering and onnxruntime; bfloat16 is
# judged by onnx.reference (onnxruntime has no bfloat16 kernels for these).
def _bf16(*shape: int) -> np.ndarray:
    import ml_dtypes

    return _f(*shape).astype(ml_dtypes.bfloat16)


def _f16(*shape: int) -> np.ndarray:
    return (_f(*shape) * 100).astype(np.float16)


@pytest.mark.parametrize("make, oracle", [(_bf16, "ref"), (_f16, "ort")], ids=["bf16", "f16"])
@pytest.mark.parametrize("op, shapes, attrs", [
    ("Conv", [(1, 8, 4, 4), (3, 8, 3, 3)], {}),
    ("ConvTranspose", [(1, 2, 4, 4), (2, 3, 3, 3)], {}),
    ("Einsum", [(2, 64), (64, 4)], {"equation": "ij,jk->ik"}),
    ("MaxPool", [(1, 2, 4, 4)], {"kernel_shape": [2, 2]}),
])
def test_narrow_float_folds(make, oracle, op, shapes, attrs):
    arrays = {f"x{k}": make(*s) for k, s in enumerate(shapes)}
    node = helper.make_node(op, list(arrays), ["y"], **attrs)
    elem = helper.np_dtype_to_tensor_dtype(arrays["x0"].dtype)
    _all_paths(node, arrays, [(elem, len(shapes[0]) if op != "Einsum" else 2)],
               12 if op == "Einsum" else 22, oracle)


# RotaryEmbedding reads its caches at position_ids[b, s] (or [b, s]) unchecked: caches or
# position ids of another shape read out of bounds in the kernel and broadcast in the fold.
# Both now refuse them at compile time, as onnxruntime does at run time.
@pytest.mark.parametrize("arrays", [
    {"x": _f(2, 2, 3, 4), "c": _f(8, 2), "s": _f(8, 2), "p": np.zeros((1, 3), np.int64)},
    {"x": _f(2, 2, 3, 4), "c": _f(1, 3, 2), "s": _f(1, 3, 2)},
    {"x": _f(2, 2, 3, 4), "c": _f(8, 2), "s": _f(7, 2), "p": np.zeros((2, 3), np.int64)},
], ids=["position-ids-batch", "cache-batch", "sin-vs-cos"])
def test_rotary_embedding_refuses_misshaped_caches(arrays):
    node = helper.make_node("RotaryEmbedding", list(arrays), ["y"])
    for as_inputs in (True, False):
        m = _graph_model(node, arrays, [(_FLT, 4)], as_inputs, 23)
        with pytest.raises(ModelError, match="RotaryEmbedding"):
            onnxjit.compile(m, cache_dir=False).run(None, arrays if as_inputs else {})
