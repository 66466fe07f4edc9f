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
from onnxjit.codegen.kernel_shapes import PACK_MIN_M, TILE_WORK
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Buffer, Kernel, Matmul, Program, i64, walk
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


def test_row_tiles_balance_a_short_last_tile() -> None:
    """Rows cover [0, m) once: whole tiles of mr, then the tail; a tail of 1 or 2 rows is
    merged with the tile before it into two tiles of about equal height (8 rows: 4 + 4)."""
    from onnxjit.codegen.matmul_kernel import row_tiles

    assert row_tiles(8, 6) == (0, [4, 4])
    assert row_tiles(7, 6) == (0, [4, 3])
    assert row_tiles(32, 6) == (24, [4, 4])
    assert row_tiles(10, 6) == (6, [4])
    assert row_tiles(2, 6) == (0, [2])
    assert row_tiles(12, 6) == (12, [])
    for m in range(1, 60):
        full, tails = row_tiles(m, 6)
        assert full % 6 == 0 and full + sum(tails) == m, m
        assert all(0 < h <= 6 for h in tails) and (m <= 6 or min(tails, default=3) >= 3), m


def test_int_products_keep_wrapping() -> None:
    run_cases(I32, _cases([(17, 64, 70), (3, 100, 120)], -2.0))


def test_small_products_float() -> None:
    """Products under TILE_WORK go through the axpy and dot forms."""
    run_cases(F32, _cases([(1, 1, 1), (3, 5, 7), (7, 13, 19), (2, 1, 40)], 0.5))


def test_large_square_blocks() -> None:
    """More columns than one packed block holds (several column groups plus an edge panel)."""
    run_cases(F32, [(70, 300, 1100, False, False, 1.0, False),
                    (19, 520, 1090, True, True, 2.0, True)])


# prepacked constant B (the prepack-weights pass) ----------------------------------------------

def _const_b_program(cases: list[tuple[int, int, int, bool, float, bool]],
                     rng: np.random.Generator) -> tuple[Program, list[np.ndarray]]:
    """One kernel per (m, k, n, b_trans, alpha, accumulate) case: C (+)= alpha * A @ B' with B a
    const buffer (the window at offset PAD inside wider rows); inputs A and C0."""
    bufs: list[Buffer] = []
    kernels: list[Kernel] = []
    inputs: list[np.ndarray] = []
    n_in = 2 * len(cases)
    for j, (m, k, n, bt, alpha, acc) in enumerate(cases):
        br, bc = (n, k) if bt else (k, n)
        a = Buffer(f"a{j}", F32, (m, k), "input", slot=2 * j)
        c0 = Buffer(f"c0_{j}", F32, (m, n), "input", slot=2 * j + 1)
        w = Buffer(f"w{j}", F32, (br + 1, bc + PAD), "const", slot=j,
                   data=_rand(F32, (br + 1, bc + PAD), rng))
        c = Buffer(f"c{j}", F32, (m, n), "output", slot=n_in + j)
        bufs += [a, c0, w, c]
        inputs += [_rand(F32, a.shape, rng), _rand(F32, c0.shape, rng)]
        bld = Builder()
        with bld.loop(0, m * n) as i:
            bld.store(c, i, bld.load(c0, i))
        bld.emit(Matmul(c, i64(0), n, a, i64(0), k, w, i64(PAD), bc + PAD, m, n, k,
                        False, bt, alpha, acc))
        kernels.append(Kernel(f"mm{j}", bld.body))
    return Program(bufs, kernels), inputs


def _run_program(p: Program, inputs: list[np.ndarray], threads: int = 1) -> list[np.ndarray]:
    return _runner(p)(inputs, threads)


