"""GridSample, AffineGrid, RoiAlign, NonMaxSuppression, DFT/STFT, windows, MelWeightMatrix,
BitCast, CausalConvWithState and the random generators: edge semantics beyond the ONNX backend
suite, checked against `onnx.reference` (lowered ops through the loop-IR interpreter, host-only
ops natively through the run-time shape phase), attribute/dtype errors, symbolic inference."""

from __future__ import annotations

import numpy as np
import pytest
from loop_harness import run_via_loop_ir
from models import node_model
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.errors import InputError, ModelError
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.opdef import resolve
from onnxjit.ir.types import DType, Sym, TensorType

RNG = np.random.default_rng(7)


def model(op: str, inputs: list, n_out: int = 1, opset: int = 22, consts=(), **attrs):
    """A one-node model (`models.node_model`) at this file's default opset."""
    return node_model(op, inputs, n_out, opset, consts, **attrs)


def reference(m, inputs: list) -> list[np.ndarray]:
    feeds = {f"in{k}": np.asarray(a) for k, a in enumerate(inputs) if a is not None}
    return ReferenceEvaluator(m).run(None, feeds)


def compare(got: list, ref: list, rtol: float, atol: float) -> None:
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, g.shape, r.dtype, r.shape)
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)


def check_loops(op: str, inputs: list, n_out=1, opset=22, rtol=1e-5, atol=1e-5, consts=(),
                **attrs) -> list:
    """Through the loop-IR interpreter, compared with onnx.reference."""
    m, feeds = model(op, inputs, n_out, opset, consts, **attrs)
    got = run_via_loop_ir(m, feeds)
    compare(got, reference(m, inputs), rtol, atol)
    return got


def check_native(op: str, inputs: list, n_out=1, opset=22, rtol=1e-5, atol=1e-5, consts=(),
                 **attrs) -> list:
    """Natively (onnxjit.compile; host ops go through the run-time shape phase)."""
    m, feeds = model(op, inputs, n_out, opset, consts, **attrs)
    got = list(onnxjit.compile(m, cache_dir=False)(*feeds))
    compare(got, reference(m, inputs), rtol, atol)
    return got


def evaluate(op: str, inputs: list, version: int = 22, **attrs) -> list[np.ndarray]:
    """The op's numpy `evaluate` (constant folding) on a bare node."""
    node = Node(op, [], [], dict(attrs), version=version)
    return resolve(node).evaluate(node, inputs)


def infer(op: str, types: list, version: int = 22, consts: dict | None = None, **attrs):
    ins = []
    for k, t in enumerate(types):
        v = None if t is None else Value(t)
        if v is not None and consts and k in consts:
            v.const = consts[k]
        ins.append(v)
    node = Node(op, ins, [Value()], dict(attrs), version=version)
    return resolve(node).infer(node)


# --------------------------------------------------------------------------- GridSample


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("rank", [2, 3])
def test_gridsample_modes_vs_reference(mode, pad, align, rank):
    if rank == 2:
        x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
        g = RNG.uniform(-1.7, 1.7, (2, 3, 4, 2)).astype(np.float32)
    else:
        x = RNG.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
        g = RNG.uniform(-1.7, 1.7, (1, 2, 3, 2, 3)).astype(np.float32)
    got = check_loops("GridSample", [x, g], mode=mode, padding_mode=pad, align_corners=align,
                      rtol=1e-4, atol=1e-4)
    folded = evaluate("GridSample", [x, g], mode=mode, padding_mode=pad, align_corners=align)
    np.testing.assert_allclose(folded[0], got[0], rtol=1e-5, atol=1e-5)


