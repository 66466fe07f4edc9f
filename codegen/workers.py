"""Compiling a program's kernels in worker processes: parallel on a machine with cores, and
interruptible (Ctrl-C acts while LLVM works, since LLVM runs in the workers).

LLVM's work (optimisation and code generation: most of a compile) holds llvmlite's global lock
and cannot be interrupted, so threads neither speed it up nor let the caller stop it. Instead:
1) `modules.KernelPlan` picks the kernels that get a function; each gets a cost estimate
   (`kernel_cost`: statements, with a Matmul weighing like the microkernel code it expands to).
2) The kernels are partitioned into `groups` (longest processing time first: each kernel, the
   costliest first, joins the cheapest group), a few per worker so that dynamic scheduling
   balances what the estimate gets wrong; the group ids, costliest first, are written to a task
   pipe whose write end is closed before the workers start.
3) `fork` starts W workers (no re-import, no pickling of the program: a worker is a copy of
   this process). A worker reads a group id (two bytes; EOF: no work left), translates that
   group's kernels into a module of its own with external linkage (`modules.translate_kernels`),
   parses, verifies, optimises and emits it (`jit.compile_module`), and writes one framed
   result (u64 length, then a pickled (group, object code or exception, seconds per stage))
   to its own result pipe. Workers ignore SIGINT (the parent decides) and leave with `os._exit`.
4) The entry module (entry points, kernels declared external: `modules.build_entry_module`)
   is one more task, the first in the pipe (a model with hundreds of inputs has a large
   one). The parent only collects the results with `select`, so Ctrl-C acts at once. A worker's
   exception is raised again in the parent; an exception in the parent (KeyboardInterrupt
   included) kills and reaps the workers first, so nothing outlives the compile.
The objects (one per group, then the entry's) become one `CompiledObject` whose `parts` the
linker (`link.load_object`) loads before the entry. Symbol names carry the program's `salt`
digest instead of a hash of the module text (the text is only known in the workers).
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import struct
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from onnxjit.codegen.modules import KernelPlan, translate_kernels
from onnxjit.errors import CompileError, OnnxJitError
from onnxjit.ir.loops import Kernel, Matmul, Program, walk
from onnxjit.timings import Recorder, recording, timed

#: below this estimated cost (statements) a program compiles in this process, in one module:
#: starting a worker costs 5-20 ms (fork, then a separate entry object); a program with one
#: Matmul or a few hundred statements takes a few hundred ms, and the worker also keeps an
#: interrupt prompt
MIN_COST = 1500
#: what one Matmul statement weighs: its microkernel tiles, stores and tails
MATMUL_COST = 1500
#: groups per worker (dynamic balancing); each group at least GROUP_COST when possible.
#: A program whose modules define their own GEMM microkernels (`gemm_objects.shares`: one of
#: a single signature) compiles them once per group, so it takes fewer groups: measured, fresh
#: processes, this Intel host, 2 workers, alternated, workers' wall time with 2 / 3 groups a
#: worker: ResNet-50 1.61-1.75 / 1.81-2.00 s (compile + first call 2.24-2.41 / 2.45-2.71 s,
#: four runs each), DenseNet-121 1.14-1.19 / 1.20-1.22 s, Inception-v1 3.31-3.36 / 3.33-3.53 s
#: (two runs); symbolic programs (shared microkernels) were no faster with 2.
GROUPS_PER_WORKER = 3
OWN_MICRO_GROUPS_PER_WORKER = 2
GROUP_COST = 1500
_FRAME = struct.Struct("<Q")


class NoWorkers(Exception):
    """Not even one worker process could be started (the caller compiles in-process)."""


def kernel_cost(kernel: Kernel) -> int:
    cost = 1
    for s in walk(kernel.body):
        cost += MATMUL_COST if isinstance(s, Matmul) else 1
    return cost


def jobs() -> int:
    """Worker processes for a compile: $ONNXJIT_COMPILE_JOBS, else the cores this process may
    use (at most 8); 0 compiles in this process."""
    env = os.environ.get("ONNXJIT_COMPILE_JOBS", "").strip()
    if env:
        try:
            return max(0, int(env))
        except ValueError:
            raise OnnxJitError(f"ONNXJIT_COMPILE_JOBS={env!r}: expected a whole number") from None
    if not hasattr(os, "fork"):
        return 0
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


def partition(costs: dict[int, int], n_groups: int) -> list[list[int]]:
    """Kernel indices in `n_groups` groups of about equal cost (LPT), costliest group first."""
    groups: list[list[int]] = [[] for _ in range(max(1, n_groups))]
    load = [0] * len(groups)
    for n in sorted(costs, key=lambda n: (-costs[n], n)):
        g = min(range(len(groups)), key=load.__getitem__)
        groups[g].append(n)
        load[g] += costs[n]
    order = sorted(range(len(groups)), key=lambda g: -load[g])
    return [sorted(groups[g]) for g in order if groups[g]]


#: A symbolic program's conv kernels are emitted without LLVM's Loop Strength Reduction
#: (`keeps_lsr`; the option is process-wide, so it is set per module and these kernels get
#: groups of their own, `plan_groups`). Their index expressions hold run-time strides, and
#: LSR's search over them took 33-65% of a kernel's LLVM time (an OCR detector's depthwise
#: conv: 0.63 of 1.2 s). With LSR off for whole symbolic programs, MiniLM's and a decoder's
#: matmul kernels ran 4-12% slower, hence conv kernels only. Measured on a Zen 3 host, both
#: variants in one process, steady streams interleaved, both orders: OCR detector compile +
#: first call 7.1-7.8 -> 4.5-4.7 s and 1.03-1.06x faster steady, recognizer 4.1 -> 3.3 s
#: and 1.02x; programs without conv kernels unchanged. Static programs keep LSR everywhere.
SYMBOLIC_CONV_NO_LSR = True


def _conv_kernel(program: Program, n: int) -> bool:
    return program.kernels[n].name.startswith("conv")


def _splits_lsr(program: Program) -> bool:
    """Whether the program's conv kernels go without LSR: it is symbolic (and the rule on)."""
    return SYMBOLIC_CONV_NO_LSR and program.symbolic


