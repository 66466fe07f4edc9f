"""Focused tests of the elementwise, logic and cast op tables (elementwise.arithmetic,
elementwise.unary_math, elementwise.activation, elementwise.logic, elementwise.cast): edge semantics
the backend suite does not pin down, per-version behaviour, dtype/attribute errors, symbolic shape
inference and constant folding.

Models run down to the loop IR and through the reference interpreter
(`loop_harness.run_via_loop_ir`), so no native code is needed.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from loop_harness import run_via_loop_ir
from models import node_model
from onnx import helper, numpy_helper

# importing registers the op tables under test
import onnxjit.ir.ops.elementwise.activation  # noqa: F401
import onnxjit.ir.ops.elementwise.arithmetic  # noqa: F401
import onnxjit.ir.ops.elementwise.cast  # noqa: F401
import onnxjit.ir.ops.elementwise.logic  # noqa: F401
import onnxjit.ir.ops.elementwise.trig  # noqa: F401
import onnxjit.ir.ops.elementwise.unary_math  # noqa: F401
from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.opdef import resolve
from onnxjit.ir.types import DType, Sym, TensorType

NP2ONNX = {
    np.dtype(np.float32): onnx.TensorProto.FLOAT, np.dtype(np.float64): onnx.TensorProto.DOUBLE,
    np.dtype(np.int8): onnx.TensorProto.INT8, np.dtype(np.int32): onnx.TensorProto.INT32,
    np.dtype(np.int64): onnx.TensorProto.INT64, np.dtype(np.uint8): onnx.TensorProto.UINT8,
    np.dtype(np.uint32): onnx.TensorProto.UINT32, np.dtype(np.bool_): onnx.TensorProto.BOOL,
    np.dtype(np.float16): onnx.TensorProto.FLOAT16,
    np.dtype(np.complex64): onnx.TensorProto.COMPLEX64,
}


def model(op: str, inputs: list, out_dtype, opset: int, consts: dict | None = None,
          n_out: int = 1, **attrs) -> onnx.ModelProto:
    """A one-node model; `inputs` are arrays (graph inputs) or "" (an omitted input); names in
    `consts` become initializers."""
    consts = consts or {}
    names, vinfo = [], []
    for k, x in enumerate(inputs):
        if isinstance(x, str):
            names.append(x)
            continue
        names.append(f"x{k}")
        vinfo.append(helper.make_tensor_value_info(f"x{k}", NP2ONNX[np.asarray(x).dtype],
                                                   list(np.shape(x))))
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    names += list(consts)
    node = helper.make_node(op, names, [f"y{k}" for k in range(n_out)], **attrs)
    outs = [helper.make_tensor_value_info(f"y{k}", out_dtype, None) for k in range(n_out)]
    g = helper.make_graph([node], "g", vinfo, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def run(op: str, inputs: list, out_dtype=onnx.TensorProto.FLOAT, opset: int = 21,
        consts: dict | None = None, **attrs) -> np.ndarray:
    m = model(op, inputs, out_dtype, opset, consts, **attrs)
    return run_via_loop_ir(m, [np.asarray(x) for x in inputs if not isinstance(x, str)])[0]


F32 = onnx.TensorProto.FLOAT
F64 = onnx.TensorProto.DOUBLE
I32 = onnx.TensorProto.INT32
I8 = onnx.TensorProto.INT8
BOOL = onnx.TensorProto.BOOL


# --------------------------------------------------------------------------- arithmetic


def test_integer_div_truncates_and_guards_zero():
    a = np.array([-7, 7, -7, 5, -2147483648], np.int32)
    b = np.array([2, -2, -2, 0, -1], np.int32)
    np.testing.assert_array_equal(run("Div", [a, b], I32), [-3, -3, 3, 0, -2147483648])


def test_integer_add_wraps():
    a, b = np.array([127, -128], np.int8), np.array([1, -1], np.int8)
    np.testing.assert_array_equal(run("Add", [a, b], I8), [-128, 127])


def test_mod_floor_and_fmod():
    a = np.array([-7, 7, -7, 7, 6], np.int32)
    b = np.array([3, -3, -3, 3, 0], np.int32)
    np.testing.assert_array_equal(run("Mod", [a, b], I32), [2, -2, -1, 1, 0])
    np.testing.assert_array_equal(run("Mod", [a, b], I32, fmod=1), [-1, 1, -1, 1, 0])


def test_mod_float_needs_fmod_before_opset_28():
    a = np.array([-7.5, 7.5, 2.0], np.float32)
    b = np.array([2.0, -2.0, np.inf], np.float32)
    with pytest.raises(ModelError, match="fmod"):
        run("Mod", [a, b], opset=13)
    np.testing.assert_allclose(run("Mod", [a, b], opset=28), [0.5, -0.5, 2.0])
    np.testing.assert_allclose(run("Mod", [-a, b], opset=28), [1.5, -1.5, np.inf])


def test_pow_mixed_types():
    xi = np.array([2, 3, -2], np.int32)
    np.testing.assert_array_equal(
        run("Pow", [xi, np.array([2.5, 2.0, 3.0], np.float32)], I32, opset=15), [5, 9, -8])
    np.testing.assert_allclose(
        run("Pow", [np.array([2.0, 4.0], np.float32), np.array([-1, 3], np.int64)], opset=15),
        [0.5, 64.0])
    np.testing.assert_array_equal(
        run("Pow", [np.array([2, 1, -1], np.int32), np.array([-1, -3, -3], np.int32)], I32),
        [0, 1, -1])
    with pytest.raises(ModelError, match="does not accept"):  # Pow-7: float exponents only
        run("Pow", [np.array([2.0], np.float32), np.array([2], np.int64)], opset=7)


def test_legacy_broadcast_attribute():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([10, 20, 30], np.float32)
    np.testing.assert_allclose(run("Add", [a, b], opset=6, broadcast=1), a + b)
    with pytest.raises(ModelError, match="broadcast=0"):
        run("Add", [a, b], opset=6)
    with pytest.raises(UnsupportedError, match="axis"):
        run("Add", [a, np.array([1, 2], np.float32)], opset=6, broadcast=1, axis=0)


def test_float16_sum_and_mean_add_in_float32():
    # 65500 + 43.8 overflows float16, their mean does not: onnxruntime adds in f32 and
    # rounds once (found by the differential fuzzer, issue 26: Mean gave inf, not 21848)
    a = np.array([65500, 60000, 1], np.float16)
    b = np.array([43.84, 60000, 2], np.float16)
    c = np.array([0.1, -60000, 3], np.float16)
    for op, want in (("Mean", (a.astype(np.float64) + b + c) / 3),
                     ("Sum", a.astype(np.float64) + b + c)):
        m, _ = node_model(op, [a, b, c], opset=13)
        got = onnxjit.compile(m, cache_dir=False)(a, b, c)[0]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float16), rtol=1e-3,
                                   err_msg=op)
        np.testing.assert_allclose(run(op, [a, b, c], onnx.TensorProto.FLOAT16, 13)
                                   .astype(np.float64), want.astype(np.float16), rtol=1e-3,
                                   err_msg=op)


def test_variadic_broadcast_nan_and_single_input():
    a = np.array([[1.0], [np.nan]], np.float32)
    b = np.array([0.0, 5.0, -1.0], np.float32)
    c = np.array(2.0, np.float32)
    np.testing.assert_allclose(run("Max", [a, b, c]), [[2, 5, 2], [np.nan] * 3])
    np.testing.assert_allclose(run("Min", [a, b, c]), [[0, 1, -1], [np.nan] * 3])
    np.testing.assert_allclose(run("Sum", [a, b, c]), a + b + c)
    np.testing.assert_allclose(run("Mean", [a, b, c]), (a + b + c) / 3, rtol=1e-6)
    np.testing.assert_allclose(run("Mean", [b]), b)
    np.testing.assert_array_equal(
        run("Max", [np.array([-3, 7], np.int32), np.array([4, -9], np.int32)], I32), [4, 7])


def test_sign_keeps_nan_and_zero():
    x = np.array([-2.5, -0.0, 0.0, 3.0, np.nan, -np.inf], np.float32)
    np.testing.assert_array_equal(run("Sign", [x]), [-1, 0, 0, 1, np.nan, -1])
    u = np.array([0, 7], np.uint32)
    np.testing.assert_array_equal(run("Sign", [u], onnx.TensorProto.UINT32), [0, 1])


def test_reciprocal_and_neg():
    x = np.array([2.0, -0.0, 4.0], np.float32)
    np.testing.assert_array_equal(run("Reciprocal", [x]), [0.5, -np.inf, 0.25])
    np.testing.assert_array_equal(run("Neg", [np.array([-128, 5], np.int8)], I8), [-128, -5])


# --------------------------------------------------------------------------- Clip


def test_clip_attribute_forms():
    x = np.array([-5.0, 0.5, 5.0, np.inf], np.float32)
    np.testing.assert_allclose(run("Clip", [x], opset=6, min=-1.0, max=1.0), [-1, 0.5, 1, 1])
    # Clip-6 defaults to the float32 range; Clip-1 has no default bound.
    assert run("Clip", [x], opset=6)[3] == np.finfo(np.float32).max
    assert run("Clip", [x], opset=1)[3] == np.inf


def test_clip_input_forms():
    x = np.array([-5, 0, 5], np.int32)
    lo, hi = np.array(-1, np.int32), np.array(2, np.int32)
    np.testing.assert_array_equal(run("Clip", [x, lo, hi], I32, opset=13), [-1, 0, 2])
    np.testing.assert_array_equal(run("Clip", [x, "", hi], I32, opset=13), [-5, 0, 2])
    np.testing.assert_array_equal(run("Clip", [x, hi, lo], I32, opset=13), [-1, -1, -1])
    with pytest.raises(ModelError, match="scalar"):
        run("Clip", [x, np.array([0, 1], np.int32)], I32, opset=13)
    with pytest.raises(ModelError, match="does not accept"):
        run("Clip", [x, lo], I32, opset=11)  # ints arrive in Clip-12


# --------------------------------------------------------------------------- math


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_round_keeps_the_sign_of_zero(dtype):
    # Round(-0.45) is -0.0 (x / Round(x) is then +inf): floor(x) + 1 gave +0.0 (found by the
    # differential fuzzer, issue 26, where onnxruntime and onnx.reference agree)
    x = np.array([-0.45, -0.3, -0.5, -0.0, 0.3, -1e-30, -2.5, 2.5, -0.7, 0.5], dtype)
    m, _ = node_model("Round", [x], opset=22)
    for got in (onnxjit.compile(m, cache_dir=False)(x)[0],
                run("Round", [x], NP2ONNX[np.dtype(dtype)], 22)):
        np.testing.assert_array_equal(got, np.round(x))
        np.testing.assert_array_equal(np.signbit(got), np.signbit(np.round(x)))


def test_round_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, 2.6, -2.6, 1e30, np.inf, np.nan],
                 np.float32)
    np.testing.assert_array_equal(run("Round", [x]), np.round(x))
    d = np.array([0.49999999999999994, 4503599627370495.5, -3.5], np.float64)
    np.testing.assert_array_equal(run("Round", [d], F64), np.round(d))


@pytest.mark.parametrize("op,fn,lo,hi", [
    ("Sinh", np.sinh, -20, 20), ("Cosh", np.cosh, -20, 20), ("Asinh", np.arcsinh, -1e20, 1e20),
    ("Acosh", np.arccosh, 1, 1e20), ("Atanh", np.arctanh, -0.999, 0.999)])
def test_hyperbolic_accuracy(op, fn, lo, hi):
    rng = np.random.default_rng(0)
    base = np.concatenate([rng.uniform(-1, 1, 50) * 10.0 ** rng.integers(-8, 3, 50),
                           [0.0, 0.09, 0.1, 0.11, 1.0, 1e15, 1e20]])
    x = np.clip(base, lo, hi)
    np.testing.assert_allclose(run(op, [x], F64), fn(x), rtol=1e-12, atol=0)
    x32 = x.astype(np.float32)
    np.testing.assert_allclose(run(op, [x32]), fn(x32.astype(np.float64)), rtol=3e-6, atol=0)


def test_erf_on_integers_before_opset_13():
    x = np.array([-3, 0, 1], np.int32)
    np.testing.assert_array_equal(run("Erf", [x], I32, opset=9), [0, 0, 0])
    with pytest.raises(ModelError, match="does not accept"):
        run("Erf", [x], I32, opset=13)


# --------------------------------------------------------------------------- activations


@pytest.mark.parametrize("mode", ["none", "tanh"])
def test_gelu(mode):
    x = np.linspace(-6, 6, 49)
    if mode == "none":
        want = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    else:
        want = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(run("Gelu", [x], F64, opset=20, approximate=mode), want,
                               rtol=1e-12, atol=1e-15)


def test_gelu_bad_mode():
    with pytest.raises(ModelError, match="approximate"):
        run("Gelu", [np.zeros(2, np.float32)], opset=20, approximate="fast")


def test_softplus_and_mish_do_not_overflow():
    x = np.array([-100.0, -1.0, 0.0, 1.0, 100.0, 1000.0], np.float32)
    ref = np.logaddexp(0, x.astype(np.float64))
    np.testing.assert_allclose(run("Softplus", [x]), ref, rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(run("Mish", [x]), x * np.tanh(ref), rtol=1e-6, atol=1e-30)


def test_selu_defaults_per_version():
    x = np.array([-1.0], np.float64)
    new = 1.05070102214813232421875 * 1.67326319217681884765625 * (np.exp(-1) - 1)
    old = 1.0507 * 1.6732 * (np.exp(-1) - 1)
    np.testing.assert_allclose(run("Selu", [x], F64, opset=6), [new], rtol=1e-12)
    np.testing.assert_allclose(run("Selu", [x], F64, opset=1), [old], rtol=1e-12)


def test_shrink_on_integers():
    x = np.array([-5, -1, 0, 1, 5], np.int8)
    np.testing.assert_array_equal(run("Shrink", [x], I8, opset=9, lambd=1.5, bias=1.5),
                                  [-3, 0, 0, 0, 3])


def test_prelu_slope_must_broadcast_to_x():
    x = np.array([[-1.0, 2.0]], np.float32)
    np.testing.assert_allclose(run("PRelu", [x, np.array([0.5, 0.5], np.float32)], opset=16),
                               [[-0.5, 2.0]])
    with pytest.raises(ModelError, match="slope"):
        run("PRelu", [x, np.ones((3, 1), np.float32)], opset=16)


def test_bad_activation_attributes():
    x = [np.zeros(2, np.float32)]
    with pytest.raises(ModelError, match="alpha"):
        run("Celu", x, opset=12, alpha=0.0)
    with pytest.raises(ModelError, match="'alpha' must be (a|of kind) float"):
        run("LeakyRelu", x, opset=16, alpha="big")


# --------------------------------------------------------------------------- logic


def test_comparisons_with_nan():
    a = np.array([1.0, np.nan, 2.0], np.float32)
    b = np.array([1.0, np.nan, 3.0], np.float32)
    np.testing.assert_array_equal(run("Equal", [a, b], BOOL), [True, False, False])
    np.testing.assert_array_equal(run("LessOrEqual", [a, b], BOOL), [True, False, True])
    np.testing.assert_array_equal(run("GreaterOrEqual", [a, b], BOOL), [True, False, False])


def test_comparison_types_per_version():
    a = np.array([1, 2], np.int32)
    with pytest.raises(ModelError, match="does not accept"):
        run("Less", [a, a], BOOL, opset=7)  # Less-7 is float-only
    np.testing.assert_array_equal(run("Less", [a, a[::-1].copy()], BOOL, opset=9),
                                  [True, False])


def test_where_broadcasts_all_three():
    cond = np.array([[True], [False]])
    x = np.array([1, 2, 3], np.int32)
    np.testing.assert_array_equal(run("Where", [cond, x, np.array(-1, np.int32)], I32),
                                  [[1, 2, 3], [-1, -1, -1]])
    with pytest.raises(ModelError, match="input 0"):
        run("Where", [x, x, x], I32)


def test_isinf_detect_flags():
    x = np.array([np.inf, -np.inf, 1.0, np.nan], np.float32)
    np.testing.assert_array_equal(run("IsInf", [x], BOOL, opset=20), [1, 1, 0, 0])
    np.testing.assert_array_equal(run("IsInf", [x], BOOL, opset=20, detect_negative=0),
                                  [1, 0, 0, 0])
    np.testing.assert_array_equal(
        run("IsInf", [x], BOOL, opset=20, detect_negative=0, detect_positive=0), [0, 0, 0, 0])


def test_bitshift_signed_and_unsigned():
    u = np.array([1, 255, 16], np.uint8)
    s = np.array([1, 3, 8], np.uint8)
    np.testing.assert_array_equal(run("BitShift", [u, s], onnx.TensorProto.UINT8, opset=11,
                                      direction="LEFT"), [2, 248, 0])
    np.testing.assert_array_equal(run("BitShift", [u, s], onnx.TensorProto.UINT8, opset=11,
                                      direction="RIGHT"), [0, 31, 0])
    x = np.array([-7, -128, 100, -1, 5], np.int8)
    y = np.array([1, 7, 9, -1, 7], np.int8)
    np.testing.assert_array_equal(run("BitShift", [x, y], I8, opset=28, direction="RIGHT"),
                                  [-4, -1, 0, -1, 0])
    np.testing.assert_array_equal(run("BitShift", [x, y], I8, opset=28, direction="LEFT"),
                                  [-14, 0, 0, 0, -128])
    with pytest.raises(ModelError, match="does not accept"):
        run("BitShift", [x, y], I8, opset=11, direction="LEFT")
    with pytest.raises(ModelError, match="direction"):
        run("BitShift", [u, s], onnx.TensorProto.UINT8, opset=11)


# --------------------------------------------------------------------------- cast


def test_cast_float_to_int_and_bool():
    x = np.array([2.7, -2.7, np.nan, 1e10, -0.0], np.float32)
    # NaN and out of range: C's x86-64 conversion, as onnxruntime and numpy give it (the
    # cases are in test_fuzz_backend_found)
    np.testing.assert_array_equal(run("Cast", [x], I32, to=I32),
                                  [2, -2, -2147483648, -2147483648, 0])
    np.testing.assert_array_equal(run("Cast", [x], BOOL, to=BOOL), [1, 1, 1, 1, 0])
    np.testing.assert_array_equal(
        run("Cast", [np.array([200, -1], np.int32)], onnx.TensorProto.UINT8,
            to=onnx.TensorProto.UINT8), [200, 255])


def test_cast_errors():
    x = np.zeros(2, np.float32)
    with pytest.raises((UnsupportedError, ModelError), match=r"Cast.*c64"):
        run("Cast", [x], onnx.TensorProto.COMPLEX64, to=onnx.TensorProto.COMPLEX64)
    with pytest.raises(ModelError, match="'to'"):
        run("Cast", [x], F32, to=99)
    with pytest.raises(ModelError, match="'to'"):
        run("Cast", [x], F32)


def test_castlike_ignores_the_shape_of_like():
    x = np.array([1.5, -2.5], np.float32)
    got = run("CastLike", [x, np.zeros((0,), np.int32)], I32, opset=15)
    np.testing.assert_array_equal(got, [1, -2])


def test_castlike_folds():
    inits = [numpy_helper.from_array(np.array([1.25, 2.0], np.float32), "c"),
             numpy_helper.from_array(np.zeros((0,), np.float64), "like")]
    g = helper.make_graph(
        [helper.make_node("CastLike", ["c", "like"], ["d"]),
         helper.make_node("Add", ["d", "x"], ["y"])],
        "g", [helper.make_tensor_value_info("x", F64, [2])],
        [helper.make_tensor_value_info("y", F64, [2])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    got = run_via_loop_ir(m, [np.array([0.5, 0.5])])[0]
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, [1.75, 2.5])


# --------------------------------------------------------------------------- dtype errors


def test_dtype_errors():
    with pytest.raises(ModelError, match="does not accept"):
        run("Exp", [np.array([1], np.int32)], I32)
    with pytest.raises(ModelError, match="does not accept"):
        run("And", [np.array([1], np.int32)] * 2, I32)
    with pytest.raises(ModelError, match="must match"):
        run("Add", [np.array([1], np.int32), np.array([1], np.int64)], I32)
    with pytest.raises(ModelError, match=r"element type c64.*does not accept"):
        run("Add", [np.zeros(2, np.complex64)] * 2, onnx.TensorProto.COMPLEX64)
    with pytest.raises(ModelError, match="takes 2 inputs"):
        run("Add", [np.zeros(2, np.float32)])


# --------------------------------------------------------------------------- inference, folding


def _tensor(dtype: DType, shape: tuple) -> Value:
    return Value(TensorType(dtype, shape))


def test_symbolic_broadcast_inference():
    n, m = Sym.var("N"), Sym.var("M")
    a, b = _tensor(DType.FLOAT, (n, 1)), _tensor(DType.FLOAT, (1, m))
    node = Node("Mul", [a, b], [Value()], version=17)
    (t,) = resolve(node).infer(node)
    assert t == TensorType(DType.FLOAT, (n, m))
    node = Node("Where", [_tensor(DType.BOOL, (1, 1)), a, b], [Value()], version=17)
    assert resolve(node).infer(node)[0].shape == (n, m)
    node = Node("Where", [_tensor(DType.BOOL, (None, 1)), a, b], [Value()], version=17)
    assert resolve(node).infer(node)[0].shape == (None, m)  # None vs N: unknown
    node = Node("Equal", [a, _tensor(DType.FLOAT, None)], [Value()], version=17)
    assert resolve(node).infer(node)[0] == TensorType(DType.BOOL, None)


def test_shape_values_flow_through_add_and_cast():
    n = Sym.var("N")
    dims = _tensor(DType.INT64, (2,))
    dims.sym_value = (n, 3)
    one = _tensor(DType.INT64, (1,))
    one.const = np.array([1], np.int64)
    add = Node("Add", [dims, one], [Value()], version=17)
    resolve(add).infer(add)
    assert add.outputs[0].sym_value == (n + 1, 4)
    cast = Node("Cast", [add.outputs[0]], [Value()], {"to": int(DType.INT64.value)},
                version=17)
    add.outputs[0].type = TensorType(DType.INT64, (2,))
    resolve(cast).infer(cast)
    assert cast.outputs[0].sym_value == (n + 1, 4)


def test_constant_folding_runs_the_scalar_rule():
    c = np.array([0.5, 1.5, 2.5, -2.5], np.float32)
    g = helper.make_graph(
        [helper.make_node("Round", ["c"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])],
        "g", [helper.make_tensor_value_info("x", F32, [4])],
        [helper.make_tensor_value_info("y", F32, [4])], [numpy_helper.from_array(c, "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    np.testing.assert_array_equal(run_via_loop_ir(m, [np.ones(4, np.float32)])[0],
                                  [1, 3, 3, -1])


@pytest.mark.parametrize("op,fn,lo,hi", [
    ("Sin", np.sin, -1e5, 1e5), ("Cos", np.cos, -1e5, 1e5), ("Tan", np.tan, -1e5, 1e5),
    ("Atan", np.arctan, -1e300, 1e300), ("Asin", np.arcsin, -1, 1),
    ("Acos", np.arccos, -1, 1)])
def test_trig_accuracy(op, fn, lo, hi):
    rng = np.random.default_rng(1)
    base = np.concatenate([rng.uniform(-1, 1, 200) * 10.0 ** rng.integers(-6, 6, 200),
                           [0.0, 1.0, -1.0, 0.5, np.pi / 4, np.pi, 1e-300]])
    x = np.clip(base, lo, hi)
    np.testing.assert_allclose(run(op, [x], F64), fn(x), rtol=1e-13, atol=1e-15)
    x32 = x.astype(np.float32)
    want32 = fn(x32.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(run(op, [x32]), want32, rtol=2e-7, atol=1e-30)


def test_trig_special_values():
    x = np.array([np.inf, -np.inf, np.nan, 2.0, -2.0], np.float64)
    assert np.isnan(run("Sin", [x[:3]], F64)).all()
    np.testing.assert_allclose(run("Atan", [x], F64), np.arctan(x))
    assert np.isnan(run("Asin", [x[3:]], F64)).all()
    assert np.isnan(run("Acos", [x[3:]], F64)).all()