def test_gridsample_opset16_names_and_float64():
    # Opset 16 spells the modes bilinear/bicubic (onnx.reference only knows the opset-20
    # names): compare with the opset-20 reference. That reference rounds its sample
    # coordinates through float32 (errors up to ~2e-6 on float64 inputs; onnxruntime agrees
    # with onnxjit to 1e-15 on bilinear), hence the tolerance.
    x = RNG.standard_normal((1, 2, 3, 3))
    g = RNG.uniform(-1.2, 1.2, (1, 2, 2, 2))
    for old, new in (("bicubic", "cubic"), ("bilinear", "linear")):
        m16, feeds = model("GridSample", [x, g], opset=16, mode=old, padding_mode="border")
        m20, _ = model("GridSample", [x, g], opset=20, mode=new, padding_mode="border")
        compare(run_via_loop_ir(m16, feeds), reference(m20, [x, g]), 1e-5, 1e-5)


def test_gridsample_size_one_dims_with_reflection():
    # d == 1 with align_corners: the reflection range is empty, every tap is pixel 0.
    x = RNG.standard_normal((1, 1, 1, 4)).astype(np.float32)
    g = RNG.uniform(-2, 2, (1, 1, 5, 2)).astype(np.float32)
    got = run_via_loop_ir(model("GridSample", [x, g], padding_mode="reflection",
                                align_corners=1)[0], [x, g])[0]
    assert np.isfinite(got).all()


def test_gridsample_errors():
    f = TensorType(DType.FLOAT, (1, 2, 4, 4))
    with pytest.raises(ModelError, match="mode"):
        infer("GridSample", [f, TensorType(DType.FLOAT, (1, 3, 3, 2))], mode="bilinear")
    with pytest.raises(ModelError, match="last dim of grid must be 2"):
        infer("GridSample", [f, TensorType(DType.FLOAT, (1, 3, 3, 3))])
    with pytest.raises(ModelError, match="padding_mode"):
        infer("GridSample", [f, TensorType(DType.FLOAT, (1, 3, 3, 2))], padding_mode="wrap")
    with pytest.raises(ModelError, match="4-D"):
        infer("GridSample", [TensorType(DType.FLOAT, (1, 2, 3, 4, 4)),
                             TensorType(DType.FLOAT, (1, 3, 3, 3, 3))], version=16)


def test_gridsample_symbolic_shape():
    n, h = Sym.var("n"), Sym.var("h")
    out = infer("GridSample", [TensorType(DType.FLOAT, (n, 3, 8, 8)),
                               TensorType(DType.FLOAT, (n, h, 5, 2))])
    assert out[0].shape == (n, 3, h, 5)


# --------------------------------------------------------------------------- AffineGrid


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reference divides by 0 for L=1
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (1, 2, 3, 4, 2), (1, 1, 1, 3)])
def test_affine_grid_vs_reference(align, size):
    r = len(size) - 2
    theta = RNG.standard_normal((size[0], r, r + 1)).astype(np.float32)
    check_loops("AffineGrid", [theta, np.array(size, np.int64)], opset=20, consts=(1,),
                align_corners=align, rtol=1e-5, atol=1e-5)


def test_affine_grid_size_at_run_time():
    theta = RNG.standard_normal((2, 2, 3)).astype(np.float32)
    check_native("AffineGrid", [theta, np.array([2, 1, 3, 4], np.int64)], opset=20)


# --------------------------------------------------------------------------- RoiAlign


def _rois(n: int) -> tuple[np.ndarray, np.ndarray]:
    xy = RNG.uniform(-2, 9, (n, 2))
    wh = RNG.uniform(0.2, 6, (n, 2))
    rois = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    return rois, RNG.integers(0, 2, n).astype(np.int64)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roialign_vs_reference(mode, ctm, ratio):
    x = RNG.standard_normal((2, 3, 8, 7)).astype(np.float32)
    rois, idx = _rois(5)
    attrs = dict(mode=mode, coordinate_transformation_mode=ctm, sampling_ratio=ratio,
                 output_height=3, output_width=2, spatial_scale=0.9)
    got = check_loops("RoiAlign", [x, rois, idx], rtol=1e-4, atol=1e-5, **attrs)
    folded = evaluate("RoiAlign", [x, rois, idx], **attrs)
    np.testing.assert_allclose(folded[0], got[0], rtol=1e-5, atol=1e-6)


