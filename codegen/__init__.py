"""Code generation: loop IR -> LLVM IR -> object code for the host CPU -> callable entry points.

`compile_program(program)` gives a `CompiledObject` (object code plus entry names; what the disk
cache stores), `load_object(obj)` links it into the process and returns a library with the
entry addresses. `DATA_OFFSET`/`FLAGS_OFFSET` are where the generated `_entry_py` reads a numpy
array's data pointer and flags; `target_id()` names the host and toolchain for cache keys;
`pool_slots(obj, num_threads)` are the values the runtime appends to the consts table (the
worker pool's entry and the thread count).

Names are imported on first use: a warm start (`CompiledObject`, `load_object`, `pool_slots`)
must not import llvmlite, which only `compile_program` needs.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "CompiledObject": "objects", "load_object": "link", "pool_slots": "pool",
    "NativeLibrary": "jit", "compile_program": "jit",
    "DATA_OFFSET": "entry", "FLAGS_OFFSET": "entry", "target_id": "target",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'onnxjit.codegen' has no attribute '{name}'")
    value = getattr(importlib.import_module(f"onnxjit.codegen.{module}"), name)
    globals()[name] = value
    return value
