"""Resize linear/cubic is bit-exact with onnxruntime where onnxruntime has a kernel (issue 26).

A one-ulp difference in a float32 Resize became a mismatch once a Cast to double exposed it
(fuzz seed 2101233). One model holds a Resize per (mode, layout, coordinate mode) case, so
one compilation covers them all; each output must equal onnxruntime's bit for bit, compiled
for the shape, for every shape (symbolic dims, the run-time tables), and constant-folded.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit

ort = pytest.importorskip("onnxruntime")

COORDS = ["half_pixel", "asymmetric", "half_pixel_symmetric", "align_corners",
          "pytorch_half_pixel", "tf_crop_and_resize"]
#: coordinate modes whose formula holds the output length: onnxruntime takes the integer size,
#: the spec scale * d, so they agree only where scale * d is an integer
LENGTH = COORDS[3:]
# (mode, input shape, scales, extra attributes); scale * d is an integer on every axis of the
# first ones, so every coordinate mode is checked there
CASES = [("linear", (4, 6), [1.5, 0.5], {}),
         ("linear", (2, 4, 4), [2.0, 1.5, 0.75], {}),
         ("linear", (2, 3, 4, 6), [1.0, 1.0, 2.0, 1.5], {}),  # NCHW
         ("linear", (1, 4, 4, 3), [1.0, 0.75, 2.5, 1.0], {}),  # NHWC
         ("linear", (1, 1, 2, 2, 4), [1.0, 1.0, 1.5, 2.0, 0.75], {}),
         ("cubic", (4, 6), [1.5, 0.5], {}),
         ("cubic", (1, 2, 4, 4), [1.0, 1.0, 2.5, 1.25], {"exclude_outside": 1,
                                                        "cubic_coeff_a": -0.5}),
         # fractional scale * d, as in fuzz seed 2101233 (a dim of 1 scaled by 1.5)
         ("linear", (2, 4, 1, 3), [1.0, 1.0, 2.0, 1.5], {"fractional": True}),
         ("linear", (3, 5), [1.3, 0.7], {"fractional": True}),
         ("cubic", (5, 3), [0.6, 1.7], {"fractional": True})]


FULL = (0, 2, 5, 6)


def _model(dtype: int, symbolic: bool, folded: np.ndarray | None = None,
           coords=COORDS) -> tuple[onnx.ModelProto, dict]:
    rng = np.random.default_rng(2101233)
    npdt = helper.tensor_dtype_to_np_dtype(dtype)
    nodes, inputs, outputs, inits, feeds = [], [], [], [], {}
    for k, (mode, shape, scales, extra) in enumerate(CASES):
        extra = dict(extra)
        fractional = extra.pop("fractional", False)
        x = (rng.standard_normal(shape) * 30).astype(npdt)
        dims = [f"d{k}_{i}" for i in range(len(shape))] if symbolic else list(shape)
        if folded is not None:
            inits.append(numpy_helper.from_array(x, f"x{k}"))
        else:
            inputs.append(helper.make_tensor_value_info(f"x{k}", dtype, dims))
            feeds[f"x{k}"] = x
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), f"s{k}"))
        r = len(shape)
        roi = np.concatenate([np.full(r, -0.2), np.full(r, 1.1)]).astype(np.float32)
        inits.append(numpy_helper.from_array(roi, f"r{k}"))
        # every coordinate mode on the 2-D, NCHW and bicubic cases; two on the others (time)
        for c in coords if k in FULL else coords[k % 3::3]:
            if fractional and c in LENGTH:
                continue
            name = f"y{k}_{c}"
            nodes.append(helper.make_node("Resize", [f"x{k}", f"r{k}", f"s{k}"], [name],
                                          mode=mode, coordinate_transformation_mode=c,
                                          extrapolation_value=0.5, **extra))
            outputs.append(helper.make_tensor_value_info(name, dtype, None))
    g = helper.make_graph(nodes, "resize_ort", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 10
    return m, feeds


def _check(model: onnx.ModelProto, feeds: dict, specialize: str) -> None:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    want = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    got = onnxjit.compile(model, cache_dir=False, specialize=specialize).run(None, feeds)
    names = [o.name for o in model.graph.output]
    bad = [n for n, g, w in zip(names, got, want)
           if g.shape != w.shape or g.tobytes() != w.tobytes()]
    assert not bad, f"not bit-exact with onnxruntime: {bad}"


def test_static_bit_exact():
    _check(*_model(TensorProto.FLOAT, symbolic=False), "auto")


def test_float16_bit_exact():
    """float16 data is blended in float32 and rounded once, as onnxruntime does."""
    _check(*_model(TensorProto.FLOAT16, symbolic=False, coords=COORDS[:2]), "auto")


def test_folded_bit_exact():
    _check(*_model(TensorProto.FLOAT, symbolic=False, folded=np.zeros(0)), "auto")


def test_symbolic_bit_exact():
    """The run-time tables (linear, coordinate modes with a run-time lowering)."""
    _check(*_model(TensorProto.FLOAT, symbolic=True, coords=COORDS[:5]), "dynamic")


def test_spec_where_onnxruntime_departs():
    """align_corners where scale * d is fractional: the spec's length scale * d (the ONNX
    backend test resize_downsample_scales_linear_align_corners), not onnxruntime's integer
    output size (which gives 4 for the second element)."""
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear",
                            coordinate_transformation_mode="align_corners")
    g = helper.make_graph([node], "ac", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 1, 2, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [numpy_helper.from_array(
                np.array([1, 1, 0.6, 0.6], np.float32), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 2, 4)
    got = onnxjit.compile(m, cache_dir=False).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, [[[[1.0, 3.142857]]]], rtol=1e-6)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_sizes(mode):
    """From sizes, the spec's length is the size itself: align_corners' y * 2 / 6 is 1 for
    y = 3 exactly (fuzz corners seed 100877: the float32 quotient 7/3 taken as the scale made
    it 1 + 1e-8, and nearest_mode ceil picked the next element)."""
    node = helper.make_node("Resize", ["x", "", "", "z"], ["y"], mode=mode,
                            coordinate_transformation_mode="align_corners", nearest_mode="ceil")
    g = helper.make_graph([node], "sizes", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [3, 3])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [numpy_helper.from_array(
                np.array([2, 7], np.int64), "z")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 10
    x = np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32)
    _check(m, {"x": x}, "auto")
