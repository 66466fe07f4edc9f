"""The disk cache, in fresh subprocesses: hits skip import, passes and LLVM; bad entries are
rebuilt; unusable folders degrade to memory with a warning; files are owner-only."""

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from models import mlp

import onnxjit

SCRIPT = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    import numpy as np, onnxjit
    if sys.argv[3] == "forbid-compile":
        # A warm start must neither parse the model nor run passes nor invoke LLVM.
        import onnxjit.codegen, onnxjit.importer, onnxjit.driver
        def boom(*a, **k):
            raise AssertionError("compiler invoked on a warm cache")
        onnxjit.codegen.compile_program = boom
        onnxjit.importer.load_model = boom
        onnxjit.driver.bind_signature = boom
        onnxjit.driver.lower_bound = boom
    fn = onnxjit.compile(sys.argv[1], cache_dir=sys.argv[2])
    x = np.ones((32, 784), np.float32)
    y, = fn(x)
    dt = time.perf_counter() - t0
    print(json.dumps({"info": fn.cache_info(), "sum": float(y.sum()), "seconds": dt}))
""")


def _run(model_path, cache_dir, mode="normal"):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(model_path), str(cache_dir), mode],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("m") / "mlp.onnx"
    p.write_bytes(mlp().SerializeToString())
    return p


@pytest.fixture(scope="module")
def filled(model_path, tmp_path_factory):
    """A cache folder one cold process filled, and that process's report."""
    folder = tmp_path_factory.mktemp("filled")
    return folder, _run(model_path, folder)


def _copy_of(filled, tmp_path):
    shutil.copytree(filled[0], tmp_path, dirs_exist_ok=True)
    return filled[1]


def test_second_process_hits_disk_cache_without_compiling(model_path, tmp_path):
    cold = _run(model_path, tmp_path)
    assert cold["info"]["misses"] == 1 and cold["info"]["disk_hits"] == 0
    warm = _run(model_path, tmp_path, "forbid-compile")
    assert warm["info"]["disk_hits"] == 1 and warm["info"]["misses"] == 0
    assert warm["sum"] == cold["sum"]
    for f in tmp_path.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def _entries(folder):
    """The compiled programs' entries (not the metadata, nor the worker pool's or the GEMM
    microkernels' own entries)."""
    from onnxjit.entries import micro_key, pool_key

    return [p for p in folder.iterdir() if p.suffix == ".ojc" and p.stat().st_size > 4096
            and p.stem not in (pool_key(), micro_key())]


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "foreign"])
def test_damaged_entry_is_rebuilt(model_path, filled, tmp_path, damage):
    ref = _copy_of(filled, tmp_path)
    (entry,) = _entries(tmp_path)
    data = bytearray(entry.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 3]
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"\x7fELF" + os.urandom(2000))
    entry.write_bytes(bytes(data))
    again = _run(model_path, tmp_path)
    assert again["info"]["misses"] == 1 and again["info"]["disk_errors"] >= 1
    assert again["sum"] == ref["sum"]
    healed = _run(model_path, tmp_path, "forbid-compile")  # the rebuilt entry is good again
    assert healed["info"]["disk_hits"] == 1


def test_changed_model_misses(tmp_path):
    x = np.ones((32, 784), np.float32)
    a = onnxjit.compile(mlp(seed=1), cache_dir=tmp_path)
    a(x)
    before = onnxjit.compile(mlp(seed=2), cache_dir=tmp_path).cache_info()["misses"]
    onnxjit.compile(mlp(seed=2), cache_dir=tmp_path)(x)
    assert onnxjit.compile(mlp(seed=2), cache_dir=tmp_path).cache_info()["misses"] == before + 1


def test_unwritable_cache_dir_warns_and_works(tmp_path):
    # A regular file where the folder should be: fails for root too.
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.warns(RuntimeWarning, match="in-memory cache only"):
        fn = onnxjit.compile(mlp(seed=4), cache_dir=blocker / "sub")
    (y,) = fn(np.ones((1, 784), np.float32))
    assert y.shape == (1, 10)


def test_entry_writable_by_others_is_not_loaded(model_path, filled, tmp_path):
    _copy_of(filled, tmp_path)
    for e in _entries(tmp_path):
        e.chmod(0o666)
    again = _run(model_path, tmp_path)
    assert again["info"]["disk_hits"] == 0 and again["info"]["misses"] == 1


def test_disabled_disk_cache_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNXJIT_CACHE_DIR", str(tmp_path))
    onnxjit.compile(mlp(seed=5), cache_dir=False)(np.ones((1, 784), np.float32))
    assert list(tmp_path.iterdir()) == []


