"""Reading a model's bytes and hashing them for the cache, without the protobuf importer.

A model is a path (`.onnx`; `.onnxtxt` is the textual syntax), bytes, a ModelProto, or a str
holding model text; text is parsed (`onnxjit.onnxtext`) and serialized, so everything after
this module sees bytes.

A warm start (artifacts in the disk cache) needs only the model's bytes and a digest of them:
this module does that much without importing protobuf, the graph IR or the passes. Only a
model whose bytes may reference external data (they contain `location`) is parsed, to hash
the external files' identities in as well.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from onnxjit.errors import ModelError


def read_model_bytes(src: Any, base_dir: str | os.PathLike | None = None
                     ) -> tuple[bytes, Path | None]:
    """(serialized model, folder for its external data) of a path, bytes, ModelProto or text."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(src), None if base_dir is None else Path(base_dir)
    if isinstance(src, str) and is_model_text(src) and not os.path.exists(src):
        return _text_to_bytes(src), None if base_dir is None else Path(base_dir)
    if isinstance(src, (str, os.PathLike)):
        path = Path(src)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ModelError(f"model file '{path}' does not exist") from None
        except IsADirectoryError:
            raise ModelError(f"model path '{path}' is a folder, not a file") from None
        except OSError as e:
            raise ModelError(f"cannot read model file '{path}': {e.strerror}") from None
        if not data:
            raise ModelError(f"model file '{path}' is empty")
        folder = Path(base_dir) if base_dir is not None else path.resolve().parent
        if path.suffix == ".onnxtxt":
            return _text_to_bytes(data, f"model file '{path}': "), folder
        return data, folder
    serialize = getattr(src, "SerializeToString", None)
    if callable(serialize):
        return serialize(), None if base_dir is None else Path(base_dir)
    raise ModelError(f"cannot load a model from a {type(src).__name__}: expected a path, bytes, "
                     "a ModelProto (an object with SerializeToString) or ONNX model text")


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


def model_hash(src: Any, base_dir: str | os.PathLike | None = None) -> tuple[bytes, str]:
    """(serialized model bytes, sha256 hex) for cache keys, without importing the model.

    The digest covers the model bytes. When they may reference external data (the bytes contain
    `location`, a cheap test), the model is parsed and each external file's location, size,
    mtime and inode are hashed in too (not its contents: weights files can be gigabytes), so
    editing a data file changes the key. Locations that are refused or missing contribute a
    marker; importing reports them properly.
    """
    data, folder = read_model_bytes(src, base_dir)
    h = hashlib.sha256(data)
    if folder is not None and b"location" in data:
        from onnxjit.external_data import fingerprint
        from onnxjit.importer import _external_locations, parse_model

        try:
            proto = parse_model(data)
        except ModelError:
            return data, h.hexdigest()
        for loc in sorted(set(_external_locations(proto))):
            h.update(b"\0external\0" + fingerprint(folder, loc).encode())
    return data, h.hexdigest()
