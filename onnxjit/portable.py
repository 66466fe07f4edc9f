"""Pickling a `CompiledModel`: what travels to another process, and rebuilding it there.

A CompiledModel pickles as a small dict (`state`), never as compiled code:
- the model's bytes. External data totalling at most INLINE_LIMIT bytes travels inside them:
  read through the import's checks (`external_data.inline_external`: the files must lie in the
  model's folder, symlinks checked, no hard links) into the tensors' raw_data, so a worker
  without the folder can compile. Above the limit (or when a data file cannot be read, which
  importing then reports) the folder is referenced: the worker reads the files under the same
  rules, and derives the cache key from its own files' identities, never trusting the
  sender's for files it reads itself;
- the digest and base folder the sender's cache keys were made of, so a worker sharing the
  cache directory finds the sender's entries (and compiles nothing when they are there);
- the options, without the process-local ones: `dump_ir` (workers writing into one dump
  folder would mix their files) and any callable (a progress callback): workers get defaults;
- the input and output declarations, so unpickling neither parses the model nor compiles.

Unpickling (`restore`) builds the object and nothing more: each signature is then found on its
first call in this process's memory cache (a forked worker inherits the parent's), the disk
cache, or compiled. A process keeps the last RESTORED_LIMIT models it rebuilt, so unpickling
the same model again (one task per item on a process pool) returns the live object, with the
signatures and sizes it has seen.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from onnxjit.options import CompileOptions

#: external data up to this many bytes travels inside the pickle (protobuf caps a model at 2 GiB)
INLINE_LIMIT = 1 << 30
#: options that belong to the process that set them; a worker gets their defaults
LOCAL_OPTIONS = ("dump_ir",)
RESTORED_LIMIT = 8
_RESTORED: OrderedDict[tuple, Any] = OrderedDict()
_RESTORED_LOCK = threading.Lock()
FORMAT = 1


def _options(opts: CompileOptions) -> dict[str, Any]:
    out = {}
    for f in opts._fields:
        value = getattr(opts, f)
        if f in LOCAL_OPTIONS or callable(value):
            value = CompileOptions._defaults.get(f)
        out[f] = value
    return out


def _has_external(fn: Any) -> bool:
    """Does the model reference external data? Remembered on the object: a pool pickles the
    model with every task, and searching its bytes takes milliseconds."""
    known = fn.__dict__.get("_external_refs")
    if known is None:
        known = False
        if b"location" in fn._data:  # cheap test first: most models have no external data
            from onnxjit.external_data import referenced_locations

            known = bool(referenced_locations(fn._data))
        fn._external_refs = known
    return known


def state(fn: Any) -> dict[str, Any]:
    """What a pickle of `fn` holds (see the module docstring)."""
    data, external = fn._data, None
    if _has_external(fn):
        from onnxjit.external_data import inline_external

        inlined = inline_external(data, fn._base_dir, INLINE_LIMIT)
        data, external = (data, "referenced") if inlined is None else (inlined, "inlined")
    base = fn._base_dir
    return {
        "format": FORMAT, "data": data, "hash": fn._hash, "external": external,
        "base_dir": None if base is None else str(base),
        "real_dir": getattr(base, "real_dir", None),
        "source_name": fn._source_name, "options": _options(fn.options),
        "inputs": list(fn._all_names), "required": list(fn.input_names),
        "outputs": list(fn.output_names),
        "declared": list(fn._declared),
    }


def _base_dir(st: dict[str, Any]) -> Path | None:
    if st["base_dir"] is None:
        return None
    if st["real_dir"] is None:
        return Path(st["base_dir"])
    from onnxjit.model_source import ModelFolder

    folder = ModelFolder(st["base_dir"])
    folder.real_dir = st["real_dir"]
    return folder


def restore(cls: type, st: dict[str, Any]) -> Any:
    """A CompiledModel (`cls`) from `state`; nothing is imported or compiled until it is
    called."""
    fields = {f: v for f, v in st["options"].items() if f in CompileOptions._fields}
    opts = CompileOptions(**fields)
    base_dir = _base_dir(st)
    digest = st["hash"]
    if st["external"] == "referenced":  # keys from the files this process will read
        from onnxjit.model_source import model_hash

        digest = model_hash(st["data"], base_dir)[1]
    key = (digest, st["base_dir"], st["real_dir"], opts)
    with _RESTORED_LOCK:
        fn = _RESTORED.get(key)
        if fn is not None:
            _RESTORED.move_to_end(key)
            return fn
    meta = {"inputs": st["inputs"], "required": st.get("required", st["inputs"]),
            "outputs": st["outputs"], "declared": st["declared"]}
    fn = cls(st["data"], digest, opts, base_dir, st["source_name"], meta)
    with _RESTORED_LOCK:
        fn = _RESTORED.setdefault(key, fn)
        while len(_RESTORED) > RESTORED_LIMIT:
            _RESTORED.popitem(last=False)
    return fn
