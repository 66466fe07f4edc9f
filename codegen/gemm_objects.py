"""The GEMM microkernels' object code, compiled once per host and shared by symbolic programs.

Every module of a program compiled in parts (`workers`) defines the microkernels its kernels
call (`gemm_micro`): ResNet-50's seven kernel groups compile 51 functions of 33 kinds, a fifth
of its LLVM time, and a process compiling a model for several shapes compiles them again for
each. A symbolic program (the one program of a dynamic-shape stream, compiled while tier 0
answers its first calls: `shares`) links shared ones instead:
1) a group's module declares the microkernels instead (`gemm_micro.module_text(shared=True)`),
   and the worker finds the keys it used (`gemm_micro.used_keys`);
2) of those, the worker compiles the ones this process's table lacks (`_OBJECTS`, inherited
   from the parent by `fork`) and no other worker of this compile claimed first (`claim`: a
   file created exclusively in a folder the parent made, `claiming`), all in one module
   (`gemm_micro.library_module`: external linkage, the usual pipeline) after its group; the
   objects travel back with the group;
3) the parent adds those to its table (`remember`): the process's next compiles reuse them, and
   `store` (the disk cache, `onnxjit.entries.MicroStore`) keeps the table for other processes
   (`load`: read once per store and process, before the workers start);
4) the objects holding the microkernels a program calls become the first `parts` of its
   `CompiledObject`, which the linker links in order, each part with the symbols of the ones
   before (`elf_loader`).
The names are global (`onnxjit.gemm.f32.6x4...`), fixed by the key: each program links its
own copy, so two programs never share code, and a cached artifact holds what it links.
The functions lose what internal linkage gave (LLVM specialising them to the constant
strides and depths their calls pass) and get the attributes LLVM inferred for them
(`gemm_micro.shared_header`); alpha = 1 is a key of its own (`MicroKey.scaled`). Only
symbolic programs share them (`shares`): measured steady state (this Intel host, several builds
of each variant timed interleaved, since the placement of a build's buffers moves a product
by 5%), shared against own copies: ResNet-50 1.00x, SqueezeNet 0.97x; the streams of the
bench's OCR recognizer 0.98x, decoder 0.99x, MiniLM 0.99x. On a host with 16 vector registers
(AVX2) the specialisation is worth more than the LLVM time: the 6x2 tile's 12 accumulators, two
B vectors and a broadcast leave no register for run-time strides and depths. Measured on a
Zen 3 host (AVX2), symbolic against specialised programs, interleaved, own copies against
shared: Winograd 3x3 64->64 at 56x56 one thread 0.73-0.88 -> 0.88-0.91, 128->128 at 28x28
0.69-0.81 -> 1.10-1.13; two threads ResNet-like 0.55 -> 0.76, BERT-tiny 0.73 -> 1.03, LSTM
1.00 -> 1.07, MobileNetV2-like 0.89 -> 0.91; the symbolic compiles (+ first call, cache off)
of MiniLM, ResNet-like and the OCR detector alike within the noise (1.97-2.26 / 2.20-2.61,
2.81-3.07 / 3.09-3.12, 5.04-5.89 / 5.03-5.07 s). So they are shared where vectors are 64
bytes wide (32 registers) only (`shares`, `SHARE_MIN_VECTOR_BYTES`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Protocol

from onnxjit.codegen import target
from onnxjit.codegen.gemm_micro import MicroKey, library_module, module_text, shared_header
from onnxjit.ir.loops import Program

#: Compile a symbolic program's microkernels once per host (above); False defines them in
#: every module, as a program of one signature always does (`shares`).
SHARED = True
#: ... on hosts whose vectors are this wide or wider (32 registers: the module docstring)
SHARE_MIN_VECTOR_BYTES = 64
#: object code by microkernel name, for this host; `_loaded`: the stores already read
_OBJECTS: dict[str, bytes] = {}
_loaded: set[str] = set()
#: the current compile's claim folder (`claiming`)
_CLAIMS: str | None = None


class ObjectStore(Protocol):
    """Where the table lives between processes (`onnxjit.entries.MicroStore`); `ident` names
    the place (read once per process)."""

    ident: str

    def get(self) -> dict[str, bytes]: ...

    def put(self, objects: dict[str, bytes]) -> None: ...


def shares(program: Program) -> bool:
    """Whether `program`'s modules call shared microkernels: a symbolic program's on a host
    with 512-bit vectors. One of a single signature, or on a host with 16 vector registers,
    keeps its own copies, which LLVM specialises to the constant strides and depths of their
    calls (see the module docstring)."""
    return SHARED and program.symbolic and target.vector_bytes() >= SHARE_MIN_VECTOR_BYTES


def load(store: ObjectStore | None) -> None:
    """Add the objects `store` holds to this process's table (once per store)."""
    if store is None or store.ident in _loaded:
        return
    _loaded.add(store.ident)
    for name, code in store.get().items():
        _OBJECTS.setdefault(name, code)


class claiming:  # noqa: N801 - used like a function: `with claiming():`
    """A compile's claim folder (`claim`), made before the workers fork, removed after."""

    def __enter__(self) -> None:
        global _CLAIMS
        _CLAIMS = tempfile.mkdtemp(prefix="onnxjit-micro-")

    def __exit__(self, *exc: object) -> None:
        global _CLAIMS
        folder, _CLAIMS = _CLAIMS, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def claim(keys: list[MicroKey]) -> list[MicroKey]:
    """The keys this worker is to compile: missing from the table and not claimed before."""
    mine = []
    for key in keys:
        if key.name() in _OBJECTS:
            continue
        if _CLAIMS is not None:
            try:
                os.close(os.open(os.path.join(_CLAIMS, key.name()), os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                continue
        mine.append(key)
    return mine


def objects_for(keys: list[MicroKey], compile_text: Callable[[str], bytes]
                ) -> dict[str, bytes]:
    """The object code of microkernels `keys` (one object defining them all), kept here."""
    from onnxjit.codegen.modules import new_module

    if not keys:
        return {}
    triple, _, _ = target.host()
    module = new_module("onnxjit.gemm", triple, target.data_layout())
    for key in keys:
        library_module(module, key)
    text = module_text(module)
    for key in keys:
        text = shared_header(text, key)
    code = compile_text(text)
    fresh = {key.name(): code for key in keys}
    _OBJECTS.update(fresh)
    return fresh


def remember(fresh: dict[str, bytes], store: ObjectStore | None) -> None:
    """Keep objects the workers of a compile compiled, here and in `store` (one write)."""
    new = {name: code for name, code in fresh.items() if name not in _OBJECTS}
    _OBJECTS.update(new)
    if new and store is not None:
        store.put(dict(_OBJECTS))


def parts(names: set[str]) -> list[bytes]:
    """The objects defining microkernels `names`, each once (in name order: deterministic
    artifacts)."""
    return list(dict.fromkeys(_OBJECTS[name] for name in sorted(names)))