def keeps_lsr(program: Program, kernels: Iterable[int]) -> bool:
    """Whether a module of these kernels is emitted with Loop Strength Reduction: all but a
    symbolic program's conv kernels (`SYMBOLIC_CONV_NO_LSR`)."""
    return not (_splits_lsr(program) and all(_conv_kernel(program, n) for n in kernels))


def plan_groups(program: Program, plan: KernelPlan, workers: int) -> list[list[int]] | None:
    """The kernel groups to compile in `workers` processes, or None: compile in-process. A
    symbolic program's conv kernels and its other kernels never share a group (`keeps_lsr`)."""
    if workers < 1:
        return None
    costs = {n: kernel_cost(program.kernels[n]) for n in plan.unique}
    total = sum(costs.values())
    if total < MIN_COST:
        return None
    from onnxjit.codegen import gemm_objects

    per_worker = (GROUPS_PER_WORKER if gemm_objects.shares(program)
                  else OWN_MICRO_GROUPS_PER_WORKER)
    n_groups = max(1, min(len(costs), workers * per_worker, total // GROUP_COST))
    if not _splits_lsr(program):
        return partition(costs, n_groups)
    conv = {n: c for n, c in costs.items() if _conv_kernel(program, n)}
    rest = {n: c for n, c in costs.items() if n not in conv}
    share = round(n_groups * sum(conv.values()) / max(total, 1))
    parts = [(conv, max(1, share)), (rest, max(1, n_groups - share))]
    groups = [g for c, k in parts if c for g in partition(c, min(k, len(c)))]
    return sorted(groups, key=lambda g: -sum(costs[n] for n in g))


def compile_groups(program: Program, plan: KernelPlan, groups: list[list[int]], prefix: str,
                   workers: int, compile_text: Callable[[str, bool], bytes],
                   entry_work: Callable[[], Any],
                   on_group: Callable[[int, int], None] | None = None
                   ) -> tuple[list[bytes], Any, dict[str, float]]:
    """Object code of each group (in group order) compiled by `workers` forked processes,
    what `entry_work()` returned (run by a worker too: the first task, since a model with
    hundreds of inputs has a large entry), and the workers' CPU seconds per stage
    (`onnxjit.timings` names). This process only waits, so an interrupt acts at once.
    `compile_text(llvm_ir, lsr)` gives a module's object code (`jit.compile_module`;
    `keeps_lsr`)."""
    entry = len(groups)  # the task id of `entry_work`
    tasks_r, tasks_w = os.pipe()
    order = [entry, *range(len(groups))]
    os.write(tasks_w, b"".join(struct.pack("<H", g) for g in order))
    os.close(tasks_w)
    pids: dict[int, int] = {}  # result fd -> pid

    def work(g: int) -> Any:
        if g == entry:
            return entry_work()
        return _compile_group(program, plan, groups[g], prefix, compile_text)

    try:
        for _ in range(min(workers, len(order))):
            res_r, res_w = os.pipe()
            try:
                with warnings.catch_warnings():  # 3.12+ warns on fork with threads
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
            except OSError:  # no more processes: go on with the workers there are
                os.close(res_r)
                os.close(res_w)
                if pids:
                    break
                raise NoWorkers from None
            if pid == 0:  # the worker
                gc.disable()  # see _worker
                _exit_at_exit()
                os.close(res_r)
                _worker(work, tasks_r, res_w)
            os.close(res_w)
            pids[res_r] = pid
        os.close(tasks_r)
        tasks_r = -1
        cpu: dict[str, float] = {}
        results = _collect(pids, len(order), cpu, on_group)
    finally:
        if tasks_r >= 0:
            os.close(tasks_r)
        _reap(pids)
    return results[:entry], results[entry], cpu


def _exit_at_exit() -> None:
    """Make a C-level `exit` in this worker end it at once: LLVM calls exit(1) on a fatal
    error (say, "ran out of registers"), and exit runs the handlers of the libraries the
    caller loaded, in reverse order of registration; onnxruntime's then waits for threads the
    child does not have and the compile hangs. Registered last, `_exit` runs first, and the
    parent sees a worker that died (a CompileError) instead of one that never ends."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)  # glibc exports __cxa_atexit, not atexit: f(arg) at exit
        libc.__cxa_atexit(ctypes.cast(libc._exit, ctypes.c_void_p), None, None)
    except (OSError, AttributeError):  # not glibc-like: keep the default behaviour
        pass


def _worker(work: Callable[[int], Any], tasks: int, out: int) -> None:
    """A worker's loop. It must not free anything it inherited: objects of the caller (an
    onnxruntime session's thread pool, say) can hang when freed in a forked child. So the
    cyclic collector is off, and an exception (whose context holds the caller's frames) is
    reported and followed by `os._exit` before it is freed."""
    status = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        while True:
            raw = os.read(tasks, 2)
            if len(raw) < 2:
                break
            (g,) = struct.unpack("<H", raw)
            rec = Recorder()  # this task's stage times, for the parent's log
            try:
                with recording(rec):
                    result = work(g)
                payload = (g, result, rec.summary())
            except BaseException as e:  # noqa: BLE001 - any failure goes to the parent
                _write_frame(out, pickle.dumps((g, _portable(e), {}),
                                               protocol=pickle.HIGHEST_PROTOCOL))
                os._exit(0)  # before `e` (its context: the caller's frames) is freed
            _write_frame(out, pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
    except BaseException:  # noqa: BLE001 - a broken pipe: the parent is gone or gave up
        status = 1
    finally:
        os._exit(status)


def _compile_group(program: Program, plan: KernelPlan, group: list[int], prefix: str,
                   compile_text: Callable[[str, bool], bytes]
                   ) -> tuple[bytes, list[str], dict[str, bytes]]:
    """(object code, names of the shared microkernels it calls, the object code of those this
    process had to compile: `gemm_objects`)."""
    from onnxjit.codegen import gemm_objects, target
    from onnxjit.codegen.gemm_micro import module_text, used_keys
    from onnxjit.codegen.modules import new_module

    shared = gemm_objects.shares(program)
    with timed("llvm-ir"):
        triple, _, _ = target.host()
        module = new_module(f"{prefix}.group", triple, target.data_layout())
        translate_kernels(module, program, plan, group, prefix, external=True)
        text = module_text(module, shared)
        keys = used_keys(module) if shared else []
    mine = gemm_objects.claim(keys)
    code = compile_text(text, keeps_lsr(program, group))
    fresh = gemm_objects.objects_for(mine, lambda t: compile_text(t, True))
    return code, [k.name() for k in keys], fresh


def _portable(e: BaseException) -> BaseException:
    """`e` if it pickles and unpickles as itself, else a CompileError with its text."""
    try:
        if isinstance(pickle.loads(pickle.dumps(e)), type(e)):
            return e
    except Exception:  # noqa: BLE001 - unpicklable exception: keep its text
        pass
    return CompileError(f"code generation failed in a worker: {type(e).__name__}: {e}")


def _write_frame(fd: int, data: bytes) -> None:
    view = memoryview(_FRAME.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _collect(pids: dict[int, int], n_groups: int, cpu: dict[str, float],
             on_group: Callable[[int, int], None] | None) -> list[Any]:
    """Read every worker's framed results until each task has its result; the workers'
    seconds per stage are added to `cpu`, `on_group(done, total)` follows each task."""
    buffers = {fd: bytearray() for fd in pids}
    objects: dict[int, bytes] = {}
    open_fds = set(pids)
    while len(objects) < n_groups:
        if not open_fds:
            raise CompileError(f"code generation workers exited with {n_groups - len(objects)}"
                               " tasks not done (a worker crashed or was killed)")
        ready, _, _ = select.select(list(open_fds), [], [])
        for fd in ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                open_fds.discard(fd)
                continue
            buf = buffers[fd]
            buf += chunk
            while len(buf) >= _FRAME.size:
                (n,) = _FRAME.unpack_from(buf)
                if len(buf) < _FRAME.size + n:
                    break
                g, result, stages = pickle.loads(bytes(buf[_FRAME.size:_FRAME.size + n]))
                del buf[:_FRAME.size + n]
                if isinstance(result, BaseException):
                    raise result
                objects[g] = result
                for stage, seconds in stages.items():
                    cpu[stage] = cpu.get(stage, 0.0) + seconds
                if on_group is not None:
                    on_group(len(objects), n_groups)
    return [objects[g] for g in range(n_groups)]


def _reap(pids: dict[int, int]) -> None:
    """Kill workers still running (an error or an interrupt in the parent) and wait for all."""
    for fd, pid in pids.items():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        try:
            os.close(fd)
        except OSError:
            pass
    pids.clear()
