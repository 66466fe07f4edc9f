"""Conv, ConvTranspose and ConvInteger: geometries beyond the backend suite (strides with
dilations and asymmetric pads, 1-D/3-D, groups, depthwise with a channel multiplier, batches,
every auto_pad), checked against onnx's reference implementation through the loop-IR
interpreter and natively against onnxruntime; the lowering strategies; constant folding;
symbolic shape inference; and the errors a bad model gets."""

from __future__ import annotations

import numpy as np
import pytest
from conv_cases import RNG, check, model, ort_run, program, rand, reference
from loop_harness import run_via_loop_ir
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.errors import InputError, ModelError, UnsupportedError
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.loops import Load, Matmul, walk
from onnxjit.ir.opdef import resolve
from onnxjit.ir.types import DType, Sym, TensorType

# --------------------------------------------------------------------------- Conv

CONV_CASES = [
    # (x shape, w shape, attributes)
    ((2, 3, 11, 9), (4, 3, 3, 2), dict(strides=[2, 1], dilations=[2, 3], pads=[1, 0, 2, 3])),
    ((1, 4, 10), (6, 2, 3), dict(group=2, strides=[2], pads=[2, 1])),
    ((2, 2, 5, 6, 7), (3, 2, 2, 3, 2), dict(strides=[1, 2, 2], pads=[1, 0, 1, 0, 1, 1])),
    ((1, 8, 7, 7), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1])),
    ((2, 3, 9, 8), (6, 1, 3, 3), dict(group=3, strides=[2, 2], dilations=[1, 2],
                                      pads=[0, 2, 1, 1])),  # depthwise, multiplier 2
    ((1, 4, 6, 6), (5, 4, 1, 1), {}),  # pointwise: X read directly
    ((3, 4, 6, 5), (6, 2, 1, 1), dict(group=2)),  # grouped pointwise, batch 3
    ((1, 4, 7, 6), (5, 4, 1, 1), dict(strides=[2, 2])),
    ((1, 3, 10, 7), (4, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[3, 2])),
    ((1, 3, 10, 7), (4, 3, 4, 2), dict(auto_pad="SAME_LOWER", strides=[3, 2])),
    ((1, 3, 8, 7), (4, 3, 3, 3), dict(auto_pad="VALID", strides=[2, 2])),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(pads=[4, 0, 0, 4])),  # pads larger than the kernel
    ((1, 2, 5), (3, 2, 2), dict(kernel_shape=[2], dilations=[4])),
    ((2, 1, 6, 6, 6), (2, 1, 3, 3, 3), dict(group=1, pads=[1] * 6, strides=[2, 2, 2])),
    # kernels wider than MAX_UNROLL: the taps of the last dim loop (run-time tap ranges)
    ((1, 2, 40), (3, 2, 20), dict(pads=[7, 3], strides=[3], dilations=[2])),
    ((1, 3, 9, 30), (3, 1, 5, 18), dict(group=3, pads=[2, 9, 2, 8])),  # depthwise, 90 taps
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv_matches_reference(xs, ws, attrs, bias):
    b = rand(ws[0]) if bias else None
    m = model("Conv", xs, [rand(*ws), b], attrs)
    check(m, rand(*xs), native=bias)


def test_conv_f64_and_opset1():
    m = model("Conv", (2, 2, 6, 5), [rand(3, 2, 2, 2, dtype=np.float64)],
              dict(pads=[1, 0, 0, 1]), dtype=np.float64, opset=1)
    check(m, rand(2, 2, 6, 5, dtype=np.float64), native=False, tol=1e-10)


