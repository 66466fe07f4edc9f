"""The disk cache of compiled artifacts (DESIGN §5), and its counters.

Lookups go memory -> disk -> compile; this module is the disk part. An entry is one file
`<key>.ojc`:

    b"ONNXJIT\\x00" | u32 format | u64 header length | header (JSON) | payload

The header lists the payload's sections (name, offset, length, dtype, shape) and the payload's
SHA-256. Writes go to a temp file in the same folder, then `os.replace` (atomic on POSIX), so
readers see a whole entry or none. A read checks magic, format, lengths and digest; anything off
(truncated, corrupt, foreign, from another format) is treated as a miss and rebuilt. Entries are
native code, so files are created owner-only (0600, folder 0700) and an entry owned by another
user or writable by group/others is never loaded. A folder that cannot be created or written
degrades to memory-only with one warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"ONNXJIT\x00"
FORMAT = 1
_PREFIX = struct.Struct("<8sIQ")
_warned: set[str] = set()
_lock = threading.Lock()


@dataclass
class CacheStats:
    memory_hits: int = 0
    disk_hits: int = 0
    misses: int = 0
    disk_errors: int = 0
    writes: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


STATS = CacheStats()


@dataclass
class Entry:
    """A decoded cache entry: JSON-able metadata and named binary sections."""

    meta: dict[str, Any]
    blobs: dict[str, bytes] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def make_key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\x00")
    return h.hexdigest()


def _warn_once(folder: Path, why: str) -> None:
    k = str(folder)
    with _lock:
        if k in _warned:
            return
        _warned.add(k)
    warnings.warn(f"onnxjit: disk cache at {folder} is unusable ({why}); using the "
                  "in-memory cache only", RuntimeWarning, stacklevel=4)


class DiskCache:
    def __init__(self, folder: Path | None):
        self.folder = folder
        self.usable = folder is not None

    def _ready(self) -> bool:
        if not self.usable or self.folder is None:
            return False
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            self.usable = False
            _warn_once(self.folder, str(e))
        return self.usable

    def get(self, key: str) -> Entry | None:
        if not self.usable or self.folder is None:
            return None
        path = self.folder / f"{key}.ojc"
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return None
        except OSError:
            STATS.disk_errors += 1
            return None
        try:
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid()
                    or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
                STATS.disk_errors += 1
                return None
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read()
        finally:
            os.close(fd)
        entry = decode(data, key)
        if entry is None:
            STATS.disk_errors += 1
        return entry

    def put(self, key: str, entry: Entry) -> None:
        if not self._ready() or self.folder is None:
            return
        data = encode(entry, key)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp", dir=self.folder)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.chmod(tmp, 0o600)
                os.replace(tmp, self.folder / f"{key}.ojc")
                STATS.writes += 1
            except BaseException:
                with _suppress():
                    os.unlink(tmp)
                raise
        except OSError as e:
            self.usable = False
            _warn_once(self.folder, str(e))


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def encode(entry: Entry, key: str = "") -> bytes:
    """The bytes of an entry; `key` is recorded so a file copied or renamed to another key's
    name is recognised as foreign."""
    sections = []
    chunks = []
    offset = 0
    for name, blob in entry.blobs.items():
        sections.append({"name": name, "kind": "blob", "offset": offset, "length": len(blob)})
        chunks.append(blob)
        offset += len(blob)
    for name, arr in entry.arrays.items():
        raw = np.ascontiguousarray(arr).tobytes()
        sections.append({"name": name, "kind": "array", "offset": offset, "length": len(raw),
                         "dtype": arr.dtype.str, "shape": list(arr.shape)})
        chunks.append(raw)
        offset += len(raw)
    payload = b"".join(chunks)
    header = json.dumps({"key": key, "meta": entry.meta, "sections": sections,
                         "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    return _PREFIX.pack(MAGIC, FORMAT, len(header)) + header + payload


def decode(data: bytes, key: str | None = None) -> Entry | None:
    """The entry in `data`, or None if it is not a whole, intact entry of this format (and,
    when `key` is given, one written under that key). The header is not covered by the digest,
    so every section is checked against the payload before anything is allocated."""
    try:
        magic, fmt, hlen = _PREFIX.unpack_from(data, 0)
        if magic != MAGIC or fmt != FORMAT or _PREFIX.size + hlen > len(data):
            return None
        header = json.loads(data[_PREFIX.size:_PREFIX.size + hlen])
        if not isinstance(header, dict) or not isinstance(header.get("meta"), dict):
            return None
        if key is not None and header.get("key") != key:
            return None
        payload = memoryview(data)[_PREFIX.size + hlen:]
        if hashlib.sha256(payload).hexdigest() != header["sha256"]:
            return None
        entry = Entry(header["meta"])
        for s in header["sections"]:
            offset, length = int(s["offset"]), int(s["length"])
            if offset < 0 or length < 0 or offset + length > len(payload):
                return None
            chunk = payload[offset:offset + length]
            if s["kind"] == "blob":
                entry.blobs[s["name"]] = bytes(chunk)
            else:
                dtype = np.dtype(s["dtype"])
                shape = [int(d) for d in s["shape"]]
                if dtype.hasobject or any(d < 0 for d in shape) or \
                        int(np.prod(shape, dtype=object)) * dtype.itemsize != length:
                    return None
                arr = np.empty(shape, dtype)  # a fresh, aligned, writeable copy
                arr.reshape(-1).view(np.uint8)[:] = np.frombuffer(chunk, np.uint8)
                entry.arrays[s["name"]] = arr
        return entry
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, MemoryError,
            struct.error, json.JSONDecodeError):
        return None
