"""The process's worker pool: compiled once, linked once per process, found by address.

Generated code cannot embed the pool's address (its object code is cached on disk and linked
into other processes), so the runtime puts `parallel_for_address()` into the consts table of
every artifact that dispatches (`pool_slots`). The pool itself is the module `pool_ir`
builds: object code like any program's, with the pthread functions as undefined symbols.

Algorithm: 1) `compile_pool()` turns the module into a `CompiledObject` (LLVM is needed
only here; the runtime keeps its bytes, `installed_code()`, in the disk-cache entry of every
artifact that dispatches, so a warm start links them instead of compiling); 2) `install(obj)`
links it with `link.load_object` exactly once per process (later calls are no-ops), keeps the
code alive until the process exits (worker threads run it), and registers a fork handler that
resets the pool's state in a child; 3) `parallel_for_address()` installs a freshly compiled
pool if none is installed yet and returns the entry's address.
"""

from __future__ import annotations

import ctypes
import os
import threading

from onnxjit.codegen.objects import CompiledObject
from onnxjit.errors import CompileError

ENTRY = "onnxjit_parallel_for"
CONTROL = "onnxjit_pool_control"

_lock = threading.Lock()
_address: int | None = None
_code: bytes | None = None
_control = None  # ctypes function: i64 control(i64 reset) -> workers started


def compile_pool() -> CompiledObject:
    """The pool module as object code for this host (a `objects.CompiledObject` whose `entry` is
    `onnxjit_parallel_for` and `entry_py` the control function)."""
    from onnxjit.codegen.jit import object_code
    from onnxjit.codegen.pool_ir import pool_ir
    from onnxjit.codegen.pool_trace import enabled

    trace = enabled()
    return pool_object(object_code(
        lambda triple, layout: pool_ir(triple, layout, ENTRY, CONTROL, trace=trace), 2))


def pool_object(code: bytes) -> CompiledObject:
    """The pool's object code as a `objects.CompiledObject` (`entry` is `onnxjit_parallel_for`,
    `entry_py` the control function)."""
    return CompiledObject(code, ENTRY, CONTROL, 0, 0, False)


def installed() -> bool:
    """True once this process has linked a pool."""
    return _address is not None


def installed_code() -> bytes | None:
    """Object code of the pool this process runs (to store in the disk cache)."""
    return _code


def install(obj: CompiledObject) -> int:
    """Link the pool's object code (once per process) and return `parallel_for`'s address."""
    global _address, _control, _code
    with _lock:
        if _address is not None:
            return _address
        from onnxjit.codegen.link import load_object

        lib = load_object(obj)
        if not lib.entry_addr or not lib.entry_py_addr:
            raise CompileError("the pool's object code lacks its entry points")
        control = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(lib.entry_py_addr)
        # Worker threads run this code until the process exits, so it must outlive interpreter
        # shutdown: an extra reference nothing ever drops.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(lib))
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(control))
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=lambda: control(1))
        _control, _code = control, obj.object_code
        _address = lib.entry_addr
        return _address


def parallel_for_address() -> int:
    """Address of `onnxjit_parallel_for` in this process (compiling the pool if the runtime
    has not installed one from its cache)."""
    if _address is not None:
        return _address
    return install(compile_pool())


def trace_records() -> list:
    """The dispatches recorded since the previous call, as `pool_trace.Record`s; empty unless
    the pool was built with $ONNXJIT_POOL_TRACE set (see `pool_trace`)."""
    from onnxjit.codegen.pool_trace import records

    return [] if _control is None else records(int(_control(2)))


def worker_count() -> int:
    """Worker threads the pool has started in this process (0 before the first dispatch)."""
    return 0 if _control is None else int(_control(0))


def pool_slots(obj: CompiledObject, num_threads: int) -> list[int]:
    """The values of the slots the runtime appends to the consts table: `parallel_for`'s
    address (0 when the code never dispatches: the pool is then not even built) and the
    thread count."""
    addr = parallel_for_address() if obj.uses_pool and num_threads > 1 else 0
    return [addr, max(1, num_threads)]