def test_lowering_strategies():
    x = rand(1, 4, 6, 6)
    # Pointwise: one Matmul reading X itself, no im2col panel.
    prog = program(model("Conv", x.shape, [rand(5, 4, 1, 1)], {}), x)
    mms = [s for k in prog.kernels for s in walk(k.body) if isinstance(s, Matmul)]
    assert len(mms) == 1 and mms[0].b.kind == "input"
    assert not any(k.name.startswith("conv_im2col") for k in prog.kernels)
    # 3x3: per block of output rows, an im2col panel and a Matmul, in one kernel.
    prog = program(model("Conv", x.shape, [rand(5, 4, 3, 3)], dict(pads=[1] * 4)), x)
    assert [k.name for k in prog.kernels] == ["conv_im2col_gemm"]
    mms = [s for s in walk(prog.kernels[0].body) if isinstance(s, Matmul)]
    assert len(mms) == 1 and mms[0].b.kind == "temp" and (mms[0].m, mms[0].k) == (5, 36)
    # Depthwise: a direct nest, no Matmul.
    prog = program(model("Conv", x.shape, [rand(4, 1, 3, 3)], dict(group=4)), x)
    assert not any(isinstance(s, Matmul) for k in prog.kernels for s in walk(k.body))
    assert any(isinstance(s, Load) for k in prog.kernels for s in walk(k.body))


def test_symbolic_batch_through_compile():
    w, b = rand(4, 3, 3, 3), rand(4)
    m = model("Conv", (1, 3, 8, 8), [w, b], dict(pads=[1, 1, 1, 1], strides=[2, 2]),
              x_dims=["N", 3, 8, 8])
    fn = onnxjit.compile(m, cache_dir=False)
    for n in (1, 3):
        x = rand(n, 3, 8, 8)
        (y,) = fn(x)
        np.testing.assert_allclose(y, ort_run(m, x), rtol=1e-4, atol=1e-4)


def test_symbolic_spatial_dims_through_compile():
    w = rand(4, 1, 3, 3)
    m = model("Conv", (1, 4, 9, 9), [w], dict(group=4, strides=[2, 2], pads=[1, 0, 1, 0]),
              x_dims=["N", 4, "H", "W"])
    fn = onnxjit.compile(m, cache_dir=False)
    for shape in ((1, 4, 9, 9), (2, 4, 12, 7)):
        x = rand(*shape)
        np.testing.assert_allclose(fn(x)[0], ort_run(m, x), rtol=1e-4, atol=1e-4)


def test_model_error_through_compile_names_node():
    m = model("Conv", (1, 4, 5, 5), [rand(6, 4, 3, 3)], dict(group=2), name="bad_conv")
    with pytest.raises(ModelError, match="bad_conv") as e:
        onnxjit.compile(m, cache_dir=False)(rand(1, 4, 5, 5))
    assert "channels" in str(e.value)


def _infer(op: str, shapes: list, dtype=DType.FLOAT, **attrs):
    ins = [Value(TensorType(dtype, s), f"x{k}") for k, s in enumerate(shapes)]
    node = Node(op, ins, [Value()], dict(attrs), version=22, name="n0")
    return resolve(node).infer(node)[0]


def test_symbolic_shape_inference():
    n, h, w = Sym.var("N"), Sym.var("H"), Sym.var("W")
    t = _infer("Conv", [(n, 3, h, w), (8, 3, 3, 3)], strides=[2, 2], pads=[1, 1, 1, 1])
    assert t.shape[:2] == (n, 8)
    for hv in (7, 8, 224):
        assert t.shape[2].evaluate({"H": hv}) == (hv + 2 - 3) // 2 + 1
    t = _infer("Conv", [(n, 3, h, 10), (8, 3, 3, 3)], auto_pad="SAME_UPPER", strides=[3, 3])
    assert t.shape[2].evaluate({"H": 10}) == 4 and t.shape[3] == 4
    t = _infer("ConvTranspose", [(n, 4, h, 5), (4, 3, 3, 3)], group=2, strides=[2, 2],
               output_padding=[1, 0])
    assert t.shape[1] == 6 and t.shape[3] == 2 * 4 + 3
    assert t.shape[2].evaluate({"H": 5}) == 2 * 4 + 1 + 3
    assert _infer("Conv", [None, (8, 3, 3, 3)]).shape == (None, 8, None, None)
    assert _infer("Conv", [(1, 3, None, 5), (8, 3, 3, 3)]).shape == (1, 8, None, 3)


