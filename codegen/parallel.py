"""Parallel loops: outlining a kernel's top-level `parallel` Loop into a task for the pool.

Algorithm (per kernel, planned before its function is built so its signature is known):
1) `plan_kernel` picks the statements to run on the pool: a top-level `parallel` Loop whose
   estimated work (trip count x `body_cost`) can reach `SERIAL_OPS` and which reads no variable
   it writes from outside the loop (`_vars`); a `parallel` Loop directly inside a serial
   top-level loop (a recurrence's steps), dispatched once per outer iteration, from the lower
   `NESTED_OPS` (the workers are still spinning from the previous dispatch); a large top-level
   `Matmul`
   (m*n*k >= MATMUL_SPLIT_WORK), which `split_matmul` rewrites as a parallel loop over blocks
   of MB rows of C (plus a serial Matmul for the leftover rows), or, for a product of few
   rows over a large prepacked B, over blocks of its column panels (`split_columns`, a GEMV:
   each thread streams its share of B); the epilogue nest after a row split
   (bias, activation, residual: a nest whose row r touches row r of C alone, `epilogue_fuse`)
   moves into the blocks, on each block's rows, and runs in the block's stores where it can;
   after a column split it is planned as a parallel loop over its rows (`EPILOGUE_ROWS`).
   A kernel with a plan takes two extra arguments: the pool's `parallel_for` pointer and the
   thread count.
2) `emit_parallel` outlines one loop into two internal functions:
   - the body `<kernel>.parN(ptr noalias root..., i64 lo, i64 hi, captured...)`, translated
     like a kernel (its own `noalias` root pointers, so its loops vectorize as before) running
     `for var in [lo, hi) step step`, returning the first failed check's status (or void);
   - the task `<kernel>.parN.task(ctx, begin, end)` that unpacks the context and calls the body
     on iterations [begin, end) (lo = start + begin*step), storing a nonzero status into the
     context's status slot with a compare-and-swap (the first failure wins).
   The kernel fills a stack context {root pointers, captured values, start, status}, calls
   `parallel_for(task, ctx, trip, grain, nthreads)` (with one thread: the task directly, so
   the pool is never built) and returns the status if one was set. The dispatching kernel's
   own pointer arguments lose `noalias`/`captures(none)`: other threads use them.
   `grain` = ceil(CHUNK_OPS / body_cost) iterations (NESTED_CHUNK_OPS for a loop nested in
   a serial loop): the pool runs serially when n < 2 * grain, so loops it cannot split into
   two chunks of work pay one indirect call.
Variables written inside the loop are private to each chunk (allocas in the body function);
variables only read there are captured by value.
"""

from __future__ import annotations

from collections.abc import Iterator

from llvmlite import ir

from onnxjit.codegen.cost import CHUNK_OPS, body_cost, derive_hints, trip_count
from onnxjit.codegen.epilogue_fuse import match as match_epilogue
from onnxjit.codegen.irutil import Callee, i64c
from onnxjit.codegen.scalar import I32, compute_type
from onnxjit.codegen.split_matmul import COLUMN_SPLIT, split_columns, split_matmul, streams_b
from onnxjit.ir.loops import (
    Check,
    Kernel,
    Load,
    Loop,
    Matmul,
    Op,
    Operand,
    Stmt,
    Store,
    Var,
    walk,
)
from onnxjit.ir.types import DType

