"""The disk cache's size cap: least-recently-used pruning on write (without a scan per write),
hits marking entries used, entries vanishing under readers (a miss, never an error), the
option and environment variable, and `onnxjit cache info | clear | prune`."""

import os
import threading
import time

import numpy as np
import pytest
from models import mlp

import onnxjit
from onnxjit import cache as cache_mod
from onnxjit import cache_prune
from onnxjit.cli import main as cli
from onnxjit.options import CompileOptions

KB = 1024


def _entry(nbytes):
    return cache_mod.Entry({"n": nbytes}, arrays={"a": np.zeros(nbytes, np.uint8)})


def _fill(folder, names, nbytes=10 * KB, start=1_000_000.0):
    """Entries written, then dated one second apart in order: names[0] used least recently."""
    disk = cache_mod.DiskCache(folder)
    for i, name in enumerate(names):
        disk.put(name, _entry(nbytes))
        os.utime(folder / f"{name}.ojc", (start + i, start + i))
    return disk


def _names(folder):
    return sorted(p.stem for p in folder.glob("*.ojc"))


def test_prune_removes_the_least_recently_used(tmp_path):
    disk = _fill(tmp_path, ["a", "b", "c", "d"])
    size = (tmp_path / "a.ojc").stat().st_size
    assert disk.get("a") is not None  # a hit: "a" is now the most recently used
    r = cache_prune.prune(tmp_path, 2 * size)
    assert _names(tmp_path) == ["a", "d"]
    assert r == {"removed": 2, "removed_bytes": 2 * size, "entries": 2, "bytes": 2 * size}


def test_prune_removes_stale_temp_files(tmp_path):
    _fill(tmp_path, ["a"])
    old, new = tmp_path / ".old-1.tmp", tmp_path / ".new-2.tmp"
    old.write_bytes(b"x")
    new.write_bytes(b"x")  # a writer may still be writing it
    os.utime(old, (1, 1))
    cache_prune.prune(tmp_path, 1 << 30)
    assert not old.exists() and new.exists() and _names(tmp_path) == ["a"]


def test_writes_past_the_cap_prune_without_scanning_every_write(tmp_path, monkeypatch):
    scans = []
    real_scan = cache_prune.scan
    monkeypatch.setattr(cache_prune, "scan", lambda f: scans.append(f) or real_scan(f))
    cap = 40 * KB
    disk = cache_mod.DiskCache(tmp_path, max_bytes=cap)
    for i in range(80):
        disk.put(f"k{i:03d}", _entry(KB))
        total = sum(p.stat().st_size for p in tmp_path.glob("*.ojc"))
        assert total <= cap
    # a scan per tenth of the cap written, and one per prune: ~1.2 KB entries, a scan per ~4
    assert 0 < len(scans) < 80 // 2
    names = _names(tmp_path)
    assert "k079" in names and "k000" not in names  # the newest kept, the oldest gone
    assert len(names) >= int(cap * cache_prune.PRUNE_TO) // (2 * KB)


def test_an_entry_over_the_cap_is_kept_when_written(tmp_path):
    disk = cache_mod.DiskCache(tmp_path, max_bytes=50 * KB)
    disk.put("small", _entry(KB))
    disk.put("big", _entry(100 * KB))
    assert _names(tmp_path) == ["big"] and disk.get("big") is not None


def test_entries_vanishing_under_readers_are_misses(tmp_path):
    names = [f"k{i}" for i in range(20)]
    disk = _fill(tmp_path, names, nbytes=2 * KB)
    errors_before = cache_mod.STATS.disk_errors
    stop, failures, seen = threading.Event(), [], set()

    def read():
        try:
            while not stop.is_set():
                for n in names:
                    e = disk.get(n)
                    seen.add(e is None)
                    assert e is None or e.meta == {"n": 2 * KB}
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:  # another process pruning and writing, simulated
        cache_prune.prune(tmp_path, 0)
        for n in names[::3]:
            disk.put(n, _entry(2 * KB))
    stop.set()
    for t in readers:
        t.join()
    assert not failures
    assert seen == {True, False}
    assert cache_mod.STATS.disk_errors == errors_before


def test_cap_from_option_environment_and_default(monkeypatch):
    monkeypatch.delenv("ONNXJIT_CACHE_MAX_SIZE", raising=False)
    assert CompileOptions.from_user({}).cache_max_bytes == 5 << 30
    assert CompileOptions.from_user({"cache_max_bytes": "1.5M"}).cache_max_bytes == 1536 * KB
    assert CompileOptions.from_user({"cache_max_bytes": 0}).cache_max_bytes is None
    monkeypatch.setenv("ONNXJIT_CACHE_MAX_SIZE", "500M")
    assert CompileOptions.from_user({}).cache_max_bytes == 500 << 20
    assert CompileOptions.from_user({"cache_max_bytes": 1000}).cache_max_bytes == 1000
    monkeypatch.setenv("ONNXJIT_CACHE_MAX_SIZE", "lots")
    with pytest.raises(onnxjit.OnnxJitError, match=r"\$ONNXJIT_CACHE_MAX_SIZE .*'lots'"):
        CompileOptions.from_user({})
    with pytest.raises(onnxjit.OnnxJitError, match="cache_max_bytes must be"):
        CompileOptions.from_user({"cache_max_bytes": -1})


def test_compiling_under_a_small_cap(tmp_path):
    x = np.ones((2, 16), np.float32)

    def compile_into_cache(seed, cap):  # a model's metadata and its code: two entries
        onnxjit.compile(mlp((16, 32, 8), seed=seed), cache_dir=tmp_path, cache_max_bytes=cap,
                        specialize="shape")(x)

    compile_into_cache(0, 0)
    first = _names(tmp_path)
    one_model = sum(p.stat().st_size for p in tmp_path.glob("*.ojc"))
    cap = int(one_model * 1.5)  # room for one model's entries, not two
    compile_into_cache(1, cap)
    assert sum(p.stat().st_size for p in tmp_path.glob("*.ojc")) <= cap
    assert len(first) == 2 and set(first).isdisjoint(_names(tmp_path))
    assert len(_names(tmp_path)) == 2  # the older model's entries made room


def test_cli_info_prune_clear(tmp_path, capsys):
    _fill(tmp_path, ["a", "b", "c"])
    size = (tmp_path / "a.ojc").stat().st_size
    assert cli(["cache", "info", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"cache folder: {tmp_path}" in out and "entries: 3," in out
    assert "least recently used" in out
    assert cli(["cache", "prune", "--max-size", str(2 * size), "--cache-dir",
                str(tmp_path)]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert _names(tmp_path) == ["b", "c"]
    assert cli(["cache", "clear", "--cache-dir", str(tmp_path)]) == 0
    assert "removed 2 entries" in capsys.readouterr().out and _names(tmp_path) == []


def test_cli_bad_size_is_one_line(tmp_path, capsys):
    assert cli(["cache", "prune", "--max-size", "2X", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--max-size must be" in err and "'2X'" in err