def test_warm_start_with_defaulted_inputs_skips_import(tmp_path):
    """An input with a default (an initializer named like it, IR < 4 style) omitted at the
    call: a warm start reads the default from the model bytes without importing the graph."""
    from onnx import TensorProto, helper, numpy_helper

    b = np.arange(4, dtype=np.float32)
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(b, "b")])
    path = tmp_path / "defaults.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
                     .SerializeToString())
    script = textwrap.dedent("""
        import json, sys
        import numpy as np, onnxjit
        if sys.argv[3] == "warm":
            import onnxjit.codegen, onnxjit.driver
            def boom(*a, **k):
                raise AssertionError("compiler invoked on a warm cache")
            onnxjit.codegen.compile_program = onnxjit.driver.import_model = boom
        fn = onnxjit.compile(sys.argv[1], cache_dir=sys.argv[2])
        y, = fn(np.ones(4, np.float32))
        y2, = fn(np.ones(4, np.float32), b=np.zeros(4, np.float32))
        print(json.dumps({"y": y.tolist(), "y2": y2.tolist(), "info": fn.cache_info()}))
    """)
    runs = []
    for mode in ("cold", "warm"):
        out = subprocess.run([sys.executable, "-c", script, str(path), str(tmp_path / "c"), mode],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    for r in runs:
        assert r["y"] == [1.0, 2.0, 3.0, 4.0] and r["y2"] == [1.0] * 4
    assert runs[1]["info"]["misses"] == 0


@pytest.mark.parametrize("big", [False, True], ids=["read", "mapped"])
def test_entry_arrays_are_used_in_place(tmp_path, big):
    """A read entry's arrays are aligned, writeable views of the one buffer the file was read
    into, or of its copy-on-write mapping for entries from MAP_MIN_BYTES (a warm start holds
    its weights once); odd sizes and dtypes keep their alignment; writing to a mapped array
    never reaches the file."""
    from onnxjit import cache

    arrays = {"a": np.arange(7, dtype=np.float32), "b": np.ones((3, 5), np.float64),
              "c": np.arange(3, dtype=np.int8), "d": np.zeros((0, 4), np.float32)}
    if big:
        arrays["w"] = np.arange(cache.MAP_MIN_BYTES // 4 + 3, dtype=np.float32)
    disk = cache.DiskCache(tmp_path)
    disk.put("k" * 64, cache.Entry({"x": 1}, {"code": b"\x01\x02\x03"}, arrays))
    got = disk.get("k" * 64)
    assert got is not None and got.meta == {"x": 1} and got.blobs == {"code": b"\x01\x02\x03"}
    for name, arr in arrays.items():
        g = got.arrays[name]
        np.testing.assert_array_equal(g, arr)
        assert g.dtype == arr.dtype and g.flags.writeable
        if g.size:
            assert g.ctypes.data % cache.ALIGN == 0 and g.base is not None
    if big:
        got.arrays["w"][:] = -1  # copy-on-write: the file keeps the weights
        again = disk.get("k" * 64)
        assert again is not None
        np.testing.assert_array_equal(again.arrays["w"], arrays["w"])
    # bytes (read-only) decode to copies, equal all the same
    copy = cache.decode(cache.encode(cache.Entry({}, {}, arrays), "k"), "k")
    assert copy is not None and all(copy.arrays[n].flags.writeable for n in arrays)


def test_model_file_digest_is_memoised_by_file_identity(tmp_path, monkeypatch):
    """A model file's digest is remembered under (device, inode, size, mtime, ctime): the warm
    path skips hashing; any write (even one that restores the old mtime and size) or a
    replacing rename is a new identity; a file changed too recently is not memoised."""
    from onnxjit import model_source
    from onnxjit.cache import DiskCache

    memo = DiskCache(tmp_path / "cache")
    m = mlp((4, 3, 2))
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    hashed = []
    real = model_source.digest.hexdigest
    monkeypatch.setattr(model_source.digest, "hexdigest",
                        lambda data: hashed.append(len(data)) or real(data))

    fresh = model_source.model_hash(p, memo=memo)
    assert fresh == model_source.model_hash(p) and len(hashed) == 2
    assert not (tmp_path / "cache").exists()  # written this instant: racy, not memoised

    old = os.stat(p).st_mtime - 10
    os.utime(p, (old, old))
    monkeypatch.setattr(model_source, "RACY_SECONDS", 0.0)  # ctime is now; accept it
    assert model_source.model_hash(p, memo=memo) == fresh and len(hashed) == 3
    assert model_source.model_hash(p, memo=memo) == fresh and len(hashed) == 3  # memo hit

    other = bytearray(m.SerializeToString())  # same size, other bytes
    other[-5] ^= 1
    p.write_bytes(bytes(other))
    os.utime(p, (old, old))  # the old mtime is back, but ctime moved
    changed = model_source.model_hash(p, memo=memo)
    assert changed[1] != fresh[1] and changed[1] == model_source.model_hash(bytes(other))[1]

    q = tmp_path / "new.onnx"  # a replacing rename: another inode
    q.write_bytes(m.SerializeToString())
    os.utime(q, (old, old))
    os.replace(q, p)
    assert model_source.model_hash(p, memo=memo) == fresh


@pytest.mark.parametrize("cores", [1, 2, 8])
def test_big_data_digest_is_the_same_on_any_number_of_cores(monkeypatch, cores):
    # Big model bytes are hashed as a tree (SHA-256 of each chunk, on a thread per core, then
    # of the chunk digests): the key must not depend on how many threads did the chunks.
    import hashlib

    from onnxjit import digest

    data = np.random.default_rng(0).integers(0, 256, 3 * digest.CHUNK + 5, np.uint8).tobytes()
    chunks = [data[i:i + digest.CHUNK] for i in range(0, len(data), digest.CHUNK)]
    want = "t" + hashlib.sha256(b"".join(hashlib.sha256(c).digest() for c in chunks)
                                ).hexdigest()[1:]
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert digest.hexdigest(data) == want
    assert digest.hexdigest(data[:100]) != digest.hexdigest(data[:101])
