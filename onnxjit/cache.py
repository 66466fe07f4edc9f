"""The disk cache of compiled artifacts (DESIGN §5), and its counters.

Lookups go memory -> disk -> compile; this module is the disk part. An entry is one file
`<key>.ojc`:

    b"ONNXJIT\\x00" | u32 format | u64 header length | u32 CRC-32 of the header | header | payload

The header (a `marshal`led dict) lists the payload's sections (name, offset, length, dtype,
shape) and the payload's checksum (`sum64`: the sum of its little-endian 64-bit words modulo
2**64, the last word zero-padded; numpy computes it at memory speed, 5x faster than CRC-32,
which matters when the payload is 100 MB of weights on a warm start of a few tens of ms: any
changed byte, a zeroed page or a truncation changes it); the payload and each section start at
a multiple of 64 bytes, so a reader that maps the file (copy-on-write; small entries are read
into an aligned buffer) uses the arrays in place (no copy: a warm start of a model with 100 MB
of weights holds them once, in the page cache), and a writer writes arrays without copying
them.
Writes go to a temp file in the same folder, then `os.replace` (atomic on POSIX), so readers
see a whole entry or none. They are not fsynced (4 ms a write at idle, 40 ms on a busy disk,
twice in a new model's front end): after a crash an entry may be truncated or zeroed, which
the checksums below catch, and a cache entry is only ever rebuilt, never lost work. A hit
touches the entry's mtime, which makes it the last use; a write past the folder's size cap
prunes the least recently used entries (`cache_prune`).
A read checks magic, format, lengths and both checksums (the
header's before it is unmarshalled); anything off (truncated, corrupt, foreign, from another
format) is treated as a miss and rebuilt. The checksums detect damage, not forgery: an entry
is trusted because it is the user's own file (below). CRC-32 and marshal rather than SHA-256
and JSON because importing hashlib and json took a tenth of a warm start. Entries are native
code, so files are created owner-only (0600, folder 0700) and an entry owned by another user
or writable by group/others is never loaded. A folder that cannot be created or written
degrades to memory-only with one warning.
"""

from __future__ import annotations

import marshal
import mmap
import os
import stat
import struct
import threading
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from onnxjit import cache_prune, digest
from onnxjit.blas import park_spinners
from onnxjit.ir.arena import aligned_bytes

MAGIC = b"ONNXJIT\x00"
FORMAT = 4
ALIGN = 64  # payload and sections start at multiples of this (arrays are used in place)
MAP_MIN_BYTES = 1 << 20  # entries from this size are mapped, smaller ones read
_PREFIX = struct.Struct("<8sIQI")
_warned: set[str] = set()
_lock = threading.Lock()


class CacheStats:
    """Process-wide counters of the caches (reported by `CompiledModel.cache_info`)."""

    def __init__(self) -> None:
        self.memory_hits = 0
        self.disk_hits = 0
        self.misses = 0
        self.disk_errors = 0
        self.writes = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


STATS = CacheStats()
if hasattr(os, "register_at_fork"):  # a forked worker counts its own lookups, from zero
    os.register_at_fork(after_in_child=STATS.__init__)


class Entry:
    """A decoded cache entry: metadata (plain dicts, lists, tuples, str, int, float, bool,
    None) and named binary sections."""

    def __init__(self, meta: dict[str, Any], blobs: dict[str, bytes] | None = None,
                 arrays: dict[str, np.ndarray] | None = None) -> None:
        self.meta = meta
        self.blobs = {} if blobs is None else blobs
        self.arrays = {} if arrays is None else arrays


