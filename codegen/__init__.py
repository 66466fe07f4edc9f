"""Code generation: loop IR -> LLVM IR -> object code for the host CPU -> callable entry points.

`compile_program(program)` gives a `CompiledObject` (object code plus entry names; what the disk
cache stores), `load_object(obj)` links it into the process and returns a `NativeLibrary` with the
entry addresses. `DATA_OFFSET`/`FLAGS_OFFSET` are where the generated `_entry_py` reads a numpy
array's data pointer and flags; `target_id()` names the host and toolchain for cache keys;
`pool_slots(obj, num_threads)` are the values the runtime appends to the consts table (the
worker pool's entry and the thread count).
"""

from onnxjit.codegen.jit import (
    CompiledObject,
    NativeLibrary,
    compile_program,
    load_object,
    pool_slots,
)
from onnxjit.codegen.llvmgen import DATA_OFFSET, FLAGS_OFFSET
from onnxjit.codegen.target import target_id

__all__ = ["CompiledObject", "NativeLibrary", "compile_program", "load_object", "pool_slots",
           "DATA_OFFSET", "FLAGS_OFFSET", "target_id"]
