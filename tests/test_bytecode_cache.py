"""onnxjit's own bytecode cache (`onnxjit.bytecode`), in fresh processes: used only when Python
keeps no bytecode, read back when its header matches the source, compiled again when not."""

from __future__ import annotations

import importlib.util
import marshal
import os
import subprocess
import sys
from pathlib import Path

import onnxjit
from onnxjit import bytecode

_PROBE = "import onnxjit, onnxjit.version as v; print(v.__version__)"


def _run(cache: Path, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    full.update(ONNXJIT_CACHE_DIR=str(cache), **env)
    out = subprocess.run([sys.executable, "-c", _PROBE], env=full, capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout.strip()


def test_code_is_kept_and_read_back_when_python_writes_none(tmp_path: Path) -> None:
    assert _run(tmp_path, PYTHONDONTWRITEBYTECODE="1") == onnxjit.__version__
    kept, = (tmp_path / bytecode.FOLDER).glob("onnxjit.version.*.pyc")  # one, of this tree
    data = kept.read_bytes()
    assert data[:4] == importlib.util.MAGIC_NUMBER
    # a file whose header matches the source is what the next process runs: swap its code
    fake = compile("__version__ = 'from the cache'", str(kept), "exec")
    kept.write_bytes(data[:16] + marshal.dumps(fake))
    assert _run(tmp_path, PYTHONDONTWRITEBYTECODE="1") == "from the cache"
    # a header that does not match (another source mtime) is compiled again and rewritten
    stale = bytearray(kept.read_bytes())
    stale[8:12] = (int.from_bytes(stale[8:12], "little") ^ 1).to_bytes(4, "little")
    kept.write_bytes(bytes(stale))
    assert _run(tmp_path, PYTHONDONTWRITEBYTECODE="1") == onnxjit.__version__
    assert kept.read_bytes() == data
    # garbage after a matching header is a miss, not an error
    kept.write_bytes(data[:16] + b"not marshal data")
    assert _run(tmp_path, PYTHONDONTWRITEBYTECODE="1") == onnxjit.__version__


def test_off_when_python_keeps_bytecode_or_when_asked(tmp_path: Path) -> None:
    for env in ({}, {"PYTHONDONTWRITEBYTECODE": "1", "ONNXJIT_BYTECODE_CACHE": "0"}):
        assert _run(tmp_path, PYTHONPYCACHEPREFIX=str(tmp_path / "pyc"), **env) == \
            onnxjit.__version__
        assert not (tmp_path / "bytecode").exists()
