"""Focused tests of the padding, resizing, scatter/gather-ND, one-hot, cumulative and
rearrangement op tables (tensor.pad, vision.resize, tensor.gather_scatter, reductions.cumulative,
tensor.rearrange).

Cases go beyond the ONNX backend suite: every mode with constant shape inputs, negative axes,
empty tensors, integer dtypes, run-time index checks, symbolic shape inference and error
messages. Models run down to the loop IR and through the reference interpreter
(`loop_harness.run_via_loop_ir`), compared with `onnx.reference.ReferenceEvaluator` (or
onnxruntime where the reference lacks a feature, e.g. negative pads); a few also run natively.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from loop_harness import run_via_loop_ir
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.driver import import_model
from onnxjit.errors import InputError, ModelError, UnsupportedError
from onnxjit.ir.types import Sym
from onnxjit.options import CompileOptions

OPTS = CompileOptions(verify=True, cache_dir=False)
_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
         np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32,
         np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.float16): TensorProto.FLOAT16,
         np.dtype(np.uint8): TensorProto.UINT8}


def make(op, names, feeds, consts=None, opset=19, shapes=None, out=None, rank=None,
         yshape=None, **attrs):
    """A one-node model: `names` are the node's inputs ("" omits one), `feeds` the run-time
    inputs (name -> array), `consts` initializers; `shapes` overrides declared input shapes;
    the output's dtype is `out` and rank `rank` (default: the first input's), its dims are
    left to inference unless `yshape` declares them."""
    consts = consts or {}
    shapes = shapes or {}
    first = next(iter(feeds.values()))
    node = helper.make_node(op, names, ["y"], **attrs)
    g = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, _ELEM[v.dtype], shapes.get(k, v.shape))
         for k, v in feeds.items()],
        [helper.make_tensor_value_info(
            "y", _ELEM[np.dtype(out or first.dtype)], yshape or [None] * (rank or first.ndim))],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def run(model, feeds):
    return run_via_loop_ir(model, list(feeds.values()), OPTS)[0]


def check(op, names, feeds, consts=None, opset=19, ref="onnx", rtol=1e-5, atol=1e-6,
          **attrs):
    """Run through the loop IR and compare with the reference (or onnxruntime)."""
    m = make(op, names, feeds, consts, opset, **attrs)
    got = run(m, feeds)
    if ref == "onnx":
        want = ReferenceEvaluator(m).run(None, feeds)[0]
    else:
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        want = s.run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return got


def out_type(model):
    return import_model(model.SerializeToString(), OPTS).graph.outputs[0].type


R = np.random.default_rng(0)
X34 = R.standard_normal((3, 4)).astype(np.float32)

# --------------------------------------------------------------------------- Pad


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, 2, 2, 1], [0, 3, 0, 0], [2, 0, 1, 3]])
def test_pad_modes(mode, pads):
    check("Pad", ["x", "p", "v"], {"x": X34},
          {"p": np.array(pads, np.int64), "v": np.array(1.5, np.float32)}, mode=mode)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[-2, 3], [3, -2], [-1, -1]])
def test_pad_negative_pads_crop_first_like_onnxruntime(mode, pads):
    x = np.arange(6, dtype=np.float32)
    check("Pad", ["x", "p"], {"x": x}, {"p": np.array(pads, np.int64)}, ref="ort", mode=mode)


def test_pad_axes_negative_and_int_dtype():
    x = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    check("Pad", ["x", "p", "", "a"], {"x": x},
          {"p": np.array([1, 0, 2, 1], np.int64), "a": np.array([-1, 0], np.int64)},
          opset=18, mode="edge")


def test_pad_runtime_constant_value_and_bool():
    x = np.array([[True, False]])
    got = run(make("Pad", ["x", "p", "v"], {"x": x, "v": np.array(True)},
                   {"p": np.array([1, 0, 0, 1], np.int64)}), {"x": x, "v": np.array(True)})
    np.testing.assert_array_equal(got, [[True, True, True], [True, False, True]])


def test_pad_attribute_forms_of_old_opsets():
    check("Pad", ["x"], {"x": X34}, opset=2, pads=[0, 1, 1, 0], mode="reflect")
    got = run(make("Pad", ["x"], {"x": X34}, opset=1, paddings=[1, 0, 0, 0], value=7.0),
              {"x": X34})
    np.testing.assert_array_equal(got[0], np.full(4, 7.0, np.float32))


def test_pad_empty_input_constant_fills():
    x = np.zeros((0, 2), np.float32)
    got = run(make("Pad", ["x", "p", "v"], {"x": x},
                   {"p": np.array([1, 0, 1, 0], np.int64), "v": np.array(3.0, np.float32)}),
              {"x": x})
    np.testing.assert_array_equal(got, np.full((2, 2), 3.0, np.float32))


def test_pad_symbolic_inference():
    m = make("Pad", ["x", "p"], {"x": X34}, {"p": np.array([1, 0, 2, 3], np.int64)},
             shapes={"x": ["N", 4]})
    t = out_type(m)
    assert t.shape == (Sym.var("N") + 3, 7)


def test_pad_errors():
    with pytest.raises(UnsupportedError, match="pads.*not a compile-time constant"):
        # (the declared output shape lets lowering reach the node; see the report)
        feeds = {"x": X34, "p": np.array([1, 1, 1, 1], np.int64)}
        run(make("Pad", ["x", "p"], feeds, yshape=[5, 6]), feeds)
    with pytest.raises(ModelError, match="mode 'wrap'"):
        make_and_import("Pad", ["x", "p"], {"x": X34}, {"p": np.zeros(4, np.int64)},
                        opset=18, mode="wrap")
    with pytest.raises(ModelError, match="expected 4"):
        make_and_import("Pad", ["x", "p"], {"x": X34}, {"p": np.zeros(3, np.int64)})
    with pytest.raises(ModelError, match="empty axis"):
        make_and_import("Pad", ["x", "p"], {"x": np.zeros((0, 2), np.float32)},
                        {"p": np.array([1, 0, 0, 0], np.int64)}, mode="edge",
                        run_too=True)


def make_and_import(op, names, feeds, consts=None, opset=19, run_too=False, **attrs):
    m = make(op, names, feeds, consts, opset, **attrs)
    if run_too:
        return run(m, feeds)
    return import_model(m.SerializeToString(), OPTS)


def test_center_crop_pad():
    x = R.standard_normal((5, 4, 3)).astype(np.float32)
    check("CenterCropPad", ["x", "s"], {"x": x}, {"s": np.array([3, 7], np.int64)},
          opset=18, axes=[0, -2])

# --------------------------------------------------------------------------- Resize


def _resize(x, scales=None, sizes=None, roi=None, opset=19, rtol=1e-5, **attrs):
    consts = {"roi": np.array(roi if roi is not None else [], np.float32)}
    names = ["x", "roi", "", ""]
    if scales is not None:
        consts["scales"] = np.array(scales, np.float32)
        names[2] = "scales"
    if sizes is not None:
        consts["sizes"] = np.array(sizes, np.int64)
        names[3] = "sizes"
    while not names[-1]:
        names.pop()
    return check("Resize", names, {"x": x}, consts, opset=opset, rtol=rtol, atol=1e-5, **attrs)


X4 = R.standard_normal((1, 2, 5, 6)).astype(np.float32)
COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
          "asymmetric"]


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_modes_and_transforms(mode, coord):
    _resize(X4, scales=[1, 1, 1.7, 0.6], mode=mode, coordinate_transformation_mode=coord)
    _resize(X4, sizes=[1, 2, 3, 11], mode=mode, coordinate_transformation_mode=coord)


@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_modes_int_dtype(nearest):
    x = np.arange(30, dtype=np.int64).reshape(5, 6)
    _resize(x, scales=[1.5, 0.7], mode="nearest", nearest_mode=nearest)


def test_resize_trilinear_and_int_linear_rounding():
    x = R.standard_normal((2, 3, 4)).astype(np.float64)
    _resize(x, sizes=[3, 5, 7], mode="linear")
    xi = np.arange(12, dtype=np.int32).reshape(3, 4) * 3
    _resize(xi, scales=[1.5, 1.75], mode="linear")


def test_resize_cubic_exclude_outside_antialias_axes_policy():
    a = _resize(X4, scales=[0.6, 0.45], mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5,
                antialias=1, axes=[2, 3])
    m = make("Resize", ["x", "", "s"], {"x": X4}, {"s": np.array([0.6, 0.45], np.float32)},
             mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5, antialias=1, axes=[2, -1])
    np.testing.assert_array_equal(run(m, {"x": X4}), a)  # the reference rejects axis -1
    _resize(X4, sizes=[4, 4], mode="linear", axes=[3, 2], keep_aspect_ratio_policy="not_larger")


def test_resize_tf_crop_and_resize_extrapolation():
    _resize(X4, sizes=[1, 2, 4, 5], roi=[0, 0, 0.2, -0.3, 1, 1, 1.1, 0.9], mode="linear",
            coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-9.0)


def test_upsample_and_resize10_legacy():
    x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    got = run(make("Upsample", ["x", "s"], {"x": x},
                   {"s": np.array([1, 1, 2, 3], np.float32)}, opset=9, mode="nearest"), {"x": x})
    np.testing.assert_array_equal(got, np.repeat(np.repeat(x, 2, axis=2), 3, axis=3))
    got7 = run(make("Upsample", ["x"], {"x": x}, opset=7, scales=[1.0, 1.0, 2.0, 1.0],
                    mode="linear"), {"x": x})
    assert got7.shape == (1, 1, 6, 4)
    np.testing.assert_allclose(got7[0, 0, :, 0], [0, 2, 4, 6, 8, 8])
    got10 = run(make("Resize", ["x", "s"], {"x": x},
                     {"s": np.array([1, 1, 2, 2], np.float32)}, opset=10), {"x": x})
    np.testing.assert_array_equal(got10, np.repeat(np.repeat(x, 2, axis=2), 2, axis=3))


def test_resize_inference_and_errors():
    scales = {"roi": np.zeros(0, np.float32), "s": np.array([1, 2], np.float32)}
    m = make("Resize", ["x", "roi", "s"], {"x": X34}, scales, shapes={"x": ["N", 4]})
    assert out_type(m).shape == (Sym.var("N"), 8)
    with pytest.raises(ModelError, match="exactly one of scales and sizes"):
        make_and_import("Resize", ["x", "roi", "s", "z"], {"x": X34},
                        {**scales, "z": np.array([3, 4], np.int64)})
    with pytest.raises(UnsupportedError, match="sizes.*not a compile-time constant"):
        feeds = {"x": X34, "z": np.array([3, 4], np.int64)}
        run(make("Resize", ["x", "", "", "z"], feeds, yshape=[3, 4]), feeds)
    with pytest.raises(ModelError, match="coordinate_transformation_mode"):
        make_and_import("Resize", ["x", "roi", "s"], {"x": X34}, scales,
                        coordinate_transformation_mode="half_pixel_symmetric", opset=18)

# --------------------------------------------------------------------------- gather / scatter


def test_gather_nd_batch_dims_and_negative_indices():
    data = R.standard_normal((2, 3, 4, 5)).astype(np.float32)
    ind = np.array([[[0, -1], [2, 3]], [[-3, 0], [1, 1]]], np.int64)
    check("GatherND", ["d", "i"], {"d": data, "i": ind}, opset=13, batch_dims=1)
    check("GatherND", ["d", "i"], {"d": data, "i": ind[1] % 2}, opset=13)


def test_gather_nd_out_of_range_is_input_error():
    data = np.zeros((2, 3), np.float32)
    feeds = {"d": data, "i": np.array([[0, 3]], np.int64)}
    with pytest.raises(InputError, match=r"GatherND index out of range.*\[-3, 3\)"):
        run(make("GatherND", ["d", "i"], feeds), feeds)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_reductions(reduction):
    data = R.standard_normal((3, 4)).astype(np.float32)
    ind = np.array([[1, -1, 0], [2, 2, 0]], np.int64)
    upd = R.standard_normal((2, 3)).astype(np.float32)
    check("ScatterElements", ["d", "i", "u"], {"d": data, "i": ind, "u": upd}, opset=18,
          axis=-1, reduction=reduction)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_reductions_int(reduction):
    data = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    ind = np.array([[1, 0], [0, -1], [1, 0]], np.int64)
    upd = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
    check("ScatterND", ["d", "i", "u"], {"d": data, "i": ind, "u": upd}, opset=18,
          reduction=reduction)


def test_scatter_errors():
    feeds = {"d": np.zeros((2, 2), np.float32), "i": np.array([[2]], np.int64),
             "u": np.ones((1, 1), np.float32)}
    with pytest.raises(InputError, match="ScatterElements index out of range"):
        run(make("ScatterElements", ["d", "i", "u"], feeds), feeds)
    with pytest.raises(ModelError, match="reduction 'max'"):
        make_and_import("ScatterElements", ["d", "i", "u"], feeds, opset=16, reduction="max")
    bad = dict(feeds, u=np.ones((1, 3), np.float32))
    with pytest.raises(ModelError, match="must have one shape"):
        make_and_import("ScatterElements", ["d", "i", "u"], bad)


def test_deprecated_scatter_and_tensor_scatter():
    data = np.zeros((3, 3), np.float32)
    feeds = {"d": data, "i": np.array([[1, 0, 2]], np.int64),
             "u": np.array([[1, 2, 3]], np.float32)}
    got = run(make("Scatter", ["d", "i", "u"], feeds, opset=10, axis=0), feeds)
    np.testing.assert_array_equal(got, check("ScatterElements", ["d", "i", "u"], feeds, axis=0))
    cache = np.zeros((2, 1, 4, 2), np.float32)
    upd = np.arange(12, dtype=np.float32).reshape(2, 1, 3, 2)
    wi = np.array([1, 3], np.int64)
    feeds = {"c": cache, "u": upd, "w": wi}
    check("TensorScatter", ["c", "u", "w"], feeds, opset=24, mode="circular")
    with pytest.raises(InputError, match="TensorScatter write position"):
        run(make("TensorScatter", ["c", "u", "w"], feeds, opset=24), feeds)

# --------------------------------------------------------------------------- one-hot, cumulative


def test_onehot_axes_float_indices_and_runtime_values():
    ind = np.array([[0, -2, 5], [3, 1, -6]], np.int64)
    vals = np.array([2, 7], np.int32)
    for axis in (-1, 0, 1):
        check("OneHot", ["i", "d", "v"], {"i": ind, "v": vals},
              {"d": np.array(5, np.int64)}, opset=11, axis=axis, out=np.int32,
              rank=3)
    fi = np.array([1.0, 2.5, -1.0], np.float32)
    check("OneHot", ["i", "d", "v"], {"i": fi, "v": np.array([0, 1], np.float32)},
          {"d": np.array(3.0, np.float32)}, opset=11, rank=2)


def test_onehot_depth_must_be_constant():
    feeds = {"i": np.array([0], np.int64), "d": np.array(3, np.int64),
             "v": np.array([0, 1], np.float32)}
    with pytest.raises(UnsupportedError, match="depth"):
        run(make("OneHot", ["i", "d", "v"], feeds, opset=11, out=np.float32, yshape=[1, 3]),
            feeds)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [1, -1, 0])
def test_cumsum_cumprod_middle_axes(exclusive, reverse, axis):
    x = R.integers(-3, 4, (2, 3, 4)).astype(np.int64)
    for op in ("CumSum", "CumProd"):
        check(op, ["x", "a"], {"x": x}, {"a": np.array(axis, np.int32)}, opset=26,
              exclusive=exclusive, reverse=reverse)


def test_cumsum_runtime_axis_and_range_check():
    x = R.standard_normal((3, 4, 2)).astype(np.float32)
    for axis in (0, 1, 2, -2):
        feeds = {"x": x, "a": np.array(axis, np.int64)}
        check("CumSum", ["x", "a"], feeds, opset=14, reverse=1)
    feeds = {"x": x, "a": np.array(3, np.int64)}
    with pytest.raises(InputError, match="axis is out of range"):
        run(make("CumSum", ["x", "a"], feeds, opset=14), feeds)

# --------------------------------------------------------------------------- rearrangement


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space_round_trip(mode):
    x = R.standard_normal((2, 8, 3, 2)).astype(np.float32)
    check("DepthToSpace", ["x"], {"x": x}, opset=13, blocksize=2, mode=mode)
    y = R.standard_normal((1, 3, 4, 6)).astype(np.float32)
    check("SpaceToDepth", ["x"], {"x": y}, opset=13, blocksize=2)
    m = make("DepthToSpace", ["x"], {"x": x}, opset=13, blocksize=2, shapes={"x": ["N", 8, 3,
                                                                                2]})
    assert out_type(m).shape == (Sym.var("N"), 2, 6, 4)
    with pytest.raises(ModelError, match="multiple of blocksize"):
        make_and_import("SpaceToDepth", ["x"], {"x": x}, opset=13, blocksize=2)


def test_reverse_sequence_batch_first_and_bad_lengths():
    x = np.arange(24, dtype=np.float32).reshape(3, 4, 2)
    lens = np.array([4, 0, 2], np.int64)
    check("ReverseSequence", ["x", "l"], {"x": x, "l": lens}, opset=10, batch_axis=0,
          time_axis=1)
    feeds = {"x": x, "l": np.array([5, 1, 1], np.int64)}
    with pytest.raises(InputError, match="sequence_lens values must be in"):
        run(make("ReverseSequence", ["x", "l"], feeds, opset=10, batch_axis=0, time_axis=1),
            feeds)


def test_native_code_matches_reference():
    """A few ops compiled to native code (the loop IR above is what codegen compiles)."""
    x = R.standard_normal((1, 2, 5, 6)).astype(np.float32)
    m = make("Resize", ["x", "roi", "s"], {"x": x},
             {"roi": np.zeros(0, np.float32), "s": np.array([1, 1, 1.6, 0.5], np.float32)},
             mode="cubic")
    fn = onnxjit.compile(m, cache_dir=False)
    np.testing.assert_allclose(fn(x)[0], ReferenceEvaluator(m).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)
    data = np.zeros((4, 3), np.float32)
    feeds = {"d": data, "i": np.array([[5]], np.int64), "u": np.ones((1, 3), np.float32)}
    fn = onnxjit.compile(make("ScatterND", ["d", "i", "u"], feeds), cache_dir=False)
    with pytest.raises(InputError, match="ScatterND index out of range"):
        fn(*feeds.values())


FOLD_CASES = [
    ("Pad", ["x", "p"], {"x": X34}, {"p": np.array([1, -1, 0, 2], np.int64)}, 19,
     {"mode": "reflect"}),
    ("CenterCropPad", ["x", "s"], {"x": X34}, {"s": np.array([2, 6], np.int64)}, 18, {}),
    ("Resize", ["x", "", "s"], {"x": X34}, {"s": np.array([1.5, 0.5], np.float32)}, 19,
     {"mode": "linear"}),
    ("GatherND", ["d", "i"], {"d": X34, "i": np.array([[2], [-1]], np.int64)}, {}, 13, {}),
    ("ScatterND", ["d", "i", "u"], {"d": X34, "i": np.array([[1]], np.int64),
                                    "u": np.ones((1, 4), np.float32)}, {}, 18,
     {"reduction": "add"}),
    ("ScatterElements", ["d", "i", "u"], {"d": X34, "i": np.array([[1, 0]], np.int64),
                                          "u": np.ones((1, 2), np.float32)}, {}, 18,
     {"axis": 1, "reduction": "max"}),
    ("CumSum", ["x", "a"], {"x": X34}, {"a": np.array(0, np.int64)}, 14, {"exclusive": 1}),
    ("DepthToSpace", ["x"], {"x": R.standard_normal((1, 4, 2, 3)).astype(np.float32)}, {},
     13, {"blocksize": 2, "mode": "CRD"}),
    ("ReverseSequence", ["x", "l"], {"x": X34, "l": np.array([2, 0, 3, 1], np.int64)}, {},
     10, {}),
    ("TensorScatter", ["c", "u", "w"], {"c": np.zeros((2, 5, 2), np.float32),
                                        "u": np.ones((2, 2, 2), np.float32),
                                        "w": np.array([4, 0], np.int64)}, {}, 24,
     {"axis": 1, "mode": "circular"}),
]


@pytest.mark.parametrize("case", FOLD_CASES, ids=[c[0] for c in FOLD_CASES])
def test_constant_folding_matches_lowering(case):
    """`evaluate` (constant folding) and the lowered kernels agree: one source of truth."""
    op, names, feeds, consts, opset, attrs = case
    lowered = run(make(op, names, feeds, consts, opset, **attrs), feeds)
    anchor = {"anchor": np.zeros(1, np.float32)}  # a graph input, so the model has one
    folded = make(op, names, anchor, {**consts, **feeds}, opset, rank=lowered.ndim, **attrs)
    np.testing.assert_allclose(run(folded, anchor), lowered, rtol=1e-6)


def test_empty_tensors():
    data = R.standard_normal((3, 4)).astype(np.float32)
    empty_i = np.zeros((0, 4), np.int64)
    feeds = {"d": data, "i": empty_i, "u": np.zeros((0, 4), np.float32)}
    np.testing.assert_array_equal(run(make("ScatterElements", ["d", "i", "u"], feeds), feeds),
                                  data)
    feeds = {"d": data, "i": np.zeros((0, 1), np.int64)}
    assert run(make("GatherND", ["d", "i"], feeds), feeds).shape == (0, 4)
    x = np.zeros((0, 2, 3, 3), np.float32)
    got = _resize(x, scales=[1, 1, 2, 2], mode="linear")
    assert got.shape == (0, 2, 6, 6)
    cs = {"x": np.zeros((2, 0), np.float32)}
    assert run(make("CumSum", ["x", "a"], cs, {"a": np.array(1, np.int64)}), cs).shape == (2, 0)
