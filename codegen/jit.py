"""From a loop-IR Program to object code, and from object code to callable addresses.

`compile_program`: 1) build the LLVM module (`llvmgen.build_module`) with placeholder symbol
names, then name the symbols `onnxjit_<program>_<hash>` where the hash is of the module text, so
several programs load into one process without clashes and the same program always gets the same
names (dumps are deterministic); 2) parse and verify it; 3) optimise with the new pass manager's
O<opt_level> pipeline for the host CPU (loop and SLP vectorization on, no fast-math: the IR only
carries fast-math flags where a Matmul reduction allows reassociation), then inline the masked
vector variants the vectorizer called (`vector_variants`: rare slow paths of math functions
become branches in the vector loop); 4) emit object code for a
target machine built from the host's CPU name and features. `dump(name, text)` receives
"llvm.ll", "llvm-opt.ll" and "asm.s" in that order.

A program whose kernels add up to more than `workers.MIN_COST` compiles in parts instead: its
kernel groups and its entry module in worker processes (in parallel, and interruptible:
`workers`, `modules.build_entry_module`), the entry's worker also doing the caller's `side`
work (the worker pool's compile, when the process has none yet); the symbols then carry a
digest of `salt` (the runtime passes the cache key). Dumps always come from one module
(`dump` given).

Each module also carries the fast-call trampoline (`pyentry`, named `<prefix>_fastcall`).
`load_object_mcjit` links with LLVM (an MCJIT engine over an empty module gets the object file
added and finalised); the usual linker is `link.load_object`'s ELF loader, which needs no
LLVM at all. The C library
symbols generated code may call (libm's `exp`, `log`, `tanh`, `erf`, `pow`, `powf`, `fmod`,
`fmodf`, `memset`/`memcpy` that LLVM forms from loops, and the pthread functions of the worker
pool) are registered with LLVM once, from the addresses the process's own C library gives.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import llvmlite.binding as llvm

from onnxjit import timings
from onnxjit.codegen import gemm_objects, pyentry, target
from onnxjit.codegen.entry import n_io
from onnxjit.codegen.gemm_micro import module_text
from onnxjit.codegen.irutil import LOOP_SELF
from onnxjit.codegen.llvmgen import uses_pool
from onnxjit.codegen.modules import (
    build_entry_module,
    build_module,
    fingerprint,
    plan_kernels,
)
from onnxjit.codegen.objects import CompiledObject
from onnxjit.codegen.pool_ir import PTHREAD_SYMBOLS
from onnxjit.codegen.vector_variants import inline_variants
from onnxjit.digest import hexdigest
from onnxjit.errors import CompileError
from onnxjit.ir.loops import Program
from onnxjit.timings import Laps

_PLACEHOLDER = "onnxjit_PROGRAMID"
_LOOP_SELF = re.compile(r'(!\d+) = !\{ !"' + re.escape(LOOP_SELF) + r'\.\d+",')
_LIBC_SYMBOLS = ("exp", "expm1", "log", "tanh", "erf", "pow", "powf", "fmod", "fmodf", "expf",
                 "logf", "tanhf", "erff", "memset", "memcpy", "memmove",
                 # the worker pool's; in libc since glibc 2.34, else libpthread
                 *PTHREAD_SYMBOLS)
_symbols_done = False
#: LLVM's global context is not thread-safe: one compile or link at a time per process
_llvm_lock = threading.RLock()


class NativeLibrary:
    """Linked code of one CompiledObject; keeps the execution engine (and the code) alive."""

    def __init__(self, engine: llvm.ExecutionEngine, obj: CompiledObject):
        self.engine = engine
        self.object = obj
        self.entry_addr = engine.get_function_address(obj.entry)
        self.entry_py_addr = engine.get_function_address(obj.entry_py)
        if not self.entry_addr or not self.entry_py_addr:
            raise CompileError(f"object code does not define {obj.entry} / {obj.entry_py}")
        #: ctypes functions calling the entries, made by the runtime once per arity
        self.entry_functions: dict = {}

    def address(self, name: str) -> int:
        return self.engine.get_function_address(name)


def _symbol_name(program: Program) -> str:
    return "onnxjit_" + (re.sub(r"[^A-Za-z0-9_]", "_", program.name) or "main")


def compile_program(program: Program, opt_level: int = 3,
                    dump: Callable[[str, str], None] | None = None,
                    salt: str = "", side: Callable[[], Any] | None = None,
                    store: gemm_objects.ObjectStore | None = None) -> CompiledObject:
    """Compile a Program to object code for this host (see the module docstring). A large
    program compiles in worker processes (`workers`: parallel and interruptible); `salt`
    (e.g. the cache key) then names its symbols, else a digest of its kernels does. `side`:
    work for the entry's worker to do beside the kernels (the worker pool's compile,
    `entries.pool_wanted`); on the worker path its result is the object's `side`. `store`
    keeps the GEMM microkernels' object code between processes (`gemm_objects`)."""
    from onnxjit.codegen import workers

    with _llvm_lock:
        target.init()
        plan = plan_kernels(program)
        if dump is None:
            n_jobs = workers.jobs()
            groups = workers.plan_groups(program, plan, n_jobs)
            if groups is not None:
                try:
                    return _compile_parts(program, plan, groups, n_jobs, opt_level, salt,
                                          side, store)
                except workers.NoWorkers:
                    pass
        return _compile(program, plan, opt_level, dump,
                        workers.keeps_lsr(program, range(len(program.kernels))))


