"""Linking object code into the process, without importing LLVM.

`load_object(obj)` links a `CompiledObject`: first with the project's own ELF loader
(`elf_loader.load_elf`: mmap, relocate, resolve libc/libm/pthread symbols with dlsym — about
0.3 ms, and no llvmlite import, which alone costs ~20 ms), and if that loader refuses the object
(an unknown relocation, an unresolvable symbol, a non-ELF host) through LLVM's MCJIT
(`jit.load_object_mcjit`). Either way the result offers `entry_addr`, `entry_py_addr`,
`address(name)` and keeps the code alive. A program compiled in parts (`obj.parts`, kernel
groups) links each part first, then the entry's object with the parts' symbols.
"""

from __future__ import annotations

from typing import Any

from onnxjit.codegen.objects import CompiledObject


def load_object(obj: CompiledObject) -> Any:
    """Link object code into this process (no recompilation); see the module docstring."""
    from onnxjit.codegen.elf_loader import ElfLoadError, load_compiled

    try:
        return load_compiled(obj)
    except ElfLoadError:
        from onnxjit.codegen.jit import load_object_mcjit

        return load_object_mcjit(obj)
