"""The command line as a user meets it: --version, one line per mistake, no invented inputs,
`info --timings`, and Ctrl-C (SIGINT to a compiling `onnxjit run`: one line, exit 130, no
partial cache file)."""

import logging
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import onnxjit
from onnxjit import cache as cache_mod
from onnxjit.cli import main

FIXED = """<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] x, float[3] b) => (float[2,3] y) <float[3] b = {1.0, 2.0, 3.0}> { y = Add(x, b) }
"""
SYMBOLIC = """<ir_version: 8, opset_import: ["" : 17]>
g (float[N,3] x) => (float[N,3] y) { y = Relu(x) }
"""


@pytest.fixture
def files(tmp_path):
    (tmp_path / "fixed.onnxtxt").write_text(FIXED)
    (tmp_path / "sym.onnxtxt").write_text(SYMBOLIC)
    (tmp_path / "bad.onnx").write_bytes(b"\x08\x07garbage\xff\xff")
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    return tmp_path


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"onnxjit {onnxjit.__version__}"


MISTAKES = [
    (["run", "{d}/fixed.onnxtxt"], "missing input(s) ['x']"),
    (["run", "{d}/fixed.onnxtxt", "--shape", "x=2x3"], "--shape sizes the random values"),
    (["run", "{d}/fixed.onnxtxt", "--random", "--shape", "x=4,16"], "--shape takes name=AxBxC"),
    (["run", "{d}/fixed.onnxtxt", "--random", "--shape", "z=2x3"], "'z', which is not an input"),
    (["run", "{d}/fixed.onnxtxt", "-i", "x={d}/missing.npy"], "cannot read the file"),
    (["run", "{d}/fixed.onnxtxt", "-i", "x={d}/bad.onnx"], "not a .npy or .npz"),
    (["run", "{d}/fixed.onnxtxt", "-i", "w={d}/x.npy"], "'w', which is not an input"),
    (["run", "{d}/fixed.onnxtxt", "-i", "{d}/x.npy"], "-i takes name=file.npy"),
    (["run", "{d}/sym.onnxtxt", "--random"], "give --shape x=AxB"),
    (["run", "{d}/nope.onnx", "--random"], "does not exist"),
    (["run", "{d}/bad.onnx", "--random"], "not a valid ONNX model"),
    (["info", "{d}/bad.onnx"], "not a valid ONNX model"),
    (["info", "{d}"], "is a folder"),
    (["info", "{d}/sym.onnxtxt", "--timings"], "give --shape x=AxB"),
    (["info", "{d}/sym.onnxtxt", "--shape", "x=2x3"], "add --timings"),
    (["dump", "{d}/nope.onnx", "{d}/dump"], "does not exist"),
    (["compile", "{d}/bad.onnx"], "not a valid ONNX model"),
    (["convert", "{d}/nope.onnx", "{d}/out.onnxtxt"], "does not exist"),
    (["run", "{d}/fixed.onnxtxt", "-i", "x={d}/x.npy", "-o", "{d}/no/dir/out.npz"],
     "No such file or directory"),
    (["bench", "-k", "add4", "--baseline", "{d}/none.json"], "cannot read the baseline"),
    (["bench", "-k", "add4", "--baseline", "{d}/x.npy"], "is not a bench JSON report"),
]


@pytest.mark.parametrize("argv,expected", MISTAKES, ids=[" ".join(a[:3]) for a, _ in MISTAKES])
def test_a_mistake_is_one_line_and_exit_2(files, capsys, argv, expected):
    assert main([a.format(d=files) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("onnxjit: error: ") and err.count("\n") == 1, err
    assert expected in err


def test_run_takes_given_or_asked_for_random_values_and_defaults(files, capsys):
    out = files / "out.npz"
    assert main(["run", f"{files}/fixed.onnxtxt", "-i", f"x={files}/x.npy", "-o", str(out),
                 "--cache-dir", str(files / "cache")]) == 0
    with np.load(out) as z:  # b is the model's default: not required, not invented
        np.testing.assert_array_equal(z["y"], np.ones((2, 3)) + [1, 2, 3])
    warm = onnxjit.compile(files / "fixed.onnxtxt", cache_dir=files / "cache")
    assert warm.required_inputs == ["x"] and warm._model is None  # a warm run imports nothing
    assert main(["run", f"{files}/sym.onnxtxt", "--random", "--shape", "x=4x3",
                 "--cache-dir", str(files / "cache")]) == 0
    assert "y: float32[4, 3]" in capsys.readouterr().out


def test_info_timings_and_verbose_log(files, capsys, monkeypatch):
    log = logging.getLogger("onnxjit")
    monkeypatch.setattr(log, "handlers", [])
    monkeypatch.setattr(log, "level", log.level)
    assert main(["-v", "info", f"{files}/sym.onnxtxt", "--timings", "--shape", "x=5x3"]) == 0
    captured = capsys.readouterr()
    for stage in ("x: f32[5,3]:", "pass lower-to-loops", "llvm-optimize", "emit-object",
                  "link", "compile total:"):
        assert stage in captured.out, stage
    assert "onnxjit: compiled" in captured.err  # -v: the logger's info lines


CHILD = """
import signal, sys, time
import onnxjit.codegen.jit as jit

# A terminal's Ctrl-C: the test runner may have been started with SIGINT ignored (a background
# job of a non-interactive shell), which its children inherit.
signal.signal(signal.SIGINT, signal.default_int_handler)

def slow_optimize(*args):  # stands for a long LLVM call, at a known moment
    print("READY", file=sys.stderr, flush=True)
    time.sleep(60)

jit.optimize = slow_optimize
from onnxjit.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_mid_compile_prints_one_line_exits_130_and_leaves_no_partial_file(files):
    cache = files / "cache"
    env = dict(os.environ, ONNXJIT_PROGRESS="1")  # the display is on, and must be erased
    p = subprocess.Popen([sys.executable, "-c", CHILD, "run", f"{files}/fixed.onnxtxt", "-i",
                          f"x={files}/x.npy", "--cache-dir", str(cache)],
                         stderr=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:  # bytes: text mode would turn the display's carriage returns into newlines
        assert p.stderr.readline().strip().endswith(b"READY")
        p.send_signal(signal.SIGINT)
        err = p.communicate(timeout=30)[1].decode()
    finally:
        p.kill()
    assert p.returncode == 130
    # what the terminal shows: the progress line (if painted) erased, then one line
    assert "Traceback" not in err and err.split("\r\x1b[K")[-1] == "onnxjit: interrupted\n"
    names = sorted(f.name for f in cache.iterdir())
    assert not [n for n in names if not n.endswith(".ojc")], names  # no temp file
    for n in names:  # only whole entries (the model's metadata), none of the compile
        entry = cache_mod.decode((cache / n).read_bytes(), n[:-4])
        assert entry is not None and "inputs" in entry.meta
