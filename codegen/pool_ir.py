"""The persistent worker pool that runs generated code's parallel loops: its LLVM module.

Compiled object code is cached on disk and linked into other processes, so it cannot embed the
pool's address: the pool is a separate module built and linked once per process, and generated
programs receive `onnxjit_parallel_for` (and the thread count) through two extra slots at the
end of their consts pointer table (see `llvmgen`).

    void onnxjit_parallel_for(void (*fn)(void* ctx, i64 begin, i64 end), void* ctx, i64 n,
                              i64 grain, i64 nthreads)

Algorithm:
1) Serial fast path: t = min(nthreads, n / grain); with t <= 1, or when another thread is
   dispatching (`trylock` on the dispatch mutex fails: concurrent callers run their loop
   serially on their own thread, which never deadlocks and keeps every core busy anyway), the
   caller runs fn(ctx, 0, n) itself.
2) Workers are created lazily with pthread_create, up to t - 1 (the caller works too), and live
   for the rest of the process. Each waits on a condition variable until the job generation
   changes: idle workers block in the kernel (after a short spin following each job).
3) A dispatch publishes (fn, ctx, n, chunk, part), resets the parts' counters, opens the job,
   bumps the generation and broadcasts. Workers with index < t - 1 join (under the mutex:
   `active += 1`) while the job is open, then claim chunks of `chunk` iterations with atomic
   adds on the counters of the parts (4). The caller claims chunks too; when every part is
   drained it closes the job (no late joiner can touch the counters of a later job) and waits
   on a second condition variable until `active` is 0, so every chunk has finished when
   parallel_for returns.
   Both sides poll before blocking: workers briefly (SPIN, with `pause`) for the next job; the
   caller, inside a call, polls for the last worker, briefly with `pause`, then with
   sched_yield between polls (CALLER_SPIN): on an idle core that is a spin without a futex
   round trip, and a worker sharing the caller's core still gets to run.
4) Chunks: about 4 per thread (dynamic load balance) but never below `grain` iterations; a
   heavy body (grain < 16) takes a chunk up to 7 smaller (at least half) when n is then a
   multiple of chunk * t (EVEN_PARTS: 28 blocks on two threads as 14 chunks of 2, not 7 of
   4, where the thread left with the 7th chunk made the other wait a chunk's time); a
   cheap body (grain >= 16) gets chunk boundaries on multiples of 16 so vector loops stay
   aligned. The range is cut into t parts of whole chunks, each with its own counter (a cache
   line apart): participant p (the caller is 0, worker i is i + 1) drains part p first, then
   helps with parts p+1, ..., p-1. So a loop run again and again (the steps of an RNN, the
   calls of a model) gives each thread the same iterations each time, and the data they touch
   (an LSTM's recurrent weights: 1 MB, half of it per core) stays in that core's cache, while
   a late or preempted thread's chunks are still taken by the others.
5) Steering: a worker woken on the caller's CPU would share that CPU with the caller, and the
   call would take as long as on one thread. Linux does put it there on machines whose other
   CPU has been idle for some milliseconds (measured on 2-vCPU VMs: after a 20 ms pause, a
   two-thread call ran at one thread's speed in most calls). So the workers run on the pool's
   CPUs (the dispatching thread's affinity when the first worker starts) minus the CPU the
   caller is on: each dispatch reads it (`sched_getcpu`, a few ns) and, only when it differs
   from the last dispatch's (or a worker was added), sets every worker's affinity to that set
   with `pthread_setaffinity_np` (or to all the pool's CPUs when the caller's is the only
   one). Workers are named `onnxjit-worker` (in `top -H`, `/proc/PID/task/*/comm`).
6) After os.fork() the child has no workers but a copy of the pool's state:
   `onnxjit_pool_control(1)` (a fork handler, see `pool.py`) zeroes every global (zeroed
   storage is a valid PTHREAD_*_INITIALIZER on glibc and musl).
7) With $ONNXJIT_POOL_TRACE set, every dispatch also records its times (`pool_trace`).

All shared state is accessed with seq_cst atomics, so LLVM never caches it across the calls into
pthread (the mutex also orders it). The module has no addresses in it: the pthread functions
are undefined symbols resolved when it is linked, like libm's in generated code.
"""