def _compile(program: Program, plan: Any, opt_level: int,
             dump: Callable[[str, str], None] | None, lsr: bool = True) -> CompiledObject:
    laps = Laps("llvm-ir")
    triple, _, _ = target.host()
    module, entry, entry_py = build_module(program, _PLACEHOLDER, triple, target.data_layout(),
                                           plan)
    fastcall = pyentry.build(module, f"{_PLACEHOLDER}_fastcall").name
    text = _distinct_loop_ids(module_text(module))  # before hashing: the ids are a counter
    digest = hexdigest(text.encode())[:16]
    prefix = f"{_symbol_name(program)}_{digest}"
    text = text.replace(_PLACEHOLDER, prefix)
    entry, entry_py, fastcall = (name.replace(_PLACEHOLDER, prefix)
                                 for name in (entry, entry_py, fastcall))
    laps.end()
    obj = compile_module(text, opt_level, dump, lsr)
    return CompiledObject(obj, entry, entry_py, n_io(program), len(program.consts),
                          uses_pool(program), fastcall)


def _compile_parts(program: Program, plan: Any, groups: list[list[int]], n_jobs: int,
                   opt_level: int, salt: str, side: Callable[[], Any] | None = None,
                   store: gemm_objects.ObjectStore | None = None) -> CompiledObject:
    """The kernels in `groups` and the entry module compiled by worker processes (the entry's
    task also runs `side`); the GEMM microkernels they call come first in the parts
    (`gemm_objects`, kept in `store`)."""
    from onnxjit.codegen import workers

    if not salt:  # kernels' names and fingerprints: symbol names need not be unique
        salt = repr([(k.name, fingerprint(k)) for k in program.kernels])
    prefix = f"{_symbol_name(program)}_{hexdigest(salt.encode())[:16]}"

    def entry_object() -> tuple[bytes, str, str, str, Any]:
        with timings.timed("llvm-ir"):
            triple, _, _ = target.host()
            module, entry, entry_py = build_entry_module(program, plan, prefix, triple,
                                                         target.data_layout())
            fastcall = pyentry.build(module, f"{prefix}_fastcall").name
            text = module_text(module)
        obj = compile_module(text, opt_level, None)
        return obj, entry, entry_py, fastcall, side() if side is not None else None

    rec = timings.current()
    listener = rec.listener if rec is not None else None

    def on_group(done: int, total: int) -> None:  # the progress display's text
        if listener is not None:
            listener.begin(f"llvm in {min(n_jobs, total)} workers: {done}/{total}")

    t0 = time.perf_counter()
    shared = gemm_objects.shares(program)
    if shared:
        gemm_objects.load(store)
    with gemm_objects.claiming() if shared else contextlib.nullcontext():
        results, (obj, entry, entry_py, fastcall, side_result), cpu = workers.compile_groups(
            program, plan, groups, prefix, n_jobs,
            lambda text, lsr: compile_module(text, opt_level, None, lsr), entry_object,
            on_group)
    used: set[str] = set()
    fresh: dict[str, bytes] = {}
    for _, names, compiled in results:
        used.update(names)
        fresh.update(compiled)
    gemm_objects.remember(fresh, store)
    parts = [*gemm_objects.parts(used), *(code for code, _, _ in results)]
    wall = time.perf_counter() - t0
    busy = sum(cpu.values()) or 1.0
    for stage, seconds in cpu.items():  # the wall time, split as the workers spent theirs
        timings.record(stage, wall * seconds / busy)
    timings.log(timings.DEBUG, "workers' seconds: %s (wall %.2f)",
                ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()), wall)
    compiled = CompiledObject(obj, entry, entry_py, n_io(program), len(program.consts),
                              uses_pool(program), fastcall, parts=tuple(parts))
    compiled.side = side_result
    return compiled