def _runner(p: Program):
    """run(inputs, threads) of `p`, compiled once: each call loads it for `threads`."""
    from onnxjit.entries import ensure_pool

    obj = compile_program(p)

    def run(inputs: list[np.ndarray], threads: int = 1) -> list[np.ndarray]:
        ensure_pool(obj.uses_pool, threads)
        art = Artifact(tuple((x.dtype, x.shape) for x in p.inputs),
                       [(x.shape, x.dtype.numpy) for x in p.outputs],
                       [x.data for x in p.consts], p.arena_size, p.messages(),
                       load_object(obj), False, num_threads=threads)
        return art.run(tuple(inputs))

    return run


#: n not a multiple of the panel width (16..64 lanes), k not a multiple of the 256-row depth
#: block, m around the 6-row tile and PACK_MIN_M; products split into row blocks (with
#: leftovers of 19 and of 5 rows), one wider than a packed block of panels, few rows
PACKED_CASES = [(16, 128, 16, False, 1.0, False), (23, 257, 65, True, -1.5, True),
                (31, 300, 130, False, 2.0, True), (17, 513, 63, True, 1.0, False),
                (64, 40, 520, False, -1.0, False), (20, 300, 1100, False, 0.5, True),
                (147, 784, 100, False, 1.0, False), (133, 784, 100, True, 1.0, False),
                (1, 700, 100, True, 1.0, False), (5, 513, 63, False, -1.0, True),
                (13, 97, 47, True, 2.0, True)]


def _tiled_region(s: Matmul) -> tuple[int, int]:
    """Rows and columns of the plain (B not packed) product `s` that the tiled kernel computes:
    a packed B is read by the tiled kernel whatever the sizes, an unpacked one by other forms
    (other sum orders) under PACK_MIN_M rows (a small product, the blocks and leftover rows of
    a product split over threads): the first rows in pieces of PACK_MIN_M rows or more."""
    from onnxjit.codegen.parallel import split_matmul

    split = split_matmul(s)
    if split is None:
        return (s.m if s.m >= PACK_MIN_M else 0), s.n
    loop, tail = split
    pieces = [t.m for t in loop.body if isinstance(t, Matmul)] * int(loop.stop.value)
    pieces += [t.m for t in tail if isinstance(t, Matmul)]
    rows = 0
    for m in pieces:
        if m < PACK_MIN_M:
            break
        rows += m
    return rows, s.n


def test_prepacked_b_is_bit_identical() -> None:
    """Packing B at compile time changes where B is read from, not the order of the sums: on
    one thread and on two (each program compiled once, run on both)."""
    from onnxjit.ir.loop_eval import run_program
    from onnxjit.passes import PassContext, get_pass
    from onnxjit.passes.plan_memory import run as plan

    rng = np.random.default_rng(5)
    plain, inputs = _const_b_program(PACKED_CASES, rng)
    packed, _ = _const_b_program(PACKED_CASES, np.random.default_rng(5))
    assert get_pass("prepack-weights").run(packed, PassContext()).changed
    mms = [s for k in packed.kernels for s in k.body if isinstance(s, Matmul)]
    assert all(s.b_packed and not s.b_trans for s in mms)
    # the original weights are gone: every const is a packed copy of k*n elements
    assert [b.shape for b in packed.consts] == [(s.k * s.n,) for s in mms]
    run_plain = _runner(plan(plain, PassContext()).ir)
    run_packed = _runner(plan(packed, PassContext()).ir)
    ref = run_program(packed, inputs)  # the interpreter unpacks
    plain_mms = [s for k in plain.kernels for s in k.body if isinstance(s, Matmul)]
    for threads in (1, 2):
        want, got = run_plain(inputs, threads), run_packed(inputs, threads)
        for case, s, g, w, r in zip(PACKED_CASES, plain_mms, got, want, ref):
            rows, cols = _tiled_region(s)
            np.testing.assert_array_equal(g[:rows, :cols], w[:rows, :cols],
                                          err_msg=str((case, threads)))
            tol = 2e-6 * case[1] ** 0.5 * 4
            np.testing.assert_allclose(g, r, rtol=tol, atol=tol, err_msg=str((case, threads)))