from __future__ import annotations

from llvmlite import ir

from onnxjit.codegen.irutil import Callee
from onnxjit.codegen.mathlib import intrinsic
from onnxjit.codegen.pool_trace_ir import Tracer

PTR = ir.PointerType()
I32 = ir.IntType(32)
I64 = ir.IntType(64)
VOID = ir.VoidType()
#: pthread_mutex_t / pthread_cond_t storage: 40 and 48 bytes on glibc x86-64; room to spare
SYNC_BYTES = 64
MAX_WORKERS = 255
CHUNKS_PER_THREAD = 4
#: heavy loops take chunks that split the range into equal parts when a slightly smaller
#: chunk does (`_even_parts`). Measured, two threads, MobileNetV2-like's 16->96 expansion at
#: 112x112 (28 blocks): the caller's wait for the worker 64 -> 0.1 us, the dispatch 252 ->
#: 220 us; the model 1.00-1.03x, ResNet-like 1.07x; LSTM, SqueezeNet, Inception-v2 alike.
EVEN_PARTS = True
PTHREAD_SYMBOLS = ("pthread_create", "pthread_mutex_lock", "pthread_mutex_unlock",
                   "pthread_mutex_trylock", "pthread_cond_wait", "pthread_cond_broadcast",
                   "sched_yield", "sched_getcpu", "sched_getaffinity", "pthread_setaffinity_np",
                   "pthread_setname_np")
_STATE = ("gen", "started", "job_fn", "job_ctx", "job_n", "job_chunk", "job_part", "job_workers",
          "job_open", "active", "steered")
#: i64 words between two parts' chunk counters (one cache line each)
NEXT_STRIDE = 8
_SYNC = ("mu", "dispatch", "cv_work", "cv_done")
#: CPU masks of 8192 CPUs (glibc's cpu_set_t holds 1024; the kernel takes any multiple of 8)
MASK_WORDS = 128
WORKER_NAME = "onnxjit-worker"
#: polls of a short spin (with `pause`, some tens of microseconds) before blocking after a job:
#: back-to-back dispatches of one call then skip the futex round trip
SPIN = 1000
#: polls with `pause` (some 5 us), then sched_yield polls, of the caller waiting for the last
#: worker before it blocks. A yield is a system call: polling with yields only, the caller saw
#: the last worker finish 0.50-0.57 us late, with pauses first 0.34-0.40 (the LSTM's steps)
CALLER_PAUSE, CALLER_SPIN = 200, 2000


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


