"""Products with a constant A (a conv's weights times an input B) and the shared microkernel
functions every tiled product calls (`codegen.gemm_micro`): right over every tile and panel
edge on one and two threads, prefetching only a constant A, and one function per tile shape
whatever the product's depth. Helpers come from test_gemm.
"""

from __future__ import annotations

import numpy as np
from test_gemm import PAD, _check_threads, _rand

from onnxjit.codegen import compile_program
from onnxjit.codegen.kernel_shapes import tile_shape
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Buffer, Kernel, Matmul, Program, i64
from onnxjit.ir.types import DType

F32 = DType.FLOAT


#: (m, k, n): a constant A (a conv's weights) over an input B: whole 6-row tiles and edge
#: tiles (the last tile's prefetch of the next tile reaches past A), depth past the 256-row
#: block, n past the panel width, and m under PACK_MIN_M (B read in place)
CONST_A_CASES = [(23, 257, 65), (64, 40, 520), (7, 300, 100), (36, 64, 196), (130, 96, 49)]


def _const_a_program(cases: list[tuple[int, int, int]], a_kind: str,
                     rng: np.random.Generator) -> tuple[Program, list[np.ndarray], list]:
    """One kernel per case: C = A @ B with A a `a_kind` ("const" or "input") buffer of PAD
    extra rows and columns (the window at row 1, column PAD); returns the program, its inputs
    (every B, then every input A) and numpy's products."""
    bufs: list[Buffer] = []
    kernels: list[Kernel] = []
    b_in: list[np.ndarray] = []
    a_in: list[np.ndarray] = []
    expected: list[np.ndarray] = []
    n_in = len(cases) * (2 if a_kind == "input" else 1)
    for j, (m, k, n) in enumerate(cases):
        data = _rand(F32, (m + PAD, k + PAD), rng)
        if a_kind == "const":
            a = Buffer(f"a{j}", F32, data.shape, "const", slot=j, data=data)
        else:
            a = Buffer(f"a{j}", F32, data.shape, "input", slot=len(cases) + j)
            a_in.append(data)
        b = Buffer(f"b{j}", F32, (k, n), "input", slot=j)
        c = Buffer(f"c{j}", F32, (m, n), "output", slot=n_in + j)
        bufs += [a, b, c]
        b_in.append(_rand(F32, b.shape, rng))
        bld = Builder()
        bld.emit(Matmul(c, i64(0), n, a, i64(k + 2 * PAD), k + PAD, b, i64(0), n, m, n, k))
        kernels.append(Kernel(f"mm{j}", bld.body))
        expected.append(data[1:m + 1, PAD:].astype(np.float64) @ b_in[-1])
    return Program(bufs, kernels), b_in + a_in, expected


def test_constant_a_products() -> None:
    """A constant A (prefetched a tile ahead, `gemm_micro.PREFETCH_A`) over every tile and
    panel edge, on one thread and split over two (compiled once): right, and the same bits
    either way."""
    from onnxjit.passes import PassContext
    from onnxjit.passes.plan_memory import run as plan

    p, inputs, expected = _const_a_program(CONST_A_CASES, "const", np.random.default_rng(5))
    _check_threads(plan(p, PassContext()).ir, inputs, CONST_A_CASES, expected)


def test_only_constant_a_is_prefetched() -> None:
    """The tiled kernel prefetches the next tile of a constant A (weights from DRAM) and
    nothing for an A computed at run time (an MLP's activations, already in cache)."""
    texts: dict[str, str] = {}
    for kind in ("const", "input"):
        p, _, _ = _const_a_program(CONST_A_CASES[:2], kind, np.random.default_rng(5))
        compile_program(p, dump=lambda name, text, kind=kind: texts.setdefault(kind, text))
    assert "llvm.prefetch" in texts["const"]
    assert "llvm.prefetch" not in texts["input"]


def test_products_share_their_microkernels() -> None:
    """Products that differ only in depth call the same microkernel functions (one per tile
    shape, `gemm_micro`): the module defines each once, and only they hold the FMA tile."""
    import re

    texts: list[str] = []
    p, _, _ = _const_a_program([(64, 40, 520), (64, 300, 520)], "input",
                               np.random.default_rng(5))
    compile_program(p, dump=lambda name, text: texts.append(text) if name == "llvm.ll" else None)
    text = texts[0]
    defined = re.findall(r'define internal void @"(onnxjit\.gemm\.[^"]+)"', text)
    assert defined and len(defined) == len(set(defined))
    bodies = text.split("\ndefine ")
    tiles = [f for f in bodies if "llvm.fmuladd.v" in f.split("\n}")[0]
             and not f.startswith("declare")]
    assert all(f.startswith('internal void @"onnxjit.gemm.') for f in tiles)
    _, mr, nrv = tile_shape(4)  # the host's f32 tile: 6 x 4 vectors on AVX-512, 6 x 2 on AVX2
    call = f'call void @"onnxjit.gemm.f32.{mr}x{nrv}"'
    for k in ("k0", "k1"):  # both products' kernels (or their tasks) call a shared tile
        assert any(f".{k}." in f.split("(")[0] and call in f for f in bodies)