PTR = ir.PointerType()
I64 = ir.IntType(64)
#: below this much estimated work (scalar ops) a loop runs serially. A dispatch never waits for
#: a worker still waking up (10-50 us from a futex, more in a VM): the caller takes the chunks
#: nobody has claimed, so a loop of two chunks costs its dispatcher the wake-up call at worst,
#: and leaves the worker spinning for the next loop. Measured, two threads, 1M -> 512K (the
#: loops of 512K-1M ops: BERT-tiny's attention softmax, MobileNetV2's stem input split into
#: phases): BERT-tiny 1.08-1.09x; MobileNetV2-like 1.007-1.02x, but its stem (the split and
#: the product) took as long as before in a per-dispatch trace: the split's two-thread run
#: pays the worker's wake-up instead; the chain, the LSTM, ResNet-50, SqueezeNet, MLP batch 1
#: unchanged; 64K gained nothing more
SERIAL_OPS = 1 << 19
#: a parallel loop directly inside a serial top-level loop of at least NESTED_MIN_TRIP
#: iterations dispatches from this much work: only the first dispatch wakes sleeping workers,
#: the later ones find them spinning (`pool_ir.SPIN`) and cost a few microseconds
NESTED_OPS, NESTED_MIN_TRIP = 1 << 18, 8
#: minimum work per chunk of such a nested loop: half of NESTED_OPS, so a loop worth
#: dispatching splits into two chunks at least. It was CHUNK_OPS, twice NESTED_OPS: an LSTM
#: with hidden 64 (4 blocks of 91K ops a step) passed the threshold but ran serially in the
#: pool, one thread per step. Measured, two threads, LSTM seq 128, batch 16, hidden 64: 1.37x
NESTED_CHUNK_OPS = NESTED_OPS // 2
#: A split product's epilogue nest (bias, activation, residual) runs in its blocks, in the
#: block's stores (`split_matmul`), instead of after the product as a loop of its own (run on
#: one thread below SERIAL_OPS). Measured, two threads: BERT-tiny 1.11x (its GELU after the
#: 128x512 product ran 35 us on one thread, and the worker fell asleep meanwhile), MLP batch
#: 32 1.009x (the bias and ReLU passes, ~1 us each)
ABSORB_EPILOGUES = True
#: plan entry of an epilogue nest a split product runs (`split_matmul`): nothing to emit
ABSORBED = (None, [], [], [])
#: The epilogue nest after a product split by columns (`split_columns`, which does not take
#: it into its blocks) runs its rows over the threads; it ran on one thread, 75 us of the OCR
#: recognizer's 0.8 ms at width 96 (bias over 24 x 6625 logits): that width, specialised,
#: 1.08x; MLP batch 1 1.03x, AlexNet 1.01x (two threads, three builds each interleaved).
EPILOGUE_ROWS = True
#: A parallel loop over a run-time batch usually of one (a symbolic program's 3-D MatMul, a
#: transformer's or a recognizer's head) whose body holds a product runs serially, its
#: products split over the threads (`_plan_products`): parallel over the batch, one thread did
#: all the work. Measured, two threads: the OCR recognizer's 80x256x256 head 59 -> 35 us
BATCH_OF_ONE = True


def _reads(s: Stmt) -> Iterator[Operand]:
    match s:
        case Op(args=args):
            yield from args
        case Load(index=index):
            yield index
        case Store(index=index, value=value):
            yield index
            yield value
        case Check(cond=cond):
            yield cond
        case Loop(start=start, stop=stop):
            yield start
            yield stop
        case Matmul():
            yield from s.offsets()
            yield from (x for x in (s.m, s.n, s.k, s.lda, s.ldb, s.ldc) if isinstance(x, Var))


def _writes(s: Stmt) -> Iterator[Var]:
    match s:
        case Op(dst=dst) | Load(dst=dst):
            yield dst
        case Loop(var=var):
            yield var


def _vars(kernel_body: list[Stmt], loop: Loop, skip: Stmt | None = None) -> list[Var] | None:
    """Variables the loop's body reads but does not write (captured by value), or None when a
    variable the loop writes is used elsewhere in the kernel (its value would not survive;
    `skip` and what it holds do not count: an epilogue nest the loop runs a copy of)."""
    inner = list(walk(loop.body))
    written = {id(v) for s in inner for v in _writes(s)} | {id(loop.var)}
    captured: dict[int, Var] = {}
    for s in inner:
        for x in _reads(s):
            if isinstance(x, Var) and id(x) not in written:
                captured.setdefault(id(x), x)
    inside = {id(s) for s in inner} | {id(loop)}
    if skip is not None:
        inside |= {id(s) for s in walk([skip])}
    for s in walk(kernel_body):
        if id(s) in inside:
            continue
        used = list(_writes(s)) + [x for x in _reads(s) if isinstance(x, Var)]
        if any(id(v) in written for v in used):
            return None
    return list(captured.values())


def plan_kernel(kernel: Kernel) -> dict[int, tuple]:
    """Statements (by id: top-level, or parallel loops directly inside a serial top-level loop)
    to run on the pool: (parallel loop, captured vars, serial statements to run after it,
    statements to run before it). A loop up to a run-time size is planned whatever its usual
    size: the pool runs it serially when it turns out too small for two chunks."""
    plan: dict[int, tuple] = {}
    hints = kernel.size_hints
    derive_hints(kernel.body, hints)
    for k, s in enumerate(kernel.body):
        if plan.get(id(s)) is ABSORBED:
            continue
        if isinstance(s, Loop) and s.parallel:
            if not (BATCH_OF_ONE and _batch_of_one(s, hints)
                    and _plan_products(kernel, s.body, plan)):
                _consider(kernel, s, SERIAL_OPS, plan)
        elif isinstance(s, Loop):
            outer = trip_count(s)
            threshold = NESTED_OPS if outer is None or outer >= NESTED_MIN_TRIP else SERIAL_OPS
            for inner in s.body:
                if isinstance(inner, Loop) and inner.parallel:
                    _consider(kernel, inner, threshold, plan)
        elif isinstance(s, Matmul):
            _plan_product(kernel, kernel.body, k, plan)
    return plan


