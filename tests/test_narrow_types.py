"""float16 and bfloat16 as storage types computed in float32 (ir/narrow.py, codegen/scalar.py).

Native results are compared bit for bit with numpy (float16: numpy rounds each op once from
float32) and with ml_dtypes (bfloat16), and with the loop-IR evaluator (`scalar_eval`).
"""

import ml_dtypes
import numpy as np
import onnx
import pytest
from loop_harness import run_via_loop_ir
from onnx import TensorProto as TP
from onnx import helper

import onnxjit
from onnxjit.ir.narrow import bf16_bits, narrow, widen
from onnxjit.ir.scalar_eval import eval_op
from onnxjit.ir.types import DType

BF16 = ml_dtypes.bfloat16
_CODE = {np.dtype(np.float16): TP.FLOAT16, np.dtype(BF16): TP.BFLOAT16,
         np.dtype(np.float32): TP.FLOAT, np.dtype(np.float64): TP.DOUBLE,
         np.dtype(np.int8): TP.INT8, np.dtype(np.uint8): TP.UINT8, np.dtype(np.int32): TP.INT32,
         np.dtype(np.int64): TP.INT64, np.dtype(np.uint16): TP.UINT16, np.dtype(bool): TP.BOOL}


def _model(nodes, ins, outs, opset=21, rank=1):
    def info(n, d):
        return helper.make_tensor_value_info(n, _CODE[np.dtype(d)], [None] * rank)

    graph = helper.make_graph(nodes, "g", [info(n, d) for n, d in ins],
                              [info(n, d) for n, d in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model, *arrays):
    return onnxjit.compile(model, cache_dir=False)(*arrays)


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    nan_a, nan_b = np.isnan(widen(a)), np.isnan(widen(b))
    assert np.array_equal(nan_a, nan_b)
    w = np.dtype(f"u{a.dtype.itemsize}")
    np.testing.assert_array_equal(a.view(w)[~nan_a], b.view(w)[~nan_b])


def _special(dtype):
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(997) * 30, [0.0, -0.0, np.inf, -np.inf, np.nan,
                        65504, 65520, 1e-8, 6e-5, 3.4e38, 1e300, -1e300]])
    return x.astype(dtype)


# ------------------------------------------------------------------------------- bf16 rounding
def test_bf16_rounding_ties_to_even_nan_inf_overflow():
    one = 0x3F800000
    x = np.array([one, one + 0x8000, one + 0x18000, one + 0x8001, 0x7F7FFFFF, 0x7FC00001,
                  0xFF800001, 0x7F800000, 0x00000001], np.uint32).view(np.float32)
    got = bf16_bits(x)
    # exact; tie -> even (down); tie -> even (up); above tie -> up; overflow -> inf;
    # quiet NaN keeps sign; signalling NaN is quieted (never inf); inf; tiny -> 0
    assert list(got) == [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0x7F80, 0x7FC0, 0xFFC0, 0x7F80, 0x0]
    y = _special(np.float32)
    _bits_equal(narrow(y, DType.BFLOAT16), y.astype(BF16))
    _bits_equal(widen(y.astype(BF16)), y.astype(BF16).astype(np.float32))


# ------------------------------------------------------------------------------- casts
_FLOATS = [np.float16, BF16, np.float32, np.float64]
_INTS = [np.int8, np.uint8, np.int32, np.int64]


@pytest.mark.parametrize("src", _FLOATS + _INTS + [bool], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dst", _FLOATS + _INTS + [bool], ids=lambda d: np.dtype(d).name)
def test_cast_pairs(src, dst):
    if np.dtype(src).kind in "iub" or src is bool:
        info = np.iinfo(src) if src is not bool else None
        x = (np.arange(-300, 300) if info is None or info.min < 0 else np.arange(0, 600))
        if src == np.int64:
            x = np.concatenate([x, [70000, 2**31 - 1, 2**40 + 2**24 + 1]])
        x = (x % 2 == 1) if src is bool else x.astype(src)
    else:
        x = _special(src)
        if np.dtype(dst).kind in "iu":  # float -> int out of range is undefined in ONNX
            w = widen(x).astype(np.float64)
            info = np.iinfo(dst)
            x = x[np.isfinite(w) & (w > info.min) & (w < info.max)]
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=_CODE[np.dtype(dst)])],
                   [("x", src)], [("y", dst)])
    y, = _run(model, x)
    want = eval_op("cast", [x], DType.from_numpy(np.dtype(dst)))
    _bits_equal(y, want)
    if dst in (np.float16, BF16) or src in (np.float16, BF16):
        with np.errstate(all="ignore"):  # ml_dtypes/numpy agree with the evaluator
            ref = x.astype(dst) if src is not BF16 or np.dtype(dst).kind not in "iu" \
                else x.astype(np.float32).astype(dst)
        _bits_equal(want, ref)


