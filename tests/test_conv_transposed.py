"""Pointwise convs over few positions lowered as T = X^T W^T (`ir/few_positions.py`):
which convs take the form, and its results against the reference (bounds-checked loop-IR
interpreter and native code, one and two threads) for 7x7 and 3x3 images, output channels
that are not whole panels or copy blocks, batches, f64, bias and a fused Relu + residual Add.
Also 1x1 convs with strides, which subsample X and then take the pointwise forms
(`conv.strided_pointwise`), and keep im2col when padded."""

from __future__ import annotations

import numpy as np
import pytest
from loop_harness import OPTIONS, run_via_loop_ir
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.codegen.kernel_shapes import panel_width, tile_shape
from onnxjit.driver import import_model, lower_signature
from onnxjit.ir.loops import Matmul, walk
from onnxjit.ir.ops.conv import blocking, few_positions
from onnxjit.ir.types import DType

RNG = np.random.default_rng(5)
TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _conv(xs, cout, k=(1, 1), dtype=np.float32, bias=True, residual=False, **attrs):
    """Conv (+ bias) (+ a residual Add of input "r" and Relu) with random constant weights."""
    t = TYPES[dtype]
    group = attrs.get("group", 1)
    fan_in = xs[1] // group * int(np.prod(k))
    inits = [numpy_helper.from_array(
        (RNG.standard_normal((cout, xs[1] // group, *k)) / np.sqrt(fan_in)).astype(dtype), "w")]
    names = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(cout).astype(dtype), "b"))
        names.append("b")
    nodes = [helper.make_node("Conv", names, ["c"], kernel_shape=list(k), **attrs)]
    ins = [helper.make_tensor_value_info("x", t, list(xs))]
    out = "c"
    if residual:  # Conv + Add + Relu: the epilogue reads the residual at the same positions
        ins.append(helper.make_tensor_value_info("r", t, [None] * len(xs)))
        nodes += [helper.make_node("Add", ["c", "r"], ["s"]),
                  helper.make_node("Relu", ["s"], ["y"])]
        out = "y"
    g = helper.make_graph(nodes, "g", ins,
                          [helper.make_tensor_value_info(out, t, [None] * len(xs))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _model(xs, cout, dtype=np.float32, bias=True, residual=False, group=1):
    return _conv(xs, cout, (1, 1), dtype, bias, residual, group=group)


def _feeds(m, xs, cout, dtype):
    feeds = [RNG.standard_normal(xs).astype(dtype)]
    if len(m.graph.input) > 1:
        feeds.append(RNG.standard_normal((xs[0], cout, *xs[2:])).astype(dtype))
    return feeds


def _waste(p, dtype=np.float32):
    """Lanes Y = W @ X wastes over `p` positions on this host (a fraction of the useful ones):
    7x7 (49) in f32 wastes 31% of 16 lanes (AVX-512), 14% of 8 (AVX2)."""
    vl = tile_shape(np.dtype(dtype).itemsize)[0]
    return -(-p // vl) * vl / p - 1


def _take_transposed(monkeypatch, p, dtype=np.float32):
    """Lets the transposed form take `p` positions on any host: where the host's vectors waste
    fewer than MIN_WASTE of their lanes (7x7 on AVX2), the tests of the form's results and
    chunks lower MIN_WASTE (the choice itself: `test_wasted_lanes_choose_the_form`)."""
    if _waste(p, dtype) < few_positions.MIN_WASTE:
        monkeypatch.setattr(few_positions, "MIN_WASTE", 0.0)


def _kernels(m, feeds):
    gm = import_model(m.SerializeToString(), OPTIONS)
    sig = tuple((DType.from_numpy(a.dtype), a.shape) for a in feeds)
    _, prog = lower_signature(gm, sig, OPTIONS)
    return [k.name for k in prog.kernels]


CASES = [
    # (x shape, output channels, dtype, bias, residual)
    ((1, 64, 7, 7), 128, np.float32, True, False),
    ((1, 96, 7, 7), 100, np.float32, False, False),  # a chunk of 36 channels: partial copy block
    ((2, 64, 7, 7), 200, np.float32, True, True),  # batch, residual + Relu epilogue
    ((1, 80, 3, 3), 72, np.float32, True, True),
    ((1, 64, 3, 3), 96, np.float64, True, False),  # f64: 9 positions of 8- or 4-lane vectors
    ((1, 256, 5, 5), 512, np.float32, True, True),
    # deep products over small images, whatever the lanes; one panel of channels (with 16
    # lanes): the threads share equal chunks of positions (49 x 4, 25 x 4, 21 x 3 + 18)
    ((1, 256, 14, 14), 64, np.float32, True, True),
    ((1, 256, 10, 10), 96, np.float32, False, False),
    ((1, 256, 9, 9), 64, np.float32, True, False),
    # a batch of 4: one chunk an image, of both panels, the second one partial (96 channels):
    # the chunk's width (128) was taken for its product (a window past W^T)
    ((4, 384, 10, 10), 96, np.float32, True, False),
]


@pytest.mark.parametrize("xs,cout,dtype,bias,residual", CASES)
def test_transposed_pointwise_matches_reference(xs, cout, dtype, bias, residual, monkeypatch):
    """The reference, the loop-IR interpreter (its lowering does not depend on the compiled
    program's threads: run once) and native code compiled for one thread and for two."""
    _take_transposed(monkeypatch, int(np.prod(xs[2:])), dtype)
    m = _model(xs, cout, dtype, bias, residual)
    feeds = _feeds(m, xs, cout, dtype)
    assert "conv_gemm_t" in _kernels(m, feeds)
    names = [i.name for i in m.graph.input]
    want = ReferenceEvaluator(m).run(None, dict(zip(names, feeds)))[0]
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(run_via_loop_ir(m, feeds)[0], want, rtol=tol, atol=tol)
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(*feeds)
        np.testing.assert_allclose(y, want, rtol=tol, atol=tol, err_msg=f"threads={threads}")


def _products(m, feeds):
    gm = import_model(m.SerializeToString(), OPTIONS)
    sig = tuple((DType.from_numpy(a.dtype), a.shape) for a in feeds)
    _, prog = lower_signature(gm, sig, OPTIONS)
    return [s for k in prog.kernels for s in walk(k.body) if isinstance(s, Matmul)]


def test_position_chunks_are_equal(monkeypatch):
    # 196 positions of one panel of channels (64 with 16 lanes, 16 with 8) on two threads:
    # four chunks of 49 (two a thread); whole 6-row tiles were 54 + 54 for one thread and
    # 54 + 34 for the other
    nr = panel_width(4)
    m = _model((1, 256, 14, 14), nr)
    feeds = _feeds(m, (1, 256, 14, 14), nr, np.float32)
    assert sorted(s.m for s in _products(m, feeds)) == [49]  # equal: no separate last chunk
    monkeypatch.setattr(blocking, "EQUAL_ROWS", False)
    assert sorted(s.m for s in _products(m, feeds)) == [34, 54]


def test_channel_chunks_balanced_for_two_threads(monkeypatch):
    # 576 channels (9 panels of 64) at 6x6 were 3 chunks of 3 panels, two of them on one
    # thread; the chunks two threads finish soonest are 2, 2, 2, 2, 1 panels
    from onnxjit.ir.ops.conv.few_positions import panel_chunk

    assert [panel_chunk(p, 4, 1) for p in (4, 5, 6, 9, 15, 16, 32)] == [1, 1, 1, 2, 4, 4, 8]
    assert panel_chunk(9, 2, 2) == 5  # two images: (5 + 4) panels each
    _take_transposed(monkeypatch, 36)
    nr = few_positions.packed_width(DType.FLOAT, 36, 576, 96)
    m = _model((1, 96, 6, 6), 9 * nr, residual=True)
    feeds = _feeds(m, (1, 96, 6, 6), 9 * nr, np.float32)
    assert sorted({s.n for s in _products(m, feeds)}) == [nr, 2 * nr]
    names = [i.name for i in m.graph.input]
    want = ReferenceEvaluator(m).run(None, dict(zip(names, feeds)))[0]
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(*feeds)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(few_positions, "EVEN_CHUNKS", False)
    assert sorted({s.n for s in _products(m, feeds)}) == [3 * nr]


def test_odd_panels_split_their_positions_too(monkeypatch):
    # 5 panels of channels at 7x7 leave two threads 3 + 2 panels; each panel's chunk is cut
    # into two halves of the 49 positions (25 + 24), ten chunks two threads share equally
    _take_transposed(monkeypatch, 49)
    nr = few_positions.packed_width(DType.FLOAT, 49, 320, 64)
    m = _model((1, 64, 7, 7), 5 * nr, residual=True)
    feeds = _feeds(m, (1, 64, 7, 7), 5 * nr, np.float32)
    assert {(s.m, s.n) for s in _products(m, feeds)} == {(25, nr), (24, nr)}
    names = [i.name for i in m.graph.input]
    want = ReferenceEvaluator(m).run(None, dict(zip(names, feeds)))[0]
    np.testing.assert_allclose(run_via_loop_ir(m, feeds)[0], want, rtol=1e-4, atol=1e-4)
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(*feeds)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(few_positions, "SPAN_SLACK", 100.0)
    assert {(s.m, s.n) for s in _products(m, feeds)} == {(49, nr)}


@pytest.mark.parametrize("xs,cout,group,why", [
    ((1, 64, 8, 8), 128, 1, "64 positions: whole vectors"),
    ((1, 48, 7, 7), 128, 1, "depth below MIN_DEPTH"),
    ((1, 64, 7, 7), 32, 1, "fewer channels than a panel"),
    ((1, 128, 7, 7), 128, 2, "two groups"),
    ((1, 256, 40, 40), 64, 1, "deep, but 1600 positions"),
    ((1, 256, 13, 13), 600, 1, "deep, but 600 output channels"),
    ((1, 256, 14, 14), 256, 1, "deep, but 256 output channels (DEEP_MAX_M)"),
    ((1, 128, 14, 14), 64, 1, "196 positions, depth below DEEP"),
])
def test_other_pointwise_convs_keep_the_usual_form(xs, cout, group, why):
    m = _model(xs, cout, group=group)
    feeds = _feeds(m, xs, cout, np.float32)
    assert "conv_gemm_t" not in _kernels(m, feeds), why


def test_deep_im2col_convs_keep_the_usual_form():
    # deep over few positions, but not pointwise: the usual form's panel is built packed once,
    # and the transposed one read it a cache line a depth step (magika's 5-tap conv: 0.61x)
    m = _conv((1, 64, 96, 1), 128, (5, 1), bias=False)
    x = RNG.standard_normal((1, 64, 96, 1)).astype(np.float32)
    names = _kernels(m, [x])
    assert "conv_gemm_t" not in names, names
    (y,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_allclose(y, ReferenceEvaluator(m).run(None, {"x": x})[0], rtol=1e-4,
                               atol=1e-4)


def test_wasted_lanes_choose_the_form():
    # 7x7 positions take the transposed form where Y = W @ X wastes MIN_WASTE of its lanes
    # along them: 16 f32 lanes (AVX-512) waste 31%, 8 (AVX2) 14%, and keep the usual form
    m = _model((1, 64, 7, 7), 128)
    feeds = _feeds(m, (1, 64, 7, 7), 128, np.float32)
    transposed = _waste(49) >= few_positions.MIN_WASTE
    assert transposed == (tile_shape(4)[0] == 16)
    assert ("conv_gemm_t" in _kernels(m, feeds)) == transposed


def test_switch_off_restores_the_usual_form(monkeypatch):
    _take_transposed(monkeypatch, 49)
    m = _model((1, 64, 7, 7), 128)
    feeds = _feeds(m, (1, 64, 7, 7), 128, np.float32)
    monkeypatch.setattr(few_positions, "TRANSPOSED", False)
    assert "conv_gemm_t" not in _kernels(m, feeds)


@pytest.mark.parametrize("xs,cout,strides,group,threads", [
    ((1, 64, 14, 14), 96, [2, 2], 1, 1),  # to 7x7: the transposed product
    ((2, 32, 9, 11), 48, [2, 3], 1, 2),  # odd sizes, unequal strides, a batch
    ((1, 64, 10, 10), 64, [2, 2], 4, 1),  # groups
    ((1, 16, 12), 24, [3], 1, 1),  # 1-D
])
def test_strided_1x1_subsamples_then_runs_pointwise(xs, cout, strides, group, threads):
    t = TensorProto.FLOAT
    c = _conv(xs, cout, [1] * len(strides), strides=strides, group=group)
    g = helper.make_graph([*c.graph.node, helper.make_node("Relu", ["c"], ["y"])], "g",
                          c.graph.input, [helper.make_tensor_value_info("y", t, [None] * len(xs))],
                          c.graph.initializer)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    x = RNG.standard_normal(xs).astype(np.float32)
    names = _kernels(m, [x])
    assert "conv_subsample" in names and not any("im2col" in n for n in names), names
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(run_via_loop_ir(m, [x])[0], want, rtol=1e-4, atol=1e-4)
    (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(x)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_padded_strided_1x1_keeps_im2col():
    m = _conv((1, 8, 6, 6), 8, bias=False, strides=[2, 2], pads=[1, 1, 1, 1])
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    assert "conv_subsample" not in _kernels(m, [x])
    (y,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_allclose(y, ReferenceEvaluator(m).run(None, {"x": x})[0], rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("xs,cout,k,attrs,dtype,residual", [
    ((1, 16, 14, 14), 64, (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), np.float32, True),
    ((2, 8, 7, 7), 96, (5, 5), dict(pads=[2, 2, 2, 2]), np.float32, False),  # batch
    ((1, 8, 9, 9), 64, (3, 3), dict(dilations=[2, 2], pads=[1, 2, 1, 0]), np.float32, True),
    ((1, 8, 5, 5), 70, (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), np.float64, False),
])
def test_im2col_convs_over_few_positions_run_transposed(xs, cout, k, attrs, dtype, residual,
                                                        monkeypatch):
    """The reference, the loop-IR interpreter (run once: its lowering does not depend on the
    compiled program's threads) and native code compiled for one thread and for two."""
    m = _conv(xs, cout, k, dtype, True, residual, **attrs)
    x = RNG.standard_normal(xs).astype(dtype)
    feeds = {"x": x}
    want = ReferenceEvaluator(m).run(None, feeds)[0] if not residual else None
    if residual:
        shape = ReferenceEvaluator(_conv(xs, cout, k, dtype, **attrs)).run(
            None, feeds)[0].shape
        feeds["r"] = RNG.standard_normal(shape).astype(dtype)
        want = ReferenceEvaluator(m).run(None, feeds)[0]
    _take_transposed(monkeypatch, int(np.prod(want.shape[2:])), dtype)
    names = _kernels(m, list(feeds.values()))
    assert "conv_gemm_t" in names and "conv_im2col" in names, names
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(run_via_loop_ir(m, list(feeds.values()))[0], want, rtol=tol,
                               atol=tol)
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(**feeds)
        np.testing.assert_allclose(y, want, rtol=tol, atol=tol, err_msg=f"threads={threads}")


def test_copy_and_epilogue_stay_rolled(monkeypatch):
    # 7x7 positions in chunks of 13 rows (two panels of channels, fewer than MIN_TASKS: 128
    # with 16 lanes, 32 with 8): unrolled by LLVM, the copy became 13 x 16 scalar copies and
    # the epilogue's rows were vectorized across channels (most of DenseNet-121's optimised
    # IR); rolled, the same results from much less code. The epilogue's own rule for short
    # rows (`epilogue.ROLL_COLS`) is off here, so the switch is measured alone.
    from onnxjit import runtime
    from onnxjit.codegen import compile_program
    from onnxjit.ir.ops.fused import epilogue

    monkeypatch.setattr(epilogue, "ROLL_COLS", 0)
    _take_transposed(monkeypatch, 49)
    cout = 2 * panel_width(4)
    m = _model((1, 64, 7, 7), cout, residual=True)
    feeds = _feeds(m, (1, 64, 7, 7), cout, np.float32)
    gm = import_model(m.SerializeToString(), OPTIONS)
    sig = tuple((DType.from_numpy(a.dtype), a.shape) for a in feeds)
    outs, loops, sizes = [], [], []
    for keep in (True, False):
        monkeypatch.setattr(few_positions, "KEEP_ROLLED", keep)
        _, prog = lower_signature(gm, sig, OPTIONS)
        (kernel,) = [k for k in prog.kernels if k.name == "conv_gemm_t"]
        rolled = {s.var.hint for s in walk(kernel.body) if getattr(s, "rolled", False)}
        assert rolled == ({"q", "er", "ec"} if keep else set())
        texts: dict[str, str] = {}
        compile_program(prog, dump=texts.__setitem__)
        loops.append(texts["llvm.ll"].count("!llvm.loop !"))  # loops carrying metadata
        sizes.append(texts["llvm-opt.ll"].count("\n"))
        runtime._MEMORY.clear()
        outs.append(onnxjit.compile(m, cache_dir=False, num_threads=2)(*feeds)[0])
    np.testing.assert_array_equal(outs[0], outs[1])
    assert loops[0] >= loops[1] + 3 and sizes[0] < 0.8 * sizes[1], (loops, sizes)
