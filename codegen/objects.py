"""Object code of one program: `CompiledObject`, what the disk cache stores.

Object code plus the names of its entry points and what the runtime needs to call them (the
number of I/O pointers and constants, whether the code dispatches to the worker pool, the name
of its CPython fast-call trampoline) and, for a program compiled in parts (`workers`), the
object code of its kernel groups, which the entry's object calls. `link.load_object` links it
into the process; this module
imports nothing, so the disk cache can unpickle entries without the code generator.
"""

from __future__ import annotations


class CompiledObject:
    """Object code of one Program and the names of its entry points. `uses_pool`: the code
    dispatches parallel loops to the worker pool (see `pool_slots`). `fastcall`: the name of
    its CPython fast-call trampoline (`pyentry`), empty when absent. `parts`: object code the
    entry's object refers to (kernel groups), linked first. `side`: what the caller's side work
    returned (`jit.compile_program`), never stored."""

    def __init__(self, object_code: bytes, entry: str, entry_py: str, n_io: int,
                 n_consts: int, uses_pool: bool = True, fastcall: str = "",
                 parts: tuple[bytes, ...] = ()) -> None:
        self.object_code = object_code
        self.entry = entry
        self.entry_py = entry_py
        self.n_io = n_io
        self.n_consts = n_consts
        self.uses_pool = uses_pool
        self.fastcall = fastcall
        self.parts = parts
        self.side: object = None