@pytest.mark.parametrize("shapes,attrs,message", [
    ([(1, 4, 5, 5), (8, 3, 3, 3)], {}, "channels"),
    ([(1, 6, 5, 5), (8, 2, 3, 3)], dict(group=3), "divisible by group"),
    ([(1, 4, 5, 5), (8, 4, 3, 3)], dict(group=0), "group"),
    ([(1, 4, 5, 5), (8, 4, 3, 3)], dict(kernel_shape=[2, 2]), "kernel_shape"),
    ([(1, 4, 5, 5), (8, 4, 3, 3)], dict(strides=[1]), "strides"),
    ([(1, 4, 5, 5), (8, 4, 3, 3)], dict(pads=[1, 1, -1, 1]), "pads"),
    ([(1, 4, 5, 5), (8, 4, 3, 3)], dict(auto_pad="SAME"), "auto_pad"),
    ([(1, 4, 2, 2), (8, 4, 3, 3)], {}, "no output"),
    ([(1, 4, 5, 5), (8, 4, 3, 3), (4,)], {}, "bias"),
    ([(1, 4, 5), (8, 4, 3, 3)], {}, "rank"),
])
def test_conv_model_errors(shapes, attrs, message):
    with pytest.raises(ModelError, match=message) as e:
        _infer("Conv", shapes, **attrs)
    assert "n0" in str(e.value)


def test_conv_transpose_channel_error_and_f16():
    with pytest.raises(ModelError, match="channels") as e:
        _infer("ConvTranspose", [(1, 4, 5, 5), (3, 2, 3, 3)])
    assert "n0" in str(e.value)
    with pytest.raises((UnsupportedError, ModelError), match="c64") as e:
        _infer("Conv", [(1, 4, 5, 5), (8, 4, 3, 3)], dtype=DType.COMPLEX64)
    assert "n0" in str(e.value)


def test_evaluate_folds_like_reference():
    x, w, b = rand(2, 4, 7, 6), rand(6, 2, 3, 2), rand(6)
    attrs = dict(group=2, strides=[2, 1], dilations=[1, 2], pads=[1, 0, 2, 1])
    ins = [Value(TensorType(DType.FLOAT, a.shape), f"x{k}") for k, a in enumerate((x, w, b))]
    node = Node("Conv", ins, [Value()], attrs, version=22)
    (got,) = resolve(node).evaluate(node, [x, w, b])
    np.testing.assert_allclose(got, reference(model("Conv", x.shape, [w, b], attrs), x),
                               rtol=1e-5, atol=1e-5)
    wt = rand(4, 3, 3, 2)
    attrs = dict(strides=[2, 3], output_padding=[1, 2], pads=[1, 0, 0, 1])
    node = Node("ConvTranspose", ins, [Value()], attrs, version=22)
    (got,) = resolve(node).evaluate(node, [x, wt, b[:3]])
    want = reference(model("ConvTranspose", x.shape, [wt, b[:3]], attrs), x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- ConvTranspose

CONVT_CASES = [
    ((2, 3, 4, 5), (3, 2, 3, 3), dict(strides=[2, 3], dilations=[2, 1], pads=[1, 0, 2, 2])),
    ((1, 4, 5), (4, 3, 3), dict(group=2, strides=[3], output_padding=[2])),
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 0])),
    ((1, 3, 4, 4), (3, 2, 3, 3), dict(strides=[2, 2], output_shape=[10, 9])),
    ((1, 3, 4, 4), (3, 2, 3, 3), dict(strides=[2, 2], output_shape=[7, 8])),
    ((1, 3, 4, 5), (3, 2, 4, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 3, 4, 5), (3, 2, 4, 3), dict(strides=[2, 3], auto_pad="SAME_LOWER")),
    ((3, 4, 3, 3), (4, 1, 2, 2), dict(group=4, dilations=[2, 2])),
    ((1, 2, 3, 3), (2, 2, 1, 1), dict(strides=[2, 2])),
    ((1, 2, 9), (2, 3, 19), dict(strides=[2], pads=[4, 2], dilations=[2])),  # wide kernel
]


