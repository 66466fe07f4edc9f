"""The blocked im2col + Matmul convolution (conv.packed_panels, blocking, input_phases):
panels written in the packed-B layout, blocks and channel chunks split over threads, strided
inputs split into phases, checked against onnx's reference and onnxruntime, bit for bit
against the paths they replace where the sums are the same."""

from __future__ import annotations

import numpy as np
import pytest
from conv_cases import ONNX_TYPES, check, model, ort_run, program, rand, reference
from loop_harness import run_via_loop_ir
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.ir.loops import Matmul, walk

# --------------------------------------------------------------------------- packed panels

PACKED_CASES = [
    # (x shape, w shape, attributes, dtype): products large enough for the tiled kernel, so
    # the im2col panel is written in its packed-B layout (conv.packed_panels)
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
    return [s for k in program(m, x).kernels for s in walk(k.body)
            if isinstance(s, Matmul) and s.b_packed]


@pytest.mark.parametrize("block_bytes", [None, 32 << 10])
@pytest.mark.parametrize("xs,ws,attrs,dt", PACKED_CASES)
def test_conv_packed_panels(xs, ws, attrs, dt, block_bytes, monkeypatch):
    from onnxjit.ir.ops.conv import blocking, im2col_blocks, winograd

    monkeypatch.setattr(winograd, "WINOGRAD", False)  # the 3x3 cases are im2col's here
    if block_bytes is not None:  # many blocks of output rows, most spanning two panels
        monkeypatch.setattr(blocking, "BLOCK_BYTES", block_bytes)
        monkeypatch.setattr(blocking, "MIN_BLOCK_COLS", 1)
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
    monkeypatch.setattr(im2col_blocks, "PACKED_PANELS", False)
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
    # of output channels (blocking.m_split), with the epilogue on the chunk's rows
    from onnxjit.ir.ops.conv import blocking, few_positions

    monkeypatch.setattr(blocking, "SPLIT_WORK", 0)
    monkeypatch.setattr(blocking, "MIN_TASKS", 64)
    monkeypatch.setattr(blocking, "MIN_SPLIT_ROWS", 8)
    # the usual form's split (7x7 outputs would take the transposed form, whose rows are
    # positions: tests/test_conv_transposed.py)
    monkeypatch.setattr(few_positions, "TRANSPOSED", False)
    m = _fused_model(xs, ws, attrs, dt, residual)
    x = rand(*xs, dtype=dt)
    gemms = [s for k in program(m, x).kernels for s in walk(k.body) if isinstance(s, Matmul)]
    assert gemms and all(s.m < ws[0] // attrs.get("group", 1) for s in gemms)
    tol = 1e-4 if dt == np.float32 else 1e-10
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(x)
        np.testing.assert_allclose(y, reference(m, x), rtol=tol, atol=tol)
    monkeypatch.setattr(blocking, "SPLIT_M", False)
    assert all(s.m == ws[0] // attrs.get("group", 1) for k in program(m, x).kernels
               for s in walk(k.body) if isinstance(s, Matmul))
    (y2,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_allclose(y2, y, rtol=tol, atol=tol)


@pytest.mark.parametrize("xs,ws,attrs,residual", [
    ((1, 64, 28, 28), (64, 64, 1, 1), {}, True),  # 784 positions: 4 blocks of 196
    ((1, 32, 28, 28), (24, 32, 1, 1), {}, False),
    ((1, 48, 16, 16), (32, 24, 1, 1), dict(group=2), False),  # 2 groups x (256 -> 2 x 128)
])
def test_pointwise_conv_split_over_positions(xs, ws, attrs, residual, monkeypatch):
    # a pointwise conv with fewer blocks than MIN_TASKS and too few channels to split cuts its
    # positions into equal blocks (blocking.pointwise_blocks)
    from onnxjit.ir.ops.conv import blocking

    monkeypatch.setattr(blocking, "SPLIT_WORK", 0)
    m = _fused_model(xs, ws, attrs, np.float32, residual)
    x = rand(*xs, dtype=np.float32)
    p = xs[2] * xs[3]
    outer = xs[0] * attrs.get("group", 1)
    gemms = [s for k in program(m, x).kernels for s in walk(k.body) if isinstance(s, Matmul)]
    cols = {s.n for s in gemms}
    assert len(cols) == 1 and outer * p // cols.pop() >= blocking.MIN_TASKS, gemms
    assert all(s.m == ws[0] // attrs.get("group", 1) for s in gemms)
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(x)
        np.testing.assert_allclose(y, reference(m, x), rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(blocking, "SPLIT_P", False)
    assert all(s.n == p for k in program(m, x).kernels for s in walk(k.body)
               if isinstance(s, Matmul))


def test_mid_sized_pointwise_conv_is_split():
    # 32->16 at 48x48 (1.2M multiply-adds, a MobileNetV2 at 96x96): under SPLIT_WORK of 2M
    # it was one block on one thread; now MIN_TASKS blocks of positions
    from onnxjit.ir.ops.conv import blocking

    m = _fused_model((1, 32, 48, 48), (16, 32, 1, 1), {}, np.float32, False)
    x = rand(1, 32, 48, 48, dtype=np.float32)
    cols = {s.n for k in program(m, x).kernels for s in walk(k.body) if isinstance(s, Matmul)}
    assert len(cols) == 1 and 48 * 48 // cols.pop() >= blocking.MIN_TASKS
    want = reference(m, x)
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(x)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_block_choice_for_deep_layers():
    # a 7x7 image takes one block of all 49 positions (not 7 one-row blocks), and its output
    # channels are split so that two threads have work; a 56x56 layer has blocks enough
    from onnxjit.ir.ops.conv.attrs import ConvAttrs
    from onnxjit.ir.ops.conv.blocking import MIN_TASKS, block_rows, m_split
    from onnxjit.ir.ops.conv.geometry import Geometry

    def geometry(c: int, hw: int) -> Geometry:
        a = ConvAttrs(kernel=(3, 3), strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1),
                      group=1, auto_pad="NOTSET")
        return Geometry(a, (1, c, hw, hw), (c, c, 3, 3), (1, c, hw, hw))

    deep = geometry(512, 7)
    assert block_rows(deep, 4) == 7
    chunks, rows = m_split(deep, 1, 512 * 49 * 4608, 4)
    assert (chunks, rows) == (MIN_TASKS, 512 // MIN_TASKS)  # equal chunks, not whole tiles
    # too few channels for MIN_SPLIT_ROWS chunks: two halves (whole tiles were 36 + 28)
    assert m_split(geometry(64, 14), 1, 64 * 196 * 576, 4) == (2, 32)
    wide = geometry(64, 56)
    rows = block_rows(wide, 4)
    assert rows * 56 >= 192 and rows * 56 * 576 * 4 <= 512 << 10
    assert m_split(wide, 56 // rows, 64 * 56 * 56 * 576, 4) == (1, 64)
    # pointwise: few channels split the positions (into blocks of whole vectors' worth),
    # many channels are left to m_split
    from onnxjit.ir.ops.conv.blocking import pointwise_blocks

    def pointwise(c: int, m: int, hw: int) -> Geometry:
        a = ConvAttrs(kernel=(1, 1), strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0),
                      group=1, auto_pad="NOTSET")
        return Geometry(a, (1, c, hw, hw), (m, c, 1, 1), (1, m, hw, hw))

    assert pointwise_blocks(pointwise(192, 32, 28), 4, 1 << 30) == 196
    assert pointwise_blocks(pointwise(256, 1024, 14), 4, 1 << 30) == 196
    assert pointwise_blocks(pointwise(192, 32, 14), 4, 1 << 30) == 196  # 49 would be narrow


def test_odd_block_count_made_even(monkeypatch):
    # 24->144 at 56x56: 7 cache-sized blocks of 448 positions ran as 4 + 3 on two threads;
    # EVEN_BLOCKS takes 8 of 392 (one block or an even count is left alone)
    from onnxjit.ir.ops.conv import blocking
    from onnxjit.ir.ops.conv.attrs import ConvAttrs
    from onnxjit.ir.ops.conv.geometry import Geometry

    def pointwise(c: int, m: int, hw: int) -> Geometry:
        a = ConvAttrs(kernel=(1, 1), strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0),
                      group=1, auto_pad="NOTSET")
        return Geometry(a, (1, c, hw, hw), (m, c, 1, 1), (1, m, hw, hw))

    work = 1 << 30
    assert blocking.pointwise_blocks(pointwise(24, 144, 56), 4, work) == 392
    assert blocking.pointwise_blocks(pointwise(16, 96, 112), 4, work) == 448  # 28
    assert blocking.pointwise_blocks(pointwise(64, 384, 14), 4, work) == 196  # 1
    monkeypatch.setattr(blocking, "EVEN_BLOCKS", False)
    assert blocking.pointwise_blocks(pointwise(24, 144, 56), 4, work) == 448
    monkeypatch.undo()
    m = _fused_model((1, 24, 56, 56), (144, 24, 1, 1), {}, np.float32, False)
    x = rand(1, 24, 56, 56, dtype=np.float32)
    assert {s.n for k in program(m, x).kernels for s in walk(k.body)
            if isinstance(s, Matmul)} == {392}
    want = reference(m, x)
    for threads in (1, 2):
        (y,) = onnxjit.compile(m, cache_dir=False, num_threads=threads)(x)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


PHASE_CASES = [
    # (x shape, w shape, attributes, dtype): strided convs whose kernel is wider than the
    # stride read X split into phase rows (input_phases)
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
    from onnxjit.ir.ops.conv import blocking, input_phases

    if split:  # also through the split path (panels built per chunk of input channels)
        monkeypatch.setattr(blocking, "SPLIT_WORK", 0)
        monkeypatch.setattr(blocking, "MIN_TASKS", 64)
        monkeypatch.setattr(blocking, "MIN_SPLIT_ROWS", 1)
    m = model("Conv", xs, [rand(*ws, dtype=dt), rand(ws[0], dtype=dt)], attrs, dtype=dt)
    x = rand(*xs, dtype=dt)
    names = [k.name for k in program(m, x).kernels]
    assert "conv_phases" in names
    tol = 1e-4 if dt == np.float32 else 1e-10
    (y,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_allclose(y, reference(m, x), rtol=tol, atol=tol)
    np.testing.assert_allclose(run_via_loop_ir(m, [x])[0], y, rtol=tol, atol=tol)
    # the switch restores strided reads of X: the same values copied, the same sums
    monkeypatch.setattr(input_phases, "DEINTERLEAVE", False)
    assert "conv_phases" not in [k.name for k in program(m, x).kernels]
    (y2,) = onnxjit.compile(m, cache_dir=False)(x)
    np.testing.assert_array_equal(y2, y)


def test_strided_pointwise_reads_x_in_place():
    # a 1x1 stride-2 conv reads every pixel at most once: no phase kernel
    m = model("Conv", (1, 8, 9, 9), [rand(16, 8, 1, 1)], dict(strides=[2, 2]))
    x = rand(1, 8, 9, 9)
    assert "conv_phases" not in [k.name for k in program(m, x).kernels]
    check(m, x)
