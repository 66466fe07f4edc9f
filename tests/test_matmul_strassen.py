"""Products by a constant B as one Strassen level (`ir/ops/linalg/strassen.py`): MatMul, MatMul +
bias + Relu, Gemm with transB, alpha and C, a residual epilogue, A with batch dims (size 1
too), odd row counts, blocks of rows and chunks of columns, f64; each in the loop-IR
interpreter (bounds-checked) and natively on one and two threads against a float64 product,
with errors measured against |A| @ |B| (Strassen's bound is norm-wise). Also: an inf or NaN
stays in its row, the plan's sizes, the right operands, the shared workspace, the dropped
weight, and the switch and the `fast_algorithms` option restore the direct product."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from loop_harness import OPTIONS, run_via_loop_ir
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.driver import import_model, lower_signature
from onnxjit.ir.loops import unpack_panels
from onnxjit.ir.ops.linalg import strassen as strassen
from onnxjit.ir.types import DType

RNG = np.random.default_rng(5)


def _model(a_shape, k, n, kind, dtype=np.float32):
    """A (a_shape) @ W (k x n) with `kind`'s epilogue: "plain", "relu" (bias, Relu), "gemm"
    (Gemm alpha 0.5, transB, C), "residual" (+ an input R of the output's shape, Relu)."""
    tp = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    w = RNG.standard_normal((n, k) if kind == "gemm" else (k, n)).astype(dtype)
    out = [*a_shape[:-1], n]
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(RNG.standard_normal(n).astype(dtype), "b")]
    inputs = [helper.make_tensor_value_info("x", tp, list(a_shape))]
    if kind == "gemm":
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], alpha=0.5, transB=1)]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y" if kind == "plain" else "p"])]
    if kind in ("relu", "residual"):
        other = "b" if kind == "relu" else "r"
        nodes += [helper.make_node("Add", ["p", other], ["q"]),
                  helper.make_node("Relu", ["q"], ["y"])]
    if kind == "residual":
        inputs.append(helper.make_tensor_value_info("r", tp, out))
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", tp, out)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(m, a_shape, n, dtype=np.float32):
    feeds = [RNG.standard_normal(a_shape).astype(dtype)]
    if len(m.graph.input) > 1:
        feeds.append(RNG.standard_normal((*a_shape[:-1], n)).astype(dtype))
    return feeds


def _want(m, feeds, kind):
    """The float64 result and the scale of each element's rounding error (|A| @ |B|)."""
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    x = feeds[0].astype(np.float64)
    w = inits["w"].T if kind == "gemm" else inits["w"]
    y = x @ w
    scale = np.abs(x) @ np.abs(w)
    if kind == "gemm":
        y, scale = 0.5 * y + inits["b"], 0.5 * scale
    elif kind == "relu":
        y = np.maximum(y + inits["b"], 0)
    elif kind == "residual":
        y = np.maximum(y + feeds[1], 0)
    return y, scale + 1


def _kernels(m, feeds):
    gm = import_model(m.SerializeToString(), OPTIONS)
    sig = tuple((DType.from_numpy(f.dtype), f.shape) for f in feeds)
    return lower_signature(gm, sig, OPTIONS)[1]


def _uses_strassen(m, feeds) -> bool:
    return any("strassen" in k.name for k in _kernels(m, feeds).kernels)


def _check(y, want, scale, tol):
    err = np.max(np.abs(np.asarray(y, np.float64) - want) / scale)
    assert err < tol, err


@pytest.fixture(autouse=True)
def strassen_on(monkeypatch):
    """Strassen is off by default (slower than today's direct product: `strassen.STRASSEN`);
    these tests switch it on, so the lowering stays right for hosts where it pays."""
    monkeypatch.setattr(strassen, "STRASSEN", True)


def test_off_by_default(monkeypatch):
    monkeypatch.undo()
    m = _model((32, 512), 512, 512, "relu")
    assert not _uses_strassen(m, _feeds(m, (32, 512), 512))


@pytest.fixture
def small(monkeypatch):
    """Strassen for small products too (thresholds are about speed, not correctness)."""
    monkeypatch.setattr(strassen, "MIN_ROWS", 2)
    monkeypatch.setattr(strassen, "MIN_DEPTH", 2)
    monkeypatch.setattr(strassen, "MIN_COLS", 1)
    monkeypatch.setattr(strassen, "WHOLE_VECTORS", False)


CASES = [
    # (A shape, k, n, kind); the small ones have quadrants of odd widths (masked vectors)
    ((6, 10), 10, 12, "plain"),
    ((7, 10), 10, 12, "plain"),  # odd rows: the bottom quadrants have one row fewer
    ((2, 4, 22), 22, 20, "relu"),  # batch dims fold into the rows
    ((9, 18), 18, 36, "gemm"),
    ((1, 8, 14), 14, 24, "relu"),  # a size-1 batch dim folds too
    ((4, 12), 12, 68, "residual"),
]