def test_roialign_opset10_has_no_shift():
    # Before opset 16 the only behaviour is output_half_pixel (onnx.reference ignores the
    # opset and shifts by half a pixel): compare with opset 16's explicit mode.
    x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
    rois, _ = _rois(3)
    idx = np.zeros(3, np.int64)
    m10, feeds = model("RoiAlign", [x, rois, idx], opset=10)
    m16, _ = model("RoiAlign", [x, rois, idx], opset=16,
                   coordinate_transformation_mode="output_half_pixel")
    compare(run_via_loop_ir(m10, feeds), reference(m16, [x, rois, idx]), 1e-4, 1e-5)


def test_roialign_bad_batch_index_is_an_input_error():
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    rois, _ = _rois(2)
    m, feeds = model("RoiAlign", [x, rois, np.array([0, 3], np.int64)])
    with pytest.raises(InputError, match="batch index"):
        run_via_loop_ir(m, feeds)


def test_roialign_errors():
    with pytest.raises(ModelError, match="coordinate_transformation_mode"):
        infer("RoiAlign", [TensorType(DType.FLOAT, (1, 2, 4, 4)),
                           TensorType(DType.FLOAT, (3, 4)), TensorType(DType.INT64, (3,))],
              coordinate_transformation_mode="align_corners")
    with pytest.raises(ModelError, match="rois"):
        infer("RoiAlign", [TensorType(DType.FLOAT, (1, 2, 4, 4)),
                           TensorType(DType.FLOAT, (3, 5)), TensorType(DType.INT64, (3,))])


def test_maxroipool_host():
    x = RNG.standard_normal((2, 2, 6, 6)).astype(np.float32)
    rois = np.array([[0, 0, 0, 3, 4], [1, 1.4, 2.6, 5, 5], [0, 4, 4, 9, 9]], np.float32)
    got = evaluate("MaxRoiPool", [x, rois], version=22, pooled_shape=[2, 2])[0]
    assert got.shape == (3, 2, 2, 2)
    np.testing.assert_allclose(got[0, :, 0, 0], x[0, :, 0:3, 0:2].max(axis=(1, 2)))


# --------------------------------------------------------------------------- NonMaxSuppression


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("with_score", [False, True])
def test_nms_vs_reference(center, with_score):
    boxes = RNG.uniform(0, 10, (2, 12, 4)).astype(np.float32)
    scores = RNG.uniform(0, 1, (2, 3, 12)).astype(np.float32)
    scores[0, 0, 3] = scores[0, 0, 7]  # a tie: the lower index goes first
    inputs = [boxes, scores, np.array([4], np.int64), np.array([0.3], np.float32),
              np.array([0.4], np.float32) if with_score else None]
    check_native("NonMaxSuppression", inputs, opset=11, center_point_box=center)


def test_nms_without_limit_selects_nothing():
    boxes = RNG.uniform(0, 10, (1, 4, 4)).astype(np.float32)
    scores = RNG.uniform(0, 1, (1, 1, 4)).astype(np.float32)
    out = evaluate("NonMaxSuppression", [boxes, scores], version=11)[0]
    assert out.shape == (0, 3) and out.dtype == np.int64


def test_nms_infer_unknown_count_and_errors():
    out = infer("NonMaxSuppression", [TensorType(DType.FLOAT, (1, 6, 4)),
                                      TensorType(DType.FLOAT, (1, 2, 6))], version=11)
    assert out[0].dtype == DType.INT64 and out[0].shape == (None, 3)
    with pytest.raises(ModelError, match="number of boxes"):
        infer("NonMaxSuppression", [TensorType(DType.FLOAT, (1, 6, 4)),
                                    TensorType(DType.FLOAT, (1, 2, 5))], version=11)
    with pytest.raises(ModelError, match="center_point_box"):
        infer("NonMaxSuppression", [TensorType(DType.FLOAT, (1, 6, 4)),
                                    TensorType(DType.FLOAT, (1, 2, 6))], version=11,
              center_point_box=2)


# --------------------------------------------------------------------------- DFT / STFT


