"""Conv, ConvTranspose and ConvInteger: geometries beyond the backend suite (strides with
dilations and asymmetric pads, 1-D/3-D, groups, depthwise with a channel multiplier, batches,
every auto_pad), checked against onnx's reference implementation through the loop-IR
interpreter and natively against onnxruntime; the lowering strategies; constant folding;
symbolic shape inference; and the errors a bad model gets."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from loop_harness import OPTIONS, run_via_loop_ir
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.driver import import_model, lower_signature
from onnxjit.errors import InputError, ModelError, UnsupportedError
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.loops import Load, Matmul, walk
from onnxjit.ir.opdef import resolve
from onnxjit.ir.types import DType, Sym, TensorType

ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.int32): TensorProto.INT32, np.dtype(np.float16): TensorProto.FLOAT16}
RNG = np.random.default_rng(0)


def model(op: str, x_shape: tuple, inits: list, attrs: dict, dtype=np.float32,
          out_dtype=None, opset: int = 22, x_dims: list | None = None, name: str = "conv0"):
    """A one-node model: input x (dims `x_dims`, default `x_shape`), the other inputs as
    initializers (None: omitted)."""
    names = ["x"] + ["" if a is None else f"i{k}" for k, a in enumerate(inits, 1)]
    init = [numpy_helper.from_array(np.asarray(a), f"i{k}")
            for k, a in enumerate(inits, 1) if a is not None]
    node = helper.make_node(op, names, ["y"], name=name, **attrs)
    x = helper.make_tensor_value_info("x", ONNX_TYPES[np.dtype(dtype)], x_dims or list(x_shape))
    out_t = ONNX_TYPES[np.dtype(out_dtype or dtype)]
    y = helper.make_tensor_value_info("y", out_t, [None] * len(x_shape))
    g = helper.make_graph([node], "g", [x], [y], init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def reference(m, x: np.ndarray) -> np.ndarray:
    return ReferenceEvaluator(m).run(None, {"x": x})[0]


def ort_run(m, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    s = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def check(m, x: np.ndarray, native: bool = True, tol: float = 1e-4) -> None:
    want = reference(m, x)
    got = run_via_loop_ir(m, [x])[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    if native:
        (y,) = onnxjit.compile(m, cache_dir=False)(x)
        np.testing.assert_allclose(y, ort_run(m, x), rtol=tol, atol=tol)


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


def _program(m, x: np.ndarray):
    gm = import_model(m.SerializeToString(), OPTIONS)
    _, prog = lower_signature(gm, ((DType.from_numpy(x.dtype), x.shape),), OPTIONS)
    return prog


def test_lowering_strategies():
    x = rand(1, 4, 6, 6)
    # Pointwise: one Matmul reading X itself, no im2col panel.
    prog = _program(model("Conv", x.shape, [rand(5, 4, 1, 1)], {}), x)
    mms = [s for k in prog.kernels for s in walk(k.body) if isinstance(s, Matmul)]
    assert len(mms) == 1 and mms[0].b.kind == "input"
    assert not any(k.name.startswith("conv_im2col") for k in prog.kernels)
    # 3x3: per block of output rows, an im2col panel and a Matmul, in one kernel.
    prog = _program(model("Conv", x.shape, [rand(5, 4, 3, 3)], dict(pads=[1] * 4)), x)
    assert [k.name for k in prog.kernels] == ["conv_im2col_gemm"]
    mms = [s for s in walk(prog.kernels[0].body) if isinstance(s, Matmul)]
    assert len(mms) == 1 and mms[0].b.kind == "temp" and (mms[0].m, mms[0].k) == (5, 36)
    # Depthwise: a direct nest, no Matmul.
    prog = _program(model("Conv", x.shape, [rand(4, 1, 3, 3)], dict(group=4)), x)
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


# --------------------------------------------------------------------------- packed panels

PACKED_CASES = [
    # (x shape, w shape, attributes, dtype): products large enough for the tiled kernel, so
    # the im2col panel is written in its packed-B layout (ops_conv_packed)
    ((1, 16, 13, 29), (20, 16, 3, 3), dict(pads=[1] * 4), np.float32),  # 377 columns
    ((2, 8, 31, 27), (16, 8, 3, 3), dict(strides=[2, 2], pads=[1, 0, 0, 1]), np.float32),
    ((1, 8, 20, 33), (16, 8, 3, 3), dict(dilations=[2, 3], pads=[2, 3, 1, 2]), np.float32),
    ((1, 6, 9, 11), (10, 6, 3, 5), dict(pads=[3, 2, 2, 4]), np.float32),  # wide padding
    ((2, 16, 15, 17), (24, 8, 3, 3), dict(group=2, pads=[1] * 4), np.float32),
    ((1, 8, 17, 23), (16, 8, 3, 3), dict(pads=[1, 2, 0, 1]), np.float64),
    ((1, 4, 6, 7, 9), (8, 4, 3, 3, 3), dict(pads=[1] * 6, strides=[1, 2, 1]), np.float32),
    ((2, 8, 300), (16, 8, 5), dict(pads=[2, 1], strides=[3]), np.float32),
    ((1, 4, 8, 60), (8, 4, 1, 20), dict(pads=[0, 7, 0, 3]), np.float32),  # looped taps
]


def _packed_matmuls(m, x: np.ndarray) -> list:
    return [s for k in _program(m, x).kernels for s in walk(k.body)
            if isinstance(s, Matmul) and s.b_packed]


@pytest.mark.parametrize("block_bytes", [None, 32 << 10])
@pytest.mark.parametrize("xs,ws,attrs,dt", PACKED_CASES)
def test_conv_packed_panels(xs, ws, attrs, dt, block_bytes, monkeypatch):
    from onnxjit.ir import ops_conv, ops_conv_blocks

    if block_bytes is not None:  # many blocks of output rows, most spanning two panels
        monkeypatch.setattr(ops_conv_blocks, "BLOCK_BYTES", block_bytes)
        monkeypatch.setattr(ops_conv_blocks, "MIN_BLOCK_COLS", 1)
    m = model("Conv", xs, [rand(*ws, dtype=dt), rand(ws[0], dtype=dt)], attrs, dtype=dt)
    x = rand(*xs, dtype=dt)
    mms = _packed_matmuls(m, x)
    assert mms and all(s.ldb in (8, 16, 32, 64) and s.b.kind == "temp" for s in mms)
    tol = 1e-4 if dt == np.float32 else 1e-10
    want = reference(m, x)
    np.testing.assert_allclose(run_via_loop_ir(m, [x])[0], want, rtol=tol, atol=tol)
    (y,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_allclose(y, want if dt == np.float64 else ort_run(m, x), rtol=tol, atol=tol)
    # the switch restores row-major panels, with the same results
    monkeypatch.setattr(ops_conv, "PACKED_PANELS", False)
    assert not _packed_matmuls(m, x)
    (y2,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_allclose(y2, y, rtol=tol, atol=tol)


def test_fused_conv_packed_panels_with_epilogue():
    # Conv + bias + Relu + residual Add: the epilogue runs on blocks of a packed-panel product
    xs, ws = (2, 16, 14, 19), (16, 16, 3, 3)
    node = helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4)
    relu = helper.make_node("Relu", ["c"], ["r"])
    add = helper.make_node("Add", ["r", "x"], ["y"])
    g = helper.make_graph(
        [node, relu, add], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, xs)],
        [numpy_helper.from_array(rand(*ws), "w"), numpy_helper.from_array(rand(16), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    x = rand(*xs)
    assert _packed_matmuls(m, x)
    (y,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_allclose(y, ort_run(m, x), rtol=1e-4, atol=1e-4)


def _fused_model(xs: tuple, ws: tuple, attrs: dict, dt=np.float32, residual: bool = False):
    """Conv + bias + Relu (+ a residual Add of x when the shapes allow): one FusedConv."""
    ty = ONNX_TYPES[np.dtype(dt)]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs),
             helper.make_node("Relu", ["c"], ["r" if residual else "y"])]
    if residual:
        nodes.append(helper.make_node("Add", ["r", "x"], ["y"]))
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", ty, xs)],
        [helper.make_tensor_value_info("y", ty, [None] * len(xs))],
        [numpy_helper.from_array(rand(*ws, dtype=dt), "w"),
         numpy_helper.from_array(rand(ws[0], dtype=dt), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


SPLIT_CASES = [
    # (x shape, w shape, attributes, dtype, residual add)
    ((1, 16, 7, 7), (64, 16, 3, 3), dict(pads=[1] * 4), np.float32, False),
    ((1, 64, 7, 7), (64, 64, 3, 3), dict(pads=[1] * 4), np.float32, True),
    ((1, 24, 13, 11), (96, 24, 3, 3), dict(strides=[2, 2], pads=[1, 0, 1, 2]), np.float32,
     False),
    ((2, 12, 9, 10), (64, 12, 3, 2), dict(dilations=[2, 1], pads=[2, 1, 1, 0]), np.float64,
     False),
    ((1, 16, 9, 9), (128, 8, 3, 3), dict(group=2, pads=[1] * 4), np.float32, False),
    ((1, 40, 5, 5), (96, 40, 1, 1), {}, np.float32, False),  # pointwise + epilogue
    ((2, 64, 3, 5), (64, 32, 1, 1), dict(group=2), np.float64, True),  # grouped pointwise
    ((1, 20, 11, 9), (64, 20, 1, 1), dict(strides=[2, 2]), np.float32, False),  # strided 1x1
    ((1, 6, 23), (64, 6, 5), dict(pads=[2, 2]), np.float32, False),  # 1-D
]


@pytest.mark.parametrize("xs,ws,attrs,dt,residual", SPLIT_CASES)
def test_conv_split_over_output_channels(xs, ws, attrs, dt, residual, monkeypatch):
    # few blocks: panels built in parallel over input channels, then one product per chunk
    # of output channels (ops_conv_blocks.m_split), with the epilogue on the chunk's rows
    from onnxjit.ir import ops_conv_blocks

    monkeypatch.setattr(ops_conv_blocks, "SPLIT_WORK", 0)
    monkeypatch.setattr(ops_conv_blocks, "MIN_TASKS", 64)
    monkeypatch.setattr(ops_conv_blocks, "MIN_SPLIT_ROWS", 8)
    m = _fused_model(xs, ws, attrs, dt, residual)
    x = rand(*xs, dtype=dt)
    gemms = [s for k in _program(m, x).kernels for s in walk(k.body) if isinstance(s, Matmul)]
    assert gemms and all(s.m < ws[0] // attrs.get("group", 1) for s in gemms)
    tol = 1e-4 if dt == np.float32 else 1e-10
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(x)
        np.testing.assert_allclose(y, reference(m, x), rtol=tol, atol=tol)
    monkeypatch.setattr(ops_conv_blocks, "SPLIT_M", False)
    assert all(s.m == ws[0] // attrs.get("group", 1) for k in _program(m, x).kernels
               for s in walk(k.body) if isinstance(s, Matmul))
    (y2,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_allclose(y2, y, rtol=tol, atol=tol)


def test_block_choice_for_deep_layers():
    # a 7x7 image takes one block of all 49 positions (not 7 one-row blocks), and its output
    # channels are split so that two threads have work; a 56x56 layer has blocks enough
    from onnxjit.ir.ops_conv import Geometry
    from onnxjit.ir.ops_conv_blocks import MIN_TASKS, block_rows, m_split
    from onnxjit.ir.ops_conv_utils import ConvAttrs

    def geometry(c: int, hw: int) -> Geometry:
        a = ConvAttrs(kernel=(3, 3), strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1),
                      group=1, auto_pad="NOTSET")
        return Geometry(a, (1, c, hw, hw), (c, c, 3, 3), (1, c, hw, hw))

    deep = geometry(512, 7)
    assert block_rows(deep, 4) == 7
    chunks, rows = m_split(deep, 1, 512 * 49 * 4608, 4)
    assert chunks >= MIN_TASKS and rows % 6 == 0 and (chunks - 1) * rows < 512 <= chunks * rows
    wide = geometry(64, 56)
    rows = block_rows(wide, 4)
    assert rows * 56 >= 192 and rows * 56 * 576 * 4 <= 512 << 10
    assert m_split(wide, 56 // rows, 64 * 56 * 56 * 576, 4) == (1, 64)


PHASE_CASES = [
    # (x shape, w shape, attributes, dtype): strided convs whose kernel is wider than the
    # stride read X split into phase rows (ops_conv_phases)
    ((1, 3, 23, 25), (8, 3, 7, 7), dict(strides=[2, 2], pads=[3] * 4), np.float32),  # stem
    ((2, 4, 9, 14), (6, 2, 3, 3), dict(group=2, strides=[2, 2], pads=[1, 0, 0, 1]), np.float32),
    ((1, 5, 8, 17), (4, 5, 2, 5), dict(strides=[1, 3], dilations=[1, 2], pads=[0, 4, 1, 2]),
     np.float64),
    ((1, 2, 31), (3, 2, 4), dict(strides=[3], pads=[2, 3]), np.float32),  # 1-D, odd width
    ((1, 16, 12, 12), (64, 16, 3, 3), dict(strides=[2, 2], pads=[1] * 4), np.float32),
]


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("xs,ws,attrs,dt", PHASE_CASES)
def test_conv_strided_phases(xs, ws, attrs, dt, split, monkeypatch):
    from onnxjit.ir import ops_conv_blocks, ops_conv_phases

    if split:  # also through the split path (panels built per chunk of input channels)
        monkeypatch.setattr(ops_conv_blocks, "SPLIT_WORK", 0)
        monkeypatch.setattr(ops_conv_blocks, "MIN_TASKS", 64)
        monkeypatch.setattr(ops_conv_blocks, "MIN_SPLIT_ROWS", 1)
    m = model("Conv", xs, [rand(*ws, dtype=dt), rand(ws[0], dtype=dt)], attrs, dtype=dt)
    x = rand(*xs, dtype=dt)
    names = [k.name for k in _program(m, x).kernels]
    assert "conv_phases" in names
    tol = 1e-4 if dt == np.float32 else 1e-10
    (y,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_allclose(y, reference(m, x), rtol=tol, atol=tol)
    np.testing.assert_allclose(run_via_loop_ir(m, [x])[0], y, rtol=tol, atol=tol)
    # the switch restores strided reads of X: the same values copied, the same sums
    monkeypatch.setattr(ops_conv_phases, "DEINTERLEAVE", False)
    assert "conv_phases" not in [k.name for k in _program(m, x).kernels]
    (y2,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_array_equal(y2, y)


def test_strided_pointwise_reads_x_in_place():
    # a 1x1 stride-2 conv reads every pixel at most once: no phase kernel
    m = model("Conv", (1, 8, 9, 9), [rand(16, 8, 1, 1)], dict(strides=[2, 2]))
    x = rand(1, 8, 9, 9)
    assert "conv_phases" not in [k.name for k in _program(m, x).kernels]
    check(m, x)
