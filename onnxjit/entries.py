"""Compiled programs in the disk cache: what an entry holds, and loading one back.

An entry holds the object code (`blobs["object"]`), the worker pool's object code when the
program dispatches to it (`blobs["pool"]`, so a warm start links the pool instead of compiling
it), the constants (`arrays["const<i>"]`) and a metadata dict: the entry point names and counts
(`CompiledObject`), the Check messages, and either the outputs' shapes and the arena size (a
program of one signature) or the symbolic program's description (`SymbolicArtifact.to_meta`:
input and output shape expressions, the dims table, the temps to place; its size code also
compiled, `blobs["size_code"]`, used by a process whose Python writes the same bytecode,
`SIZE_CODE_TAG`, and compiled from the stored source otherwise). Loading links the
object code without LLVM (`codegen.link`); an entry that does not decode or link is counted as
a disk error and rebuilt. Artifacts whose code dispatches parallel loops need the process's
worker pool installed first (`ensure_pool`), from the entry's copy when it has one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.util import MAGIC_NUMBER
from typing import Any

import numpy as np

from onnxjit import cache as cache_mod
from onnxjit.artifact import pyobject_layout_ok
from onnxjit.errors import OnnxJitError

_LAYOUT: bool | None = None
#: the bytecode a marshalled size code is valid for (interpreter and bytecode version)
SIZE_CODE_TAG = f"{sys.implementation.cache_tag}-{MAGIC_NUMBER.hex()}"


def layout_ok() -> bool:
    """Does this interpreter's PyObject layout match what the Python entries read?"""
    global _LAYOUT
    if _LAYOUT is None:
        from onnxjit.artifact import DATA_OFFSET, FLAGS_OFFSET

        _LAYOUT = pyobject_layout_ok(DATA_OFFSET, FLAGS_OFFSET)
    return _LAYOUT


def ensure_pool(uses_pool: bool, num_threads: int, stored: bytes | None = None,
                disk: cache_mod.DiskCache | None = None, built: bytes | None = None
                ) -> bytes | None:
    """Install the worker pool in this process before an artifact that dispatches to it is
    built: from `stored` (the pool's object code kept in that artifact's cache entry) when
    given, else from the disk cache's own pool entry (`pool_key`: one per host target and
    onnxjit version), else compiled (a tenth of a second or more: once per cache, not once per
    process) and stored there. `built`: the pool's object code a compile worker built beside
    the program's kernels (`pool_wanted`), installed and stored there like a compiled one.
    Returns the pool's object code to keep in the artifact's entry."""
    if not uses_pool or num_threads <= 1:
        return None
    from onnxjit.codegen import pool, pool_trace

    if pool_trace.enabled():  # a traced pool is built here, and never kept in an entry
        pool.parallel_for_address()
        return None
    # a pool a compile worker built beside the program's kernels counts as compiled here
    fresh = built is not None and _link(built)
    key = None  # the pool's own entry, looked for only when the artifact carries no copy
    if not pool.installed() and stored is None and disk is not None:
        key = pool_key()
        entry = disk.get(key)
        stored = entry.blobs.get("pool") if entry is not None else None
    if not pool.installed() and stored is not None:
        _link(stored)
    if not pool.installed():
        pool.install(pool.compile_pool())
        fresh = True
    code = pool.installed_code()
    if fresh and disk is not None and code is not None:
        disk.put(key or pool_key(), cache_mod.Entry({"what": "worker pool"}, {"pool": code}))
    return code


def _link(code: bytes) -> bool:
    """Install the pool from its object code unless one is installed; whether this did."""
    from onnxjit.codegen import pool

    if pool.installed():
        return False
    try:
        pool.install(pool.pool_object(code))
    except Exception:  # code this process cannot link: compiled instead
        cache_mod.STATS.disk_errors += 1
        return False
    return True


#: a cold compile's worker pool is compiled by a compile worker beside the kernels
#: (`pool_wanted`, `jit.compile_program`'s `side`), instead of alone in this process after
#: them. Measured on a Zen 3 host (2 cores), fresh processes, empty caches, 10 alternating
#: pairs: MiniLM's symbolic compile + first call 2252 -> 2161 ms (medians; paired difference
#: -198 ms median, -147 mean); the "link" stage 120-150 -> 4-9 ms (ResNet-50 alike)
POOL_IN_WORKER = True


def pool_wanted(program: Any, num_threads: int, disk: cache_mod.DiskCache | None
                ) -> Callable[[], bytes] | None:
    """The side work (`jit.compile_program`'s `side`) that compiles the worker pool beside
    `program`'s kernels when the program dispatches and `ensure_pool` would otherwise compile
    the pool after it (none installed in this process, none traced, none in the disk cache);
    else None."""
    from onnxjit.codegen import pool, pool_trace
    from onnxjit.codegen.llvmgen import uses_pool

    if not POOL_IN_WORKER or num_threads <= 1 or pool.installed() or pool_trace.enabled():
        return None
    if not uses_pool(program) or disk is not None and disk.get(pool_key()) is not None:
        return None
    return _pool_code


def _pool_code() -> bytes:
    """The worker pool's object code (run by a compile worker)."""
    from onnxjit.codegen import pool

    return pool.compile_pool().object_code


def pool_key() -> str:
    """The disk-cache key of the worker pool's object code on this host."""
    from onnxjit.hostinfo import compiler_id, host_id
    from onnxjit.version import __version__

    return cache_mod.make_key("pool", host_id(), compiler_id(), str(cache_mod.FORMAT),
                              __version__)


