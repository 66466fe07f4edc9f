"""The GEMM microkernels compiled once per host (`codegen.gemm_objects`): a symbolic program
compiled in parts links them as parts of its own, the same bits as defining them in every
module; a process compiles each once, and a process whose disk cache holds them compiles none;
a program of one signature keeps its own copies."""

from __future__ import annotations

import os

import numpy as np
import pytest
from models import mlp

import onnxjit
from onnxjit import runtime
from onnxjit.codegen import gemm_objects

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="worker processes need fork")


@pytest.fixture
def fresh_table(monkeypatch):
    """An empty table of microkernel objects, and a record of those workers compiled."""
    monkeypatch.setattr(gemm_objects, "_OBJECTS", {})
    monkeypatch.setattr(gemm_objects, "_loaded", set())
    monkeypatch.setenv("ONNXJIT_COMPILE_JOBS", "2")
    monkeypatch.setattr(gemm_objects, "SHARE_MIN_VECTOR_BYTES", 0)  # whatever this host is
    runtime._MEMORY.clear()
    compiled: list[str] = []
    remember = gemm_objects.remember

    def recording(fresh, store):
        compiled.extend(fresh)
        remember(fresh, store)

    monkeypatch.setattr(gemm_objects, "remember", recording)
    return compiled


def _x(rows=37):
    return np.random.default_rng(rows).standard_normal((rows, 784)).astype(np.float32)


def _symbolic(model, cache_dir=False):
    return onnxjit.compile(model, cache_dir=cache_dir, tiered=False, specialize="dynamic")


def test_shared_microkernels_give_the_same_bits(fresh_table, monkeypatch):
    x = _x()
    shared = _symbolic(mlp(seed=4))
    y_shared = shared(x)[0]
    assert fresh_table  # the workers compiled the microkernels on their own
    assert len(shared._last.library.parts) > 3  # microkernels, then the kernel groups
    runtime._MEMORY.clear()
    monkeypatch.setattr(gemm_objects, "SHARED", False)
    inline = _symbolic(mlp(seed=4))
    np.testing.assert_array_equal(inline(x)[0], y_shared)


def test_a_program_of_one_signature_keeps_its_own(fresh_table):
    fn = onnxjit.compile(mlp(seed=3), cache_dir=False, tiered=False, specialize="shape")
    x = _x()
    y = fn(x)[0]
    assert fresh_table == [] and gemm_objects._OBJECTS == {}  # its modules define them
    np.testing.assert_allclose(y, _symbolic(mlp(seed=3))(x)[0], rtol=1e-5, atol=1e-6)
    assert fresh_table


def test_a_host_with_16_vector_registers_keeps_its_own(fresh_table, monkeypatch):
    """Where vectors are narrower than `SHARE_MIN_VECTOR_BYTES` (an AVX2 host: 16 registers)
    a symbolic program's modules define their microkernels, which LLVM specialises to their
    calls; where they are as wide, the workers compile shared ones. The same bits either way."""
    from onnxjit.codegen import target

    wide, x, ys = target.vector_bytes(), _x(), []
    for least, shared in ((wide + 1, False), (wide, True)):
        monkeypatch.setattr(gemm_objects, "SHARE_MIN_VECTOR_BYTES", least)
        runtime._MEMORY.clear()
        fresh_table.clear()
        ys.append(_symbolic(mlp(seed=11))(x)[0])
        assert bool(fresh_table) is shared
    np.testing.assert_array_equal(ys[0], ys[1])


def test_a_process_compiles_each_microkernel_once(fresh_table):
    _symbolic(mlp(seed=5))(_x())
    first = set(fresh_table)
    assert first
    fresh_table.clear()
    fn = _symbolic(mlp(sizes=(784, 256, 300, 10), seed=6))
    y = fn(_x(9))[0]
    assert not set(fresh_table) & first  # none of the first model's again
    assert y.shape == (9, 10) and np.isfinite(y).all()


def test_the_disk_cache_keeps_them_for_the_next_process(fresh_table, tmp_path, monkeypatch):
    _symbolic(mlp(seed=7), tmp_path)(_x(39))
    assert fresh_table
    # a "new process": an empty table, the same disk cache, another model with the same tiles
    monkeypatch.setattr(gemm_objects, "_OBJECTS", {})
    monkeypatch.setattr(gemm_objects, "_loaded", set())
    runtime._MEMORY.clear()
    fresh_table.clear()
    fn = _symbolic(mlp(seed=8), tmp_path)
    x = _x(21)
    y = fn(x)[0]
    assert fresh_table == []
    ref = onnxjit.compile(mlp(seed=8), cache_dir=False, tiered=False, specialize="shape")
    np.testing.assert_allclose(y, ref(x)[0], rtol=1e-5, atol=1e-6)
