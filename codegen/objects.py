"""Object code and linking it into the process, without importing LLVM.

A `CompiledObject` is what the disk cache stores for one program: object code plus the names of
its entry points. `load_object` links it: first with the project's own ELF loader
(`elf_loader.load_elf`: mmap, relocate, resolve libc/libm/pthread symbols with dlsym — about
0.3 ms, and no llvmlite import, which alone costs ~20 ms), and if that loader refuses the object
(an unknown relocation, an unresolvable symbol, a non-ELF host) through LLVM's MCJIT
(`jit.load_object_mcjit`). Either way the result offers `entry_addr`, `entry_py_addr`,
`address(name)` and keeps the code alive. `pool_slots` are the two words the runtime appends to
a program's consts table for the worker pool.
"""

from __future__ import annotations

from typing import Any


class CompiledObject:
    """Object code of one Program and the names of its entry points. `uses_pool`: the code
    dispatches parallel loops to the worker pool (see `pool_slots`). `fastcall`: the name of
    its CPython fast-call trampoline (`pyentry`), empty when absent."""

    def __init__(self, object_code: bytes, entry: str, entry_py: str, n_io: int,
                 n_consts: int, uses_pool: bool = True, fastcall: str = "") -> None:
        self.object_code = object_code
        self.entry = entry
        self.entry_py = entry_py
        self.n_io = n_io
        self.n_consts = n_consts
        self.uses_pool = uses_pool
        self.fastcall = fastcall


def load_object(obj: CompiledObject) -> Any:
    """Link object code into this process (no recompilation); see the module docstring."""
    from onnxjit.codegen.elf_loader import ElfLoadError, load_elf

    try:
        return load_elf(obj.object_code, obj.entry, obj.entry_py, obj=obj)
    except ElfLoadError:
        from onnxjit.codegen.jit import load_object_mcjit

        return load_object_mcjit(obj)


def pool_slots(obj: CompiledObject, num_threads: int) -> list[int]:
    """The values of the slots the runtime appends to the consts table: `parallel_for`'s
    address (0 when the code never dispatches: the pool is then not even built) and the
    thread count."""
    from onnxjit.codegen.pool import parallel_for_address

    addr = parallel_for_address() if obj.uses_pool and num_threads > 1 else 0
    return [addr, max(1, num_threads)]
