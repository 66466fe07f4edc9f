"""Bounding the disk cache: least-recently-used pruning, and what `onnxjit cache` reports.

Recency: an entry's mtime is its last use. Writes set it, and `DiskCache.get` touches it on a
hit (through the open descriptor, at most once every TOUCH_SECONDS per entry), so the entry
with the oldest mtime is the one least recently used.

`prune(folder, max_bytes)`: one scan of the folder (`os.scandir` and a stat per entry), the
entries sorted by mtime, the oldest unlinked until the rest fit. Safe while other processes
use the folder: a reader that has opened an entry keeps reading it (an unlinked file lives
until it is closed, a mapped one until it is unmapped); a reader that comes later finds no
file, which is a miss (the entry is rebuilt), never an error; writers publish whole entries
with a rename, so a scan never sees half of one. Temp files older than STALE_TMP_SECONDS
(their writer died) are removed too. `keep` names an entry never removed: the one a writer
just published, even when it alone exceeds the cap.

Pruning on write, without a scan per write (`after_write`): each process estimates each
folder's size. Its first write there scans; then it adds what it writes, and scans again once
its writes since the last scan reach RESCAN_FRACTION of the cap (other processes write too).
When the estimate passes the cap it prunes to PRUNE_TO of the cap, so the next writes do not
prune again at once. With N processes writing, the folder may exceed its cap by about N times
RESCAN_FRACTION of it until one of them scans.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

SUFFIX = ".ojc"
TOUCH_SECONDS = 60.0
STALE_TMP_SECONDS = 3600.0
RESCAN_FRACTION = 0.1
PRUNE_TO = 0.8
_usage: dict[str, list[int]] = {}  # folder -> [estimated bytes, bytes written since the scan]
_lock = threading.Lock()


def scan(folder: Path) -> tuple[list[tuple[float, int, str]], list[tuple[float, str]]]:
    """([(mtime, size, name)] of the entries, oldest first; [(mtime, name)] of temp files).
    A file removed while the folder is read is left out."""
    entries, temps = [], []
    try:
        it = os.scandir(folder)
    except OSError:
        return [], []
    with it:
        for d in it:
            try:
                if d.name.endswith(SUFFIX):
                    st = d.stat(follow_symlinks=False)
                    entries.append((st.st_mtime, st.st_size, d.name))
                elif d.name.startswith(".") and d.name.endswith(".tmp"):
                    temps.append((d.stat(follow_symlinks=False).st_mtime, d.name))
            except OSError:  # gone since listed: another process pruned or replaced it
                continue
    entries.sort()
    return entries, temps


def _unlink(path: Path) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:  # another process removed it first
        return False


def prune(folder: Path, max_bytes: int, keep: str | None = None) -> dict[str, int]:
    """Remove the least recently used entries until the rest total at most `max_bytes`.
    Returns {"removed", "removed_bytes", "entries", "bytes"} (the last two: what is left)."""
    entries, temps = scan(folder)
    now = time.time()
    for mtime, name in temps:
        if now - mtime > STALE_TMP_SECONDS:
            _unlink(folder / name)
    total = sum(size for _, size, _ in entries)
    removed = removed_bytes = 0
    left = len(entries)
    for _, size, name in entries:
        if total <= max_bytes:
            break
        if name == keep:
            continue
        if _unlink(folder / name):
            removed, removed_bytes = removed + 1, removed_bytes + size
        total -= size
        left -= 1
    return {"removed": removed, "removed_bytes": removed_bytes, "entries": left,
            "bytes": total}


def clear(folder: Path) -> dict[str, int]:
    """Remove every entry (and temp file) of the folder."""
    entries, temps = scan(folder)
    for _, name in temps:
        _unlink(folder / name)
    removed = [size for _, size, name in entries if _unlink(folder / name)]
    with _lock:
        _usage.pop(str(folder), None)
    return {"removed": len(removed), "removed_bytes": sum(removed)}


def info(folder: Path) -> dict[str, Any]:
    """{"entries", "bytes", "oldest", "newest" (mtimes or None), "temps"} of the folder."""
    entries, temps = scan(folder)
    return {"entries": len(entries), "bytes": sum(size for _, size, _ in entries),
            "oldest": entries[0][0] if entries else None,
            "newest": entries[-1][0] if entries else None, "temps": len(temps)}


def after_write(folder: Path, written: int, max_bytes: int | None, key: str) -> None:
    """Account for an entry of `written` bytes just published under `key`; prune when the
    folder's estimated size passes `max_bytes` (see the module docstring)."""
    if not max_bytes:
        return
    k = str(folder)
    with _lock:
        usage = _usage.get(k)
        fresh = usage is None or usage[1] + written >= RESCAN_FRACTION * max_bytes
        if not fresh:
            usage[0] += written
            usage[1] += written
            if usage[0] <= max_bytes:
                return
    if fresh:
        total = sum(size for _, size, _ in scan(folder)[0])
        if total <= max_bytes:
            with _lock:
                _usage[k] = [total, 0]
            return
    left = prune(folder, int(max_bytes * PRUNE_TO), keep=key + SUFFIX)
    with _lock:
        _usage[k] = [left["bytes"], 0]


def human(nbytes: int) -> str:
    """`nbytes` as '1.5 GiB'."""
    size, unit = float(nbytes), "bytes"
    for u in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, u
    return f"{nbytes} bytes" if unit == "bytes" else f"{size:.1f} {unit}"


def touch(fd: int, mtime: float) -> None:
    """Mark an entry (open as `fd`) used now, unless it was within TOUCH_SECONDS."""
    if time.time() - mtime < TOUCH_SECONDS:
        return
    try:
        os.utime(fd)
    except (OSError, NotImplementedError):  # a read-only file system: recency is approximate
        pass