class MicroStore:
    """The disk cache's entry holding the GEMM microkernels' object code compiled so far on
    this host (`codegen.gemm_objects`): a dict of name -> object code, one entry per host and
    compiler (`micro_key`). A write merges with what the entry holds (another process may have
    added some); a lost race only means compiling a microkernel again."""

    def __init__(self, disk: cache_mod.DiskCache):
        self.disk = disk
        self.ident = str(disk.folder)

    def get(self) -> dict[str, bytes]:
        entry = self.disk.get(micro_key())
        if entry is None:
            return {}
        try:
            blobs = {blob: bytes(entry.blobs[blob]) for blob in set(entry.meta["names"].values())}
            return {name: blobs[blob] for name, blob in entry.meta["names"].items()}
        except (KeyError, AttributeError, TypeError):
            cache_mod.STATS.disk_errors += 1
            return {}

    def put(self, objects: dict[str, bytes]) -> None:
        """Store `objects` (name -> object code; one object may define several names)."""
        merged = {**self.get(), **objects}
        blobs = {code: f"o{i}" for i, code in enumerate(dict.fromkeys(merged.values()))}
        meta = {"what": "GEMM microkernels", "names": {n: blobs[c] for n, c in merged.items()}}
        self.disk.put(micro_key(), cache_mod.Entry(meta, {b: c for c, b in blobs.items()}))


def micro_key() -> str:
    """The disk-cache key of the GEMM microkernels' object code on this host."""
    from onnxjit.hostinfo import compiler_id, host_id
    from onnxjit.version import __version__

    return cache_mod.make_key("micro", host_id(), compiler_id(), str(cache_mod.FORMAT),
                              __version__)


def _object_meta(obj: Any) -> dict[str, Any]:
    return {"entry": obj.entry, "entry_py": obj.entry_py, "fastcall": obj.fastcall,
            "n_io": obj.n_io, "n_consts": obj.n_consts, "uses_pool": obj.uses_pool,
            "parts": len(obj.parts)}


def _entry(meta: dict[str, Any], obj: Any, consts: list[np.ndarray],
           pool_code: bytes | None) -> cache_mod.Entry:
    meta = dict(meta, **_object_meta(obj))
    blobs = {"object": obj.object_code}
    blobs.update((f"part{i}", code) for i, code in enumerate(obj.parts))
    if pool_code is not None:
        blobs["pool"] = pool_code
    return cache_mod.Entry(meta, blobs, {f"const{i}": a for i, a in enumerate(consts)})


def native_entry(art: Any, obj: Any, pool_code: bytes | None) -> cache_mod.Entry:
    """The entry of an artifact compiled for one signature."""
    meta = {"arena_size": art.arena_size, "messages": art.messages,
            "outputs": [[list(s), np.dtype(d).str] for s, d in art.out_specs],
            "out_names": art.out_names}
    return _entry(meta, obj, art.consts, pool_code)


def symbolic_entry(sym: Any, obj: Any, pool_code: bytes | None) -> cache_mod.Entry:
    """The entry of a symbolic program (`dynamic.SymbolicArtifact`), with its size code
    compiled (`size_code` blob, for processes of the same Python: `SIZE_CODE_TAG`)."""
    entry = _entry(dict(sym.to_meta(), size_code_tag=SIZE_CODE_TAG), obj, sym.consts,
                   pool_code)
    entry.blobs["size_code"] = sym.code.marshalled()
    return entry


def load_library(entry: cache_mod.Entry, ensure_pool: Any) -> tuple[Any, list[np.ndarray]]:
    """(linked library, constants) of an entry; raises on an entry that does not load."""
    from onnxjit.codegen import CompiledObject, load_object

    m = entry.meta
    obj = CompiledObject(entry.blobs["object"], m["entry"], m["entry_py"], m["n_io"],
                         m["n_consts"], bool(m.get("uses_pool", True)), str(m.get("fastcall", "")),
                         tuple(entry.blobs[f"part{i}"] for i in range(int(m.get("parts", 0)))))
    consts = [entry.arrays[f"const{i}"] for i in range(m["n_consts"])]
    lib = load_object(obj)
    ensure_pool(obj.uses_pool, entry.blobs.get("pool"))
    return lib, consts


def native_from_entry(sig: tuple, entry: cache_mod.Entry, ensure_pool: Any,
                      use_py_entry: bool, num_threads: int) -> Any:
    """The Artifact an entry of one signature holds, or None (a disk error, counted)."""
    from onnxjit.artifact import Artifact

    try:
        lib, consts = load_library(entry, ensure_pool)
        m = entry.meta
        return Artifact(sig, [(tuple(s), np.dtype(d)) for s, d in m["outputs"]], consts,
                        m["arena_size"], list(m["messages"]), lib, use_py_entry,
                        source="disk", num_threads=num_threads, out_names=m.get("out_names"))
    except (KeyError, TypeError, ValueError, OnnxJitError):
        cache_mod.STATS.disk_errors += 1
        return None
    except Exception:  # an entry LLVM cannot link is foreign: rebuild it
        cache_mod.STATS.disk_errors += 1
        return None


def symbolic_from_entry(entry: cache_mod.Entry, ensure_pool: Any, use_py_entry: bool,
                        num_threads: int) -> Any:
    """The SymbolicArtifact an entry holds, or None (not one, or a disk error)."""
    from onnxjit.dynamic import SymbolicArtifact

    if not entry.meta.get("symbolic"):
        return None
    try:
        lib, consts = load_library(entry, ensure_pool)
        same = entry.meta.get("size_code_tag") == SIZE_CODE_TAG
        return SymbolicArtifact.from_meta(entry.meta, consts, lib, use_py_entry, num_threads,
                                          entry.blobs.get("size_code") if same else None)
    except (KeyError, TypeError, ValueError, OnnxJitError):
        cache_mod.STATS.disk_errors += 1
        return None
    except Exception:
        cache_mod.STATS.disk_errors += 1
        return None
