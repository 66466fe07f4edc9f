"""The worker pool itself: the chunks `parallel_for` hands out, an idle pool that does not
spin, workers steered off the caller's CPU, the pool's object code linked from the disk cache,
and a pool that works in a forked child."""

from __future__ import annotations

import ctypes
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from models import chain

import onnxjit
from onnxjit.codegen import pool

N = 300_000


def compiled(model: onnx.ModelProto, threads: int):
    return onnxjit.compile(model, num_threads=threads, cache_dir=False)


def _pool_chunks(n: int, grain: int) -> list[tuple[int, int]]:
    """The [begin, end) chunks `parallel_for` hands out for n iterations on two threads."""
    task_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def task(ctx, begin, end):
        with lock:
            seen.append((begin, end))
        time.sleep(0.0005)  # long enough that both threads take chunks

    run = ctypes.CFUNCTYPE(None, task_t, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                           ctypes.c_int64)(pool.parallel_for_address())
    run(task_t(task), None, n, grain, 2)
    return sorted(seen)


def test_pool_chunks_cover_the_range_once() -> None:
    # about CHUNKS_PER_THREAD chunks a thread, never below the grain; a heavy body's (grain
    # < 16) a little smaller when that gives both threads the same number (28: 14 chunks of
    # 2, not 7 of 4; 30: 10 of 3; 26: no such size, 4); a cheap body's cut on multiples of
    # 16; every iteration exactly once
    for n, grain, size in ((7, 1, 1), (28, 1, 2), (30, 1, 3), (26, 1, 4), (1000, 1, 125),
                           (1000, 16, 128), (5000, 40, 640), (100, 30, 32), (100, 15, 15)):
        chunks = _pool_chunks(n, grain)
        assert [i for b, e in chunks for i in range(b, e)] == list(range(n)), (n, grain)
        assert {e - b for b, e in chunks[:-1]} == {size}, (n, grain, chunks)


def test_idle_pool_does_not_spin() -> None:
    fn = compiled(chain(N), 2)
    x = np.ones(N, np.float32)
    for _ in range(5):
        fn(x)
    assert pool.worker_count() >= 1
    time.sleep(0.2)  # past the short spin after the last job
    me = threading.get_native_id()
    for _ in range(20):  # a spinning worker is runnable ('R') in nearly every sample
        states = {}
        for task in Path("/proc/self/task").iterdir():
            stat = (task / "stat").read_text()
            states[int(task.name)] = stat[stat.rindex(")") + 2]
        assert all(st != "R" for tid, st in states.items() if tid != me), states
        time.sleep(0.01)


_STEER_SCRIPT = """
import os, sys
from pathlib import Path
import numpy as np
sys.path.insert(0, {tests!r})
from models import chain
import onnxjit

def worker_cpus():
    tasks = Path("/proc/self/task")
    return [os.sched_getaffinity(int(t.name)) for t in tasks.iterdir()
            if (t / "comm").read_text().strip() == "onnxjit-worker"]

a, b = sorted(os.sched_getaffinity(0))[:2]
fn = onnxjit.compile(chain({n}), num_threads=2, cache_dir=False)
x = np.linspace(-2, 2, {n}).astype(np.float32)
want, = onnxjit.compile(chain({n}), num_threads=1, cache_dir=False)(x)
fn(x)  # the pool takes its CPUs from its first dispatcher: all of this process's
for cpu, other in ((a, b), (b, a), (a, b)):
    os.sched_setaffinity(0, {{cpu}})  # this thread only
    assert np.array_equal(fn(x)[0], want)
    masks = worker_cpus()
    assert masks and all(cpu not in m and other in m for m in masks), (cpu, masks)
"""


def test_workers_stay_off_the_callers_cpu() -> None:
    """Each dispatch moves the workers off the CPU its caller is on (else Linux may wake a
    worker there, and the call runs at one thread's speed). In a fresh process: other tests
    link extra copies of the pool whose workers have the same name."""
    import os
    import subprocess
    import sys

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    script = _STEER_SCRIPT.format(tests=str(Path(__file__).parent), n=N)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)


def test_warm_start_links_the_pool_from_the_disk_cache(tmp_path) -> None:
    """A second process finds the pool's object code in the disk cache (stored with the
    artifact): it never compiles it."""
    import subprocess
    import sys

    model = tmp_path / "chain.onnx"
    onnx.save(chain(N), str(model))
    script = f"""
import numpy as np, onnxjit
from onnxjit.codegen import pool
if {{warm}}:
    def no_compile():
        raise AssertionError("pool compiled on a warm start")
    pool.compile_pool = no_compile
fn = onnxjit.compile({str(model)!r}, num_threads=2, cache_dir={str(tmp_path / "cache")!r})
x = np.linspace(-3, 3, {N}).astype(np.float32)
y, = fn(x)
assert pool.installed() and pool.worker_count() >= 1
np.save({str(tmp_path / "y")!r} + str({{warm}}), y)
"""
    for warm in (0, 1):
        subprocess.run([sys.executable, "-c", script.format(warm=warm)], check=True,
                       timeout=300)
    np.testing.assert_array_equal(np.load(tmp_path / "y0.npy"), np.load(tmp_path / "y1.npy"))


def test_a_compile_in_a_fresh_process_links_the_pool_from_the_disk_cache(tmp_path) -> None:
    """The pool has a cache entry of its own: a fresh process compiling another model (a
    background compile worker, a server's new model) links it instead of compiling it."""
    import subprocess
    import sys

    script = """
import sys
import numpy as np, onnxjit
from tests_models import chain
from onnxjit.codegen import pool
n, second = int(sys.argv[1]), sys.argv[2] == "1"
if second:
    def no_compile():
        raise AssertionError("pool compiled although the disk cache holds it")
    pool.compile_pool = no_compile
fn = onnxjit.compile(chain(n), num_threads=2, cache_dir=sys.argv[3])
x = np.linspace(-3, 3, n).astype(np.float32)
y, = fn(x)
assert pool.installed() and pool.worker_count() >= 1
"""
    script = script.replace("from tests_models import chain",
                            f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                            "from models import chain")
    for n, second in ((N, 0), (N + 64, 1)):
        subprocess.run([sys.executable, "-c", script, str(n), str(second),
                        str(tmp_path / "cache")], check=True, timeout=300)


def test_pool_works_in_a_forked_child() -> None:
    """The child of os.fork() has no workers but a copy of the pool's state: the fork handler
    resets it, so the child starts workers of its own (and never waits on a mutex some thread
    of the parent held at the fork)."""
    import os

    fn = compiled(chain(N), 2)
    x = np.linspace(-2, 2, N).astype(np.float32)
    want, = fn(x)
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        ok = False
        try:
            ok = all(np.array_equal(fn(x)[0], want) for _ in range(3))
            ok = ok and len(os.listdir("/proc/self/task")) >= 2  # a worker of its own
        finally:
            os._exit(0 if ok else 1)
    deadline = time.monotonic() + 120
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
