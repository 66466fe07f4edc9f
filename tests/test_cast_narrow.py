"""Cast/CastLike to and from the cast-only types: float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz),
float4e2m1 and the 4-/2-bit ints.

Decoding is checked exhaustively (every byte pattern of each type -> f32, native code and the
numpy model in `ir/narrow.py`, against ml_dtypes); encoding on a set of f32/f16/f64 values
holding NaN, +-inf, overflow, ties, subnormals and random bit patterns, with and without
`saturate`, against `onnx.reference.ReferenceEvaluator`, through native code, the loop-IR
interpreter (scalar_eval) and constant folding. Packed 4-/2-bit initializers are unpacked.
The loop-IR interpreter, which evaluates a cast element by element with the one numpy rule
of `ir/narrow.py` (the same code for every value), encodes the deterministic values only
(the first `_N_FIXED`: the specials and every representable value and midpoint of each
small float); native code encodes the random draws too.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from loop_harness import run_via_loop_ir
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.ir.narrow import (
    FLOAT_FORMATS,
    SMALL_INTS,
    decode_e8m0,
    decode_small_float,
    encode_e8m0,
    encode_small_float,
)
from onnxjit.ir.types import CAST_ONLY_DTYPES, DType

SMALL_FLOATS = list(FLOAT_FORMATS)
SUB_BYTE_INTS = list(SMALL_INTS)
ALL = SMALL_FLOATS + SUB_BYTE_INTS


def _cast_model(src: int, dst: int, saturate: int | None = None, like: bool = False):
    kw = {} if saturate is None else {"saturate": saturate}
    if like:
        node = helper.make_node("CastLike", ["x", "t"], ["y"], **kw)
        inputs = [helper.make_tensor_value_info("x", src, ["N"])]
        inits = [helper.make_tensor("t", dst, [0], [])]
    else:
        node = helper.make_node("Cast", ["x"], ["y"], to=dst, **kw)
        inputs = [helper.make_tensor_value_info("x", src, ["N"])]
        inits = []
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", dst,
                                                                                   ["N"])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])


def _n_patterns(dt: DType) -> int:
    if dt in SMALL_INTS:
        return 1 << SMALL_INTS[dt][0]
    e, m, _, _ = FLOAT_FORMATS[dt]
    return 1 << (1 + e + m)


def _same_values(got: np.ndarray, want: np.ndarray) -> bool:
    g = np.asarray(got).astype(np.float64)
    w = np.asarray(want).astype(np.float64)
    same = (g == w) | (np.isnan(g) & np.isnan(w))
    # -0 and +0 differ in their bits: compare signs of zeros too (fnuz types have no -0);
    # a NaN's sign is not specified.
    same &= (np.signbit(g) == np.signbit(w)) | np.isnan(w)
    return bool(same.all())


def _values() -> tuple[np.ndarray, int]:
    """(the encode test values, how many of them lead, before the random draws)."""
    rng = np.random.default_rng(7)
    special = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-7, -1e-7, 1e-30, 1e6, -1e6,
               3e38, -3e38, 448, 449, 464, 465, 480, -464, 240, 247, 248, 256, 57344, 61439,
               61440, 61441, 1e5, 6, 5, 7, -7, 0.25, 0.75, 1.25, 2.5, -2.5, 3.5, 15.5, 2 ** 27,
               2 ** 27 + 16, -(2 ** 31), 2 ** 62, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -11,
               2.0 ** -17, 3 * 2.0 ** -18, 2.0 ** -16, 2.0 ** -6, 2.0 ** -7]
    grid = []
    for dt in SMALL_FLOATS:  # every representable value and every midpoint (ties)
        v = np.arange(_n_patterns(dt), dtype=np.uint8).view(dt.numpy).astype(np.float32)
        v = np.sort(v[np.isfinite(v)])
        grid += [v, (v[1:] + v[:-1]) / 2]
    fixed = np.concatenate([np.asarray(special, np.float32), *grid])
    return np.concatenate([fixed, rng.standard_normal(3000).astype(np.float32) * 64,
                           rng.integers(0, 2 ** 32, 3000, dtype=np.uint64)
                           .astype(np.uint32).view(np.float32)]), len(fixed)


#: the specials and the grid of every small float's values and midpoints are the first
#: _N_FIXED values (the loop-IR interpreter encodes those: module docstring)
VALUES, _N_FIXED = _values()


@pytest.mark.parametrize("dt", SMALL_FLOATS, ids=lambda d: d.short)
def test_numpy_model_decodes_every_pattern(dt: DType) -> None:
    bits = np.arange(_n_patterns(dt), dtype=np.uint8)
    assert _same_values(decode_small_float(bits, dt), bits.view(dt.numpy).astype(np.float32))


@pytest.mark.parametrize("dt", SMALL_FLOATS, ids=lambda d: d.short)
def test_numpy_model_encodes_like_ml_dtypes(dt: DType) -> None:
    with np.errstate(all="ignore"):
        want = VALUES.astype(dt.numpy).view(np.uint8)
    assert (encode_small_float(VALUES, dt) == want).all()


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.short)
@pytest.mark.parametrize("to", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE,
                                TensorProto.INT8, TensorProto.INT64, TensorProto.BOOL])
def test_decode_every_pattern_native(dt: DType, to: int) -> None:
    x = np.arange(_n_patterns(dt), dtype=np.uint8).view(dt.numpy)
    if to in (TensorProto.INT8, TensorProto.INT64) and dt in SMALL_FLOATS:
        # float -> int of NaN, inf or out-of-range values is undefined in ONNX
        f = x.astype(np.float32)
        x = x[np.isfinite(f) & (np.abs(f) < 128)]
    model = _cast_model(dt.value, to)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = onnxjit.compile(model, cache_dir=False)(x)[0]
    assert got.dtype == want.dtype
    assert _same_values(got, want)
    assert _same_values(run_via_loop_ir(model, [x])[0], want)


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.short)
@pytest.mark.parametrize("saturate", [None, 0, 1])
@pytest.mark.parametrize("src", [np.float32, np.float16, np.float64])
def test_encode_against_reference(dt: DType, saturate: int | None, src: type) -> None:
    with np.errstate(all="ignore"):
        x = VALUES.astype(src)
    model = _cast_model(helper.np_dtype_to_tensor_dtype(np.dtype(src)), dt.value, saturate)
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = onnxjit.compile(model, cache_dir=False)(x)[0]
    assert got.dtype == dt.numpy
    assert _same_values(got, want)
    grid = x[:_N_FIXED]
    assert _same_values(run_via_loop_ir(model, [grid])[0], want[:_N_FIXED])


@pytest.mark.parametrize("dt", [DType.FLOAT8E4M3FN, DType.FLOAT8E5M2FNUZ, DType.FLOAT4E2M1,
                                DType.INT4, DType.UINT2], ids=lambda d: d.short)
@pytest.mark.parametrize("saturate", [0, 1])
def test_castlike(dt: DType, saturate: int) -> None:
    model = _cast_model(TensorProto.FLOAT, dt.value, saturate, like=True)
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(model).run(None, {"x": VALUES})[0]
    assert _same_values(onnxjit.compile(model, cache_dir=False)(VALUES)[0], want)


@pytest.mark.parametrize("src", [DType.FLOAT8E5M2, DType.INT4, DType.UINT2],
                         ids=lambda d: d.short)
@pytest.mark.parametrize("dst", [DType.FLOAT8E4M3FN, DType.FLOAT8E4M3FNUZ, DType.INT2,
                                 DType.UINT4], ids=lambda d: d.short)
def test_between_cast_only_types(src: DType, dst: DType) -> None:
    x = np.arange(_n_patterns(src), dtype=np.uint8).view(src.numpy)
    model = _cast_model(src.value, dst.value)
    got = onnxjit.compile(model, cache_dir=False)(x)[0]
    # the value read exactly, then cast from f32 (saturating float8) or int (wrapping)
    with np.errstate(all="ignore"):
        if dst in SMALL_INTS:
            wide = x.astype(np.float32)
            want = np.where(np.isfinite(wide), wide, 0).astype(dst.numpy)
        else:
            hi = float(ml_dtypes.finfo(dst.numpy).max)
            want = np.clip(x.astype(np.float32), -hi, hi).astype(dst.numpy)
    assert _same_values(got, want)


@pytest.mark.parametrize("dt", SUB_BYTE_INTS, ids=lambda d: d.short)
def test_out_of_range_floats_wrap_like_onnxruntime(dt: DType) -> None:
    # ONNX leaves float -> fixed point undefined out of range; onnxjit wraps whole values
    # (two's complement, as for ints), as onnxruntime does. ml_dtypes 0.7 gives 0 instead,
    # so this compares with onnxruntime, reading its 4-/2-bit result back through int8.
    ort = pytest.importorskip("onnxruntime")
    x = np.arange(-40, 41, dtype=np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["y"], to=dt.value),
             helper.make_node("Cast", ["y"], ["z"], to=TensorProto.INT8)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             ["N"])],
                              [helper.make_tensor_value_info("z", TensorProto.INT8, ["N"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    model.ir_version = 10 if dt in (DType.INT4, DType.UINT4) else 11
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(onnxjit.compile(model, cache_dir=False)(x)[0], want)


@pytest.mark.parametrize("src", [np.int8, np.uint8, np.int32, np.int64, np.uint64, np.bool_])
@pytest.mark.parametrize("dt", [DType.FLOAT8E4M3FN, DType.FLOAT8E5M2, DType.INT4, DType.UINT4,
                                DType.INT2], ids=lambda d: d.short)
def test_from_ints_and_bool(src: type, dt: DType) -> None:
    x = np.array([0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 100, 127, 255, 300, 1000, 70000],
                 np.int64).astype(src)
    if np.dtype(src).kind == "i":
        x = np.concatenate([x, (-x).astype(src)])
    model = _cast_model(helper.np_dtype_to_tensor_dtype(np.dtype(src)), dt.value)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert _same_values(onnxjit.compile(model, cache_dir=False)(x)[0], want)


@pytest.mark.parametrize("dt", SMALL_FLOATS + SUB_BYTE_INTS, ids=lambda d: d.short)
def test_constant_folding_and_packed_initializers(dt: DType) -> None:
    # A packed initializer cast to f32 (folded), and f32 constants cast to dt and back.
    vals = np.array([-3, -2, -1, 0, 1, 2, 3], np.float32)
    if dt in (DType.UINT4, DType.UINT2):
        vals = np.abs(vals)
    typed = vals.astype(dt.numpy)
    init = numpy_helper.from_array(typed, "c")
    x_init = numpy_helper.from_array(np.array([0.3, -1.7, 500.0, np.nan], np.float32), "f")
    nodes = [helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["f"], ["t"], to=dt.value),
             helper.make_node("Cast", ["t"], ["z"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "g", [], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [7]),
        helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])], initializer=[init, x_init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    want = ReferenceEvaluator(model).run(None, {})
    got = onnxjit.compile(model, cache_dir=False)()
    assert _same_values(got[0], want[0])
    assert _same_values(got[1], want[1])


def test_arithmetic_on_cast_only_types_is_refused() -> None:
    node = helper.make_node("Add", ["x", "x"], ["y"])
    t = TensorProto.FLOAT8E4M3FN
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", t, [2])],
                              [helper.make_tensor_value_info("y", t, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    with pytest.raises((onnxjit.UnsupportedError, onnxjit.ModelError)):
        onnxjit.compile(model, cache_dir=False)(np.zeros(2, DType.FLOAT8E4M3FN.numpy))


def test_e8m0_numpy_model() -> None:
    bits = np.arange(256, dtype=np.uint8)
    assert _same_values(decode_e8m0(bits), bits.view(DType.FLOAT8E8M0.numpy).astype(np.float32))
    want = numpy_helper.to_float8e8m0(VALUES).view(np.uint8)
    assert (encode_e8m0(VALUES) == want).all()


@pytest.mark.parametrize("src", [np.float32, np.float16, np.float64])
def test_e8m0_cast(src: type) -> None:
    # float8e8m0 is compiled once `types.CAST_ONLY_DTYPES` lists it; until then it is refused.
    with np.errstate(all="ignore"):
        x = VALUES.astype(src)
    tp = helper.np_dtype_to_tensor_dtype(np.dtype(src))
    to_e8m0 = _cast_model(tp, TensorProto.FLOAT8E8M0)
    from_e8m0 = _cast_model(TensorProto.FLOAT8E8M0, tp)
    bits = np.arange(256, dtype=np.uint8).view(DType.FLOAT8E8M0.numpy)
    if DType.FLOAT8E8M0 not in CAST_ONLY_DTYPES:
        with pytest.raises(onnxjit.UnsupportedError, match="f8e8m0"):
            onnxjit.compile(to_e8m0, cache_dir=False)(x)
        return
    want = ReferenceEvaluator(to_e8m0).run(None, {"x": x})[0]
    assert _same_values(onnxjit.compile(to_e8m0, cache_dir=False)(x)[0], want)
    got = onnxjit.compile(from_e8m0, cache_dir=False)(bits)[0]
    assert _same_values(got, bits.astype(src))


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.short)
@pytest.mark.parametrize("saturate", [0, 1])
def test_quantize_dequantize(dt: DType, saturate: int) -> None:
    # per-axis scales and zero points; values beyond each type's range, NaN-free (rint of NaN
    # into an int is undefined)
    x = np.linspace(-700.0, 700.0, 24, dtype=np.float32).reshape(2, 12)
    scale = np.array([0.5, 3.0], np.float32)
    # float zero points must be 0 (the reference refuses others for float8, ignores them
    # for float4)
    zp = np.array([0, 0] if dt in SMALL_FLOATS else [1, 2], np.float32).astype(dt.numpy)
    kw = {"saturate": saturate} if dt in SMALL_FLOATS else {}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=0, **kw),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [2, 12])],
                              [helper.make_tensor_value_info("q", dt.value, [2, 12]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])],
                              initializer=[numpy_helper.from_array(scale, "s"),
                                           numpy_helper.from_array(zp, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    if saturate == 0 and dt not in SMALL_FLOATS:
        return  # `saturate` is a float8 attribute; covered once with the default
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(model).run(None, {"x": x})
    got = onnxjit.compile(model, cache_dir=False)(x)
    assert got[0].dtype == dt.numpy
    assert _same_values(got[0], want[0])
    assert _same_values(got[1], want[1])