def test_f64_to_f16_rounds_once():
    x = np.array([1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40), 65519.999, 2**-25 + 2**-60],
                 np.float64)
    y, = _run(_model([helper.make_node("Cast", ["x"], ["y"], to=TP.FLOAT16)], [("x", np.float64)],
                     [("y", np.float16)]), x)
    _bits_equal(y, x.astype(np.float16))


# ------------------------------------------------------------------------------- arithmetic
@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sqrt", "Abs", "Neg",
                                "Floor", "Exp"])
def test_single_op_matches_numpy(dtype, op):
    rng = np.random.default_rng(2)
    a = (rng.standard_normal(1003) * 8).astype(dtype)
    b = (rng.standard_normal(1003) * 8).astype(dtype)
    unary = op in ("Sqrt", "Abs", "Neg", "Floor", "Exp")
    names = ["a"] if unary else ["a", "b"]
    model = _model([helper.make_node(op, names, ["y"])], [(n, dtype) for n in names],
                   [("y", dtype)])
    args = [a] if unary else [a, b]
    y, = _run(model, *args)
    fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
          "Max": np.maximum, "Min": np.minimum, "Sqrt": np.sqrt, "Abs": np.abs,
          "Neg": np.negative, "Floor": np.floor, "Exp": np.exp}[op]
    with np.errstate(all="ignore"):
        ref = narrow(fn(*[x.astype(np.float32) for x in args]), DType.from_numpy(np.dtype(dtype)))
    if op == "Exp":  # a polynomial in f32 vs libm: at most one narrow ulp apart
        np.testing.assert_allclose(y.astype(np.float32), ref.astype(np.float32), rtol=2**-7)
        return
    _bits_equal(y, ref)
    if dtype == np.float16:
        with np.errstate(all="ignore"):
            _bits_equal(y, fn(*args))  # numpy's own float16 loops: same per-op rounding
        # the loop-IR interpreter agrees (it cannot store 0-d ml_dtypes arrays yet: f16 only)
        loop, = run_via_loop_ir(model, args)
        _bits_equal(loop, y)


def test_fused_chain_rounds_after_every_op():
    # (a * b) + c in f16: numpy rounds the product before the add; so must a fused loop.
    rng = np.random.default_rng(3)
    a, b, c = ((rng.standard_normal(4096) * 30).astype(np.float16) for _ in range(3))
    model = _model([helper.make_node("Mul", ["a", "b"], ["t"]),
                    helper.make_node("Add", ["t", "c"], ["y"])],
                   [("a", np.float16), ("b", np.float16), ("c", np.float16)],
                   [("y", np.float16)])
    y, = _run(model, a, b, c)
    _bits_equal(y, a * b + c)
    once = (a.astype(np.float32) * b.astype(np.float32) + c.astype(np.float32)).astype(np.float16)
    assert not np.array_equal(y, once)  # the inputs are chosen so that per-op rounding shows


def test_movement_and_matmul_on_narrow_types():
    rng = np.random.default_rng(4)
    for dt in (np.float16, BF16):
        x = rng.standard_normal((3, 4, 5)).astype(dt)
        w = rng.standard_normal((1, 5, 6)).astype(dt)
        model = _model([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
                        helper.make_node("MatMul", ["t", "w"], ["y"])],
                       [("x", dt), ("w", dt)], [("y", dt)], rank=3)
        y, = _run(model, x, w)
        assert y.dtype == np.dtype(dt)
        ref = np.transpose(x, (1, 0, 2)).astype(np.float32) @ w.astype(np.float32)
        _bits_equal(y, narrow(ref, DType.from_numpy(np.dtype(dt))))


def test_narrow_constants_and_isnan():
    init = onnx.numpy_helper.from_array(np.array([1.5, np.nan, -2.0], np.float16), "c")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["s"]), helper.make_node("IsNaN", ["s"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TP.FLOAT16, [3])],
        [helper.make_tensor_value_info("y", TP.BOOL, [3])], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    y, = _run(model, np.array([1.0, 2.0, np.inf], np.float16))
    assert list(y) == [False, True, False]
