"""A bytecode cache for onnxjit's own modules, for processes in which Python keeps none.

With $PYTHONDONTWRITEBYTECODE set (container images set it) and an editable install (pip
compiles no .pyc for one), every fresh process compiles each onnxjit module it imports from
source: measured on an Intel guest, 35 of the 44 ms of a warm start (a model whose code is in
the disk cache) and 160 of the 270 ms of a one-Add model's cold compile.

`install()` puts a finder at the head of `sys.meta_path` that only handles `onnxjit.*`
modules, and only while `sys.dont_write_bytecode` is set: it asks the other finders for the
module's spec and, when its loader is the standard source loader, swaps in `_Loader`, whose
`get_code` keeps the code object in `FOLDER/<module>.<crc of its folder>.pyc` under the disk
cache's root (`paths.cache_root`: $ONNXJIT_CACHE_DIR, else `~/.cache/onnxjit`), in CPython's
own timestamp-pyc layout: magic number, flags 0, the source's mtime and size (a changed source
does not match and is compiled again, as CPython's own cache decides), then the marshalled
code. A file is written to a temporary name and renamed into place, so concurrent processes
never read half of one; a file that cannot be read, parsed or written is a miss, never an
error. Off with $ONNXJIT_BYTECODE_CACHE=0.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import marshal
import os
import sys
import zlib
from types import CodeType
from typing import Any

from onnxjit.paths import cache_root

#: the subfolder of the cache root holding the code objects, one per Python version
FOLDER = f"bytecode/{sys.implementation.cache_tag}"
_folder: str | None = None


def _header(st: os.stat_result) -> bytes:
    return (importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
            + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
            + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"))


class _Loader(importlib.machinery.SourceFileLoader):
    """The standard source loader, whose compiled code is kept in `_folder`."""

    def get_code(self, fullname: str) -> CodeType:  # type: ignore[override]
        folder = _folder
        source = self.get_filename(fullname)
        try:
            st = os.stat(source)
        except OSError:
            return super().get_code(fullname)  # type: ignore[return-value]
        # the source's folder in the name: two checkouts never share a file (their sources
        # may agree in size and mtime and differ in content)
        tag = zlib.crc32(os.path.dirname(source).encode(errors="surrogateescape"))
        path = os.path.join(folder or "", f"{fullname}.{tag:08x}.pyc")
        head = _header(st)
        try:
            with open(path, "rb") as f:
                data = f.read()
            if data[:16] == head:
                code = marshal.loads(memoryview(data)[16:])
                if isinstance(code, CodeType):
                    return code
        except (OSError, ValueError, EOFError, TypeError):
            pass
        code = super().get_code(fullname)  # compiled from source; Python writes nothing
        if code is not None and folder:
            tmp = f"{path}.{os.getpid()}.tmp"
            try:
                with open(tmp, "wb") as f:
                    f.write(head + marshal.dumps(code))
                os.replace(tmp, path)
            except OSError:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
        return code  # type: ignore[return-value]


class _Finder:
    """Finds `onnxjit.*` modules through the other finders and gives their source loader a
    bytecode cache."""

    @staticmethod
    def find_spec(fullname: str, path: Any = None, target: Any = None) -> Any:
        if not fullname.startswith("onnxjit.") or not sys.dont_write_bytecode:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _Finder) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if type(spec.loader) is importlib.machinery.SourceFileLoader and spec.origin:
                spec.loader = _Loader(fullname, spec.origin)
            return spec
        return None


def install() -> None:
    """Put the finder first in `sys.meta_path` (once), when Python keeps no bytecode and the
    cache folder can be made; otherwise do nothing."""
    global _folder
    if not sys.dont_write_bytecode or os.environ.get("ONNXJIT_BYTECODE_CACHE") == "0" or \
            any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    try:
        folder = os.path.join(cache_root(), FOLDER)
        os.makedirs(folder, exist_ok=True)
    except (OSError, RuntimeError):  # no home folder, or no folder can be made there
        return
    _folder = folder
    sys.meta_path.insert(0, _Finder())