@pytest.mark.parametrize("xs,ws,attrs", CONVT_CASES)
def test_conv_transpose_matches_reference(xs, ws, attrs):
    mout = ws[1] * attrs.get("group", 1)
    m = model("ConvTranspose", xs, [rand(*ws), rand(mout)], attrs)
    x = rand(*xs)
    want = ort_run(m, x)
    got = run_via_loop_ir(m, [x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # onnx.reference slices grouped weights by output channel (wrong when C != M), and
    # derives output_shape/SAME pads differently from onnxruntime (whose rule we follow).
    if "output_shape" not in attrs and "SAME" not in attrs.get("auto_pad", "") \
            and attrs.get("group", 1) == 1:
        np.testing.assert_allclose(got, reference(m, x), rtol=1e-4, atol=1e-4)
    (y,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs", [dict(auto_pad="SAME_UPPER"), dict(auto_pad="SAME_LOWER"),
                                   dict(output_shape=[9, 13])], ids=["upper", "lower", "oshape"])
@pytest.mark.parametrize("x_dims", [["N", 3, "H", 5], ["N", 3, 4, "W"], [1, 3, "H", "W"]])
def test_conv_transpose_derived_pads_with_symbolic_dims(attrs, x_dims):
    """SAME and output_shape derive the pads from the input size: with a symbolic spatial dim
    the pads of the dims after it stay unknown until binding (inference used to crash)."""
    m = model("ConvTranspose", (1, 3, 4, 5), [rand(3, 2, 4, 3), rand(2)],
              dict(strides=[2, 3], **attrs), x_dims=x_dims)
    fn = onnxjit.compile(m, cache_dir=False)
    for shape in ((1, 3, 4, 5), (2, 3, 4, 5), (1, 3, 3, 5)):
        if any(isinstance(d, int) and d != n for d, n in zip(x_dims, shape)):
            continue
        x = rand(*shape)
        np.testing.assert_allclose(fn(x)[0], ort_run(m, x), rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- ConvInteger


@pytest.mark.parametrize("xdt,wdt,per_channel,attrs", [
    (np.uint8, np.uint8, False, dict(pads=[1, 0, 1, 2], strides=[2, 1])),
    (np.uint8, np.int8, True, dict(group=2, dilations=[2, 1])),
    (np.int8, np.int8, True, {}),
    (np.uint8, np.uint8, False, dict(group=4)),
])
def test_conv_integer(xdt, wdt, per_channel, attrs):
    x = RNG.integers(0 if xdt == np.uint8 else -100, 120, (2, 4, 6, 5)).astype(xdt)
    w = RNG.integers(0 if wdt == np.uint8 else -100, 120,
                     (8, 4 // attrs.get("group", 1), 2, 3)).astype(wdt)
    xzp = np.array(3, dtype=xdt)
    wzp = np.arange(8).astype(wdt) if per_channel else np.array(2, dtype=wdt)
    m = model("ConvInteger", x.shape, [w, xzp, wzp], attrs, dtype=xdt, out_dtype=np.int32,
              opset=10)
    got = run_via_loop_ir(m, [x])[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, reference(m, x))
    (y,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_array_equal(y, got)


# --------------------------------------------------------------------------- QLinearConv


@pytest.mark.parametrize("xdt,ydt,per_channel,attrs", [
    (np.uint8, np.uint8, True, dict(pads=[1, 1, 1, 1], strides=[2, 1])),
    (np.int8, np.int8, False, dict(group=2)),
    (np.uint8, np.int8, True, dict(group=4, pads=[1, 0, 0, 1])),
])
def test_qlinear_conv(xdt, ydt, per_channel, attrs):
    lo = 0 if xdt == np.uint8 else -100
    x = RNG.integers(lo, 120, (2, 4, 6, 5)).astype(xdt)
    w = RNG.integers(lo, 120, (8, 4 // attrs.get("group", 1), 3, 2)).astype(xdt)
    ws = (RNG.random(8) * 0.01 + 0.001).astype(np.float32) if per_channel \
        else np.array(0.004, np.float32)
    wzp = np.arange(8).astype(xdt) if per_channel else np.array(1, xdt)
    bias = RNG.integers(-500, 500, 8).astype(np.int32)
    inits = [np.array(0.05, np.float32), np.array(3, xdt), w, ws, wzp,
             np.array(0.7, np.float32), np.array(2, ydt), bias]
    m = model("QLinearConv", x.shape, inits, attrs, dtype=xdt, out_dtype=ydt, opset=10)
    got = run_via_loop_ir(m, [x])[0]
    want = reference(m, x)
    assert got.dtype == want.dtype == ydt
    np.testing.assert_array_equal(got, want)
    (y,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_array_equal(y, want)
    if xdt == ydt:  # onnxruntime implements only matching input and output types
        np.testing.assert_allclose(y.astype(np.int32), ort_run(m, x).astype(np.int32), atol=1)


# --------------------------------------------------------------------------- Col2Im


@pytest.mark.parametrize("const_shapes", [True, False])
def test_col2im(const_shapes):
    image, block = np.array([7, 6], np.int64), np.array([3, 2], np.int64)
    attrs = dict(strides=[2, 1], dilations=[1, 2], pads=[1, 0, 2, 1])
    blocks = ((7 + 3 - 2 - 1) // 2 + 1) * ((6 + 1 - 2 - 1) // 1 + 1)
    x = rand(2, 3 * 6, blocks)
    if const_shapes:
        m = model("Col2Im", x.shape, [image, block], attrs, opset=18)
        np.testing.assert_allclose(run_via_loop_ir(m, [x])[0], reference(m, x), rtol=1e-5,
                                   atol=1e-5)
    else:  # image_shape and block_shape as inputs: the run-time scatter
        node = helper.make_node("Col2Im", ["x", "i", "b"], ["y"], **attrs)
        vi = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
              helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
              helper.make_tensor_value_info("b", TensorProto.INT64, [2])]
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 7, 6])
        m = helper.make_model(helper.make_graph([node], "g", vi, [y]),
                              opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 10
        want = ReferenceEvaluator(m).run(None, {"x": x, "i": image, "b": block})[0]
        got = run_via_loop_ir(m, [x, image, block])[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        with pytest.raises(InputError, match="block"):
            run_via_loop_ir(m, [x, image, np.array([2, 2], np.int64)])


# --------------------------------------------------------------------------- DeformConv


@pytest.mark.parametrize("with_mask", [False, True])
def test_deform_conv(with_mask):
    x, w, b = rand(2, 4, 6, 7), rand(6, 2, 2, 3), rand(6)
    attrs = dict(group=2, offset_group=2, strides=[2, 1], dilations=[1, 2], pads=[1, 1, 0, 2])
    oh, ow = (6 + 1 - 2) // 2 + 1, (7 + 3 - 5) // 1 + 1
    off = (rand(2, 2 * 2 * 6, oh, ow) * 2).astype(np.float32)
    mask = RNG.random((2, 2 * 6, oh, ow)).astype(np.float32) if with_mask else None
    m = model("DeformConv", x.shape, [w, off, b, mask], attrs, opset=19)
    check(m, x, native=with_mask, tol=1e-4)
    ins = [Value(TensorType(DType.FLOAT, a.shape), f"x{k}")
           for k, a in enumerate((x, w, off, b, mask)) if a is not None]
    node = Node("DeformConv", ins, [Value()], attrs, version=19)
    (got,) = resolve(node).evaluate(node, [a for a in (x, w, off, b, mask) if a is not None])
    np.testing.assert_allclose(got, reference(m, x), rtol=1e-4, atol=1e-4)