class _Builder:
    """Builds the pool module; `g[name]` are the globals."""

    def __init__(self, triple: str, data_layout: str, names: tuple[str, str], trace: bool):
        self.entry, self.control = names
        m = self.module = ir.Module(name="onnxjit_pool")
        m.triple, m.data_layout = triple, data_layout
        self.x86 = triple.startswith(("x86_64", "i386", "i686"))
        self.g: dict[str, ir.GlobalVariable] = {}
        self.trace = Tracer(m, self._global) if trace else None
        for name in _SYNC:
            self._global(name, ir.ArrayType(ir.IntType(8), SYNC_BYTES), 16)
        for name in _STATE:
            self._global(name, I64, 8)
        self._global("threads", ir.ArrayType(I64, MAX_WORKERS), 8)  # pthread_t of each worker
        # the next chunk of each part, one cache line apart
        self._global("next", ir.ArrayType(I64, (MAX_WORKERS + 1) * NEXT_STRIDE), 64)
        self._global("cpus", ir.ArrayType(I64, MASK_WORDS), 8)  # the pool's CPUs
        name = bytearray(WORKER_NAME.encode() + b"\0")
        gv = ir.GlobalVariable(m, ir.ArrayType(ir.IntType(8), len(name)), "onnxjit_pool_name")
        gv.initializer = ir.Constant(gv.value_type, name)
        gv.linkage, gv.global_constant, gv.type = "internal", True, PTR
        self.name = gv
        decl = {"pthread_create": (I32, [PTR] * 4), "pthread_cond_wait": (I32, [PTR, PTR]),
                "sched_yield": (I32, []), "sched_getcpu": (I32, []),
                "sched_getaffinity": (I32, [I32, I64, PTR]),
                "pthread_setaffinity_np": (I32, [I64, I64, PTR]),
                "pthread_setname_np": (I32, [I64, PTR])}
        self.f: dict[str, ir.Function] = {}
        for name in PTHREAD_SYMBOLS:
            ret, args = decl.get(name, (I32, [PTR]))
            self.f[name] = ir.Function(m, ir.FunctionType(ret, args), name)
        self.task_ty = ir.FunctionType(VOID, [PTR, I64, I64])

    def _global(self, name: str, ty: ir.Type, align: int) -> ir.GlobalVariable:
        gv = ir.GlobalVariable(self.module, ty, f"onnxjit_pool_{name}")
        gv.initializer = ir.Constant(ty, None)
        gv.linkage = "internal"
        gv.align = align
        gv.type = PTR  # llvmlite would print a typed pointer; LLVM 22 IR is opaque `ptr`
        self.g[name] = gv
        return gv

    # atomics on the state globals -------------------------------------------------------------
    def get(self, b: ir.IRBuilder, name: str) -> ir.Value:
        ty = PTR if name in ("job_fn", "job_ctx") else I64
        return b.load_atomic(self.g[name], "seq_cst", 8, typ=ty)

    def set(self, b: ir.IRBuilder, name: str, value: ir.Value) -> None:
        if isinstance(value.type, ir.PointerType):
            value = b.ptrtoint(value, I64)
        b.atomic_rmw("xchg", self.g[name], value, "seq_cst")

    def spin(self, b: ir.IRBuilder, name: str, pred: str, value: ir.Value, polls: int = 0,
             yield_cpu: bool = False) -> None:
        """Poll the global `name` until `name <pred> value` holds or `polls` (default SPIN)
        polls went by, pausing (or with `yield_cpu`, calling sched_yield) between polls."""
        def stop(b: ir.IRBuilder, i: ir.Value) -> ir.Value:
            hit = b.icmp_signed(pred, self.get(b, name), value)
            return b.or_(hit, b.icmp_signed(">=", i, _c(polls or SPIN)))

        def wait(b: ir.IRBuilder, i: ir.Value) -> None:
            if yield_cpu:
                self.call(b, "sched_yield")
            elif self.x86:
                b.call(intrinsic(self.module, "llvm.x86.sse2.pause", VOID, []), [])

        self.loop(b, "spin", stop, wait)

    def word(self, b: ir.IRBuilder, name: str | ir.Value, i: ir.Value) -> ir.Value:
        """Address of element `i` of the i64 array global `name` (or of an alloca)."""
        base = self.g[name] if isinstance(name, str) else name
        return b.gep(base, [i], inbounds=True, source_etype=I64)

    def count(self, b: ir.IRBuilder, n: ir.Value, body) -> None:
        """for (i = 0; i < n; i++) body(b, i)"""
        self.loop(b, "for", lambda b, i: b.icmp_signed(">=", i, n), body)

    def loop(self, b: ir.IRBuilder, tag: str, stop, body) -> None:
        """for (i = 0; !stop(b, i); i++) body(b, i), left at the block after the loop."""
        fn = b.block.function
        head, loop, done = (fn.append_basic_block(f"{tag}.{x}") for x in ("head", "body", "end"))
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name="i")
        i.add_incoming(_c(0), pre)
        b.cbranch(stop(b, i), done, loop)
        b.position_at_end(loop)
        body(b, i)
        i.add_incoming(b.add(i, _c(1)), b.block)
        b.branch(head)
        b.position_at_end(done)

    def call(self, b: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
        return b.call(self.f[name], list(args))

    def task(self, b: ir.IRBuilder, fn: ir.Value, args: list[ir.Value]) -> None:
        b.call(Callee(fn, self.task_ty), args)

    # functions --------------------------------------------------------------------------------
    def build(self) -> str:
        self.run_chunks = self._run_chunks()
        self.worker = self._worker()
        self.steer = self._steer()
        self._dispatch()
        self._control()
        return str(self.module)

    def _fn(self, name: str, ret: ir.Type, args: list[ir.Type], internal: bool = True
            ) -> tuple[ir.Function, ir.IRBuilder]:
        fn = ir.Function(self.module, ir.FunctionType(ret, args), name)
        fn.attributes.add("nounwind")
        if internal:
            fn.linkage = "internal"
        return fn, ir.IRBuilder(fn.append_basic_block("entry"))

    def _run_chunks(self) -> ir.Function:
        """Participant p of t: claim chunks of its own part until it is done, then of the
        parts after it (p+1, ..., p-1 mod t), running fn on each."""
        fn, b = self._fn("onnxjit_pool_run_chunks", VOID, [PTR, PTR, I64, I64, I64, I64, I64])
        task, ctx, n, chunk, part, t, p = fn.args

        def drain(b: ir.IRBuilder, i: ir.Value) -> None:
            q = b.add(p, i)
            q = b.select(b.icmp_signed(">=", q, t), b.sub(q, t), q)
            end = b.mul(b.add(q, _c(1)), part)
            end = b.select(b.icmp_signed("<", end, n), end, n)
            counter = self.word(b, "next", b.mul(q, _c(NEXT_STRIDE)))
            head, body, done = (fn.append_basic_block(x) for x in ("head", "body", "done"))
            b.branch(head)
            b.position_at_end(head)
            start = b.atomic_rmw("add", counter, chunk, "seq_cst")
            b.cbranch(b.icmp_signed(">=", start, end), done, body)
            b.position_at_end(body)
            stop = b.add(start, chunk)
            self.task(b, task, [ctx, start, b.select(b.icmp_signed("<", stop, end), stop, end)])
            b.branch(head)
            b.position_at_end(done)

        self.count(b, t, drain)
        if self.trace is not None:
            worker, out = fn.append_basic_block("traced"), fn.append_basic_block("out")
            b.cbranch(b.icmp_signed("!=", fn.args[-1], _c(0)), worker, out)
            b.position_at_end(worker)
            self.trace.worker_done(b)
            b.branch(out)
            b.position_at_end(out)
        b.ret_void()
        return fn

    def _worker(self) -> ir.Function:
        fn, b = self._fn("onnxjit_pool_worker", PTR, [PTR])
        idx = b.ptrtoint(fn.args[0], I64)
        seen = b.alloca(I64, name="seen")
        seen.type = PTR
        b.store(_c(0), seen)
        mu = self.g["mu"]
        self.call(b, "pthread_mutex_lock", mu)
        wait, sleep, woke, work = (fn.append_basic_block(x)
                                   for x in ("wait", "sleep", "woke", "work"))
        b.branch(wait)
        b.position_at_end(wait)
        gen = self.get(b, "gen")
        b.cbranch(b.icmp_signed("==", gen, b.load(seen, typ=I64)), sleep, woke)
        b.position_at_end(sleep)
        self.call(b, "pthread_cond_wait", self.g["cv_work"], mu)
        b.branch(wait)
        b.position_at_end(woke)
        b.store(gen, seen)
        join = b.and_(b.icmp_signed("!=", self.get(b, "job_open"), _c(0)),
                      b.icmp_signed("<", idx, self.get(b, "job_workers")))
        b.cbranch(join, work, wait)
        b.position_at_end(work)
        b.atomic_rmw("add", self.g["active"], _c(1), "seq_cst")
        args = [self.get(b, x) for x in ("job_fn", "job_ctx", "job_n", "job_chunk", "job_part")]
        args += [b.add(self.get(b, "job_workers"), _c(1)), b.add(idx, _c(1))]
        self.call(b, "pthread_mutex_unlock", mu)
        b.call(self.run_chunks, args)
        self.call(b, "pthread_mutex_lock", mu)
        old = b.atomic_rmw("sub", self.g["active"], _c(1), "seq_cst")
        last, idle = fn.append_basic_block("last"), fn.append_basic_block("idle")
        b.cbranch(b.icmp_signed("==", old, _c(1)), last, idle)
        b.position_at_end(last)
        self.call(b, "pthread_cond_broadcast", self.g["cv_done"])
        b.branch(idle)
        b.position_at_end(idle)  # spin briefly for the next job before blocking
        self.call(b, "pthread_mutex_unlock", mu)
        self.spin(b, "gen", "!=", b.load(seen, typ=I64))
        self.call(b, "pthread_mutex_lock", mu)
        b.branch(wait)
        return fn

    def _steer(self) -> ir.Function:
        """Keep the workers off the caller's CPU (5 in the module docstring). Called by the
        dispatching thread only, so `steered` needs no lock."""
        fn, b = self._fn("onnxjit_pool_steer", VOID, [])
        go, ret = fn.append_basic_block("go"), fn.append_basic_block("ret")
        cpu = b.sext(self.call(b, "sched_getcpu"), I64)
        key = b.add(cpu, _c(1))
        fresh = b.and_(b.icmp_unsigned("<", cpu, _c(MASK_WORDS * 64)),
                       b.icmp_signed("!=", key, self.get(b, "steered")))
        b.cbranch(fresh, go, ret)
        b.position_at_end(go)
        self.set(b, "steered", key)
        mask = b.alloca(ir.ArrayType(I64, MASK_WORDS), name="mask")
        mask.type = PTR
        own, bit = b.lshr(cpu, _c(6)), b.shl(_c(1), b.and_(cpu, _c(63)))
        # acc[0]: OR of the pool's CPU words, acc[1]: the same without the caller's CPU
        acc = b.alloca(I64, size=_c(2), name="acc")
        acc.type = PTR
        b.store(_c(0), acc)
        b.store(_c(0), self.word(b, acc, _c(1)))

        def copy(b: ir.IRBuilder, i: ir.Value) -> None:
            w = b.load(self.word(b, "cpus", i), typ=I64)
            b.store(b.or_(b.load(acc, typ=I64), w), acc)
            w = b.select(b.icmp_signed("==", i, own), b.and_(w, b.not_(bit)), w)
            b.store(w, self.word(b, mask, i))
            other = self.word(b, acc, _c(1))
            b.store(b.or_(b.load(other, typ=I64), w), other)

        self.count(b, _c(MASK_WORDS), copy)
        has, apply = fn.append_basic_block("has"), fn.append_basic_block("apply")
        b.cbranch(b.icmp_signed("==", b.load(acc, typ=I64), _c(0)), ret, has)
        b.position_at_end(has)  # when the caller's CPU is the pool's only one, keep it
        alone = b.icmp_signed("==", b.load(self.word(b, acc, _c(1)), typ=I64), _c(0))
        restore = b.load(self.word(b, "cpus", own), typ=I64)
        word = self.word(b, mask, own)
        b.store(b.select(alone, restore, b.load(word, typ=I64)), word)
        b.branch(apply)
        b.position_at_end(apply)
        self.count(b, self.get(b, "started"), lambda b, i: self.call(
            b, "pthread_setaffinity_np", b.load(self.word(b, "threads", i), typ=I64),
            _c(MASK_WORDS * 8), mask))
        b.branch(ret)
        b.position_at_end(ret)
        b.ret_void()
        return fn

    def _dispatch(self) -> None:
        fn, b = self._fn(self.entry, VOID, [PTR, PTR, I64, I64, I64], internal=False)
        task, ctx, n, grain, nthreads = fn.args
        blocks = {x: fn.append_basic_block(x) for x in (
            "serial", "try", "spawn", "create", "spawned", "unlock_serial", "run", "wait",
            "sleep", "done")}
        tr = self.trace
        start = tr.now(b) if tr is not None else None
        grain = b.select(b.icmp_signed("<", grain, _c(1)), _c(1), grain)
        t = b.sdiv(n, grain)
        t = b.select(b.icmp_signed("<", nthreads, t), nthreads, t)
        b.cbranch(b.icmp_signed("<=", t, _c(1)), blocks["serial"], blocks["try"])

        b.position_at_end(blocks["serial"])
        self.task(b, task, [ctx, _c(0), n])
        if tr is not None:
            tr.record(b, n, start, _c(0), _c(0))
        b.ret_void()

        b.position_at_end(blocks["try"])
        busy = self.call(b, "pthread_mutex_trylock", self.g["dispatch"])
        want = b.sub(t, _c(1))
        want = b.select(b.icmp_signed("<", want, _c(MAX_WORKERS)), want, _c(MAX_WORKERS))
        b.cbranch(b.icmp_signed("!=", busy, ir.Constant(I32, 0)), blocks["serial"],
                  blocks["spawn"])

        # lazily start workers (only the dispatching thread touches `started`)
        b.position_at_end(blocks["spawn"])
        started = self.get(b, "started")
        b.cbranch(b.icmp_signed("<", started, want), blocks["create"], blocks["spawned"])
        b.position_at_end(blocks["create"])
        first, create = fn.append_basic_block("first"), fn.append_basic_block("create.thread")
        b.cbranch(b.icmp_signed("==", started, _c(0)), first, create)
        b.position_at_end(first)  # the pool's CPUs: the first dispatcher's affinity
        self.call(b, "sched_getaffinity", ir.Constant(I32, 0), _c(MASK_WORDS * 8),
                  self.g["cpus"])
        b.branch(create)
        b.position_at_end(create)
        tid = self.word(b, "threads", started)
        rc = self.call(b, "pthread_create", tid, ir.Constant(PTR, None), self.worker,
                       b.inttoptr(started, PTR))
        ok = fn.append_basic_block("created")
        b.cbranch(b.icmp_signed("==", rc, ir.Constant(I32, 0)), ok, blocks["spawned"])
        b.position_at_end(ok)
        self.call(b, "pthread_setname_np", b.load(tid, typ=I64), self.name)
        self.set(b, "started", b.add(started, _c(1)))
        self.set(b, "steered", _c(0))  # the new worker has not been steered yet
        b.branch(blocks["spawn"])

        b.position_at_end(blocks["spawned"])
        avail = b.add(self.get(b, "started"), _c(1))
        t = b.select(b.icmp_signed("<", avail, t), avail, t)
        b.cbranch(b.icmp_signed("<=", t, _c(1)), blocks["unlock_serial"], blocks["run"])
        b.position_at_end(blocks["unlock_serial"])
        self.call(b, "pthread_mutex_unlock", self.g["dispatch"])
        b.branch(blocks["serial"])

        b.position_at_end(blocks["run"])
        b.call(self.steer, [])
        per = b.sdiv(b.add(n, b.sub(b.mul(t, _c(CHUNKS_PER_THREAD)), _c(1))),
                     b.mul(t, _c(CHUNKS_PER_THREAD)))
        chunk = b.select(b.icmp_signed("<", per, grain), grain, per)
        if EVEN_PARTS:
            chunk = self._even_parts(b, n, t, chunk, grain)
        aligned = b.and_(b.add(chunk, _c(15)), _c(-16))
        chunk = b.select(b.icmp_signed(">=", grain, _c(16)), aligned, chunk)
        chunks = b.sdiv(b.add(n, b.sub(chunk, _c(1))), chunk)
        part = b.mul(b.sdiv(b.add(chunks, b.sub(t, _c(1))), t), chunk)
        mu = self.g["mu"]
        if tr is not None:
            tr.reset_worker_done(b)
        self.call(b, "pthread_mutex_lock", mu)
        self.count(b, t, lambda b, q: b.atomic_rmw(
            "xchg", self.word(b, "next", b.mul(q, _c(NEXT_STRIDE))), b.mul(q, part), "seq_cst"))
        for name, value in (("job_fn", task), ("job_ctx", ctx), ("job_n", n),
                            ("job_chunk", chunk), ("job_part", part),
                            ("job_workers", b.sub(t, _c(1))), ("job_open", _c(1))):
            self.set(b, name, value)
        self.set(b, "gen", b.add(self.get(b, "gen"), _c(1)))
        self.call(b, "pthread_cond_broadcast", self.g["cv_work"])
        self.call(b, "pthread_mutex_unlock", mu)
        b.call(self.run_chunks, [task, ctx, n, chunk, part, t, _c(0)])
        caller_done = tr.now(b) if tr is not None else None
        self.call(b, "pthread_mutex_lock", mu)
        self.set(b, "job_open", _c(0))
        self.call(b, "pthread_mutex_unlock", mu)
        self.spin(b, "active", "==", _c(0), CALLER_PAUSE)
        self.spin(b, "active", "==", _c(0), CALLER_SPIN, yield_cpu=True)
        self.call(b, "pthread_mutex_lock", mu)
        b.branch(blocks["wait"])
        b.position_at_end(blocks["wait"])
        b.cbranch(b.icmp_signed("==", self.get(b, "active"), _c(0)), blocks["done"],
                  blocks["sleep"])
        b.position_at_end(blocks["sleep"])
        self.call(b, "pthread_cond_wait", self.g["cv_done"], mu)
        b.branch(blocks["wait"])
        b.position_at_end(blocks["done"])
        self.call(b, "pthread_mutex_unlock", mu)
        if tr is not None:  # before the dispatch lock goes: the next job resets worker_done
            tr.record(b, n, start, caller_done, b.load_atomic(tr.wdone, "seq_cst", 8, typ=I64))
        self.call(b, "pthread_mutex_unlock", self.g["dispatch"])
        b.ret_void()

    def _even_parts(self, b: ir.IRBuilder, n: ir.Value, t: ir.Value, chunk: ir.Value,
                    grain: ir.Value) -> ir.Value:
        """For a heavy loop (grain < 16): the largest c in [max(grain, chunk - 7,
        ceil(chunk / 2)), chunk] with n a multiple of c * t, so every part is the same whole
        number of chunks; else `chunk` (4 in the module docstring)."""
        fn = b.block.function
        blocks = [fn.append_basic_block(f"even.{x}") for x in ("head", "test", "hit", "done")]
        head, test, hit, done = blocks
        lo = b.select(b.icmp_signed(">", grain, b.sub(chunk, _c(7))), grain,
                      b.sub(chunk, _c(7)))
        half = b.sdiv(b.add(chunk, _c(1)), _c(2))
        lo = b.select(b.icmp_signed(">", half, lo), half, lo)
        pre = b.block
        b.cbranch(b.icmp_signed("<", grain, _c(16)), head, done)
        b.position_at_end(head)
        c = b.phi(I64, name="c")
        c.add_incoming(chunk, pre)
        b.cbranch(b.icmp_signed("<", c, lo), done, test)
        b.position_at_end(test)
        c.add_incoming(b.sub(c, _c(1)), test)
        b.cbranch(b.icmp_signed("==", b.srem(n, b.mul(c, t)), _c(0)), hit, head)
        b.position_at_end(hit)
        b.branch(done)
        b.position_at_end(done)
        out = b.phi(I64, name="chunk")
        out.add_incoming(chunk, pre)
        out.add_incoming(chunk, head)
        out.add_incoming(c, hit)
        return out

    def _control(self) -> None:
        """i64 control(i64 op): the number of workers started; op 1 first zeroes every
        global (the child side of a fork); op 2 returns the trace ring's address instead (0
        without tracing, `pool_trace`)."""
        fn, b = self._fn(self.control, I64, [I64], internal=False)
        ring, check, zero, done = map(fn.append_basic_block, ("ring", "check", "zero", "done"))
        b.cbranch(b.icmp_signed("==", fn.args[0], _c(2)), ring, check)
        b.position_at_end(ring)
        b.ret(self.trace.address(b) if self.trace is not None else _c(0))
        b.position_at_end(check)
        b.cbranch(b.icmp_signed("==", fn.args[0], _c(1)), zero, done)
        b.position_at_end(zero)
        for gv in self.g.values():
            b.store(ir.Constant(gv.value_type, None), gv)
        b.branch(done)
        b.position_at_end(done)
        b.ret(self.get(b, "started"))


def pool_ir(triple: str, data_layout: str, entry: str, control: str, trace: bool = False) -> str:
    """The pool module's IR: entries `entry`, `control`; `trace` records each dispatch."""
    return _Builder(triple, data_layout, (entry, control), trace).build()