def _batch_of_one(loop: Loop, hints: dict | None) -> bool:
    """Whether `loop` runs up to a run-time size usually 1 (a symbolic batch: its hint) and
    holds a product directly (then its products split instead: `_plan_products`)."""
    return trip_count(loop) is None and trip_count(loop, hints) == 1 and \
        any(isinstance(x, Matmul) for x in loop.body)


def _plan_products(kernel: Kernel, body: list[Stmt], plan: dict[int, tuple]) -> bool:
    """Plan the products directly in `body` (a loop over a batch of usually one) as split
    products dispatched on each of its iterations; whether one was."""
    before = len(plan)
    for k, s in enumerate(body):
        if isinstance(s, Matmul) and plan.get(id(s)) is not ABSORBED:
            _plan_product(kernel, body, k, plan)
    return len(plan) > before


def _plan_product(kernel: Kernel, body: list[Stmt], k: int, plan: dict[int, tuple]) -> None:
    """Plan the Matmul `body[k]` as a split product (`split_matmul`, `split_columns`), with
    the epilogue nest after it absorbed into its blocks where it can be."""
    s = body[k]
    hints = kernel.size_hints
    nxt = body[k + 1] if k + 1 < len(body) else None
    wide = COLUMN_SPLIT and streams_b(s, hints)  # by columns, the epilogue not absorbed
    epilogue = isinstance(nxt, Loop) and nxt.step == 1 and match_epilogue(
        s, Loop(nxt.var, nxt.start, nxt.stop, 1, nxt.body), vector=False) is not None
    if not wide and ABSORB_EPILOGUES and epilogue:
        split = split_matmul(s, nxt, hints)
        captured = None if split is None else _vars(kernel.body, split[0], nxt)
        if split is not None and captured is not None:
            plan[id(s)] = _entry(s, split, captured)
            plan[id(nxt)] = ABSORBED
            for x in split[2] if len(split) == 3 and EPILOGUE_ROWS else ():
                # a run-time column case's epilogue rows (the nest's copy: its
                # variables are the absorbed nest's, so that one is left out)
                rows = _vars(kernel.body, x, nxt) if isinstance(x, Loop) and x.parallel \
                    else None
                if rows is not None:
                    plan[id(x)] = (x, rows, [], [])
            return
    split = (split_columns(s, hints) if wide else None) or \
        split_matmul(s, None, hints) or (split_columns(s, hints) if COLUMN_SPLIT else None)
    if split is not None:
        captured = _vars(kernel.body, split[0])
        if captured is not None:
            plan[id(s)] = _entry(s, split, captured)
            if wide and EPILOGUE_ROWS and epilogue:
                _consider(kernel, nxt, SERIAL_OPS, plan)  # type: ignore[arg-type]  # its rows


def _consider(kernel: Kernel, loop: Loop, threshold: int, plan: dict[int, tuple]) -> None:
    """Plan `loop` for the pool when its work can reach `threshold` (always when its trip
    count is a run-time size) and it writes no variable used outside it."""
    t = trip_count(loop)
    if t is not None and (t < 2 or t * body_cost(loop.body, kernel.size_hints) < threshold):
        return
    captured = _vars(kernel.body, loop)
    if captured is not None:
        plan[id(loop)] = (loop, captured, [], [])


def _entry(s: Matmul, split: tuple[Loop, list[Stmt]], captured: list[Var]) -> tuple:
    """A plan entry of a split product: a run-time split's statements come before its loop
    (they compute its trip count), a static split's after it (the rows left over)."""
    if len(split) == 3:  # a run-time split: (loop, before, after)
        loop, before, after = split  # type: ignore[misc]
        return loop, captured, after, before
    loop, stmts = split
    return loop, captured, stmts, []


