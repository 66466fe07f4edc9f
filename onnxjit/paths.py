"""Where onnxjit keeps its files: the disk cache's root folder.

`cache_root()`: $ONNXJIT_CACHE_DIR when set and not empty, else `$XDG_CACHE_HOME/onnxjit`, else
`~/.cache/onnxjit`. The compile options (`options.CompileOptions`: compiled programs) and the
bytecode cache of onnxjit's own modules (`bytecode`, installed when the package is imported,
before anything else of it) share it. Only `os` and `pathlib`: it is imported first.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> str:
    """The disk cache's root folder (see the module docstring); RuntimeError when the home
    folder is needed and unknown."""
    env = os.environ.get("ONNXJIT_CACHE_DIR")
    if env:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME")
    return str((Path(xdg) if xdg else Path.home() / ".cache") / "onnxjit")