@pytest.mark.parametrize("a_shape,k,n,kind", CASES)
def test_strassen_matches_float64(a_shape, k, n, kind, small, monkeypatch):
    m = _model(a_shape, k, n, kind)
    feeds = _feeds(m, a_shape, n)
    assert _uses_strassen(m, feeds)
    want, scale = _want(m, feeds, kind)
    _check(run_via_loop_ir(m, feeds)[0], want, scale, 1e-6)
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(*feeds)
        _check(y, want, scale, 1e-6)
    monkeypatch.setattr(strassen, "STRASSEN", False)
    assert not _uses_strassen(m, feeds)


@pytest.mark.parametrize("kind", ["relu", "gemm"])
def test_strassen_at_its_thresholds(kind):
    """A batch-32 MLP layer (the shape Strassen is for) with the default thresholds, against
    float64 and onnxruntime."""
    m = _model((32, 512), 512, 512, kind)
    feeds = _feeds(m, (32, 512), 512)
    assert _uses_strassen(m, feeds)
    want, scale = _want(m, feeds, kind)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = s.run(None, {"x": feeds[0]})[0]
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(*feeds)
        _check(y, want, scale, 1e-6)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_strassen_f64(small):
    m = _model((10, 14), 14, 24, "relu", np.float64)
    feeds = _feeds(m, (10, 14), 24, np.float64)
    assert _uses_strassen(m, feeds)
    want, scale = _want(m, feeds, "relu")
    (y,) = onnxjit.compile(m, cache_dir=False)(*feeds)
    _check(y, want, scale, 1e-14)


def test_plan_sizes():
    f32, plan = DType.FLOAT, strassen.plan
    assert plan(32, 784, 512, f32) == (32, 128)  # one block of rows, one chunk
    assert plan(31, 784, 512, f32) == (32, 128)  # one block of 31 rows (odd)
    assert plan(1024, 1024, 1024, f32) == (58, 256)  # 17 blocks of 58 rows, one of 38
    assert plan(128, 768, 3072, f32) == (64, 256)  # 2 blocks, 3 chunks of quadrant columns
    assert plan(197, 768, 3072, f32) == (50, 256)  # 3 blocks of 50 rows, one of 47
    assert plan(64, 4096, 4096, f32) is None  # 112 MB of right operands: from DRAM
    assert plan(32, 785, 512, f32) is None  # odd depth
    assert plan(32, 784, 510, f32) is None  # slices of odd width
    assert plan(32, 784, 600, f32) is None  # quadrants of 150 columns (not whole vectors)
    assert plan(32, 512, 256, f32) is None  # quadrants of 64 columns: too narrow to pay
    assert plan(8, 784, 512, f32) is None  # too few rows to pay
    assert plan(32, 256, 512, f32) is None  # too shallow to pay
    assert plan(32, 784, 512, DType.INT32) is None


def test_blocks_of_rows_and_chunks_of_columns(small, monkeypatch):
    """A product cut into 3 blocks of 6 rows and one of 1 (no bottom quadrant rows), and 2
    chunks of columns a slice (what fits the workspace), against float64, in the interpreter
    and natively."""
    monkeypatch.setattr(strassen, "CHUNK_COLS", 4)
    monkeypatch.setattr(strassen, "SLICE_BYTES", 4 * (3 * (5 * 8 + 7 * 4) + 6))  # 3-row quadrants
    assert strassen.plan(19, 16, 32, DType.FLOAT) == (6, 4)
    m = _model((19, 16), 16, 32, "residual")
    feeds = _feeds(m, (19, 16), 32)
    assert _uses_strassen(m, feeds)
    want, scale = _want(m, feeds, "residual")
    _check(run_via_loop_ir(m, feeds)[0], want, scale, 1e-6)
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(*feeds)
        _check(y, want, scale, 1e-6)


def test_right_operands_are_the_seven_sums():
    b = RNG.standard_normal((6, 8)).astype(np.float32)
    packed = strassen.right_operands(b, 2, 4)[:, 0]
    kh, wh = 3, 2
    for s in range(strassen.SLICES):
        quads = [b[i * kh:(i + 1) * kh, s * 4 + j * wh:s * 4 + (j + 1) * wh]
                 for i in (0, 1) for j in (0, 1)]
        for p, coef in enumerate(strassen._RIGHT):
            want = sum(c * q.astype(np.float64) for c, q in zip(coef, quads))
            np.testing.assert_array_equal(unpack_panels(packed[s, p], kh, wh, 4),
                                          want.astype(np.float32))


