"""MatMul/Gemm, the Softmax family, ArgMax/ArgMin and the reductions: edge semantics, the
loop nests' strategies (checked against numpy through the loop-IR interpreter), error messages
and symbolic shape inference. The ONNX backend suite covers the common cases natively."""

from __future__ import annotations

import numpy as np
import pytest
from loop_harness import run_via_loop_ir
from onnx import TensorProto, helper, numpy_helper

import onnxjit.ir.ops.linalg.matmul  # noqa: F401  (registers the ops)
import onnxjit.ir.ops.reductions.along_axis  # noqa: F401
from onnxjit.errors import InputError, ModelError, UnsupportedError
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Matmul, Program, walk
from onnxjit.ir.opdef import resolve
from onnxjit.ir.ops.reductions import semantics as reductions
from onnxjit.ir.types import DType, Sym, TensorType

NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64,
              np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.float16): TensorProto.FLOAT16,
              np.dtype(np.uint32): TensorProto.UINT32}
RNG = np.random.default_rng(0)


def run(op: str, inputs: list, opset: int = 18, consts: dict | None = None,
        out_shape: list | None = None, out_dtype=None, n_out: int = 1, **attrs) -> list:
    """Build a one-node model (`inputs`: arrays or None for an omitted input; names in
    `consts` become initializers) and run it through the loop IR."""
    consts = consts or {}
    names, feeds, vis, inits = [], [], [], []
    for k, a in enumerate(inputs):
        if a is None:
            names.append("")
            continue
        name = f"in{k}"
        names.append(name)
        a = np.asarray(a)
        if k in consts:
            inits.append(numpy_helper.from_array(a, name))
        else:
            feeds.append(a)
            vis.append(helper.make_tensor_value_info(name, NP_TO_ONNX[a.dtype], a.shape))
    node = helper.make_node(op, names, [f"out{k}" for k in range(n_out)], **attrs)
    first = np.asarray(inputs[0])
    dt = NP_TO_ONNX[np.dtype(out_dtype) if out_dtype is not None else first.dtype]
    outs = [helper.make_tensor_value_info(f"out{k}", dt, out_shape) for k in range(n_out)]
    g = helper.make_graph([node], "g", vis, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return run_via_loop_ir(m, feeds)


def rand(*shape, dtype=np.float32):
    if np.dtype(dtype).kind == "f":
        return RNG.standard_normal(shape).astype(dtype)
    return RNG.integers(-5, 6, shape).astype(dtype)


def infer(op: str, shapes: list, opset: int = 18, dtype=DType.FLOAT, consts=None, **attrs):
    """Run the op table's `infer` on a node with (possibly symbolic) input shapes (None: an
    unknown rank)."""
    ins = [Value(TensorType(DType.INT64 if k == 1 and op.startswith("Reduce") else dtype, s),
                 f"x{k}") for k, s in enumerate(shapes)]
    for k, c in (consts or {}).items():
        ins[k].const = np.asarray(c, dtype=np.int64)
        ins[k].type = TensorType(DType.INT64, ins[k].const.shape)
    node = Node(op, ins, [Value()], dict(attrs), version=opset)
    return resolve(node).infer(node)[0]


# --------------------------------------------------------------------------- MatMul


@pytest.mark.parametrize("sa,sb", [
    ((4,), (4,)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2)),
    ((3, 5, 4), (4, 6)), ((5, 4), (2, 4, 3)), ((2, 3, 4), (2, 4, 5)), ((3, 0), (0, 2)),
    ((0, 3), (3, 2)), ((1, 3), (3, 1))])
def test_matmul_shapes(sa, sb):
    a, b = rand(*sa), rand(*sb)
    got, = run("MatMul", [a, b], opset=13)
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-5, atol=1e-5)
    assert got.shape == np.matmul(a, b).shape


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_matmul_dtypes(dtype):
    a, b = rand(2, 3, 4, dtype=dtype), rand(4, 5, dtype=dtype)
    got, = run("MatMul", [a, b], opset=13)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, a @ b, rtol=1e-12)


