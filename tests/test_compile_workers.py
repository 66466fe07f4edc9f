"""Compiling in worker processes (`codegen.workers`): the same code as in one process, objects
in parts through the disk cache, worker errors raised in the caller, interrupts that stop the
workers, and the in-process path for small programs or ONNXJIT_COMPILE_JOBS=0.

The cost thresholds are lowered so that a small MLP (two MatMuls, a fused elementwise kernel)
takes the worker path in a few hundred milliseconds.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from models import finish
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.codegen import workers
from onnxjit.errors import OnnxJitError, UnsupportedError

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="worker processes need fork")


def _mlp():
    rng = np.random.default_rng(3)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 96)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((96, 10)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Tanh", ["h"], ["t"]),
             helper.make_node("MatMul", ["t", "w2"], ["z"]),
             helper.make_node("Softmax", ["z"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["n", 64])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [w1, w2])
    return finish(graph)


@pytest.fixture
def parts(monkeypatch):
    """Every program of a few kernels compiles in two workers, one kernel per group (nothing
    from the in-memory cache of other tests)."""
    from onnxjit import runtime

    runtime._MEMORY.clear()
    monkeypatch.setattr(workers, "MIN_COST", 0)
    monkeypatch.setattr(workers, "GROUP_COST", 1)
    monkeypatch.setenv("ONNXJIT_COMPILE_JOBS", "2")


def _x(n=5):
    return np.random.default_rng(n).standard_normal((n, 64)).astype(np.float32)


def test_parts_match_one_module_and_load_from_the_cache(parts, tmp_path, monkeypatch):
    model = _mlp()
    fn = onnxjit.compile(model, cache_dir=tmp_path, specialize="shape")
    y, = fn(_x())
    assert fn._last.library.parts  # linked from the kernel groups' objects
    monkeypatch.setenv("ONNXJIT_COMPILE_JOBS", "0")
    ref, = onnxjit.compile(model, cache_dir=False, specialize="shape")(_x())
    np.testing.assert_array_equal(y, ref)
    # a fresh model object over the same cache: loads the parts, compiles nothing
    from onnxjit import cache as cache_mod
    from onnxjit import runtime

    runtime._MEMORY.clear()  # only the disk has it now
    before = cache_mod.STATS.disk_hits
    again, = onnxjit.compile(model, cache_dir=tmp_path, specialize="shape")(_x())
    assert cache_mod.STATS.disk_hits > before
    np.testing.assert_array_equal(again, ref)


def test_entry_stored_in_parts(parts, tmp_path):
    from onnxjit import cache as cache_mod

    fn = onnxjit.compile(_mlp(), cache_dir=tmp_path, specialize="shape")
    fn(_x())
    entries = [cache_mod.decode(p.read_bytes()) for p in tmp_path.rglob("*.ojc")]
    natives = [e for e in entries if e is not None and "object" in e.blobs]
    assert natives and all(e.meta["parts"] >= 2 for e in natives)
    assert all(f"part{i}" in e.blobs for e in natives for i in range(e.meta["parts"]))


def test_worker_error_is_raised_in_the_caller(parts, monkeypatch):
    def fail(*args):
        raise UnsupportedError("kernel 'k' uses something this test refuses")

    monkeypatch.setattr(workers, "_compile_group", fail)
    with pytest.raises(UnsupportedError, match="this test refuses"):
        onnxjit.compile(_mlp(), cache_dir=False, specialize="shape")(_x())


def test_worker_crash_is_a_compile_error(parts, monkeypatch):
    monkeypatch.setattr(workers, "_compile_group", lambda *args: os._exit(3))
    with pytest.raises(OnnxJitError, match="worker crashed"):
        onnxjit.compile(_mlp(), cache_dir=False, specialize="shape")(_x())


def test_interrupt_stops_the_workers_at_once(parts, monkeypatch):
    started: list[int] = []
    real_fork, real_select = os.fork, workers.select.select

    def fork():
        pid = real_fork()
        if pid:
            started.append(pid)
        return pid

    def slow(*args):
        time.sleep(60)

    def interrupted(*args):  # Ctrl-C while the caller waits for the workers
        real_select(*args[:3], 0.2)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.setattr(workers, "_compile_group", slow)
    monkeypatch.setattr(workers.select, "select", interrupted)
    with pytest.raises(KeyboardInterrupt):
        onnxjit.compile(_mlp(), cache_dir=False, specialize="shape")(_x())
    assert started
    for pid in started:  # reaped: no such child any more
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_small_programs_jobs_zero_and_no_fork_compile_in_process(monkeypatch):
    forks: list[int] = []

    def no_fork():
        forks.append(1)
        raise OSError("fork refused by this test")

    small = finish(helper.make_graph(
        [helper.make_node("Tanh", ["x"], ["y"])], "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]))
    ref = np.tanh(_x())
    monkeypatch.setattr(os, "fork", no_fork)
    np.testing.assert_allclose(onnxjit.compile(small, cache_dir=False)(_x())[0], ref,
                               rtol=1e-6)
    assert not forks  # below MIN_COST
    monkeypatch.setattr(workers, "MIN_COST", 0)
    monkeypatch.setenv("ONNXJIT_COMPILE_JOBS", "0")
    y0, = onnxjit.compile(_mlp(), cache_dir=False, specialize="shape")(_x())
    assert not forks
    monkeypatch.setenv("ONNXJIT_COMPILE_JOBS", "2")  # fork fails: compiled here all the same
    from onnxjit import runtime

    runtime._MEMORY.clear()
    y1, = onnxjit.compile(_mlp(), cache_dir=False, specialize="shape")(_x())
    assert forks
    np.testing.assert_array_equal(y0, y1)


def test_bad_jobs_variable_is_named(monkeypatch):
    monkeypatch.setenv("ONNXJIT_COMPILE_JOBS", "many")
    with pytest.raises(OnnxJitError, match="ONNXJIT_COMPILE_JOBS"):
        workers.jobs()


def test_partition_balances_costs():
    groups = workers.partition({0: 10, 1: 9, 2: 5, 3: 4, 4: 1}, 2)
    loads = sorted(sum({0: 10, 1: 9, 2: 5, 3: 4, 4: 1}[n] for n in g) for g in groups)
    assert loads == [14, 15]
    assert sorted(n for g in groups for n in g) == [0, 1, 2, 3, 4]


_EXIT_SCRIPT = r"""
import ctypes, os, sys
sys.path.insert(0, sys.argv[1])
libc = ctypes.CDLL(None)
# a library's exit handler that never returns
libc.__cxa_atexit(ctypes.cast(libc.pause, ctypes.c_void_p), None, None)
import onnxjit
from onnxjit.codegen import workers
from test_compile_workers import _mlp, _x
workers.MIN_COST, workers.GROUP_COST = 0, 1
workers._compile_group = lambda *args: libc.exit(1)  # LLVM's way out of a fatal error
try:
    onnxjit.compile(_mlp(), cache_dir=False, specialize="shape")(_x())
