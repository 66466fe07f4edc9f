"""The disk cache under attack and accident (issue 7): damaged or foreign entries are rebuilt,
unusable folders degrade to memory with one warning, processes share a folder, writes are
atomic and owner-only, entries of another user are never loaded, and every input of the code
(model, options, compiler, llvmlite, CPU) is part of the key.

Unit tests drive `onnxjit.cache.DiskCache` directly (fast); the process-level ones run small
models in child processes, as a user would.
"""

from __future__ import annotations

import json
import marshal
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
from models import one_node

import onnxjit
from onnxjit import cache as cache_mod
from onnxjit import hostinfo, version

KEY = "ab" * 32


def _entry():
    return cache_mod.Entry({"k": 1}, {"code": b"\x90" * 100}, {"w": np.arange(6.0).reshape(2, 3)})


def _disk(tmp_path):
    d = cache_mod.DiskCache(tmp_path / "c")
    d.put(KEY, _entry())
    return d, tmp_path / "c" / f"{KEY}.ojc"


def test_round_trip_and_owner_only_permissions(tmp_path):
    d, path = _disk(tmp_path)
    e = d.get(KEY)
    assert e.meta == {"k": 1} and e.blobs["code"] == b"\x90" * 100
    np.testing.assert_array_equal(e.arrays["w"], np.arange(6.0).reshape(2, 3))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp files left


def _reheadered(data: bytes, edit) -> bytes:
    """The entry with its header replaced by `edit(header bytes)` and the header checksum
    recomputed: damage the checksum cannot catch, which the section checks must."""
    magic, fmt, hlen, _ = cache_mod._PREFIX.unpack_from(data, 0)
    start = cache_mod._PREFIX.size
    header = edit(data[start:start + hlen])
    header += b" " * (-(start + len(header)) % cache_mod.ALIGN)
    return (cache_mod._PREFIX.pack(magic, fmt, len(header), zlib.crc32(header)) + header
            + data[start + hlen:])


def _huge_shape(header: bytes) -> bytes:
    h = marshal.loads(header)
    h["sections"][-1]["shape"] = [9999999999999, 3]
    return marshal.dumps(h)


@pytest.mark.parametrize("damage", ["flip-payload", "flip-header", "truncate", "empty", "elf",
                                    "huge-shape", "bad-header", "header-not-a-dict"])
def test_damaged_entry_is_a_miss(tmp_path, damage):
    d, path = _disk(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "flip-payload":
        data[-3] ^= 0xFF
    elif damage == "flip-header":
        data[30] ^= 0x01
    elif damage == "truncate":
        data = data[: len(data) - 10]
    elif damage == "empty":
        data = bytearray()
    elif damage == "elf":
        data = bytearray(b"\x7fELF" + bytes(500))
    elif damage == "huge-shape":
        data = bytearray(_reheadered(bytes(data), _huge_shape))
    elif damage == "bad-header":
        data = bytearray(_reheadered(bytes(data), lambda h: b"\xff" + h[1:]))
    else:
        data = bytearray(_reheadered(bytes(data), lambda h: marshal.dumps([1, 2])))
    path.write_bytes(bytes(data))
    before = cache_mod.STATS.disk_errors
    assert d.get(KEY) is None
    assert cache_mod.STATS.disk_errors == before + 1
    d.put(KEY, _entry())  # rebuilt
    assert d.get(KEY) is not None


def test_foreign_entry_under_another_key_is_a_miss(tmp_path):
    d, path = _disk(tmp_path)
    other = "cd" * 32
    path.rename(path.with_name(f"{other}.ojc"))  # a valid entry, but not for this key
    assert d.get(other) is None


def test_entry_of_another_user_is_not_loaded(tmp_path, monkeypatch):
    d, path = _disk(tmp_path)
    if os.getuid() == 0:
        os.chown(path, 65534, 65534)  # really another user
    else:
        real = os.fstat

        def fake(fd):
            st = list(real(fd))
            st[stat.ST_UID] = os.getuid() + 1
            return os.stat_result(st)

        monkeypatch.setattr(cache_mod.os, "fstat", fake)
    assert d.get(KEY) is None


def test_group_writable_entry_and_symlink_are_not_loaded(tmp_path):
    d, path = _disk(tmp_path)
    path.chmod(0o620)
    assert d.get(KEY) is None
    path.chmod(0o600)
    target = tmp_path / "elsewhere.ojc"
    path.rename(target)
    path.symlink_to(target)
    assert d.get(KEY) is None


def test_write_is_atomic(tmp_path, monkeypatch):
    d, path = _disk(tmp_path)
    good = path.read_bytes()

    def crash(*a):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache_mod.os, "replace", crash)
    with pytest.warns(RuntimeWarning, match="in-memory cache only"):
        d.put(KEY, cache_mod.Entry({"k": 2}))
    assert path.read_bytes() == good  # the old entry is untouched
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # the temp file is gone


def test_unusable_folder_warns_once_and_compiles_in_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a file where a folder should be: unusable even for root
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(3):
            fn = onnxjit.compile(one_node("Relu", [("x", 1, [k + 2])], [("y", 1, [k + 2])]),
                                 cache_dir=blocker / "sub")
            (y,) = fn(np.full(k + 2, -1.0, np.float32))
            assert (y == 0).all()
    msgs = [w for w in caught if "in-memory cache only" in str(w.message)]
    assert len(msgs) == 1, [str(w.message) for w in caught]


def test_missing_folder_is_created_owner_only(tmp_path):
    folder = tmp_path / "a" / "b"
    fn = onnxjit.compile(one_node("Neg", [("x", 1, [2])], [("y", 1, [2])]), cache_dir=folder)
    fn(np.ones(2, np.float32))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in folder.iterdir())