def _program(op: str, shapes: list, out: list, **attrs) -> Program:
    from onnxjit.driver import import_model, lower_signature
    from onnxjit.options import CompileOptions

    vis = [helper.make_tensor_value_info(f"in{k}", TensorProto.FLOAT, s)
           for k, s in enumerate(shapes)]
    g = helper.make_graph([helper.make_node(op, [f"in{k}" for k in range(len(shapes))], ["y"],
                                            **attrs)], "g", vis,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    opts = CompileOptions(verify=True)
    sig = tuple((DType.FLOAT, tuple(s)) for s in shapes)
    return lower_signature(import_model(m.SerializeToString(), opts), sig, opts)[1]


def test_matmul_shared_weight_folds_batch_into_rows():
    prog = _program("MatMul", [[3, 5, 4], [4, 6]], [3, 5, 6])
    mms = [s for k in prog.kernels for s in walk(k.body) if isinstance(s, Matmul)]
    assert len(mms) == 1 and (mms[0].m, mms[0].n, mms[0].k) == (15, 6, 4)
    # A broadcast batch needs a loop of 2-D products.
    prog = _program("MatMul", [[5, 4], [2, 4, 3]], [2, 5, 3])
    mms = [s for k in prog.kernels for s in walk(k.body) if isinstance(s, Matmul)]
    assert len(mms) == 1 and (mms[0].m, mms[0].n) == (5, 3)


def test_matmul_errors():
    with pytest.raises(ModelError, match="inner dims differ"):
        infer("MatMul", [(2, 3), (4, 5)], opset=13)
    with pytest.raises(ModelError, match="rank >= 1"):
        infer("MatMul", [(), (4,)], opset=13)
    with pytest.raises(ModelError, match="cannot broadcast"):
        infer("MatMul", [(2, 3, 4), (3, 4, 5)], opset=13)
    with pytest.raises(ModelError, match="c64.*does not accept"):
        infer("MatMul", [(2, 3), (3, 4)], opset=13, dtype=DType.COMPLEX64)
    with pytest.raises(ModelError, match="does not accept"):
        infer("MatMul", [(2, 3), (3, 4)], opset=8, dtype=DType.INT32)  # ints from opset 9


def test_matmul_symbolic_inference():
    n, m = Sym.var("N"), Sym.var("M")
    t = infer("MatMul", [(n, 1, 3, 4), (5, 4, m)], opset=13)
    assert t.shape == (n, 5, 3, m)
    assert infer("MatMul", [(n, 4), (4,)], opset=13).shape == (n,)
    assert infer("MatMul", [None, (4, 2)], opset=13).shape is None


def test_matmulinteger_zero_points():
    a = RNG.integers(0, 256, (2, 3, 4)).astype(np.uint8)
    b = RNG.integers(0, 256, (4, 5)).astype(np.uint8)
    azp, bzp = np.array([1, 200, 3], np.uint8), np.array([9, 8, 7, 6, 5], np.uint8)
    got, = run("MatMulInteger", [a, b, azp, bzp], opset=10, out_dtype=np.int32)
    ref = (a.astype(np.int32) - azp[:, None].astype(np.int32)) @ (b.astype(np.int32) - bzp)
    np.testing.assert_array_equal(got, ref)
    got, = run("MatMulInteger", [a.astype(np.int8), b.astype(np.int8)], opset=10,
               out_dtype=np.int32)
    np.testing.assert_array_equal(got, a.astype(np.int8).astype(np.int32)
                                  @ b.astype(np.int8).astype(np.int32))
    with pytest.raises(UnsupportedError, match="zero point of shape"):
        infer("MatMulInteger", [(3, 4), (4, 5), (3, 4)], opset=10, dtype=DType.UINT8)


# --------------------------------------------------------------------------- Gemm


def gemm_ref(a, b, c, ta=0, tb=0, alpha=1.0, beta=1.0):
    y = alpha * ((a.T if ta else a) @ (b.T if tb else b))
    return y + beta * c if c is not None else y


@pytest.mark.parametrize("cshape", [None, (), (1,), (5,), (3, 1), (3, 5), (1, 5)])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm(cshape, ta, tb):
    a = rand(*((4, 3) if ta else (3, 4)))
    b = rand(*((5, 4) if tb else (4, 5)))
    c = None if cshape is None else rand(*cshape)
    got, = run("Gemm", [a, b, c], opset=13, transA=ta, transB=tb, alpha=0.5, beta=2.0)
    np.testing.assert_allclose(got, gemm_ref(a, b, c, ta, tb, 0.5, 2.0), rtol=1e-5, atol=1e-5)


def test_gemm_beta_zero_and_empty_k():
    a, b, c = rand(3, 4), rand(4, 2), rand(2)
    got, = run("Gemm", [a, b, c], opset=13, beta=0.0)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5)
    got, = run("Gemm", [rand(3, 0), rand(0, 2), c], opset=13, beta=3.0)
    np.testing.assert_allclose(got, np.broadcast_to(3 * c, (3, 2)), rtol=1e-6)
    got, = run("Gemm", [rand(3, 0), rand(0, 2)], opset=13)
    assert got.shape == (3, 2) and not got.any()


