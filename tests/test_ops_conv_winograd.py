"""Conv 3x3 stride 1 through Winograd F(2x2, 3x3) (ir/winograd.py): padding of every
side, odd output sizes (a last tile row/column of one output), a last block of fewer tile
rows, batches, float64, bias (Y filled first, the transform adding onto it), the fused
epilogue (bias, Relu, residual Add) and 1 or 2 threads, against onnx's reference; the shapes
it must leave to im2col (images wider than a panel of tiles: test_conv_wide_winograd.py); the
weight transform against the convolution it stands for."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conv_cases import ONNX_TYPES, conv3x3_model, program, rand, reference
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.codegen.kernel_shapes import panel_width
from onnxjit.ir.loops import Matmul, walk
from onnxjit.ir.ops.conv import winograd

CASES = [
    # (x shape, M, attributes, dtype)
    ((2, 16, 24, 24), 32, dict(pads=[1] * 4), np.float32),
    ((1, 16, 27, 25), 40, dict(pads=[1] * 4), np.float32),  # odd out 27 x 25, last block 2
    ((2, 32, 20, 22), 16, {}, np.float32),  # no padding: 18 x 20
    ((1, 24, 30, 29), 32, dict(pads=[2, 0, 1, 3]), np.float32),  # uneven padding
    ((2, 16, 21, 20), 48, dict(pads=[1, 1, 0, 0]), np.float64),  # 20 x 19, 4 blocks of 3,3,3,1
    ((1, 16, 40, 20), 32, dict(auto_pad="SAME_UPPER"), np.float32),
    ((1, 32, 14, 14), 64, dict(pads=[1] * 4), np.float32),  # one block: channel chunks
    ((1, 48, 13, 15), 40, dict(pads=[1] * 4), np.float32),  # one block, odd, last chunk
    ((2, 16, 14, 16), 48, dict(pads=[1, 1, 0, 0]), np.float64),  # 13 x 15: 8 tiles a row
]


def _winograd_kernels(mo, *args: np.ndarray) -> list[str]:
    return [k.name for k in program(mo, *args).kernels if "winograd" in k.name]


def _one_block_side(dt=np.float32) -> int:
    """An output side whose tiles make one block on this host (a block is at most one packed
    panel of tiles: 14x14 is 49 tiles of 64 with 16 f32 lanes, 8x8 16 of 16 with 8)."""
    return min(14, 2 * math.isqrt(panel_width(np.dtype(dt).itemsize)))


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("xs,m,attrs,dt", CASES)
def test_winograd_matches_reference(xs, m, attrs, dt, fused):
    x = rand(*xs, dtype=dt)
    mo = conv3x3_model(xs, m, attrs, dt, bias=True, fused=fused)
    tol = 1e-4 if dt == np.float32 else 1e-10
    if fused:
        ref = ReferenceEvaluator(mo)
        shape = ref.run(None, {"x": x, "s": np.zeros((1, 1, 1, 1), dt)})[0].shape
        feeds = {"x": x, "s": rand(*shape, dtype=dt)}
        want = ref.run(None, feeds)[0]
        kernels = _winograd_kernels(mo, x, feeds["s"])
    else:
        want = reference(mo, x)
        feeds = {"x": x}
        kernels = _winograd_kernels(mo, x)
    # every case takes Winograd: a tile row within one packed panel the specialised form
    # (10 tiles a row, 20 x 19, fit the 32 f64 columns of AVX-512's panel), a wider one (the 8
    # f64 columns of AVX2's) the run-time blocking (`conv.runtime_sizes.wide_winograd`)
    assert kernels, "no Winograd kernel"
    for threads in (1, 2):
        (y,) = onnxjit.compile(mo, cache_dir=False, num_threads=threads)(**feeds)
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(y, want, rtol=tol, atol=tol * scale)


def test_winograd_splits_few_blocks_over_channels():
    # a batch-1 14x14 output (8x8 with 8 lanes) is one block: the input transforms become a
    # kernel of their own (chunks of input channels), the products and output transforms
    # another (chunks of output channels), each with more than one parallel iteration
    from onnxjit.ir.loops import Loop

    side = _one_block_side()
    xs = (1, 32, side, side)
    mo = conv3x3_model(xs, 64, dict(pads=[1] * 4), np.float32, bias=True, fused=False)
    x = rand(*xs)
    kernels = {k.name: k for k in program(mo, x).kernels if "winograd" in k.name}
    assert sorted(kernels) == ["conv_winograd", "conv_winograd_in"]
    for k in kernels.values():
        loop = next(s for s in k.body if isinstance(s, Loop))
        assert loop.parallel and loop.stop.value >= 2


@pytest.mark.parametrize("m", [32, 26])
def test_winograd_splits_few_channels_in_two(m, monkeypatch):
    # 32 (or 26) output channels of one block (14x14, 8x8 with 8 lanes; 128 input channels
    # so that 26 x 16 tiles is a product for the tiled kernel): fewer than MIN_SPLIT_ROWS,
    # still two chunks of whole tiles (18 + 14, 18 + 8) so both threads work (DenseNet's 3x3
    # 128->32 layers)
    from onnxjit.ir.loops import Loop
    from onnxjit.ir.ops.conv import blocking

    side = _one_block_side()
    xs = (1, 128, side, side)
    mo = conv3x3_model(xs, m, dict(pads=[1] * 4), np.float32, bias=True, fused=True)
    x = rand(*xs)
    s = rand(1, m, side, side)
    kernels = {k.name: k for k in program(mo, x, s).kernels if "winograd" in k.name}
    loop = next(st for st in kernels["conv_winograd"].body if isinstance(st, Loop))
    assert loop.parallel and loop.stop.value == 2
    ref = ReferenceEvaluator(mo).run(None, {"x": x, "s": s})[0]
    (y,) = onnxjit.compile(mo, cache_dir=False, num_threads=2)(x, s)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(blocking, "PAIR_SPLIT", False)
    kernels = {k.name: k for k in program(mo, x, s).kernels if "winograd" in k.name}
    assert list(kernels) == ["conv_winograd"]  # one serial iteration


def test_winograd_batch_in_passes(monkeypatch):
    # a batch whose transforms exceed PANEL_BYTES runs in passes of fewer images (one here)
    monkeypatch.setattr(winograd, "PANEL_BYTES", 1)
    xs = (3, 16, 20, 18)
    mo = conv3x3_model(xs, 32, dict(pads=[1] * 4), np.float32, bias=True, fused=False)
    x = rand(*xs)
    assert len(_winograd_kernels(mo, x)) == 3
    for threads in (1, 2):
        (y,) = onnxjit.compile(mo, cache_dir=False, num_threads=threads)(x)
        np.testing.assert_allclose(y, reference(mo, x), rtol=1e-4, atol=1e-4)


def test_winograd_without_bias_and_switched_off(monkeypatch):
    xs = (2, 16, 24, 24)
    mo = conv3x3_model(xs, 32, dict(pads=[1] * 4), np.float32, bias=False, fused=False)
    x = rand(*xs)
    assert _winograd_kernels(mo, x)
    (y,) = onnxjit.compile(mo, cache_dir=False)(x)
    np.testing.assert_allclose(y, reference(mo, x), rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(winograd, "WINOGRAD", False)
    assert not _winograd_kernels(mo, x)
    (y2,) = onnxjit.compile(mo, cache_dir=False)(x)
    np.testing.assert_allclose(y2, y, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xs,w,attrs", [
    ((2, 16, 24, 24), (16, 16, 3, 3), dict(strides=[2, 2], pads=[1] * 4)),  # strided
    ((2, 16, 24, 24), (16, 16, 3, 3), dict(dilations=[2, 2], pads=[2] * 4)),  # dilated
    ((2, 16, 24, 24), (16, 8, 3, 3), dict(group=2, pads=[1] * 4)),  # grouped
    ((2, 8, 24, 24), (16, 8, 3, 3), dict(pads=[1] * 4)),  # few input channels
    ((1, 16, 6, 6), (16, 16, 3, 3), dict(pads=[1] * 4)),  # few tiles (9)
    ((2, 16, 24, 24), (16, 16, 5, 5), dict(pads=[2] * 4)),  # 5x5
])
def test_winograd_leaves_other_convs_to_im2col(xs, w, attrs):
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", ONNX_TYPES[np.dtype(np.float32)], xs)],
        [helper.make_tensor_value_info("y", ONNX_TYPES[np.dtype(np.float32)], [None] * 4)],
        [numpy_helper.from_array(rand(*w), "w")])
    mo = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mo.ir_version = 10
    x = rand(*xs)
    assert not _winograd_kernels(mo, x)
    assert any(isinstance(s, Matmul) for k in program(mo, x).kernels for s in walk(k.body))


def test_weight_transform_is_the_convolution_it_stands_for():
    # sum over xi of U_xi * V_xi, then A^T . A, equals the direct 3x3 correlation of a 4x4 patch
    rng = np.random.default_rng(3)
    w = rng.standard_normal((5, 4, 3, 3))
    d = rng.standard_normal((4, 4, 4))  # (channel, 4x4 patch)
    u = winograd.weight_transform(w)  # (16, M, C)
    bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], float)
    at = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], float)
    v = np.einsum("ia,cab,jb->ijc", bt, d, bt).reshape(16, 4)  # (16, C)
    mt = np.einsum("xmc,xc->mx", u, v).reshape(5, 4, 4)
    y = np.einsum("ia,mab,jb->mij", at, mt, at)
    direct = np.array([[[np.sum(w[m] * d[:, i:i + 3, j:j + 3]) for j in range(2)]
                        for i in range(2)] for m in range(5)])
    np.testing.assert_allclose(y, direct, rtol=1e-12, atol=1e-12)


def test_block_heights_give_an_even_number_of_blocks(monkeypatch):
    # 28x28 outputs (14 tile rows, 14 tiles a row, panels of 64): one tile row or two use the
    # vector lanes alike; one gives 14 blocks, two give 7, one thread's part a block longer
    class Out:
        out = [28, 28]

    assert winograd.block_tile_rows(Out(), 64) == 1
    monkeypatch.setattr(winograd, "EVEN_TILE_ROWS", False)
    assert winograd.block_tile_rows(Out(), 64) == 2
    Out.out = [56, 56]  # 28 tile rows: 14 blocks of two already
    monkeypatch.setattr(winograd, "EVEN_TILE_ROWS", True)
    assert winograd.block_tile_rows(Out(), 64) == 2