def test_layers_share_one_workspace(small):
    """Two Strassen layers use one workspace, slice s's part at s * SLICE_BYTES in both, so a
    part stays with one thread from layer to layer."""
    w1, w2 = (numpy_helper.from_array(RNG.standard_normal(s).astype(np.float32), f"w{i}")
              for i, s in enumerate([(16, 24), (24, 8)]))
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w0"], ["h"]),
                           helper.make_node("MatMul", ["h", "w1"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 8])],
                          [w1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = RNG.standard_normal((6, 16)).astype(np.float32)
    prog = _kernels(m, [x])
    assert sum("strassen" in k.name for k in prog.kernels) == 2
    work = [b for b in prog.buffers if b.name.startswith("strassen_work")]
    part = strassen.SLICE_BYTES // 4
    # a block of 6 rows: 5 left operands and 7 products of 3 rows, 6 row flags
    assert len(work) == 1 and work[0].shape[0] == part + 3 * (5 * 8 + 7 * 6) + 6
    (y,) = onnxjit.compile(m, cache_dir=False, num_threads=2)(x)
    want = x.astype(np.float64) @ numpy_helper.to_array(w1) @ numpy_helper.to_array(w2)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_weight_replaced_by_its_right_operands_is_dropped():
    """A MatMul whose weight only the Strassen products read keeps their packed right
    operands, not the weight too (prepack-weights drops unread constants)."""
    m = _model((32, 512), 512, 512, "plain")
    prog = _kernels(m, _feeds(m, (32, 512), 512))
    consts = [b.name for b in prog.buffers if b.kind == "const"]
    assert consts == ["strassen_b"], consts


def test_fast_algorithms_option_turns_strassen_and_winograd_off():
    """compile(..., fast_algorithms=False): direct products and convs (and its own cache key),
    the same results within float tolerance; a non-bool is refused."""
    from onnxjit.options import CompileOptions

    m = _model((32, 512), 512, 512, "relu")
    feeds = _feeds(m, (32, 512), 512)
    gm = import_model(m.SerializeToString(), OPTIONS)
    sig = ((DType.FLOAT, (32, 512)),)
    direct = CompileOptions.from_user({"verify": False, "fast_algorithms": False})
    assert any("strassen" in k.name for k in lower_signature(gm, sig, OPTIONS)[1].kernels)
    assert not any("strassen" in k.name for k in lower_signature(gm, sig, direct)[1].kernels)
    assert direct.code_key() != CompileOptions.from_user({}).code_key()
    fast = onnxjit.compile(m, cache_dir=False)(*feeds)[0]
    slow_fn = onnxjit.compile(m, cache_dir=False, fast_algorithms=False)
    slow = slow_fn(*feeds)[0]
    assert "strassen" not in slow_fn.ir("loops")  # not the in-memory artifact of the other
    want, scale = _want(m, feeds, "relu")
    _check(fast, want, scale, 1e-6)
    _check(slow, want, scale, 1e-6)

    w = numpy_helper.from_array(RNG.standard_normal((32, 32, 3, 3)).astype(np.float32), "w")
    conv = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])], [w]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    cg = import_model(conv.SerializeToString(), OPTIONS)
    csig = ((DType.FLOAT, (1, 32, 16, 16)),)
    assert any("winograd" in k.name for k in lower_signature(cg, csig, OPTIONS)[1].kernels)
    assert not any("winograd" in k.name for k in lower_signature(cg, csig, direct)[1].kernels)
    with pytest.raises(onnxjit.OnnxJitError, match="fast_algorithms"):
        onnxjit.compile(m, fast_algorithms="no")


@pytest.mark.parametrize("a_shape,k,n,kind,bad", [
    ((32, 96), 96, 64, "relu", (3, 20)),  # rows 3 and 19 are paired
    ((32, 96), 96, 64, "gemm", (19,)),  # a bottom row
    ((7, 10), 10, 12, "plain", (5, 0)),  # an odd block: rows 0-3 top, 4-6 bottom
])
def test_nonfinite_rows_stay_in_their_rows(a_shape, k, n, kind, bad, small):
    """The sums pair row r with row r + m/2: an inf or NaN in one row of A must not reach
    another row's result. The block takes its guarded form: the flagged rows read as zeros
    and their results are NaN; every other row is as without them."""
    m = _model(a_shape, k, n, kind)
    feeds = _feeds(m, a_shape, n)
    x = feeds[0]
    for i, r in enumerate(bad):
        x[r, (5 * i + 1) % k] = np.inf if i == 0 else np.nan
    assert _uses_strassen(m, feeds)
    want, scale = _want(m, [np.where(np.isfinite(x), x, 0)], kind)
    ok = [r for r in range(a_shape[0]) if r not in bad]
    outs = [run_via_loop_ir(m, feeds)[0]]
    outs += [onnxjit.compile(m, cache_dir=False, num_threads=t)(*feeds)[0] for t in (1, 2)]
    for y in outs:
        assert np.isnan(y[list(bad)]).all()
        _check(y[ok], want[ok], scale[ok], 1e-6)
