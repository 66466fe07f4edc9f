"""The Matmul statement's native code (register-tiled, packed and unpacked, dot and axpy forms)
against numpy, over shapes that hit every edge of the tiling.

Each case is a Matmul on windows inside wider buffers (leading dims larger than the window,
non-zero offsets), with transposed or plain operands, alpha, and accumulation into C's old
contents. Sizes straddle the register tile (rows of 6, columns of 16/32/64 lanes), the depth
block (256), the packed block, and the thresholds that choose between the kernels. Many cases
share one compiled program so the file stays fast. Floats compare to a float64 product within
rounding; ints exactly (wrap-around).
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxjit.artifact import Artifact
from onnxjit.codegen import compile_program, load_object
from onnxjit.codegen.matmul import PACK_MIN_M, TILE_WORK
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Buffer, Kernel, Matmul, Program, i64
from onnxjit.ir.types import DType

F32, F64, I32 = DType.FLOAT, DType.DOUBLE, DType.INT32
PAD = 3  # extra columns in every window's buffer rows, and offset of the window


def _rand(dt: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dt.is_float:
        return rng.uniform(-1, 1, shape).astype(dt.numpy)
    return rng.integers(-100, 100, shape, endpoint=True).astype(dt.numpy)


def run_cases(dt: DType, cases: list[tuple[int, int, int, bool, bool, float, bool]]) -> None:
    """Compile one program holding every (m, k, n, a_trans, b_trans, alpha, accumulate) case as
    its own kernel; compare each output with numpy."""
    rng = np.random.default_rng(len(cases))
    bufs: list[Buffer] = []
    inputs: list[np.ndarray] = []
    kernels: list[Kernel] = []
    expected: list[np.ndarray] = []
    n_in = 3 * len(cases)
    for j, (m, k, n, at, bt, alpha, acc) in enumerate(cases):
        ar, ac = (k, m) if at else (m, k)
        br, bc = (n, k) if bt else (k, n)
        a = Buffer(f"a{j}", dt, (ar, ac + PAD), "input", slot=3 * j)
        b = Buffer(f"b{j}", dt, (br, bc + PAD), "input", slot=3 * j + 1)
        c0 = Buffer(f"c0_{j}", dt, (m, n + PAD), "input", slot=3 * j + 2)
        c = Buffer(f"c{j}", dt, (m, n + PAD), "output", slot=n_in + j)
        xs = [_rand(dt, x.shape, rng) for x in (a, b, c0)]
        bufs += [a, b, c0, c]
        inputs += xs
        bld = Builder()
        # C starts as a copy of c0 (the columns outside the window must survive untouched)
        with bld.loop(0, m * (n + PAD)) as i:
            bld.store(c, i, bld.load(c0, i))
        bld.emit(Matmul(c, i64(PAD), n + PAD, a, i64(PAD), ac + PAD, b, i64(PAD), bc + PAD,
                        m, n, k, at, bt, alpha, acc))
        kernels.append(Kernel(f"mm{j}", bld.body))
        aw = xs[0][:, PAD:]
        bw = xs[1][:, PAD:]
        a_ = aw.T if at else aw
        b_ = bw.T if bt else bw
        c_ = xs[2].copy()
        if dt.is_float:
            prod = alpha * (a_.astype(np.float64) @ b_.astype(np.float64))
            c_[:, PAD:] = prod + (c_[:, PAD:] if acc else 0)
        else:
            prod = (a_ @ b_) * np.asarray(alpha, dt.numpy)
            c_[:, PAD:] = prod + (c_[:, PAD:] if acc else 0)
        expected.append(c_)
    p = Program(bufs, kernels)
    lib = load_object(compile_program(p))
    art = Artifact(tuple((x.dtype, x.shape) for x in p.inputs),
                   [(x.shape, x.dtype.numpy) for x in p.outputs],
                   [x.data for x in p.consts], p.arena_size, p.messages(), lib, False)
    got = art.run(tuple(inputs))
    for case, out, ref in zip(cases, got, expected):
        if dt.is_float:
            k = case[1]
            tol = (2e-6 if dt == F32 else 1e-14) * max(1, k) ** 0.5 * 4
            np.testing.assert_allclose(out, ref, rtol=tol, atol=tol, err_msg=str(case))
        else:
            np.testing.assert_array_equal(out, ref, err_msg=str(case))


#: (m, k, n) around the tile edges: rows 1..6 and past multiples of 6, columns around the
#: vector/panel widths (16, 64 f32 lanes; 8, 32 f64), depth past the 256-row block; all above
#: TILE_WORK so the tiled kernels run, m below and above PACK_MIN_M
TILE_SIZES = [(16, 128, 16), (17, 256, 64), (23, 257, 65), (31, 300, 130), (6, 600, 200),
              (1, 700, 100), (5, 513, 63), (13, 97, 47), (64, 40, 520), (48, 12, 1030),
              (2, 4100, 9), (40, 50, 17)]


def _cases(sizes: list[tuple[int, int, int]], alpha: float) -> list:
    combos = [(1.0, False), (alpha, True), (alpha, False), (1.0, True)]
    out = []
    for j, (m, k, n) in enumerate(sizes):
        for at in (False, True):
            for bt in (False, True):
                q = j * 4 + 2 * at + bt
                out.append((m, k, n, at, bt, *combos[(q + q // 4) % 4]))
    return out


def test_sizes_exercise_every_kernel() -> None:
    assert any(m * n * k >= TILE_WORK and m >= PACK_MIN_M for m, k, n in TILE_SIZES)
    assert any(m * n * k >= TILE_WORK and m < PACK_MIN_M for m, k, n in TILE_SIZES)
    assert all(m * n * k >= TILE_WORK for m, k, n in TILE_SIZES)


@pytest.mark.parametrize("dt", [F32, F64], ids=lambda d: d.short)
def test_tiled_float(dt: DType) -> None:
    run_cases(dt, _cases(TILE_SIZES, -1.5))


def test_int_products_keep_wrapping() -> None:
    run_cases(I32, _cases([(17, 64, 70), (3, 100, 120)], -2.0))


def test_small_products_float() -> None:
    """Products under TILE_WORK go through the axpy and dot forms."""
    run_cases(F32, _cases([(1, 1, 1), (3, 5, 7), (7, 13, 19), (2, 1, 40)], 0.5))


def test_large_square_blocks() -> None:
    """More columns than one packed block holds (several column groups plus an edge panel)."""
    run_cases(F32, [(70, 300, 1100, False, False, 1.0, False),
                    (19, 520, 1090, True, True, 2.0, True)])
