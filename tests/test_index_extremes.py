"""Sweep (issue 26): index and clamping rules at the INT64/INT32 extremes, folded and lowered.

Each case is one node run on two paths: lowered (the data is a graph input; the index-like
inputs too unless the lowering needs them constant) and folded (every input an initializer,
so `OpDef.evaluate` computes it at compile time). Valid cases must equal the oracle on both
paths: onnxruntime, or onnx.reference where onnxruntime departs from the spec (each such case
says why). Invalid ones (an index outside [-dim, dim), a size that does not add up, a pad that
makes a dim negative) must raise onnxjit's ModelError or InputError naming the node on both
paths, never wrap around, read out of bounds or crash with a numpy error.

Slice has its own sweep (tests/test_slice_clamping.py).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from op_audit import assert_same, reference

import onnxjit
from onnxjit.errors import InputError, ModelError

I64, I32 = np.iinfo(np.int64), np.iinfo(np.int32)
F = onnx.TensorProto.FLOAT
X = np.arange(12, dtype=np.float32).reshape(3, 4)


def _model(node: onnx.NodeProto, arrays: dict, consts: set, outs: list,
           opset: int) -> onnx.ModelProto:
    """`node` over `arrays`, those named in `consts` as initializers; `outs`: output ranks."""
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in arrays.items() if n not in consts]
    inits = [numpy_helper.from_array(a, n) for n, a in arrays.items() if n in consts]
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(o, F, [None] * r)
                                             for o, r in zip(node.output, outs)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _paths(node, arrays, outs, opset, const=()):
    """(lowered model, its feeds), (folded model, no feeds)."""
    lowered = _model(node, arrays, set(const), outs, opset)
    feeds = {n: a for n, a in arrays.items() if n not in const}
    return (lowered, feeds), (_model(node, arrays, set(arrays), outs, opset), {})


def _check(node, arrays, outs, opset, const=(), oracle="ort"):
    (low, feeds), (fold, _) = _paths(node, arrays, outs, opset, const)
    if oracle == "ort":
        want = ort.InferenceSession(low.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)
    else:
        want = reference(low, feeds)
    for what, (m, fd) in (("lowered", (low, feeds)), ("folded", (fold, {}))):
        assert_same(onnxjit.compile(m, cache_dir=False).run(None, fd), want, what)


def _refused(node, arrays, outs, opset, const=()):
    for m, fd in _paths(node, arrays, outs, opset, const):
        with pytest.raises((ModelError, InputError)) as info:
            onnxjit.compile(m, cache_dir=False).run(None, fd)
        assert f"({node.op_type})" in str(info.value)


# --------------------------------------------------------------------------- gathers, scatters


@pytest.mark.parametrize("dt", [np.int64, np.int32])
@pytest.mark.parametrize("idx, ok", [([-3, 2], True), ([-1, 0], True), ([-4], False),
                                     ([3], False), ("min", False), ("max", False)])
def test_gather_extremes(dt, idx, ok):
    ii = np.iinfo(dt)
    idx = [ii.min] if idx == "min" else [ii.max] if idx == "max" else idx
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0)
    arrays = {"x": X, "i": np.array(idx, dt)}
    (_check if ok else _refused)(node, arrays, [2], 13)


@pytest.mark.parametrize("dt", [np.int64, np.int32])
@pytest.mark.parametrize("idx, ok", [([[-4, 3]], True), ([[-5, 0]], False), ([[4, 0]], False),
                                     ("min", False), ("max", False)])
def test_gather_elements_extremes(dt, idx, ok):
    ii = np.iinfo(dt)
    idx = [[ii.min, 0]] if idx == "min" else [[0, ii.max]] if idx == "max" else idx
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)
    # onnx.reference refuses indices smaller than the data on the other axis; onnxruntime
    # follows the spec
    (_check if ok else _refused)(node, {"x": X, "i": np.array(idx, dt)}, [2], 13)


@pytest.mark.parametrize("idx, ok", [([[-3, -4]], True), ([[-1, 3]], True), ([[-4, 0]], False),
                                     ([[I64.min, 0]], False), ([[0, I64.max]], False)])
def test_gather_nd_extremes(idx, ok):
    node = helper.make_node("GatherND", ["x", "i"], ["y"])
    (_check if ok else _refused)(node, {"x": X, "i": np.array(idx, np.int64)}, [1], 13)


@pytest.mark.parametrize("idx, ok", [(-4, True), (3, True), (-5, False), (I64.min, False),
                                     (I64.max, False)])
def test_scatter_extremes(idx, ok):
    upd = np.full((1, 1), 100, np.float32)
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1)
    arrays = {"x": X, "i": np.array([[idx]], np.int64), "u": upd}
    (_check if ok else _refused)(node, arrays, [2], 18)
    nd = helper.make_node("ScatterND", ["x", "i", "u"], ["y"])
    row = idx if -3 <= idx < 3 or not ok else -3
    arrays = {"x": X, "i": np.array([[row]], np.int64), "u": np.full((1, 4), 7, np.float32)}
    (_check if ok else _refused)(nd, arrays, [2], 18)


# --------------------------------------------------------------------------- Pad


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads, ok", [
    ([0, -1, 0, -2], True), ([1, 2, 2, 1], True),
    ([0, 0, -4, 0], False), ([-4, 0, 0, 0], False), ([I64.min, 0, 0, 0], False),
    ([0, I64.min, 0, I64.max], False), ([0, 0, I64.max, 0], False),
])
def test_pad_extremes(mode, pads, ok):
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)
    (_check if ok else _refused)(node, {"x": X, "p": np.array(pads, np.int64)}, [2], 19)


def test_pad_crop_to_empty():
    # reflect/edge/wrap cropping a dim to 0: onnxruntime refuses them, onnx.reference cannot
    # crop at all; the spec's negative pads remove rows, here all of them
    for mode in ("constant", "reflect", "edge", "wrap"):
        node = helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)
        arrays = {"x": X, "p": np.array([-3, 0, 0, 0], np.int64)}
        for m, fd in _paths(node, arrays, [2], 19):
            got = onnxjit.compile(m, cache_dir=False).run(None, fd)[0]
            assert got.shape == (0, 4) and got.dtype == np.float32, mode


@pytest.mark.parametrize("axes, ok", [([-1], True), ([-2], True), ([-3], False),
                                      ([I64.min], False), ([I64.max], False)])
def test_pad_axes_extremes(axes, ok):
    node = helper.make_node("Pad", ["x", "p", "", "a"], ["y"])
    arrays = {"x": X, "p": np.array([1, 2], np.int64), "a": np.array(axes, np.int64)}
    (_check if ok else _refused)(node, arrays, [2], 19)


# --------------------------------------------------------------------------- Trilu, EyeLike


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [0, 3, -2, 4, -3, -4, 100, I64.max, I64.max - 1, I64.min,
                               I64.min + 1])
def test_trilu_k_extremes(upper, k):
    # numpy's triu/tril overflowed (k - 1) on k near INT64_MIN when folding; onnx.reference
    # too, so onnxruntime is the oracle
    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)
    _check(node, {"x": X, "k": np.array(k, np.int64)}, [2], 14)


@pytest.mark.parametrize("k", [I64.min, I64.max, -3, 4, -2])
def test_eye_like_k_extremes(k):
    node = helper.make_node("EyeLike", ["x"], ["y"], k=k)
    _check(node, {"x": X}, [2], 9)


# --------------------------------------------------------------------------- OneHot


@pytest.mark.parametrize("dt", [np.int64, np.int32])
@pytest.mark.parametrize("idx", [[-1, 2], [-3, 0], [-4, 3], "extremes"])
def test_one_hot_index_extremes(dt, idx):
    ii = np.iinfo(dt)
    idx = [ii.min, ii.max, ii.min + 1, ii.max - 1] if idx == "extremes" else idx
    node = helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=-1)
    arrays = {"i": np.array(idx, dt), "d": np.array(3, dt), "v": np.array([0, 1], np.float32)}
    _check(node, arrays, [2], 11)


@pytest.mark.parametrize("depth", [0, -1, I64.min, I64.max])
def test_one_hot_bad_depth(depth):
    node = helper.make_node("OneHot", ["i", "d", "v"], ["y"])
    arrays = {"i": np.array([1], np.int64), "d": np.array(depth, np.int64),
              "v": np.array([0, 1], np.float32)}
    _refused(node, arrays, [2], 11)


# --------------------------------------------------------------------------- Split


@pytest.mark.parametrize("split, ok", [
    ([0, 3, 0], True), ([3, 0, 0], True), ([1, 1, 1], True),
    ([I64.max, I64.max, 5], False),  # wraps around to 3 in int64
    ([I64.max, 1, I64.max], False), ([I64.min, I64.min, 3], False), ([-1, 4, 0], False),
])
def test_split_size_extremes(split, ok):
    node = helper.make_node("Split", ["x", "s"], ["a", "b", "c"], axis=0)
    (_check if ok else _refused)(node, {"x": X, "s": np.array(split, np.int64)}, [2] * 3, 18)


def test_split_attribute_sum_wrapping_is_refused():
    node = helper.make_node("Split", ["x"], ["a", "b", "c"], axis=0, split=[I64.max, I64.max, 5])
    _refused(node, {"x": X}, [2] * 3, 11)


# --------------------------------------------------------------------------- Resize


IMG = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)


@pytest.mark.parametrize("scale", [0.0, -1.0, np.inf, -np.inf, np.nan])
def test_resize_bad_scales(scale):
    # inf used to crash infer-shapes with an OverflowError (int(inf))
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")
    arrays = {"x": IMG, "s": np.array([1, 1, scale, 1], np.float32)}
    _refused(node, arrays, [4], 19, const=("s",))


@pytest.mark.parametrize("sizes, ok", [([1, 1, 0, 4], True), ([1, 1, 7, 1], True),
                                       ([1, 1, -1, 4], False), ([1, 1, I64.min, 1], False),
                                       ([1, 1, I64.max, 1], False)])
def test_resize_size_extremes(sizes, ok):
    # onnxruntime refuses a 0 output size, which the spec allows: onnx.reference judges
    node = helper.make_node("Resize", ["x", "", "", "z"], ["y"], mode="linear")
    arrays = {"x": IMG, "z": np.array(sizes, np.int64)}
    if ok:
        _check(node, arrays, [4], 19, const=("z",), oracle="ref")
    else:
        _refused(node, arrays, [4], 19, const=("z",))


@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric", "align_corners",
                                   "pytorch_half_pixel", "half_pixel_symmetric"])
@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_coordinates_clamp(coord, nearest):
    # upsampling by 3.5 puts the outer output pixels' source coordinates before 0 and past the
    # last pixel; nearest rounding must clamp them to the edge. Downsampling by 0.6 / 0.3 is
    # left out: onnxruntime sizes align_corners by the integer output length where the spec's
    # formulas take the fractional one, and its float rounding differs on exact .5 ties.
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest",
                            coordinate_transformation_mode=coord, nearest_mode=nearest)
    arrays = {"x": IMG, "s": np.array([1, 1, 3.5, 2.25], np.float32)}
    _check(node, arrays, [4], 19, const=("s",))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("roi", [[-0.5, 0.2, 1.5, 2.0], [-1e30, 0, 1e30, 1], [0.5, 0, 0.5, 1]])
def test_resize_crop_roi_extremes(mode, roi):
    # tf_crop_and_resize: source coordinates outside the image take extrapolation_value. A
    # roi of +-1e30 puts every row outside (onnxruntime interpolates instead: its coordinate
    # arithmetic overflows), so onnx.reference, which follows the formula, is the oracle.
    node = helper.make_node("Resize", ["x", "r", "s"], ["y"], mode=mode,
                            coordinate_transformation_mode="tf_crop_and_resize",
                            extrapolation_value=-7.0)
    arrays = {"x": IMG, "r": np.array([0, 0, roi[0], roi[1], 1, 1, roi[2], roi[3]], np.float32),
              "s": np.array([1, 1, 1.5, 0.75], np.float32)}
    _check(node, arrays, [4], 19, const=("r", "s"), oracle="ref")
