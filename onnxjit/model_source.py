"""Reading a model's bytes and hashing them for the cache, without the protobuf importer.

A model is a path (`.onnx`; `.onnxtxt` is the textual syntax), bytes, a ModelProto, or a str
holding model text; text is parsed (`onnxjit.onnxtext`) and serialized, so everything after
this module sees bytes.

A warm start (artifacts in the disk cache) needs only the model's bytes and a digest of them:
this module does that much without importing protobuf, the graph IR or the passes. Only a
model whose bytes may reference external data (they contain `location`) is parsed, to hash
the external files' identities in as well.

The folder for external data of a model given by path is the folder of the path AS GIVEN
(`model_folder`), not of its symlink target: in a HuggingFace snapshot `snap/model.onnx` links
to `../../blobs/<hash>`, and the data file `snap/model.onnx_data` is a link too, so only the
folder as given holds both names. Rule (enforced by `onnxjit.external_data`):
1) the location must be relative and stay inside that folder lexically (no absolute path, no
   `..`); 2) the real path of the file it names (symlinks resolved) must lie inside
   realpath(folder as given) OR inside the folder of realpath(model file) (`ModelFolder.
   real_dir`): `snap/model.onnx -> blobs/X` with `snap/model.onnx_data -> blobs/Y` is allowed,
   a link to /etc/passwd is refused; 3) the file is then opened without following symlinks
   (O_NOFOLLOW, component by component). A hard link inside either folder to a file elsewhere
   cannot be told from a plain file by its path; data files with more than one link are
   therefore refused outright (see `onnxjit.external_data`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from onnxjit import digest
from onnxjit.errors import ModelError

#: see `model_hash`
RACY_SECONDS = 2.0


def read_model_bytes(src: Any, base_dir: str | os.PathLike | None = None
                     ) -> tuple[bytes, Path | None]:
    """(serialized model, folder for its external data) of a path, bytes, ModelProto or text."""
    data, folder, _ = _read(src, base_dir)
    return data, folder


def _read(src: Any, base_dir: str | os.PathLike | None
          ) -> tuple[bytes, Path | None, os.stat_result | None]:
    """`read_model_bytes` plus the stat of a binary model file that did not change while it
    was read (else None)."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(src), _as_path(base_dir), None
    if isinstance(src, str) and is_model_text(src) and not os.path.exists(src):
        return _text_to_bytes(src), _as_path(base_dir), None
    if isinstance(src, (str, os.PathLike)):
        path = Path(src)
        try:
            with open(path, "rb") as f:
                before = os.fstat(f.fileno())
                data = f.read()
                after = os.fstat(f.fileno())
        except FileNotFoundError:
            raise ModelError(f"model file '{path}' does not exist") from None
        except IsADirectoryError:
            raise ModelError(f"model path '{path}' is a folder, not a file") from None
        except OSError as e:
            raise ModelError(f"cannot read model file '{path}': {e.strerror}") from None
        if not data:
            raise ModelError(f"model file '{path}' is empty")
        folder = _as_path(base_dir) if base_dir is not None else model_folder(path)
        if path.suffix == ".onnxtxt":
            return _text_to_bytes(data, f"model file '{path}': "), folder, None
        return data, folder, (before if _identity(before) == _identity(after) else None)
    serialize = getattr(src, "SerializeToString", None)
    if callable(serialize):
        return serialize(), _as_path(base_dir), None
    raise ModelError(f"cannot load a model from a {type(src).__name__}: expected a path, bytes, "
                     "a ModelProto (an object with SerializeToString) or ONNX model text")


class ModelFolder(type(Path())):  # type: ignore[misc]
    """The folder of a model file as given, remembering `real_dir`, the folder of the model
    file's real path: external data may resolve into either (see the module docstring)."""

    real_dir: str | None = None


def model_folder(path: str | os.PathLike) -> Path:
    """The folder for a model file's external data: its folder as given (absolute, symlinks
    not resolved), with the folder of its real path as `real_dir`."""
    # absolute() keeps `..` (abspath would drop it lexically, which a symlinked folder
    # before it makes wrong); realpath of this folder is then what the OS would open.
    folder = ModelFolder(Path(path).absolute().parent)
    folder.real_dir = os.path.dirname(os.path.realpath(path))
    return folder


def _as_path(base_dir: str | os.PathLike | None) -> Path | None:
    """A caller's base_dir as a Path (a ModelFolder is kept, with its second folder)."""
    if base_dir is None or isinstance(base_dir, Path):
        return base_dir
    return Path(base_dir)


def is_model_text(s: str) -> bool:
    """Is this string ONNX model text (spec/003_...) rather than a path? Text has '=>' and '{',
    which no sensible path has."""
    return "=>" in s and "{" in s


def _text_to_bytes(text: str | bytes, where: str = "") -> bytes:
    """Parse ONNX model text and serialize it; syntax errors are ModelErrors (with `where`)."""
    from onnxjit.onnxtext import parse

    try:
        return parse(text).SerializeToString()
    except ModelError as e:
        raise ModelError(f"{where}{e}") from None


def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def model_hash(src: Any, base_dir: str | os.PathLike | None = None, memo: Any = None
               ) -> tuple[bytes, str]:
    """(serialized model bytes, hex digest) for cache keys, without importing the model.

    The digest covers the model bytes. When they may reference external data (the bytes contain
    `location`, a cheap test), the model is parsed and each external file's location, size,
    mtime and inode are hashed in too (not its contents: weights files can be gigabytes), so
    editing a data file changes the key. Locations that are refused or missing contribute a
    marker; importing reports them properly.

    `memo` (a `cache.DiskCache`) remembers the digest of a model file under its identity
    (device, inode, size, mtime, ctime), so a warm start skips hashing the bytes (3 ms for
    a 2.7 MB MLP, a fifth of its warm start). Any write changes ctime, a replacing rename the
    inode. As in git's "racy clean" rule, a file changed less than RACY_SECONDS before it was
    hashed is not memoised: timestamps are coarse, and a write in the same tick could leave
    them as they were.
    """
    data, folder, st = _read(src, base_dir)
    memo_key = None
    known = None
    if memo is not None and st is not None:
        from onnxjit.cache import make_key

        memo_key = make_key("model-file", *map(str, _identity(st)))
        entry = memo.get(memo_key)
        known = entry.meta.get("digest") if entry is not None else None
    base = known if isinstance(known, str) else digest.hexdigest(data)
    if memo_key is not None and known is None and \
            time.time() - max(st.st_mtime, st.st_ctime) >= RACY_SECONDS:
        from onnxjit.cache import Entry

        memo.put(memo_key, Entry({"digest": base}))
    h = digest.new(base.encode())
    if folder is not None and b"location" in data:
        from onnxjit.external_data import fingerprint, referenced_locations

        for loc in sorted(set(referenced_locations(data) or ())):
            h.update(b"\0external\0" + fingerprint(folder, loc).encode())
    return data, h.hexdigest()