def test_gemm_int_and_legacy_broadcast():
    a, b, c = rand(3, 4, dtype=np.int32), rand(4, 2, dtype=np.int32), rand(2, dtype=np.int32)
    got, = run("Gemm", [a, b, c], opset=13, alpha=2.0, beta=3.0)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, 2 * (a @ b) + 3 * c)
    a, b, c = rand(3, 4), rand(4, 2), rand(2)
    got, = run("Gemm", [a, b, c], opset=6, broadcast=1)
    np.testing.assert_allclose(got, a @ b + c, rtol=1e-5)


def test_gemm_errors():
    with pytest.raises(ModelError, match="does not broadcast"):
        infer("Gemm", [(3, 4), (4, 5), (3,)], opset=13)
    with pytest.raises(ModelError, match="must be 2-D"):
        infer("Gemm", [(2, 3, 4), (4, 5)], opset=13)
    with pytest.raises(ModelError, match="inner dims differ"):
        infer("Gemm", [(3, 4), (4, 5)], opset=13, transA=1)
    with pytest.raises(ModelError, match="takes 3 inputs"):
        infer("Gemm", [(3, 4), (4, 5)], opset=9)  # C is optional from opset 11
    with pytest.raises(UnsupportedError, match="non-integer alpha"):
        infer("Gemm", [(3, 4), (4, 5)], opset=13, dtype=DType.INT32, alpha=0.5)
    n = Sym.var("N")
    assert infer("Gemm", [(n, 4), (6, 4), (6,)], opset=13, transB=1).shape == (n, 6)


# --------------------------------------------------------------------------- Softmax family


def softmax_ref(x, axis, log=False):
    m = x.max(axis=axis, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    return (x - m) - np.log(s) if log else e / s


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_axes_and_opsets(op):
    x = rand(2, 3, 4) * 50  # large values: the max subtraction keeps exp finite
    log = op == "LogSoftmax"
    for axis in (0, 1, -1):
        got, = run(op, [x], opset=13, axis=axis)
        np.testing.assert_allclose(got, softmax_ref(x, axis, log), rtol=1e-5, atol=1e-6)
    # Before opset 13 the input is coerced to 2-D at axis (default 1).
    got, = run(op, [x], opset=11)
    ref = softmax_ref(x.reshape(2, 12), 1, log).reshape(x.shape)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    for axis in (2, -1):  # a negative axis counts from the back before opset 13 too
        got, = run(op, [x], opset=1, axis=axis)
        np.testing.assert_allclose(got, softmax_ref(x, 2, log), rtol=1e-5, atol=1e-6)
    got, = run(op, [x], opset=11, axis=-2)
    ref = softmax_ref(x.reshape(2, 12), 1, log).reshape(x.shape)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_softmax_nan_and_errors():
    x = np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0]], np.float32)
    got, = run("Softmax", [x], opset=13)
    assert np.isnan(got[0]).all() and np.isfinite(got[1]).all()
    with pytest.raises(ModelError, match="axis 3 is out of range"):
        infer("Softmax", [(2, 3)], opset=13, axis=3)
    with pytest.raises(ModelError, match="does not accept"):
        infer("Softmax", [(2, 3)], opset=13, dtype=DType.INT32)
    assert infer("Softmax", [(Sym.var("B"), 7)], opset=13).shape == (Sym.var("B"), 7)