def compile_module(text: str, opt_level: int,
                   dump: Callable[[str, str], None] | None, lsr: bool = True) -> bytes:
    """Object code of one module's LLVM IR text: parse, verify, optimise, emit (without Loop
    Strength Reduction when not `lsr`: `workers.keeps_lsr`)."""
    text = _distinct_loop_ids(text)
    if dump is not None:
        dump("llvm.ll", text)
    laps = Laps("llvm-parse")
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as e:
        raise CompileError(f"codegen produced invalid LLVM IR: {e}") from e
    laps.next("llvm-optimize")
    tm = target.create_target_machine(opt_level)
    optimize(mod, tm, opt_level)
    laps.next("emit-object")
    _use_lsr(lsr)
    if dump is not None:
        dump("llvm-opt.ll", str(mod))
        dump("asm.s", tm.emit_assembly(mod))
    obj = bytes(tm.emit_object(mod))
    laps.end()
    return obj


def _use_lsr(on: bool) -> None:
    """Code generation with or without Loop Strength Reduction from now on: the option is
    process-wide, so every emission sets it (`workers.keeps_lsr`)."""
    llvm.set_option("", f"-disable-lsr={'false' if on else 'true'}")


def _distinct_loop_ids(text: str) -> str:
    """`!N = !{ !"onnxjit.loop.self.K", ...}` -> `!N = distinct !{ !N, ...}`: the self-referring
    loop ids llvmlite cannot print; K (a process-wide counter) leaves the text."""
    return _LOOP_SELF.sub(lambda m: f"{m[1]} = distinct !{{ {m[1]},", text)


def optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine, opt_level: int = 3) -> None:
    """Run the new pass manager's O<opt_level> pipeline with vectorization on, then inline
    the masked vector variants it called (`vector_variants.inline_variants`)."""
    pto = llvm.PipelineTuningOptions(speed_level=max(0, min(opt_level, 3)))
    if opt_level >= 2:
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = True
        pto.loop_interleaving = True
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)
    inline_variants(mod, tm)


def object_code(ir_text: Callable[[str, str], str], opt_level: int = 2) -> bytes:
    """Object code of a hand-written module (the worker pool, the FMA-peak kernel):
    `ir_text(triple, data_layout)` gives its LLVM IR text, verified, optimised at `opt_level`
    for the host and emitted."""
    with _llvm_lock:
        target.init()
        triple, _, _ = target.host()
        mod = llvm.parse_assembly(ir_text(triple, target.data_layout()))
        mod.verify()
        tm = target.create_target_machine(opt_level)
        optimize(mod, tm, opt_level)
        _use_lsr(True)
        return bytes(tm.emit_object(mod))


def _register_libc_symbols() -> None:
    global _symbols_done
    if _symbols_done:
        return
    with _llvm_lock:
        if _symbols_done:
            return
        libs = [ctypes.CDLL(None)]
        for name in ("m", "c", "pthread"):
            path = ctypes.util.find_library(name)
            if path:
                libs.append(ctypes.CDLL(path))
        for sym in _LIBC_SYMBOLS:
            for lib in libs:
                try:
                    addr = ctypes.cast(getattr(lib, sym), ctypes.c_void_p).value
                except AttributeError:
                    continue
                if addr:
                    llvm.add_symbol(sym, addr)
                    break
        _symbols_done = True


def load_object_mcjit(obj: CompiledObject) -> NativeLibrary:
    """Link object code with LLVM's MCJIT (the fallback of `link.load_object`)."""
    target.init()
    _register_libc_symbols()
    triple, _, _ = target.host()
    with _llvm_lock:
        empty = llvm.parse_assembly(f'target triple = "{triple}"\n')
        engine = llvm.create_mcjit_compiler(empty, target.create_target_machine())
        for code in (*obj.parts, obj.object_code):
            engine.add_object_file(llvm.ObjectFileRef.from_data(code))
        engine.finalize_object()
        return NativeLibrary(engine, obj)
