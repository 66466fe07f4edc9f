"""Reading tensors stored outside the model file (TensorProto.data_location = EXTERNAL).

The `location` key names a file relative to the model's folder; `offset` and `length` (bytes)
select a range of it; `checksum` and other keys are ignored. A model is untrusted input, so the
reader guarantees that nothing outside the model's folder is ever opened:

1. A model given as bytes or an object has no folder: external data is refused unless the caller
   passes `base_dir`.
2. The location is checked as text first: it must be relative (no leading `/` or `\\`, no drive
   letter), contain no NUL, and have no `..` component at all (even `a/../b`, which would stay
   inside: refusing every `..` keeps the rule simple to audit). Both `/` and `\\` separate parts.
3. The path is resolved with `realpath` (following symlinks); the result must lie strictly inside
   the realpath of the folder, or inside the folder of the model file's real path when the
   model was loaded from a path that is a symlink (`model_source.ModelFolder.real_dir`: a
   HuggingFace snapshot links `model.onnx` and `model.onnx_data` into `blobs/`); it must exist
   and be a regular file; `offset`/`length` must lie within it.
4. The file is opened component by component from a descriptor of the folder, each step with
   O_NOFOLLOW (and O_DIRECTORY for folders), so a symlink swapped in after step 3 is not followed;
   where the platform lacks `dir_fd` support the resolved path is opened with O_NOFOLLOW. O_NONBLOCK
   keeps a FIFO swapped in from blocking the open. Finally the opened descriptor's st_dev/st_ino
   must equal those checked in step 3, and it must still be a regular file.

Symlinks *inside* the folder that point inside it (or into the model file's real folder) are
followed (step 3 resolves them; step 4 then opens the resolved path, walking down from the folder
that contains it). Hard links: a hard link inside the folder to a file elsewhere has the
same inode wherever it is named, so where its other names are cannot be found out cheaply.
A data file with more than one link (`st_nlink > 1`) is therefore refused, in steps 3 and 4
(the error says to copy the file): a hard link planted in a shared folder would otherwise read
a file from anywhere on the same file system.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from onnxjit.errors import ModelError
from onnxjit.proto import onnx_pb2 as P

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_DIR_FLAGS = _FLAGS | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW
_FILE_FLAGS = _FLAGS | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
_WALK_DIRS = os.open in os.supports_dir_fd and bool(_NOFOLLOW)


def external_info(t: P.TensorProto, where: str) -> tuple[str, int, int | None]:
    """(location, offset, length or None) of an EXTERNAL tensor; ModelError if malformed."""
    entries = {e.key: e.value for e in t.external_data}
    location = entries.get("location", "")
    if not location:
        raise ModelError("external data has no 'location'", where=where)

    def number(key: str) -> int | None:
        text = entries.get(key)
        if text is None or text == "":
            return None
        try:
            n = int(text)
        except ValueError:
            raise ModelError(f"external data {key} {text!r} is not an integer",
                             where=where) from None
        if n < 0:
            raise ModelError(f"external data {key} {n} is negative", where=where)
        return n

    return location, number("offset") or 0, number("length")


def check_location(location: str, where: str) -> list[str]:
    """The parts of a relative location, after the textual checks (step 2 above)."""
    if "\0" in location:
        raise ModelError(f"external data location {location!r} contains a NUL", where=where)
    if location.startswith(("/", "\\")) or os.path.isabs(location) or \
            (len(location) >= 2 and location[1] == ":"):
        raise ModelError(f"external data location '{location}' is absolute; it must be "
                         "relative to the model's folder", where=where)
    parts = [p for p in location.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ModelError(f"external data location '{location}' contains '..'; it must stay "
                         "inside the model's folder", where=where)
    if not parts:
        raise ModelError(f"external data location '{location}' names no file", where=where)
    return parts


def _inside(root: str, real: str) -> bool:
    return real != root and os.path.commonpath([root, real]) == root


def resolve(base_dir: Path, location: str, where: str) -> tuple[str, str, os.stat_result]:
    """(the allowed folder holding the file, realpath of the file, its stat) after steps 2
    and 3."""
    parts = check_location(location, where)
    base = os.path.realpath(base_dir)
    if not os.path.isdir(base):
        raise ModelError(f"the model folder '{base_dir}' for external data is not a folder",
                         where=where)
    roots = [base]
    real_dir = getattr(base_dir, "real_dir", None)
    if real_dir:
        roots.append(os.path.realpath(real_dir))
    real = os.path.realpath(os.path.join(base, *parts))
    root = next((r for r in roots if _inside(r, real)), None)
    if root is None:
        allowed = " or ".join(f"'{r}'" for r in dict.fromkeys(roots))
        raise ModelError(f"external data location '{location}' resolves outside the model's "
                         f"folder {allowed} (to '{real}')", where=where)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise ModelError(f"external data file '{location}' does not exist in '{base}'",
                         where=where) from None
    except OSError as e:
        raise ModelError(f"cannot access external data file '{location}': {e.strerror}",
                         where=where) from None
    if not stat.S_ISREG(st.st_mode):
        raise ModelError(f"external data location '{location}' is not a regular file",
                         where=where)
    _check_links(st, location, where)
    return root, real, st


def _check_links(st: os.stat_result, location: str, where: str) -> None:
    if st.st_nlink > 1:
        raise ModelError(f"external data file '{location}' has {st.st_nlink} hard links; a hard "
                         "link may lead outside the model's folder, so such files are refused "
                         "(copy the file to break the link)", where=where)


def _open_checked(base: str, real: str, location: str, where: str) -> int:
    """Step 4: an fd of `real`, opened without following any symlink."""
    rel = os.path.relpath(real, base).split(os.sep)
    try:
        if _WALK_DIRS:
            fd = os.open(base, _DIR_FLAGS & ~_NOFOLLOW)  # the folder itself may be a symlink
            try:
                for part in rel[:-1]:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd = nfd
                return os.open(rel[-1], _FILE_FLAGS, dir_fd=fd)
            finally:
                os.close(fd)
        return os.open(real, _FILE_FLAGS)
    except OSError as e:
        raise ModelError(f"cannot open external data file '{location}' safely: {e.strerror} "
                         "(did it change while the model was loading?)", where=where) from None


class ExternalReader:
    """Reads EXTERNAL tensors of one model; `base_dir` None refuses them all."""

    def __init__(self, base_dir: str | os.PathLike | None):
        # A Path is kept as it is: a `model_source.ModelFolder` carries a second folder.
        self.base_dir = base_dir if base_dir is None or isinstance(base_dir, Path) \
            else Path(base_dir)

    def __call__(self, t: P.TensorProto, where: str) -> bytes:
        location, offset, length = external_info(t, where)
        if self.base_dir is None:
            raise ModelError(f"stores its data in external file '{location}', but the model was "
                             "given as bytes or an object, which has no folder: pass base_dir "
                             "(the folder holding the data files) or load the model from a path",
                             where=where)
        base, real, st = resolve(self.base_dir, location, where)
        size = st.st_size
        if length is None:
            length = max(size - offset, 0)
        if offset > size or offset + length > size:
            raise ModelError(f"external data range [{offset}, {offset + length}) lies beyond the "
                             f"end of '{location}' ({size} bytes)", where=where)
        fd = _open_checked(base, real, location, where)
        try:
            fst = os.fstat(fd)
            if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino) or \
                    not stat.S_ISREG(fst.st_mode) or fst.st_size < offset + length:
                raise ModelError(f"external data file '{location}' changed while the model was "
                                 "loading", where=where)
            _check_links(fst, location, where)
            return _pread_all(fd, offset, length, location, where)
        finally:
            os.close(fd)


def _pread_all(fd: int, offset: int, length: int, location: str, where: str) -> bytes:
    chunks: list[bytes] = []
    done = 0
    while done < length:
        if hasattr(os, "pread"):
            chunk = os.pread(fd, min(length - done, 1 << 30), offset + done)
        else:  # pragma: no cover - Windows
            os.lseek(fd, offset + done, os.SEEK_SET)
            chunk = os.read(fd, min(length - done, 1 << 30))
        if not chunk:
            raise ModelError(f"external data file '{location}' ended early (truncated while "
                             "loading?)", where=where)
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)


def fingerprint(base_dir: str | os.PathLike, location: str) -> str:
    """A cheap identity of an external data file for cache keys: size and mtime, or a marker
    when the location is refused or missing (the import then reports the real error)."""
    try:
        folder = base_dir if isinstance(base_dir, Path) else Path(base_dir)
        _, real, st = resolve(folder, location, "external data")
    except ModelError:
        return f"{location}:invalid"
    return f"{location}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


def referenced_locations(data: bytes) -> list[str] | None:
    """The external-data locations a serialized model references (for its cache key), or None
    when `data` is not a model (importing it reports why)."""
    proto = P.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        return None
    return external_locations(proto) if proto.HasField("graph") else None


def external_locations(proto: P.ModelProto) -> list[str]:
    """Every external-data location named in the model: initializers, sparse initializers and
    tensor attributes, in subgraphs and functions too (unreadable entries are skipped)."""
    out: list[str] = []
    for t in external_tensors(proto):
        try:
            out.append(external_info(t, "")[0])
        except ModelError:
            pass
    return out


def external_tensors(proto: P.ModelProto) -> list[P.TensorProto]:
    """Every tensor of the model whose data is EXTERNAL (see `external_locations`)."""
    out: list[P.TensorProto] = []

    def tensor(t: P.TensorProto) -> None:
        if t.data_location == P.TensorProto.EXTERNAL:
            out.append(t)

    def graph(g: P.GraphProto) -> None:
        for t in g.initializer:
            tensor(t)
        for s in g.sparse_initializer:
            tensor(s.values)
            tensor(s.indices)
        for n in g.node:
            attrs(n.attribute)

    def attrs(attributes: Any) -> None:
        for a in attributes:
            if a.HasField("t"):
                tensor(a.t)
            for t in a.tensors:
                tensor(t)
            if a.HasField("g"):
                graph(a.g)
            for g in a.graphs:
                graph(g)

    graph(proto.graph)
    for f in proto.functions:
        for n in f.node:
            attrs(n.attribute)
    return out


def inline_external(data: bytes, base_dir: str | os.PathLike | None, limit: int
                    ) -> bytes | None:
    """The model with the data of every external tensor read in (as raw_data, through the
    checks of `ExternalReader`), for a model that must travel without its folder (a pickled
    `CompiledModel`). None when there is nothing to inline or it cannot be: no folder, a file
    refused or missing (whoever imports the model reports it), or more than `limit` bytes in
    all (protobuf caps a message at 2 GiB; the caller then references the folder instead)."""
    proto = P.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        return None
    tensors = external_tensors(proto)
    if not tensors or base_dir is None:
        return None
    folder = base_dir if isinstance(base_dir, Path) else Path(base_dir)
    try:
        total = 0
        for t in tensors:  # sizes first: a model over the limit reads nothing
            location, offset, length = external_info(t, "external data")
            if length is None:
                length = resolve(folder, location, "external data")[2].st_size - offset
            total += max(length, 0)
        if total > limit:
            return None
        read = ExternalReader(folder)
        for t in tensors:
            raw = read(t, f"tensor '{t.name}'")
            del t.external_data[:]
            t.data_location = P.TensorProto.DEFAULT
            t.raw_data = raw
    except ModelError:
        return None
    return proto.SerializeToString()