def test_hardmax_ties_first():
    x = np.array([[3, 1, 3], [0, 2, 2]], np.float32)
    got, = run("Hardmax", [x], opset=13)
    np.testing.assert_array_equal(got, [[1, 0, 0], [0, 1, 0]])
    got, = run("Hardmax", [x], opset=13, axis=0)
    np.testing.assert_array_equal(got, [[1, 0, 1], [0, 1, 0]])


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_argmax(op):
    x = np.array([[1, 5, 5, 0], [7, 7, 0, 0]], np.int32)
    fn = np.argmax if op == "ArgMax" else np.argmin
    got, = run(op, [x], opset=13, out_dtype=np.int64, axis=1, keepdims=0)
    np.testing.assert_array_equal(got, fn(x, axis=1))
    got, = run(op, [x], opset=13, out_dtype=np.int64, axis=-1, select_last_index=1)
    np.testing.assert_array_equal(got, 3 - fn(x[:, ::-1], axis=1)[:, None])
    y = rand(3, 4, 5)
    got, = run(op, [y], opset=13, out_dtype=np.int64, axis=1)
    np.testing.assert_array_equal(got, fn(y, axis=1)[:, None, :])
    f = np.array([[1.0, np.nan, 3.0, np.nan]], np.float32)  # NaN wins, like numpy
    got, = run(op, [f], opset=13, out_dtype=np.int64, axis=1)
    assert got.tolist() == [[1]]


def test_argmax_empty_axis_is_an_input_error():
    with pytest.raises(InputError, match="size 0"):
        run("ArgMax", [np.zeros((2, 0), np.float32)], opset=13, out_dtype=np.int64, axis=1)


# --------------------------------------------------------------------------- reductions

REDUCE_REF = {
    "ReduceSum": lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    "ReduceMean": lambda x, a, k: np.mean(x, axis=a, keepdims=k),
    "ReduceMax": lambda x, a, k: np.max(x, axis=a, keepdims=k),
    "ReduceMin": lambda x, a, k: np.min(x, axis=a, keepdims=k),
    "ReduceProd": lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    "ReduceL1": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "ReduceL2": lambda x, a, k: np.sqrt(np.sum(x * x, axis=a, keepdims=k)),
    "ReduceSumSquare": lambda x, a, k: np.sum(x * x, axis=a, keepdims=k),
    "ReduceLogSum": lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)),
    "ReduceLogSumExp": lambda x, a, k: np.log(np.sum(np.exp(x), axis=a, keepdims=k)),
}

# Shapes and axes exercising each loop strategy: innermost reduced (register accumulator),
# outer reduced (accumulate into the output), columns, mixed, all, size-1 dims, noop.
LAYOUTS = [((3, 4, 5), (2,)), ((3, 4, 5), (0,)), ((3, 4, 5), (1,)), ((3, 4, 5), (0, 2)),
           ((2, 3, 4, 5), (0, 2)), ((2, 3, 4, 5), (1, 3)), ((3, 1, 5), (1,)),
           ((3, 4, 5), (0, 1, 2)), ((2, 2100), (0,)), ((4,), (0,))]


@pytest.mark.parametrize("name", sorted(REDUCE_REF))
@pytest.mark.parametrize("shape,axes", LAYOUTS)
def test_reduce_layouts(name, shape, axes):
    x = RNG.uniform(0.5, 1.5, shape).astype(np.float32)
    for keep in (0, 1):
        got, = run(name, [x, np.array(axes, np.int64)], opset=18, consts={1: 1}, keepdims=keep)
        ref = REDUCE_REF[name](x.astype(np.float64), axes, bool(keep))
        np.testing.assert_allclose(got, ref, rtol=2e-5)
        assert got.shape == ref.shape
        # Constant folding evaluates the same semantics.
        ev = reductions.evaluate_reduce(name, x, tuple(sorted(a % x.ndim for a in axes)),
                                        bool(keep))
        np.testing.assert_allclose(ev, ref, rtol=2e-5)


@pytest.mark.parametrize("name,expect", [
    ("ReduceSum", 0.0), ("ReduceMean", np.nan), ("ReduceMax", -np.inf), ("ReduceMin", np.inf),
    ("ReduceProd", 1.0), ("ReduceL2", 0.0), ("ReduceLogSum", -np.inf),
    ("ReduceLogSumExp", -np.inf)])