def make_key(*parts: str) -> str:
    h = digest.new()
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
    def __init__(self, folder: Path | None, max_bytes: int | None = None):
        self.folder = folder
        self.usable = folder is not None
        self.max_bytes = max_bytes  # None: no cap (`cache_prune`)

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
        _writing(self, key)
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
            cache_prune.touch(fd, st.st_mtime)  # its mtime is its last use
            if st.st_size >= MAP_MIN_BYTES:
                # A private (copy-on-write) mapping: the page cache's pages, neither copied nor
                # zeroed (a read into fresh memory faults in and zeroes every page first:
                # ~90 ms of a warm start for ResNet-50's 100 MB); writeable and page-aligned,
                # so `decode` uses the arrays in place. Writers replace files, never truncate.
                data: Any = memoryview(mmap.mmap(fd, st.st_size, access=mmap.ACCESS_COPY))
            else:
                data = aligned_bytes(st.st_size)
                with os.fdopen(fd, "rb", closefd=False) as f:
                    if f.readinto(memoryview(data)) != st.st_size:
                        STATS.disk_errors += 1  # changed while being read
                        return None
        except (OSError, ValueError):
            STATS.disk_errors += 1
            return None
        finally:
            os.close(fd)
        if st.st_size >= MAP_MIN_BYTES:
            park_spinners()  # its checksum's two threads and its program's, not numpy's BLAS
        entry = decode(data, key)
        if entry is None:
            STATS.disk_errors += 1
        return entry

    def put_later(self, key: str, entry: Entry) -> None:
        """`put` in a thread of its own when the entry's arrays reach LATER_BYTES (a CNN's
        weights: ResNet-50's 130 MB took 0.15-0.22 s to write, after its compile and before
        its first result), else now. A lookup of the key waits for its write (`get`), and
        the interpreter waits for every write at exit (the threads are not daemons)."""
        if sum(a.nbytes for a in entry.arrays.values()) < LATER_BYTES:
            self.put(key, entry)
            return
        _writing(self, key)  # one write of a key at a time, in order
        t = threading.Thread(target=self.put, args=(key, entry), name="onnxjit-cache-write")
        with _lock:
            _writers[(str(self.folder), key)] = t
        t.start()

    def put(self, key: str, entry: Entry) -> None:
        if not self._ready() or self.folder is None:
            return
        import tempfile

        parts = encode_parts(entry, key)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp", dir=self.folder)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.writelines(parts)
                    written = f.tell()
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
            return
        cache_prune.after_write(self.folder, written, self.max_bytes, key)


#: entries whose arrays reach this many bytes are written in a thread (`put_later`)
LATER_BYTES = 16 << 20
#: (folder, key) -> the thread writing that entry (`put_later`)
_writers: dict[tuple[str, str], threading.Thread] = {}


def _writing(disk: DiskCache, key: str) -> None:
    """Wait for a `put_later` of `key` in `disk`'s folder, if one is running."""
    with _lock:
        t = _writers.pop((str(disk.folder), key), None)
    if t is not None and t is not threading.current_thread():
        t.join()


def flush() -> None:
    """Wait for every `put_later` write of this process."""
    with _lock:
        pending = list(_writers.values())
        _writers.clear()
    for t in pending:
        t.join()


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def encode_parts(entry: Entry, key: str = "") -> list[bytes | memoryview]:
    """The bytes of an entry as a list of parts to write in order (arrays are not copied);
    `key` is recorded so a file copied or renamed to another key's name is recognised as
    foreign. The header is padded with spaces so the payload starts at a multiple of ALIGN
    bytes, and every section starts at a multiple of ALIGN within the payload: a reader that
    loads the file into an aligned buffer can use the arrays in place."""
    sections = []
    chunks: list[bytes | memoryview] = []
    total = 0
    offset = 0

    def add(raw: bytes | memoryview) -> None:
        nonlocal offset, total
        pad = -offset % ALIGN
        if pad:
            chunks.append(bytes(pad))  # zeros: nothing to add to the sum
        chunks.append(raw)
        total += sum64(raw)  # starts at a multiple of 8: its words are the payload's
        offset += pad + len(raw)

    for name, blob in entry.blobs.items():
        add(blob)
        sections.append({"name": name, "kind": "blob", "offset": offset - len(blob),
                         "length": len(blob)})
    for name, arr in entry.arrays.items():
        raw = memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
        add(raw)
        sections.append({"name": name, "kind": "array", "offset": offset - len(raw),
                         "length": len(raw), "dtype": arr.dtype.str, "shape": list(arr.shape)})
    header = marshal.dumps({"key": key, "meta": entry.meta, "sections": sections,
                            "sum64": total % (1 << 64)})
    header += b" " * (-(_PREFIX.size + len(header)) % ALIGN)  # marshal ignores trailing bytes
    prefix = _PREFIX.pack(MAGIC, FORMAT, len(header), zlib.crc32(header))
    return [prefix + header] + chunks