except onnxjit.OnnxJitError as e:
    print("raised:", e, flush=True)
os._exit(0)  # this process has the pausing handler too
"""


def test_exit_in_a_worker_does_not_run_the_callers_exit_handlers():
    # A C-level exit in a worker (LLVM's fatal errors) must end it, not run the handlers the
    # caller's libraries registered (onnxruntime's waits forever in a forked child).
    import subprocess
    import sys

    env = dict(os.environ, ONNXJIT_COMPILE_JOBS="2")
    out = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, os.path.dirname(__file__)],
                         capture_output=True, text=True, timeout=60, env=env)
    assert "raised:" in out.stdout and "worker crashed" in out.stdout, out.stderr[-2000:]


def _conv_relu_matmul():
    """Conv (symbolic height and width) -> Relu -> MatMul over the width: conv kernels and
    others in one symbolic program."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w")
    m = numpy_helper.from_array(rng.standard_normal((11, 6)).astype(np.float32), "m")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MatMul", ["r", "m"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["n", 4, "h", 11])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [w, m])
    return finish(graph)


@pytest.mark.parametrize("jobs", ["0", "2"])
def test_symbolic_conv_kernels_compile_without_lsr(monkeypatch, jobs):
    """A symbolic program's conv kernels are emitted without Loop Strength Reduction, in
    modules of their own (`workers.keeps_lsr`); its other kernels and every static program
    keep it. The option is process-wide, so each module sets it; the results match."""
    from onnxjit import runtime
    from onnxjit.codegen import jit

    seen: list[bool] = []  # modules compiled in this process
    real, real_groups = jit.compile_module, workers.plan_groups

    def spy(text, opt_level, dump, lsr=True):
        seen.append(lsr)
        return real(text, opt_level, dump, lsr)

    def groups_spy(program, plan, n_jobs):  # the workers' modules: decided per group
        groups = real_groups(program, plan, n_jobs)
        seen.extend(workers.keeps_lsr(program, g) for g in groups or [])
        return groups

    monkeypatch.setattr(jit, "compile_module", spy)
    monkeypatch.setattr(workers, "plan_groups", groups_spy)
    monkeypatch.setenv("ONNXJIT_COMPILE_JOBS", jobs)
    if jobs != "0":  # every program takes the worker path, groups split by family
        monkeypatch.setattr(workers, "MIN_COST", 0)
        monkeypatch.setattr(workers, "GROUP_COST", 1)
    x = np.random.default_rng(0).standard_normal((2, 4, 7, 11)).astype(np.float32)
    outs = {}
    for spec in ("dynamic", "auto"):
        runtime._MEMORY.clear()
        seen.clear()
        fn = onnxjit.compile(_conv_relu_matmul(), cache_dir=False, tiered=False,
                             specialize=spec)
        outs[spec] = fn(x)
        if spec == "auto" or jobs == "0":  # one module mixing the families keeps LSR
            assert seen and all(seen), (spec, jobs, seen)
        else:  # the conv kernel's group without, the others' groups and the entry with
            assert False in seen and True in seen, seen
    np.testing.assert_allclose(outs["dynamic"], outs["auto"], rtol=1e-5, atol=1e-5)
