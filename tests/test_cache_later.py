"""Big cache entries written in a thread (`cache.DiskCache.put_later`): the first result does
not wait for the write, a lookup of the key does, and so does the interpreter's exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
from models import mlp

import onnxjit
from onnxjit import cache, runtime


def test_the_first_result_does_not_wait_for_the_write(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "LATER_BYTES", 1)
    started, release = threading.Event(), threading.Event()
    put = cache.DiskCache.put

    def slow_put(self, key, entry):
        if entry.arrays:  # the program's entry: held until the result is in
            started.set()
            assert release.wait(60)
        put(self, key, entry)

    monkeypatch.setattr(cache.DiskCache, "put", slow_put)
    runtime._MEMORY.clear()
    x = np.random.default_rng(0).standard_normal((5, 784)).astype(np.float32)
    out, done = {}, threading.Event()

    def user():
        fn = onnxjit.compile(mlp(seed=11), cache_dir=tmp_path, tiered=False)
        out["y"] = fn(x)[0]
        done.set()

    threading.Thread(target=user, daemon=True).start()
    try:
        assert done.wait(30)  # the result came while its entry's write was held
        assert started.is_set()
    finally:
        release.set()
    runtime._MEMORY.clear()  # a lookup of the key now waits for the write, then hits
    again = onnxjit.compile(mlp(seed=11), cache_dir=tmp_path, tiered=False)
    hits = again.cache_info()["disk_hits"]
    np.testing.assert_array_equal(again(x)[0], out["y"])
    assert again.cache_info()["disk_hits"] == hits + 1
    cache.flush()


SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np, onnxjit
    fn = onnxjit.compile(sys.argv[1], cache_dir=sys.argv[2], tiered=False)
    fn(np.ones((3, 2048), np.float32))
    print(fn.cache_info()["misses"], fn.cache_info()["disk_hits"])
""")


def test_the_interpreter_waits_for_the_write_at_exit(tmp_path):
    path = tmp_path / "big.onnx"  # 17 MB of weights: past LATER_BYTES
    path.write_bytes(mlp(sizes=(2048, 2048, 10), seed=12).SerializeToString())
    assert 2048 * 2048 * 4 >= cache.LATER_BYTES

    def run():
        out = subprocess.run([sys.executable, "-c", SCRIPT, str(path), str(tmp_path / "c")],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert run() == ["1", "0"]  # compiled, then exited right after its result
    assert run() == ["0", "1"]  # the entry was whole on disk