def test_microkernel_text_built_once(monkeypatch) -> None:
    """A module declares each microkernel and its text gets the definition built once per
    process (`gemm_micro.SHARED_TEXT`): the same module text as building it in the module."""
    import re

    from onnxjit.codegen import gemm_micro, target
    from onnxjit.codegen.modules import build_module, plan_kernels

    target.init()
    p, _, _ = _const_a_program(CONST_A_CASES[:3], "const", np.random.default_rng(5))
    texts: list[str] = []
    for shared in (False, True, True):  # the second True reuses the texts the first built
        monkeypatch.setattr(gemm_micro, "SHARED_TEXT", shared)
        if len(texts) == 1:
            monkeypatch.setattr(gemm_micro, "_TEXTS", {})
        module, _, _ = build_module(p, "p", target.host()[0], target.data_layout(),
                                    plan_kernels(p))
        texts.append(re.sub(r"onnxjit\.loop\.self\.\d+", "L", gemm_micro.module_text(module)))
    assert len(gemm_micro._TEXTS) == texts[0].count('define internal void @"onnxjit.gemm.') > 0
    assert texts[0] == texts[1] == texts[2]


def test_streamed_weights_are_prefetched() -> None:
    """A product over a prepacked constant B (a layer's weights, read from L3 or DRAM on each
    call) prefetches B's next slice from its first row tile (a microkernel keyed `b`) when it
    has more rows than one tile, and A' too when it is read transposed (keyed `a`: a T-form
    conv's input); a product of one row tile does not prefetch B. All of them right on one
    thread and on two, past every panel and depth block (the prefetches reach past B)."""
    import re

    from onnxjit.passes import PassContext, get_pass
    from onnxjit.passes.plan_memory import run as plan

    rng = np.random.default_rng(7)
    cases = [(40, 300, 200), (3, 300, 200), (49, 260, 130)]  # the last: A' transposed
    bufs: list[Buffer] = []
    kernels: list[Kernel] = []
    inputs: list[np.ndarray] = []
    expected: list[np.ndarray] = []
    for j, (m, k, n) in enumerate(cases):
        trans = j == 2
        a = Buffer(f"a{j}", F32, (k, m) if trans else (m, k), "input", slot=j)
        w = Buffer(f"w{j}", F32, (k, n), "const", slot=j, data=_rand(F32, (k, n), rng))
        c = Buffer(f"c{j}", F32, (m, n), "output", slot=len(cases) + j)
        bufs += [a, w, c]
        inputs.append(_rand(F32, a.shape, rng))
        bld = Builder()
        bld.emit(Matmul(c, i64(0), n, a, i64(0), m if trans else k, w, i64(0), n, m, n, k,
                        a_trans=trans))
        kernels.append(Kernel(f"mm{j}", bld.body))
        expected.append((inputs[-1].T if trans else inputs[-1]).astype(np.float64) @ w.data)
    p = Program(bufs, kernels)
    assert get_pass("prepack-weights").run(p, PassContext()).changed
    assert all(s.b_packed for kern in p.kernels for s in kern.body if isinstance(s, Matmul))
    texts: list[str] = []
    compile_program(p, dump=lambda name, text: texts.append(text) if name == "llvm.ll" else None)
    bodies = texts[0].split("\ndefine ")

    def flags(kernel: str) -> set[str]:
        """The flags of the microkernels that kernel `kernel` (or its tasks) calls."""
        calls = set()
        for f in bodies:
            if f".{kernel}." in f.split("(")[0] or f'@"{kernel}"' in f.split("(")[0]:
                calls |= set(re.findall(r'call void @"onnxjit\.gemm\.f32\.\d+x\d+\.?([a-z]*)"', f))
        return calls

    assert any("b" in f for f in flags("mm0")) and not any("a" in f for f in flags("mm0"))
    assert not any("b" in f for f in flags("mm1"))
    assert any("b" in f for f in flags("mm2")) and all("a" in f for f in flags("mm2"))
    _check_threads(plan(p, PassContext()).ir, inputs, cases, expected)
