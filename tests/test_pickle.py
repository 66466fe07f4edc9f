"""A CompiledModel pickles as its model and options, and is rebuilt without compiling: in this
process, in fork and spawn worker pools sharing the disk cache (which then compile nothing),
with external data inlined or referenced."""

import multiprocessing
import os
import pickle
import shutil
import threading
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import onnx
import pytest
from models import mlp, mlp_reference

import onnxjit
from onnxjit import portable

SIZES = (16, 32, 8)


@pytest.fixture
def model():
    return mlp(SIZES, seed=3)


def _x(batch):
    return np.random.default_rng(batch).standard_normal((batch, SIZES[0])).astype(np.float32)


def test_round_trip_keeps_results_and_compiles_nothing(model, tmp_path):
    fn = onnxjit.compile(model, cache_dir=tmp_path)
    y, = fn(_x(4))
    blob = pickle.dumps(fn)
    assert len(blob) < len(model.SerializeToString()) + 2048  # the model and a small header
    portable._RESTORED.clear()
    before = fn.cache_info()
    g = pickle.loads(blob)
    assert g is not fn and g.cache_info() == before  # unpickling looks nothing up
    assert (g.input_names, g.output_names) == (fn.input_names, fn.output_names)
    assert g.options == fn.options
    y2, = g(_x(4))
    np.testing.assert_array_equal(y, y2)
    assert g.cache_info()["misses"] == before["misses"]  # the memory cache served it
    assert pickle.loads(blob) is g  # the same model again: the live object


def test_process_local_options_are_dropped(model, tmp_path):
    fn = onnxjit.compile(model, cache_dir=tmp_path / "c", dump_ir=tmp_path / "dumps",
                         num_threads=1, opt_level=2)
    g = pickle.loads(pickle.dumps(fn))
    assert g.options.dump_ir is None
    assert g.options == fn.options.replace(dump_ir=None)
    # a callable option (a progress callback) stays with its process: workers get the default
    fn.options = fn.options.replace(progress=lambda stage, done, total: None)
    portable._RESTORED.clear()
    assert pickle.loads(pickle.dumps(fn)).options.progress == "auto"


def test_pickles_while_another_thread_compiles(model, tmp_path):
    fn = onnxjit.compile(model, cache_dir=False)
    with fn._lock:  # held as a compile holds it: pickling must neither wait nor fail
        t = threading.Thread(target=lambda: pickle.dumps(fn))
        t.start()
        t.join(10)
        assert not t.is_alive()
    y, = pickle.loads(pickle.dumps(fn))(_x(3))
    np.testing.assert_allclose(y, mlp_reference(model, _x(3)), rtol=1e-5, atol=1e-5)


def _forbid_compiling():
    """Pool initializer: a worker that tries to compile fails its task."""
    import onnxjit.codegen
    import onnxjit.driver

    def boom(*a, **k):
        raise AssertionError("a worker compiled on a warm cache")

    onnxjit.codegen.compile_program = boom
    onnxjit.driver.bind_signature = boom
    onnxjit.driver.lower_bound = boom


def _run_and_count(fn, x):
    y, = fn(x)
    return y, fn.cache_info(), os.getpid()


def _warm(model, tmp_path, batches):
    fn = onnxjit.compile(model, cache_dir=tmp_path, specialize="shape", num_threads=1)
    for b in set(batches):
        fn(_x(b))  # the disk cache holds every signature the workers will see
    return fn


def test_spawned_process_pool_with_a_warm_cache_compiles_nothing(model, tmp_path):
    batches = (1, 5, 5, 1)
    fn = _warm(model, tmp_path, batches)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx, initializer=_forbid_compiling) as pool:
        results = list(pool.map(_run_and_count, [fn] * len(batches), map(_x, batches)))
    for (y, info, _), b in zip(results, batches):
        np.testing.assert_array_equal(y, fn(_x(b))[0])
        assert info["misses"] == 0
    assert sum(info["disk_hits"] for _, info, _ in results) > 0


def _count(fn):
    return fn.cache_info()


_FORKED_POOL = """
import json, multiprocessing, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import test_pickle as t
import onnxjit
fn = t._warm(t.mlp(t.SIZES, seed=3), sys.argv[1], (2, 3))
xs = [t._x(b) for b in (2, 3, 2, 3)]
with multiprocessing.get_context("fork").Pool(2, initializer=t._forbid_compiling) as pool:
    outs = pool.map(fn, xs)
    counts = pool.map(t._count, [fn] * 4)
same = all(np.array_equal(y, fn(x)[0]) for (y,), x in zip(outs, xs))
print(json.dumps({"same": same, "counts": counts}))
"""


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                    reason="no fork start method on this platform")
def test_forked_multiprocessing_pool_map(tmp_path):
    """In a fresh interpreter: a forked child of this test process would inherit
    onnxruntime's thread pools from other tests, and freeing those hangs in the child."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _FORKED_POOL, str(tmp_path),
                          os.path.dirname(__file__)], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["same"]
    # counters start at zero in a forked child; its memory cache is the parent's
    assert all(c["misses"] == 0 for c in got["counts"])
    assert sum(c["memory_hits"] for c in got["counts"]) > 0


def _external_model(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    m = mlp(SIZES, seed=5)
    saved = onnx.ModelProto.FromString(m.SerializeToString())  # save_model moves the data out
    onnx.save_model(saved, str(folder / "m.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="m.data", size_threshold=0)
    return m, folder


def test_external_data_travels_inside_the_pickle(tmp_path):
    m, folder = _external_model(tmp_path)
    fn = onnxjit.compile(folder / "m.onnx", cache_dir=False)
    blob = pickle.dumps(fn)
    shutil.rmtree(folder)  # a worker on another machine has no copy of the folder
    y, = pickle.loads(blob)(_x(3))
    np.testing.assert_allclose(y, mlp_reference(m, _x(3)), rtol=1e-5, atol=1e-5)


def test_large_external_data_is_referenced_and_checked(tmp_path, monkeypatch):
    m, folder = _external_model(tmp_path)
    fn = onnxjit.compile(folder / "m.onnx", cache_dir=tmp_path / "cache")
    monkeypatch.setattr(portable, "INLINE_LIMIT", 100)  # the weights are larger
    blob = pickle.dumps(fn)
    assert len(blob) < 4096  # the folder is referenced, not copied
    portable._RESTORED.clear()
    g = pickle.loads(blob)
    assert g._hash == fn._hash  # same files: the sender's cache entries serve the worker
    y, = g(_x(3))
    np.testing.assert_allclose(y, mlp_reference(m, _x(3)), rtol=1e-5, atol=1e-5)
    (folder / "m.data").unlink()
    portable._RESTORED.clear()
    lost = pickle.loads(blob)
    assert lost._hash != fn._hash
    with pytest.raises(onnxjit.ModelError, match="m.data"):
        lost(_x(3))