def test_reduce_empty_set(name, expect):
    x = np.zeros((2, 0, 3), np.float32)
    got, = run(name, [x, np.array([1], np.int64)], opset=18, consts={1: 1})
    assert got.shape == (2, 1, 3)
    np.testing.assert_array_equal(got, np.full((2, 1, 3), expect, np.float32))


def test_reduce_int_and_bool_identities():
    e = np.zeros((2, 0), np.int32)
    got, = run("ReduceMax", [e, np.array([1], np.int64)], opset=18, consts={1: 1})
    assert got.tolist() == [[np.iinfo(np.int32).min]] * 2
    got, = run("ReduceMin", [e.astype(np.uint8), np.array([1], np.int64)], opset=18,
               consts={1: 1})
    assert got.tolist() == [[255]] * 2
    b = np.array([[True, False], [False, False]])
    got, = run("ReduceMax", [b, np.array([1], np.int64)], opset=20, consts={1: 1}, keepdims=0)
    assert got.tolist() == [True, False]
    got, = run("ReduceMin", [b, np.array([0], np.int64)], opset=20, consts={1: 1}, keepdims=0)
    assert got.tolist() == [False, False]
    x = np.array([[7, -7, 2], [1, 2, 4]], np.int64)
    got, = run("ReduceMean", [x], opset=18, keepdims=0)
    assert got.dtype == np.int64 and int(got) == 1  # 9 // 6, truncated


def test_reduce_attribute_axes_and_noop():
    x = rand(3, 4, 5)
    got, = run("ReduceSum", [x], opset=11, axes=[-1, 0], keepdims=0)
    np.testing.assert_allclose(got, x.sum(axis=(0, 2)), rtol=1e-5, atol=1e-5)  # f32 order
    got, = run("ReduceMax", [x], opset=13, axes=[1])  # attribute form until opset 18
    np.testing.assert_allclose(got, x.max(axis=1, keepdims=True))
    got, = run("ReduceSum", [x], opset=13)  # no axes: everything
    np.testing.assert_allclose(got, x.sum(keepdims=True), rtol=1e-5, atol=1e-5)
    empty = np.zeros((0,), np.int64)
    got, = run("ReduceSumSquare", [x, empty], opset=18, consts={1: 1},
               noop_with_empty_axes=1)
    np.testing.assert_allclose(got, x * x, rtol=1e-6)  # numpy's axis=(): squares only
    got, = run("ReduceSum", [x, None], opset=13, noop_with_empty_axes=1)
    np.testing.assert_array_equal(got, x)


def test_reduce_runtime_axes_checked_against_declared_shape():
    x = rand(3, 2, 2)
    got, = run("ReduceSum", [x, np.array([-2], np.int64)], opset=13, out_shape=[3, 2],
               keepdims=0)
    np.testing.assert_allclose(got, x.sum(axis=1), rtol=1e-6)
    got, = run("ReduceSum", [x, np.array([2], np.int64)], opset=13, out_shape=[3, 2],
               keepdims=0)  # same shape, other axis: the matching nest runs
    np.testing.assert_allclose(got, x.sum(axis=2), rtol=1e-6)
    got, = run("ReduceMean", [x, np.array([0], np.int64)], opset=18, out_shape=[1, 2, 2])
    np.testing.assert_allclose(got, x.mean(axis=0, keepdims=True), rtol=1e-6)
    with pytest.raises(InputError, match="do not give the output shape"):
        run("ReduceMean", [x, np.array([1], np.int64)], opset=18, out_shape=[1, 2, 2])
    with pytest.raises(InputError, match="out of range"):
        run("ReduceMean", [x, np.array([3], np.int64)], opset=18, out_shape=[1, 2, 2])


def test_reduce_errors():
    with pytest.raises(ModelError, match="name an axis twice"):
        infer("ReduceSum", [(3, 4)], opset=11, axes=[1, -1])
    with pytest.raises(ModelError, match="out of range"):
        infer("ReduceMax", [(3, 4)], opset=13, axes=[2])
    with pytest.raises(ModelError, match="does not accept"):
        infer("ReduceMax", [(3, 4)], opset=11, dtype=DType.UINT8)  # u8 from opset 12
    with pytest.raises(ModelError, match="does not accept"):
        infer("ReduceLogSum", [(3, 4)], opset=28, dtype=DType.INT32)
    with pytest.raises(ModelError, match="c64.*does not accept"):
        infer("ReduceSum", [(3, 4)], opset=13, dtype=DType.COMPLEX64)
    with pytest.raises(ModelError, match="not as an attribute"):
        infer("ReduceSum", [(3, 4)], opset=13, axes=[0])
    with pytest.raises(ModelError, match="noop_with_empty_axes"):
        infer("ReduceSum", [(3, 4)], opset=13, noop_with_empty_axes=2)


