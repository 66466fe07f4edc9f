"""Static 3x3 convs the specialised Winograd declines (images with more tile columns than a
GEMM panel, products too small for its panel) take the run-time-sized Winograd with constant
sizes (`conv.runtime_sizes.wide_winograd`): which kernels the program gets with the route on
and off, and the results of both against onnx's reference, with bias or not, fused Relu +
residual Add, float32/float64, one or two threads, odd output sizes."""

from __future__ import annotations

import numpy as np
import pytest
from conv_cases import conv3x3_model, program, rand, reference
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit import runtime
from onnxjit.ir.loops import Matmul, walk
from onnxjit.ir.ops.conv import runtime_sizes, winograd, winograd_runtime

# 134 columns: 67 tile columns, wider than any panel (at most 64 columns), so the specialised
# Winograd declines; 8 rows: 4 x 67 = 268 tiles, enough for the run-time one.
WIDE = [
    ((1, 16, 8, 134), 16, dict(pads=[1] * 4), np.float32, True),
    ((2, 24, 9, 141), 32, dict(pads=[1] * 4), np.float32, False),  # odd output 9 x 141
    ((1, 16, 10, 150), 24, {}, np.float64, True),  # no padding: 8 x 148
    ((1, 16, 24, 24), 16, dict(pads=[1] * 4), np.float32, True),  # products under a panel
]


def _spy(monkeypatch, module, name: str) -> list:
    """Wrap module.name so that each call's result is appended to the returned list."""
    seen: list = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    return seen


def _kernels(mo, *xs: np.ndarray) -> list[str]:
    return [k.name for k in program(mo, *xs).kernels]


@pytest.mark.parametrize("xs,m,attrs,dt,bias", WIDE)
def test_wide_images_take_winograd_and_match(xs, m, attrs, dt, bias, monkeypatch):
    mo = conv3x3_model(xs, m, attrs, dt, bias)
    x = rand(*xs, dtype=dt)
    assert any("winograd" in k for k in _kernels(mo, x))
    want = reference(mo, x)
    tol = 1e-4 if dt == np.float32 else 1e-10
    for threads in (1, 2):
        (y,) = onnxjit.compile(mo, cache_dir=False, num_threads=threads)(x)
        np.testing.assert_allclose(y, want, rtol=tol, atol=tol)
    monkeypatch.setattr(runtime_sizes, "WIDE_WINOGRAD", False)  # the route off: im2col
    runtime._MEMORY.clear()  # compile anew, not the program above from memory
    prog = program(mo, x)
    assert not any("winograd" in k.name for k in prog.kernels)
    assert any(isinstance(s, Matmul) for k in prog.kernels for s in walk(k.body))
    (y,) = onnxjit.compile(mo, cache_dir=False)(x)
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)


def test_wide_image_with_fused_relu_and_residual():
    xs = (1, 16, 12, 140)
    mo = conv3x3_model(xs, 16, dict(pads=[1] * 4), np.float32, bias=True, fused=True)
    x, s = rand(*xs), rand(1, 16, 12, 140)
    assert any("winograd" in k for k in _kernels(mo, x, s))
    (y,) = onnxjit.compile(mo, cache_dir=False)(x, s)
    want = ReferenceEvaluator(mo).run(None, {"x": x, "s": s})[0]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_convs_the_specialised_winograd_takes_stay_there(monkeypatch):
    # 16 -> 32 on 24 x 24: the specialised lowering takes it; this route is not asked
    xs = (2, 16, 24, 24)
    mo = conv3x3_model(xs, 32, dict(pads=[1] * 4), np.float32, bias=True)
    x = rand(*xs)
    calls = _spy(monkeypatch, runtime_sizes, "lower_winograd_runtime")
    assert any("winograd" in k for k in _kernels(mo, x))
    assert calls == []
    monkeypatch.setattr(winograd, "WINOGRAD", False)  # no Winograd at all: not by this route
    assert not any("winograd" in k for k in _kernels(mo, x))


def test_blocks_of_several_panels_match_one_panel(monkeypatch):
    # 2 images of 9 x 71 tiles: blocks of several panels (NR = 16 tiles a panel with 8 lanes,
    # 64 with 16), the last block of each image partly filled (639 tiles an image)
    xs = (2, 24, 17, 141)
    mo = conv3x3_model(xs, 32, dict(pads=[1] * 4), np.float32, bias=True)
    x = rand(*xs)
    seen = _spy(monkeypatch, winograd_runtime, "block_panels")
    (y,) = onnxjit.compile(mo, cache_dir=False, num_threads=2)(x)
    assert seen and seen[-1] > 1
    monkeypatch.setattr(winograd_runtime, "MAX_PANELS", 1)
    runtime._MEMORY.clear()  # compile anew, not the program above from memory
    (y1,) = onnxjit.compile(mo, cache_dir=False, num_threads=2)(x)
    assert seen[-1] == 1
    np.testing.assert_allclose(y, y1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, reference(mo, x), rtol=1e-4, atol=1e-4)


def test_symbolic_programs_take_panels_by_their_hints(monkeypatch):
    # the geometry of the test above with run-time sizes: the panels chosen by the first
    # call's sizes, then narrower and wider images through the same program
    mo = conv3x3_model((2, 24, 17, 141), 32, dict(pads=[1] * 4), np.float32, bias=True)
    mo.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"
    mo.graph.input[0].type.tensor_type.shape.dim[3].dim_param = "w"
    seen = _spy(monkeypatch, winograd_runtime, "block_panels")
    fn = onnxjit.compile(mo, cache_dir=False, specialize="dynamic")
    for h, w in ((17, 141), (5, 33), (12, 201)):
        x = rand(2, 24, h, w)
        (y,) = fn(x)
        np.testing.assert_allclose(y, reference(mo, x), rtol=1e-4, atol=1e-4)
    assert len(seen) == 1 and seen[0] > 1


def test_transformed_matrices_are_a_cache_line_apart():
    # V_xi and M_xi of a block start 16 floats past the end of the one before (`xi_stride`):
    # 96 channels x 16k tiles x 4 bytes is a multiple of 4096
    xs = (1, 96, 8, 134)
    mo = conv3x3_model(xs, 24, dict(pads=[1] * 4), np.float32, bias=True)
    shapes = {b.name: b.shape for b in program(mo, rand(*xs)).buffers}
    per_v, per_m = shapes["wino_v"][1] // 16, shapes["wino_m"][1] // 16
    assert per_v % (96 * 16) == 16 and per_m % (24 * 16) == 16
    assert (per_v - 16) // 96 == (per_m - 16) // 24  # the same T tiles


@pytest.mark.parametrize("xs", [(1, 16, 8, 134), (1, 16, 24, 24)])  # wide; specialised
def test_non_finite_weights_leave_winograd(xs):
    mo = conv3x3_model(xs, 16, dict(pads=[1] * 4), np.float32, bias=False)
    w = numpy_helper.to_array(mo.graph.initializer[0]).copy()
    w[3, 5, 0, 1], w[7, 2, 2, 2] = np.inf, np.nan
    mo.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    x = rand(*xs)
    assert not any("winograd" in k for k in _kernels(mo, x))
    (y,) = onnxjit.compile(mo, cache_dir=False)(x)
    want = reference(mo, x)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