def grain_of(kernel: Kernel, loop: Loop) -> int:
    """The fewest iterations of `loop` (planned in `kernel`) a chunk gets."""
    nested = any(isinstance(o, Loop) and any(x is loop for x in o.body) for o in kernel.body)
    return max(1, -(-(NESTED_CHUNK_OPS if nested else CHUNK_OPS)
                    // body_cost(loop.body, kernel.size_hints)))


def emit_parallel(kt, loop: Loop, captured: list[Var], index: int) -> None:
    """Emit `loop` (a top-level statement of the kernel `kt` translates) as a pool dispatch."""
    b = kt.b
    lo, hi = Var(DType.INT64, "lo"), Var(DType.INT64, "hi")
    serial = Loop(loop.var, lo, hi, loop.step, loop.body, parallel=False)
    name = f"{kt.fn.name}.par{index}"
    # the body keeps the kernel's size hints: its run-time products choose their form by them
    body = Kernel(kt.kernel.name, [serial], kt.kernel.contract, kt.kernel.size_hints,
                  kt.kernel.gather)
    body_kt = type(kt)(kt.fn.module, kt.scalar, body, name, kt.check_index,
                       params=[lo, hi, *captured])
    body_fn = body_kt.translate()
    roots = body_kt.roots
    fields = [PTR] * len(roots) + [compute_type(v.dtype) for v in captured] + [I64, I32]
    ctx_ty = ir.LiteralStructType(fields)
    task = _task(kt.fn.module, f"{name}.task", body_fn, ctx_ty, len(roots), len(captured),
                 loop.step, body_kt.has_checks)

    ctx = ir.IRBuilder(kt.alloca_block).alloca(ctx_ty, name="par.ctx")
    ctx.type = PTR

    def field(k: int) -> ir.Value:
        return b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True,
                     source_etype=ctx_ty)

    for k, (r, off) in enumerate(roots):
        b.store(kt.at(r, off), field(k))
    for k, v in enumerate(captured):
        b.store(kt.operand(v), field(len(roots) + k))
    start, stop = kt.operand(loop.start), kt.operand(loop.stop)
    b.store(start, field(len(fields) - 2))
    b.store(ir.Constant(I32, 0), field(len(fields) - 1))
    span = b.sub(stop, start)
    trip = b.sdiv(b.add(span, i64c(loop.step - 1)), i64c(loop.step))
    trip = b.select(b.icmp_signed(">", span, i64c(0)), trip, i64c(0))
    grain = grain_of(kt.kernel, loop)
    pfor, nthreads = kt.pool_args
    fnty = ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I64, I64])
    pooled = kt.fn.append_basic_block("par.pool")
    direct = kt.fn.append_basic_block("par.direct")
    joined = kt.fn.append_basic_block("par.join")
    # one thread: no pool at all (the runtime does not even build it)
    b.cbranch(b.icmp_signed(">", nthreads, i64c(1)), pooled, direct)
    b.position_at_end(pooled)
    b.call(Callee(pfor, fnty), [task, ctx, trip, i64c(grain), nthreads])
    b.branch(joined)
    b.position_at_end(direct)
    b.call(task, [ctx, i64c(0), trip])
    b.branch(joined)
    b.position_at_end(joined)
    if body_kt.has_checks:
        status = b.load(field(len(fields) - 1), typ=I32)
        fail = kt.fn.append_basic_block("par.fail")
        cont = kt.fn.append_basic_block("par.ok")
        b.cbranch(b.icmp_signed("!=", status, ir.Constant(I32, 0)), fail, cont)
        b.position_at_end(fail)
        b.ret(status)
        b.position_at_end(cont)


def _task(module: ir.Module, name: str, body_fn: ir.Function, ctx_ty: ir.LiteralStructType,
          n_roots: int, n_captured: int, step: int, has_checks: bool) -> ir.Function:
    """void task(ctx, begin, end): body(roots..., start + begin*step, start + end*step, ...)."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64]), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    ctx, begin, end = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def load(k: int) -> ir.Value:
        p = b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True,
                  source_etype=ctx_ty)
        return b.load(p, typ=ctx_ty.elements[k])

    roots = [load(k) for k in range(n_roots)]
    captured = [load(n_roots + k) for k in range(n_captured)]
    start = load(n_roots + n_captured)
    lo = b.add(start, b.mul(begin, i64c(step)))
    hi = b.add(start, b.mul(end, i64c(step)))
    rc = b.call(body_fn, [*roots, lo, hi, *captured])
    if has_checks:
        fail = fn.append_basic_block("fail")
        done = fn.append_basic_block("done")
        b.cbranch(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), fail, done)
        b.position_at_end(fail)
        status = b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, n_roots + n_captured + 1)],
                       inbounds=True, source_etype=ctx_ty)
        b.cmpxchg(status, ir.Constant(I32, 0), rc, "seq_cst", "seq_cst")
        b.branch(done)
        b.position_at_end(done)
    b.ret_void()
    return fn