#: payloads from this size are summed by two threads (numpy's sum releases the GIL): a mapped
#: 127 MB entry (ResNet-50's warm start) in 6 ms instead of 9.5-13 on a two-core Zen 3 host
SPLIT_SUM_BYTES = 32 << 20


def sum64(data: bytes | memoryview) -> int:
    """The sum of `data`'s little-endian u64 words modulo 2**64 (the last one zero-padded)."""
    view = memoryview(data).cast("B")
    whole = len(view) - len(view) % 8
    words = np.frombuffer(view[:whole], "<u8")
    if whole >= SPLIT_SUM_BYTES and (os.cpu_count() or 1) > 1:
        half = len(words) // 2
        parts = [0]

        def upper() -> None:
            parts[0] = int(words[half:].sum(dtype=np.uint64))

        helper = threading.Thread(target=upper, name="onnxjit-sum64", daemon=True)
        helper.start()
        total = int(words[:half].sum(dtype=np.uint64))
        helper.join()
        total += parts[0]
    else:
        total = int(words.sum(dtype=np.uint64)) if whole else 0
    if whole < len(view):
        total += int.from_bytes(bytes(view[whole:]).ljust(8, b"\0"), "little")
    return total % (1 << 64)


def encode(entry: Entry, key: str = "") -> bytes:
    """The bytes of an entry (see `encode_parts`)."""
    return b"".join(encode_parts(entry, key))


def decode(data: bytes | bytearray | memoryview | np.ndarray, key: str | None = None
           ) -> Entry | None:
    """The entry in `data`, or None if it is not a whole, intact entry of this format (and,
    when `key` is given, one written under that key). A checksum guards against damage, not
    forgery, so every section is still checked against the payload before anything is
    allocated. Arrays are
    views of `data` when it is a writeable buffer with ALIGN-aligned sections (what
    `DiskCache.get` reads into), else fresh aligned copies."""
    try:
        data = memoryview(data).cast("B")
        magic, fmt, hlen, header_crc = _PREFIX.unpack_from(data, 0)
        if magic != MAGIC or fmt != FORMAT or _PREFIX.size + hlen > len(data):
            return None
        raw_header = data[_PREFIX.size:_PREFIX.size + hlen]
        if zlib.crc32(raw_header) != header_crc:
            return None
        header = marshal.loads(raw_header)
        if not isinstance(header, dict) or not isinstance(header.get("meta"), dict):
            return None
        if key is not None and header.get("key") != key:
            return None
        payload = data[_PREFIX.size + hlen:]
        if sum64(payload) != header["sum64"]:
            return None
        entry = Entry(header["meta"])
        in_place = not data.readonly
        for s in header["sections"]:
            offset, length = int(s["offset"]), int(s["length"])
            if offset < 0 or length < 0 or offset + length > len(payload):
                return None
            chunk = payload[offset:offset + length]
            if s["kind"] == "blob":
                entry.blobs[s["name"]] = bytes(chunk)
                continue
            dtype = np.dtype(s["dtype"])
            shape = [int(d) for d in s["shape"]]
            if dtype.hasobject or any(d < 0 for d in shape) or \
                    int(np.prod(shape, dtype=object)) * dtype.itemsize != length:
                return None
            flat = np.frombuffer(chunk, np.uint8)
            if in_place and flat.ctypes.data % ALIGN == 0:
                arr = flat.view(dtype).reshape(shape)
            else:
                arr = np.empty(shape, dtype)  # a fresh, aligned, writeable copy
                arr.reshape(-1).view(np.uint8)[:] = flat
            entry.arrays[s["name"]] = arr
        return entry
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, MemoryError,
            EOFError, struct.error):
        return None
