"""Compile timings (`fn.timings()`), progress reports, the `onnxjit` logger, and interrupts.

An interrupt is simulated in-process by a progress callback raising KeyboardInterrupt as a
stage begins (the CLI's SIGINT test is in test_cli.py): the compile stops, the disk cache holds
no entry of that signature and no temp file, and the next call compiles normally.
"""

import io
import logging
import os
import time
import types

import numpy as np
import pytest

import onnxjit
from onnxjit import cache as cache_mod
from onnxjit import runtime
from onnxjit import timings as timings_mod
from onnxjit.options import CompileOptions
from onnxjit.progress import Display, resolve
from onnxjit.timings import Recorder, current, grouped, recording, timed

TEXT = """<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] x) => (float[2,3] y) { t = Relu(x) y = Mul(t, x) }
"""
X = np.arange(6, dtype=np.float32).reshape(2, 3)


def _entries(folder):
    return sorted(p.name for p in folder.iterdir())


def test_timings_name_every_stage_and_a_warm_start_shows_its_load(tmp_path):
    fn = onnxjit.compile(TEXT, cache_dir=tmp_path)
    fn(X)
    t = fn.timings()
    assert "import" in t["model"] and "pass infer-shapes" in t["model"]
    stages = t["x: f32[2,3]"]
    for s in ("pass lower-to-loops", "verify", "llvm-ir", "llvm-parse", "llvm-optimize",
              "emit-object", "link", "cache-write"):
        assert stages[s] >= 0, s
    assert set(grouped(stages)) >= {"passes", "lowering", "llvm-optimize"}
    runtime._MEMORY.clear()  # a fresh process's view: memory empty, disk filled
    warm = onnxjit.compile(TEXT, cache_dir=tmp_path)
    warm(X)
    assert warm.timings() == {"x: f32[2,3]": {"load": warm.timings()["x: f32[2,3]"]["load"]}}


def test_timed_records_nothing_outside_a_compile_and_nested_stages_once(monkeypatch):
    with timed("stage"):
        pass
    assert current() is None
    ticks = iter(range(100))  # a clock advancing one second a reading
    clock = types.SimpleNamespace(perf_counter=lambda: next(ticks))
    monkeypatch.setattr(timings_mod, "time", clock)
    rec = Recorder()
    with recording(rec):
        with timed("a"):  # 0..3, "b" inside it 1..2
            with timed("b"):
                pass
        with timed("a"):  # 4..5
            pass
    assert rec.stages == [("b", 1), ("a", 2), ("a", 1)] and rec.summary() == {"b": 1, "a": 3}
    assert current() is None


def test_progress_callback_counts_stages_up_to_done():
    calls = []
    text = TEXT.replace("Mul", "Sub")  # a model no other test compiles (memory cache)
    fn = onnxjit.compile(text, cache_dir=False, progress=lambda *a: calls.append(a))
    fn(X)
    fn(X * 2)  # the same signature: nothing to report
    # two reports: the model's import (at `compile`), then the signature's compile
    ends = [k for k, c in enumerate(calls) if c[0] == "done"]
    assert len(ends) == 2 and ends[-1] == len(calls) - 1
    imported, compiled = calls[:ends[0] + 1], calls[ends[0] + 1:]
    assert imported[0][0] == "import" and "pass lower-to-loops" in [c[0] for c in compiled]
    for report in (imported, compiled):
        done = [c[1] for c in report]
        assert done == list(range(len(report) - 1)) + [len(report) - 1]
        assert all(d < total for _, d, total in report[:-1]) and report[-1][2] == done[-1]


def test_progress_option_and_its_environment_variable(monkeypatch):
    monkeypatch.delenv("ONNXJIT_PROGRESS", raising=False)
    assert CompileOptions.from_user({}).progress == "auto"
    monkeypatch.setenv("ONNXJIT_PROGRESS", "0")
    assert CompileOptions.from_user({}).progress is False
    assert CompileOptions.from_user({"progress": True}).progress is True
    monkeypatch.setenv("ONNXJIT_PROGRESS", "1")
    assert CompileOptions.from_user({}).progress is True
    with pytest.raises(onnxjit.OnnxJitError, match="progress must be"):
        CompileOptions.from_user({"progress": "loud"})
    assert resolve("auto", io.StringIO()) is None  # not a terminal: quiet
    assert resolve(False) is None


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_terminal_display_paints_one_line_and_erases_it():
    out = _Terminal()
    display = resolve("auto", out)
    assert isinstance(display, Display)
    display.delay = 0.0
    display("llvm-optimize", 3, 7)
    deadline = time.monotonic() + 10
    while "compiling" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    display("done", 7, 7)
    text = out.getvalue()
    assert "onnxjit: compiling [3/7] llvm-optimize" in text and "\n" not in text
    assert text.endswith("\r\x1b[K")  # the line is erased, the terminal left clean
    display.thread.join(5)
    assert not display.thread.is_alive()


def test_logger_reports_compiles_and_cache_events(caplog):
    caplog.set_level(logging.DEBUG, logger="onnxjit")
    text = TEXT.replace("Mul", "Add")  # a model no other test compiles
    onnxjit.compile(text, cache_dir=False)(X)
    assert "miss: <model text> for x: f32[2,3]" in caplog.text
    assert "compiling <model text> for x: f32[2,3]" in caplog.text
    assert "compiled <model text> for x: f32[2,3] in" in caplog.text
    caplog.clear()
    onnxjit.compile(text, cache_dir=False)(X)
    assert "memory hit: <model text> for x: f32[2,3]" in caplog.text
    assert "compiling" not in caplog.text


def test_interrupted_compile_leaves_no_cache_entry_and_recovers(tmp_path):
    def stop(stage, done, total):
        if stage == "llvm-optimize":
            raise KeyboardInterrupt

    text = TEXT.replace("Relu", "Sigmoid")
    fn = onnxjit.compile(text, cache_dir=tmp_path, progress=stop)
    before = _entries(tmp_path)  # the model's metadata only
    with pytest.raises(KeyboardInterrupt):
        fn(X)
    assert _entries(tmp_path) == before and current() is None
    again = onnxjit.compile(text, cache_dir=tmp_path, progress=False)
    np.testing.assert_allclose(again(X)[0], X / (1 + np.exp(-X)), rtol=1e-6)
    assert len(_entries(tmp_path)) == len(before) + 1


def test_interrupt_while_writing_an_entry_leaves_no_file(tmp_path, monkeypatch):
    disk = cache_mod.DiskCache(tmp_path)
    entry = cache_mod.Entry({"a": 1}, arrays={"w": np.ones(1000, np.float32)})

    def interrupted(path, mode):  # after the data, before the rename
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "chmod", interrupted)
    with pytest.raises(KeyboardInterrupt):
        disk.put("k" * 40, entry)
    assert _entries(tmp_path) == []