def test_prepack_skips_batched_and_small_products() -> None:
    """A B offset that varies (a batched product) over windows that are not one panel, or a
    product under the packing thresholds, keeps reading B in place; a weight still read
    elsewhere stays."""
    from onnxjit.passes import PassContext, get_pass

    w = Buffer("w", F32, (4, 64, 128), "const", slot=0,
               data=_rand(F32, (4, 64, 128), np.random.default_rng(0)))
    a = Buffer("a", F32, (64, 64), "input", slot=0)
    c = Buffer("c", F32, (4, 64, 64), "output", slot=1)
    bld = Builder()
    with bld.loop(0, 4) as t:  # 64 of the 128 columns: rows are not contiguous
        bld.emit(Matmul(c, bld.imul(t, 64 * 64), 64, a, i64(0), 64, w, bld.imul(t, 64 * 128),
                        128, 64, 64, 64))
    bld.emit(Matmul(c, i64(0), 64, a, i64(0), 64, w, i64(0), 128, 4, 64, 64))  # < TILE_WORK
    p = Program([a, c, w], [Kernel("k", bld.body)])
    assert not get_pass("prepack-weights").run(p, PassContext()).changed
    assert p.consts == [w]


@pytest.mark.parametrize("m", [32, 70])
def test_prepack_reads_one_panel_windows_in_place(m: int) -> None:
    """A batched product over constant windows that are already one panel (k rows of n
    contiguous columns, n the host's panel width: an RNN's recurrent weights, grouped per block
    of hidden units) is read in place as packed: no copy, no packing per call, the same sums."""
    from onnxjit.codegen.kernel_shapes import panel_width
    from onnxjit.ir.loop_eval import run_program
    from onnxjit.passes import PassContext, get_pass
    from onnxjit.passes.plan_memory import run as plan

    n, k, nb = panel_width(4), 300, 3

    def program() -> Program:
        w = Buffer("w", F32, (nb, k, n), "const", slot=0,
                   data=_rand(F32, (nb, k, n), np.random.default_rng(3)))
        a = Buffer("a", F32, (m, k), "input", slot=0)
        c = Buffer("c", F32, (m, nb * n), "output", slot=1)
        bld = Builder()
        with bld.loop(0, nb) as t:
            bld.emit(Matmul(c, bld.imul(t, n), nb * n, a, i64(0), k, w, bld.imul(t, k * n), n,
                            m, n, k))
        return Program([a, c, w], [Kernel("k", bld.body)])

    plain, packed = program(), program()
    assert get_pass("prepack-weights").run(packed, PassContext()).changed
    (s,) = [s for s in walk(packed.kernels[0].body) if isinstance(s, Matmul)]
    assert s.b_packed and s.b is packed.consts[0] and s.ldb == n and len(packed.consts) == 1
    x = [_rand(F32, (m, k), np.random.default_rng(4))]
    got = _run_program(plan(packed, PassContext()).ir, x)[0]
    np.testing.assert_array_equal(got, _run_program(plan(plain, PassContext()).ir, x)[0])
    want = x[0].astype(np.float64) @ np.concatenate(list(plain.consts[0].data), axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(run_program(packed, x)[0], want, rtol=1e-4, atol=1e-4)


def test_packed_matmul_text_round_trip() -> None:
    from onnxjit.errors import ModelError
    from onnxjit.ir.loop_parser import parse_program
    from onnxjit.ir.loop_printer import print_program
    from onnxjit.ir.loop_verify import verify_program
    from onnxjit.passes import PassContext, get_pass

    p, _ = _const_b_program([(23, 257, 65, True, -1.5, True)], np.random.default_rng(1))
    get_pass("prepack-weights").run(p, PassContext())
    text = print_program(p)
    assert "^P {m = 23, n = 65, k = 257" in text
    back = parse_program(text)
    verify_program(back)
    assert print_program(back) == text
    (s,) = [s for s in back.kernels[0].body if isinstance(s, Matmul)]
    assert s.b_packed and not s.b_trans and s.ldb == p.kernels[0].body[-1].ldb
    with pytest.raises(ModelError):
        parse_program(text.replace("%a0[0, ld=257]", "%a0[0, ld=257]^P"))


def test_packed_matmul_verifier() -> None:
    from onnxjit.errors import CompileError
    from onnxjit.ir.loop_verify import verify_program
    from onnxjit.passes import PassContext, get_pass

    p, _ = _const_b_program([(23, 257, 65, False, 1.0, False)], np.random.default_rng(1))
    get_pass("prepack-weights").run(p, PassContext())
    verify_program(p)
    (s,) = [s for s in p.kernels[0].body if isinstance(s, Matmul)]
    s.b_off = i64(1)  # one element past the packed constant
    with pytest.raises(CompileError, match="out of range"):
        verify_program(p)
    s.b_off, s.b_trans = i64(0), True
    with pytest.raises(CompileError, match="packed B"):
        verify_program(p)


def test_pack_panels_round_trip() -> None:
    from onnxjit.ir.loops import pack_panels, unpack_panels

    b = np.arange(7 * 23, dtype=np.float32).reshape(7, 23)
    flat = pack_panels(b, 16)
    assert flat[:16].tolist() == list(range(16))  # row 0 of panel 0
    assert flat[7 * 16:7 * 16 + 7].tolist() == list(range(16, 23))  # row 0 of the edge panel
    np.testing.assert_array_equal(unpack_panels(flat, 7, 23, 16), b)


def test_prepacked_model_from_disk_cache(tmp_path) -> None:
    """The packed weights are constants of the artifact: a warm start from the disk cache (no
    compilation) computes the same results, on one thread and split over two."""
    import onnxruntime as ort
    from models import mlp

    import onnxjit
    import onnxjit.runtime as rt

    model = mlp((784, 512, 100))
    x = np.random.default_rng(0).standard_normal((70, 784)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    for threads in (1, 2):
        rt._MEMORY.clear()
        cold = onnxjit.compile(model, cache_dir=tmp_path / str(threads), num_threads=threads)
        y_cold = cold(x)[0]
        assert "^P" in cold.ir("loops")
        np.testing.assert_allclose(y_cold, ref, rtol=1e-4, atol=1e-4)
        rt._MEMORY.clear()
        hits = cold.cache_info()["disk_hits"]
        warm = onnxjit.compile(model, cache_dir=tmp_path / str(threads), num_threads=threads)
        np.testing.assert_array_equal(warm(x)[0], y_cold)
        assert warm.cache_info()["disk_hits"] == hits + 1



def test_constants_start_on_a_cache_line(tmp_path) -> None:
    """Packed weights and every other constant start at a multiple of 64 bytes, compiled or
    loaded from the disk cache, symbolic or not (numpy allocates at 16: a vector load of a
    packed panel then spanned two cache lines)."""
    from models import mlp

    import onnxjit
    import onnxjit.runtime as rt

    model = mlp((784, 512, 100))
    x = np.ones((7, 784), np.float32)
    for spec in ("shape", "dynamic"):
        for _ in range(2):  # compiled, then from the disk cache
            rt._MEMORY.clear()
            fn = onnxjit.compile(model, cache_dir=tmp_path / spec, specialize=spec,
                                 tiered=False)
            fn(x)
            consts = fn._last.consts
            assert len(consts) >= 2 and all(c.ctypes.data % 64 == 0 for c in consts)

# few-row products (the small-batch MLP shapes) and every row edge tile ------------------------

#: (m, k, n, b_trans, alpha, accumulate): m <= 64 rows, most large enough to be split over
#: threads (by row blocks, some with leftover rows), n and k multiples of nothing
FEW_ROW_CASES = [(32, 784, 512, False, 1.0, False), (2, 784, 1030, False, 1.0, True),
                 (5, 300, 1100, True, -1.5, False), (13, 784, 130, False, 2.0, True),
                 (16, 513, 520, True, 1.0, False), (40, 257, 200, False, 0.5, False),
                 (64, 784, 520, False, 1.0, True), (37, 1000, 77, True, 1.0, False)]


def test_few_row_products() -> None:
    """Few-row products, B packed at compile time or not: right on one thread and on two, and
    the same bits either way."""
    from onnxjit.ir.loop_eval import run_program
    from onnxjit.passes import PassContext, get_pass
    from onnxjit.passes.plan_memory import run as plan

    plain, inputs = _const_b_program(FEW_ROW_CASES, np.random.default_rng(7))
    packed, _ = _const_b_program(FEW_ROW_CASES, np.random.default_rng(7))
    assert get_pass("prepack-weights").run(packed, PassContext()).changed
    ref = run_program(plain, inputs)
    for prog in (plain, packed):
        _check_threads(plan(prog, PassContext()).ir, inputs, FEW_ROW_CASES, ref)


def _check_threads(prog: Program, inputs: list[np.ndarray], cases: list, ref: list) -> None:
    """Compile `prog` once, run it on one thread and on two: each output close to `ref`
    (case[1] is the depth k), and the same bits on both."""
    run = _runner(prog)
    one, two = run(inputs, 1), run(inputs, 2)
    for case, o, t, r in zip(cases, one, two, ref):
        tol = 2e-6 * case[1] ** 0.5 * 4
        np.testing.assert_allclose(o, r, rtol=tol, atol=tol, err_msg=str(case))
        np.testing.assert_array_equal(t, o, err_msg=str(case))


def test_packed_edge_tiles_every_row_count() -> None:
    """m = 1..40 against a packed B whose n and k are multiples of nothing: every row edge
    tile (m mod 6) and the masked edge panel."""
    from onnxjit.ir.loop_eval import run_program
    from onnxjit.passes import PassContext, get_pass
    from onnxjit.passes.plan_memory import run as plan

    cases = [(m, 431, 77 + 16 * (m % 3), m % 2 == 1, (1.0, -1.5)[m % 4 == 0], m % 3 == 0)
             for m in range(1, 41)]
    p, inputs = _const_b_program(cases, np.random.default_rng(3))
    get_pass("prepack-weights").run(p, PassContext())
    assert all(s.b_packed for k in p.kernels for s in k.body if isinstance(s, Matmul))
    ref = run_program(p, inputs)
    got = _run_program(plan(p, PassContext()).ir, inputs)
    for case, g, r in zip(cases, got, ref):
        np.testing.assert_allclose(g, r, rtol=3e-5, atol=3e-5, err_msg=str(case))


@pytest.mark.parametrize("alpha,a,bv,finite", [(2.0, 3e38, 0.1, True), (0.5, 2e38, 1.0, False)])
def test_small_product_alpha_multiplies_the_sum(alpha, a, bv, finite):
    """A small float product (the axpy form) takes alpha * (A @ B), as numpy and the tiled
    kernel do: 2 * (3e38 * 0.1 * 2) is finite where (2 * 3e38) * 0.1 overflowed, and
    0.5 * (2e38 + 2e38) overflows where 0.5 * 2e38 + 0.5 * 2e38 did not."""
    from onnxjit.passes import PassContext
    from onnxjit.passes.plan_memory import run as plan

    ab = Buffer("a", F32, (2, 2), "input", slot=0)
    bb = Buffer("b", F32, (2, 3), "input", slot=1)
    c = Buffer("c", F32, (2, 3), "output", slot=2)
    bld = Builder()
    bld.emit(Matmul(c, i64(0), 3, ab, i64(0), 2, bb, i64(0), 3, 2, 3, 2, alpha=alpha))
    p = plan(Program([ab, bb, c], [Kernel("k", bld.body)]), PassContext()).ir
    x, y = np.full((2, 2), a, np.float32), np.full((2, 3), bv, np.float32)
    with np.errstate(over="ignore"):
        want = np.float32(alpha) * (x @ y)
    (got,) = _runner(p)([x, y])
    assert np.isfinite(got).all() == finite
    np.testing.assert_allclose(got, want, rtol=1e-6)