CHILD = textwrap.dedent("""
    import json, os, sys, warnings
    sys.path.insert(0, sys.argv[1])
    import numpy as np, onnxjit
    from models import chain
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn = onnxjit.compile(chain(64), cache_dir=sys.argv[2])
        y, = fn(np.linspace(-1, 1, 64, dtype=np.float32))
    print(json.dumps({"info": fn.cache_info(), "sum": float(y.sum()),
                      "warnings": [str(x.message) for x in w], "tag": sys.argv[3]}))
""")


def _child(folder, tag=""):
    return subprocess.Popen([sys.executable, "-c", CHILD, str(Path(__file__).parent), str(folder),
                             tag], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _result(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def test_two_processes_compile_into_one_folder(tmp_path):
    procs = [_child(tmp_path, str(k)) for k in range(2)]
    results = [_result(p) for p in procs]
    assert results[0]["sum"] == results[1]["sum"]
    assert not any(r["warnings"] for r in results)
    warm = _result(_child(tmp_path))
    assert warm["info"]["disk_hits"] >= 1 and warm["info"]["misses"] == 0, warm
    assert warm["sum"] == results[0]["sum"]
    assert not [p for p in tmp_path.iterdir() if p.suffix != ".ojc"]  # no temp files left


def test_read_only_folder_warns_once_and_still_reads(tmp_path, monkeypatch):
    d, path = _disk(tmp_path)
    path.parent.chmod(0o500)
    if os.getuid() == 0:  # root ignores the mode bits: make the write fail as they would
        def denied(*a, **k):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(tempfile, "mkstemp", denied)
    try:
        assert d.get(KEY) is not None  # existing entries are still used
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for k in range(3):
                d.put(f"{k}" * 64, _entry())
        assert sum("in-memory cache only" in str(w.message) for w in caught) == 1
        assert not d.usable
    finally:
        path.parent.chmod(0o700)


def _key(fn, sig):
    return fn._artifact_key(sig)


def test_every_input_of_the_code_is_in_the_key(monkeypatch):
    from onnxjit.ir.types import DType

    f32 = DType.from_short("f32")
    sig = ((f32, (2,)),)
    base = onnxjit.compile(one_node("Relu", [("x", 1, [2])], [("y", 1, [2])]), cache_dir=False)
    keys = {"base": _key(base, sig)}
    other_model = onnxjit.compile(one_node("Neg", [("x", 1, [2])], [("y", 1, [2])]),
                                  cache_dir=False)
    keys["model"] = _key(other_model, sig)
    keys["option"] = _key(onnxjit.compile(
        one_node("Relu", [("x", 1, [2])], [("y", 1, [2])]), cache_dir=False, opt_level=1), sig)
    keys["signature"] = _key(base, ((f32, (3,)),))
    for what, fake in [("version", None), ("compiler", "compiler_id"), ("host", "host_id")]:
        with monkeypatch.context() as mp:
            if fake is None:
                mp.setattr(version, "__version__", version.__version__ + ".post1")
            else:
                mp.setattr(hostinfo, fake, lambda: "something-else")
            keys[what] = _key(base, sig)
    assert len(set(keys.values())) == len(keys), keys


def test_host_id_covers_cpu_and_llvmlite(monkeypatch):
    hostinfo.host_id.cache_clear()
    a = hostinfo.host_id()
    try:
        with monkeypatch.context() as mp:
            mp.setattr(hostinfo, "_cpu", lambda: "another cpu with other flags")
            hostinfo.host_id.cache_clear()
            b = hostinfo.host_id()
        with monkeypatch.context() as mp:
            mp.setattr(hostinfo, "_llvmlite_build", lambda: "llvmlite 9.9 elsewhere")
            hostinfo.host_id.cache_clear()
            c = hostinfo.host_id()
    finally:
        hostinfo.host_id.cache_clear()
    assert len({a, b, c}) == 3


def test_compiler_id_covers_the_op_families(monkeypatch):
    """A changed op rule (folding or lowering, under ir/ops/<family>/) changes the compiler id,
    so the disk cache cannot serve code built by the old rule."""
    real_stat = os.stat
    before = hostinfo.compiler_id.__wrapped__()

    def touched(path, *args, **kwargs):
        st = real_stat(path, *args, **kwargs)
        if str(path).replace(os.sep, "/").endswith("ir/ops/tensor/slice.py"):
            return os.stat_result(tuple(st), {"st_mtime_ns": st.st_mtime_ns + 1})
        return st

    monkeypatch.setattr(hostinfo.os, "stat", touched)
    assert hostinfo.compiler_id.__wrapped__() != before


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000, 4099, 40961])
def test_sum64_is_the_wrapping_sum_of_padded_words(n, monkeypatch):
    monkeypatch.setattr(cache_mod, "SPLIT_SUM_BYTES", 4096)  # the two-thread sum from 4 KB
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    padded = data + b"\0" * (-n % 8)
    words = [int.from_bytes(padded[i:i + 8], "little") for i in range(0, len(padded), 8)]
    assert cache_mod.sum64(data) == sum(words) % (1 << 64)


def test_odd_sized_sections_round_trip():
    e = cache_mod.Entry({"m": 1}, {"a": b"\x01" * 13, "b": b"\xff" * 3},
                        {"w": np.arange(5, dtype=np.int8)})
    back = cache_mod.decode(cache_mod.encode(e, "k"), "k")
    assert back.blobs == e.blobs and back.arrays["w"].tolist() == [0, 1, 2, 3, 4]