@pytest.mark.parametrize("opset", [17, 20])
# One-sided forward transforms take real input.
@pytest.mark.parametrize("complex_in,onesided,inverse", [(False, 0, 0), (False, 1, 0),
                                                         (False, 0, 1), (True, 0, 0),
                                                         (True, 0, 1)])
@pytest.mark.parametrize("length", [None, 6, 11])
def test_dft_vs_reference(opset, complex_in, onesided, inverse, length):
    x = RNG.standard_normal((2, 8, 3, 2 if complex_in else 1)).astype(np.float32)
    attrs = dict(onesided=onesided, inverse=inverse)
    ln = None if length is None else np.array(length, np.int64)
    if opset >= 20:
        inputs = [x, ln, np.array(1, np.int64)]
    else:
        inputs, attrs = [x, ln], dict(attrs, axis=1)
    check_native("DFT", inputs, opset=opset, consts=(1, 2), rtol=1e-4, atol=1e-4, **attrs)


def test_dft_irfft_and_errors():
    x = RNG.standard_normal((1, 5, 2)).astype(np.float32)
    out = evaluate("DFT", [x, None, np.array(-2, np.int64)], version=20, inverse=1,
                   onesided=1)[0]
    assert out.shape == (1, 8, 1)
    np.testing.assert_allclose(out[..., 0], np.fft.irfft(x[..., 0] + 1j * x[..., 1], n=8),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ModelError, match="last dim"):
        infer("DFT", [TensorType(DType.FLOAT, (2, 8, 3))], version=20)
    with pytest.raises(ModelError, match="signal dim"):
        infer("DFT", [TensorType(DType.FLOAT, (2, 8, 2))], version=17, axis=2)
    assert infer("DFT", [TensorType(DType.FLOAT, (Sym.var("b"), 8, 1))], version=20,
                 onesided=1)[0].shape == (Sym.var("b"), 5, 2)


@pytest.mark.parametrize("window", [False, True])
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_vs_reference(window, onesided):
    x = RNG.standard_normal((2, 20, 1)).astype(np.float32)
    w = np.hanning(8).astype(np.float32) if window else None
    inputs = [x, np.array(3, np.int64), w, np.array(8, np.int64)]
    check_native("STFT", inputs, opset=17, consts=(1, 3), onesided=onesided, rtol=1e-4,
                 atol=1e-4)


# --------------------------------------------------------------------------- windows, mel


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows_vs_reference(op, periodic):
    m, _ = model(op, [np.array(10, np.int64)], opset=17, periodic=periodic,
                 output_datatype=TensorProto.DOUBLE)
    got = evaluate(op, [np.array(10, np.int64)], version=17, periodic=periodic,
                   output_datatype=TensorProto.DOUBLE)
    compare(got, reference(m, [np.array(10, np.int64)]), 1e-12, 1e-12)


def test_window_size_at_run_time_and_errors():
    m, feeds = model("HannWindow", [np.array(7, np.int32)], opset=17)
    m.graph.ClearField("output")  # onnx infers no rank here; the size is known at run time
    m.graph.output.append(helper.make_tensor_value_info("out0", TensorProto.FLOAT, ["n"]))
    fn = onnxjit.compile(m, cache_dir=False)
    compare(list(fn(*feeds)), reference(m, feeds), 1e-6, 1e-6)
    assert fn(np.array(3, np.int32))[0].shape == (3,)
    with pytest.raises(ModelError, match="output_datatype"):
        infer("HannWindow", [TensorType(DType.INT64, ())], version=17,
              output_datatype=TensorProto.BOOL)


def test_melweightmatrix_vs_reference():
    ins = [np.array(6, np.int64), np.array(32, np.int64), np.array(8000, np.int64),
           np.array(100, np.float32), np.array(3000, np.float32)]
    m, _ = model("MelWeightMatrix", ins, opset=17)
    compare(evaluate("MelWeightMatrix", ins, version=17), reference(m, ins), 1e-6, 1e-6)


# --------------------------------------------------------------------------- BitCast, conv