def test_reduce_symbolic_inference():
    n, s = Sym.var("N"), Sym.var("S")
    assert infer("ReduceMean", [(n, s, 8)], opset=13, axes=[-1]).shape == (n, s, 1)
    assert infer("ReduceSum", [(n, s, 8), (1,)], opset=13, consts={1: [1]},
                 keepdims=0).shape == (n, 8)
    # Axes known only at run time: the rank is known, the dims are not.
    assert infer("ReduceSum", [(n, 1, 8), (1,)], opset=13).shape == (None, 1, None)
    assert infer("ReduceSum", [(n, 1, 8), (2,)], opset=13, keepdims=0).shape == (None,)


def test_reduce_loop_strategies():
    """Innermost reductions keep a register accumulator; outer ones accumulate into the output
    with a contiguous innermost loop, and the outermost loop is parallel."""
    from onnxjit.ir.loops import Buffer, Loop

    x = Buffer("x", DType.FLOAT, (8, 16, 32), "input", slot=0)
    y = Buffer("y", DType.FLOAT, (8, 1, 32), "output", slot=1)
    b = Builder()
    reductions.emit_reduce(b, "ReduceSum", x, y, (1,))
    loops = [s for s in walk(b.body) if isinstance(s, Loop)]
    assert loops[0].parallel and loops[0].stop.value == 8
    assert not any(lp.parallel for lp in loops[1:])
    # The innermost loop of the accumulation nest runs over the 32 contiguous columns.
    assert any(lp.stop.value == 32 and not any(isinstance(t, Loop) for t in lp.body)
               for lp in loops)


@pytest.mark.parametrize("op,inputs,opset,attrs", [
    ("MatMul", [rand(2, 3, 4), rand(4, 5)], 13, {}),
    ("MatMul", [rand(4, dtype=np.int32), rand(2, 4, 3, dtype=np.int32)], 13, {}),
    ("Gemm", [rand(4, 3), rand(5, 4), rand(5)], 13, {"transA": 1, "transB": 1, "alpha": 0.5}),
    ("Gemm", [rand(3, 4, dtype=np.int64), rand(4, 2, dtype=np.int64)], 13, {"alpha": 3.0}),
    ("Softmax", [rand(2, 3, 4)], 11, {}),
    ("LogSoftmax", [rand(2, 3, 4)], 13, {"axis": 1}),
    ("Hardmax", [rand(2, 3, 4)], 13, {"axis": 0}),
    ("ArgMin", [rand(2, 3, 4)], 13, {"axis": 2, "keepdims": 0, "select_last_index": 1}),
    ("ReduceLogSumExp", [rand(2, 3, 4)], 13, {"axes": [0, 2]}),
    ("ReduceL2", [rand(2, 3, 4, dtype=np.int32)], 13, {"axes": [1], "keepdims": 0}),
    ("ReduceMean", [rand(2, 3, 4, dtype=np.int64)], 18, {}),
    ("MatMulInteger", [rand(3, 4, dtype=np.int8), rand(4, 2, dtype=np.int8),
                       np.array(2, np.int8)], 10, {}),
])
def test_constant_folding_agrees_with_lowering(op, inputs, opset, attrs):
    """`evaluate` (constant folding) and the loop nest give the same result."""
    out_dtype = np.int64 if op.startswith("Arg") else \
        np.int32 if op == "MatMulInteger" else None
    lowered, = run(op, inputs, opset, out_dtype=out_dtype, **attrs)
    folded, = run(op, inputs, opset, consts=dict.fromkeys(range(len(inputs)), 1),
                  out_dtype=out_dtype, **attrs)
    assert folded.dtype == lowered.dtype and folded.shape == lowered.shape
    np.testing.assert_allclose(folded, lowered, rtol=1e-5, atol=1e-6)