def test_bitcast_roundtrip_and_errors():
    x = RNG.standard_normal((3, 2)).astype(np.float32)
    y = evaluate("BitCast", [x], version=26, to=TensorProto.UINT32)[0]
    assert y.dtype == np.uint32 and y.shape == (3, 2)
    np.testing.assert_array_equal(y.view(np.float32), x)
    check_native("BitCast", [x.T], opset=26, to=TensorProto.INT32)  # non-contiguous view
    with pytest.raises(ModelError, match="one width"):
        infer("BitCast", [TensorType(DType.FLOAT, (3,))], version=26, to=TensorProto.INT64)
    with pytest.raises(ModelError, match="'to'"):
        infer("BitCast", [TensorType(DType.FLOAT, (3,))], version=26)


@pytest.mark.parametrize("bias,past,act", [(False, False, "none"), (True, True, "silu"),
                                           (True, False, "swish"), (False, True, "none")])
def test_causal_conv_with_state_vs_reference(bias, past, act):
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    w = RNG.standard_normal((3, 1, 4)).astype(np.float32)
    inputs = [x, w, RNG.standard_normal(3).astype(np.float32) if bias else None,
              RNG.standard_normal((2, 3, 3)).astype(np.float32) if past else None]
    check_loops("CausalConvWithState", inputs, n_out=2, opset=27, activation=act)


def test_causal_conv_errors():
    x = TensorType(DType.FLOAT, (2, 3, 5))
    with pytest.raises(ModelError, match="activation"):
        infer("CausalConvWithState", [x, TensorType(DType.FLOAT, (3, 1, 2))], version=27,
              activation="relu")
    with pytest.raises(ModelError, match="channels"):
        infer("CausalConvWithState", [x, TensorType(DType.FLOAT, (4, 1, 2))], version=27)


# --------------------------------------------------------------------------- random


def test_seeded_random_matches_reference_and_repeats():
    m, _ = model("RandomNormal", [], shape=[3, 4], seed=5.0, mean=1.0, scale=2.0)
    fn = onnxjit.compile(m, cache_dir=False)
    a, b = fn()[0], fn()[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, ReferenceEvaluator(m).run(None, {})[0], rtol=1e-6)
    x = RNG.uniform(0, 1, (4, 5)).astype(np.float32)
    check_native("Bernoulli", [x], seed=3.0)
    check_native("RandomUniformLike", [x], seed=11.0, low=-2.0, high=3.0)


def test_unseeded_random_shapes_dtypes_and_ranges():
    x = np.zeros((50, 40), np.float32)
    m, feeds = model("RandomUniformLike", [x], low=2.0, high=3.0,
                     dtype=TensorProto.DOUBLE)
    y = onnxjit.compile(m, cache_dir=False)(*feeds)[0]
    assert y.dtype == np.float64 and y.shape == (50, 40)
    assert (y >= 2).all() and (y < 3).all() and y.std() > 0.1
    logits = np.log(np.array([[0.7, 0.2, 0.1], [0.0, 0.0, 1.0]], np.float32) + 1e-30)
    s = evaluate("Multinomial", [logits], sample_size=2000, dtype=TensorProto.INT64)[0]
    assert s.shape == (2, 2000) and s.dtype == np.int64
    assert abs((s[0] == 0).mean() - 0.7) < 0.05 and (s[1] == 2).all()
    with pytest.raises(ModelError, match="dtype"):
        infer("RandomUniformLike", [TensorType(DType.INT64, (2,))])


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_ranks_nan_above_every_number(largest: int) -> None:
    # onnxruntime and onnx.reference (numpy's sort) rank NaN above every number; onnxjit's
    # comparisons were false for NaN and kept it in a wrong place ([1, nan] for the top 2 of
    # [1, nan, 3, 2]; found by the differential fuzzer, issue 26)
    import onnxruntime as ort

    x = np.array([[1.0, np.nan, 3.0, 2.0, np.nan, -1.0]], np.float32)
    m, _ = node_model("TopK", [x, np.array([4])], n_out=2, consts=(1,), opset=18,
                      largest=largest)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"in0": x})
    got = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
