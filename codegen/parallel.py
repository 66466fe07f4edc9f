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
   moves into the blocks, on each block's rows, and runs in the block's stores where it can.
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
from dataclasses import replace

from llvmlite import ir

from onnxjit.codegen.epilogue_fuse import match as match_epilogue
from onnxjit.codegen.irutil import Callee, i64c
from onnxjit.codegen.scalar import I32, compute_type
from onnxjit.ir.loops import (
    Check,
    Const,
    Kernel,
    Load,
    Loop,
    Matmul,
    Op,
    Operand,
    Stmt,
    Store,
    Var,
    i64,
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
#: minimum work per chunk handed to a thread (the pool runs loops of less than two serially)
CHUNK_OPS = 1 << 18
#: a parallel loop directly inside a serial top-level loop of at least NESTED_MIN_TRIP
#: iterations dispatches from this much work: only the first dispatch wakes sleeping workers,
#: the later ones find them spinning (`pool_ir.SPIN`) and cost a few microseconds
NESTED_OPS, NESTED_MIN_TRIP = 1 << 18, 8
#: minimum work per chunk of such a nested loop: half of NESTED_OPS, so a loop worth
#: dispatching splits into two chunks at least. It was CHUNK_OPS, twice NESTED_OPS: an LSTM
#: with hidden 64 (4 blocks of 91K ops a step) passed the threshold but ran serially in the
#: pool, one thread per step. Measured, two threads, LSTM seq 128, batch 16, hidden 64: 1.37x
NESTED_CHUNK_OPS = NESTED_OPS // 2
#: a top-level Matmul is split over its rows from this many multiply-adds (about 5 us on one
#: thread), in two blocks when it is too small for blocks of 4 * CHUNK_OPS. It was 1M, and
#: products of 1-4M took one block: an MLP 100-200-100-1 at batch 32 (32x100x200 products)
#: ran on one thread. Measured, two threads: that MLP 1.72x, BERT-tiny at seq 32 1.53x, an MLP
#: 784-300-100-10 1.12x; BERT-tiny, MLP batch 1, MLP 128-64-10 unchanged
MATMUL_SPLIT_WORK = 1 << 19
#: rows of C per block of a split Matmul, at least (while that leaves two blocks): each block
#: packs all of B again, a pass over B worth some mb-th of the block's multiply-adds; with 16-row
#: blocks (n*k = 64K) repacking made a 128x128x512 product 25% slower, with 64 rows 4%
MATMUL_MIN_ROWS = 64
#: A split product's epilogue nest (bias, activation, residual) runs in its blocks, in the
#: block's stores (`split_matmul`), instead of after the product as a loop of its own (run on
#: one thread below SERIAL_OPS). Measured, two threads: BERT-tiny 1.11x (its GELU after the
#: 128x512 product ran 35 us on one thread, and the worker fell asleep meanwhile), MLP batch
#: 32 1.009x (the bias and ReLU passes, ~1 us each)
ABSORB_EPILOGUES = True
#: a row split has an even number of blocks (`split_matmul`). Measured, two threads: MatMul
#: 200x100x800 196 -> 138 us (3 blocks of 64 rows and 8 left -> 4 of 50), LSTM seq 50,
#: batch 4, hidden 200 1.11x (its input projection), 197x768x768 at 97% of peak; BERT-tiny,
#: MLP batch 32, the bench LSTM unchanged (their splits were even)
EVEN_BLOCKS = True
#: the rows a row split leaves go one each to its first blocks (31 rows: blocks of 16 and
#: 15), not to a product after the parallel loop on one thread (blocks of 12, then 7 rows).
#: Measured, two threads, a layer with bias and Relu, against False: 31x784x300 1.40x (93 ->
#: 67 us, as fast as 32 rows), 17x784x300 1.21x, 33x784x300 1.11x; 32 rows unchanged
BALANCED_BLOCKS = True
#: plan entry of an epilogue nest a split product runs (`split_matmul`): nothing to emit
ABSORBED = (None, [], [])
#: A product of at most COLUMN_SPLIT_ROWS rows (a GEMV: bound by the bytes of B it streams,
#: not by its multiply-adds) over a prepacked B of at least COLUMN_SPLIT_BYTES is split over
#: blocks of whole panels of columns, up to COLUMN_BLOCKS of them (`split_columns`): each
#: thread streams its share of B (from its own L2 when a call repeats). Measured, two threads,
#: against one thread's GEMV: MatMul 1x512x512 2.03x (onnxruntime 1.0 -> 2.1x), MLP batch 1
#: 1.69x (0.97 -> 1.59x), AlexNet 1.05x, ZFNet 1.02x, ResNet-50 1.01x (their classifiers)
COLUMN_SPLIT, COLUMN_SPLIT_ROWS, COLUMN_SPLIT_BYTES, COLUMN_BLOCKS = True, 4, 512 << 10, 8
#: `body_cost` of a product of fewer rows: it takes about as long as one of this many rows
GEMV_ROWS = 16
#: rough cost of the scalar ops expanded to polynomials or guarded sequences
_OP_COST = {"exp": 8, "log": 8, "tanh": 10, "erf": 10, "sigmoid": 8, "pow": 20, "div": 4,
            "rem": 4}
#: trip count assumed for a loop whose bounds are variables (in our lowerings: blocks of a
#: tiled loop, some tens of iterations)
_UNKNOWN_TRIP = 64


def trip_count(loop: Loop) -> int | None:
    """The loop's trip count when its bounds are constants."""
    if isinstance(loop.start, Const) and isinstance(loop.stop, Const):
        return max(0, -(-(int(loop.stop.value) - int(loop.start.value)) // loop.step))
    return None


def body_cost(body: list[Stmt]) -> int:
    """Estimated scalar operations of one execution of `body`."""
    total = 0
    for s in body:
        if isinstance(s, Loop):
            t = trip_count(s)
            total += (_UNKNOWN_TRIP if t is None else t) * (body_cost(s.body) + 1)
        elif isinstance(s, Matmul):  # few rows: bound by streaming B, as GEMV_ROWS rows
            total += max(s.m, GEMV_ROWS) * s.n * s.k
        elif isinstance(s, Op):
            total += _OP_COST.get(s.op, 1)
        else:
            total += 1
    return max(1, total)


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
            yield from (s.c_off, s.a_off, s.b_off)


def _writes(s: Stmt) -> Iterator[Var]:
    match s:
        case Op(dst=dst) | Load(dst=dst):
            yield dst
        case Loop(var=var):
            yield var


def _vars(kernel_body: list[Stmt], loop: Loop) -> list[Var] | None:
    """Variables the loop's body reads but does not write (captured by value), or None when a
    variable the loop writes is used elsewhere in the kernel (its value would not survive)."""
    inner = list(walk(loop.body))
    written = {id(v) for s in inner for v in _writes(s)} | {id(loop.var)}
    captured: dict[int, Var] = {}
    for s in inner:
        for x in _reads(s):
            if isinstance(x, Var) and id(x) not in written:
                captured.setdefault(id(x), x)
    inside = {id(s) for s in inner} | {id(loop)}
    for s in walk(kernel_body):
        if id(s) in inside:
            continue
        used = list(_writes(s)) + [x for x in _reads(s) if isinstance(x, Var)]
        if any(id(v) in written for v in used):
            return None
    return list(captured.values())


def split_matmul(s: Matmul, epilogue: Loop | None = None) -> tuple[Loop, list[Stmt]] | None:
    """`s` as a parallel loop over blocks of MB rows of C, plus statements computing the
    leftover rows (or None when it is too small to split; with BALANCED_BLOCKS the leftover
    rows go one each to the first blocks instead). `epilogue`, the nest over C's rows that
    follows `s` (an `epilogue_fuse` match), goes into each block for the block's rows,
    `for r in [0, mb): er = row + r; <its body>`, and after the leftover rows' product for
    those rows."""
    work = s.m * s.n * s.k
    if work < MATMUL_SPLIT_WORK:
        return None
    mb = max(-(-(4 * CHUNK_OPS) // max(1, s.n * s.k)), -(-s.m // 32))
    mb = max(-(-mb // 4) * 4, min(MATMUL_MIN_ROWS, s.m // 2) // 4 * 4)
    nblk = s.m // mb
    if nblk < 2 and s.m >= 8:  # too small for blocks of that much work: a block a thread
        nblk, mb = 2, s.m // 2
    if nblk < 2:
        return None
    if EVEN_BLOCKS and nblk % 2:
        # an odd count leaves one thread of two a block more: 200 rows as 3 blocks of 64
        # ran 2 blocks on one thread, then the 8 rows left on one thread (136 rows' time,
        # not 100). Even blocks of about equal height instead (fewer when B is packed per
        # block, more when it is prepacked); the rows left over are fewer than the blocks
        nblk += 1 if s.b_packed else -1
        mb = s.m // nblk
    t = Var(DType.INT64, "blk")
    body: list[Stmt] = []

    def offsets(row: Operand, out: list[Stmt]) -> tuple[Operand, Operand]:
        c_row, c_off, a_row, a_off = (Var(DType.INT64, h) for h in ("crow", "coff", "arow",
                                                                     "aoff"))
        out += [Op(c_row, "mul", (row, i64(s.ldc))), Op(c_off, "add", (c_row, s.c_off)),
                Op(a_row, "mul", (row, i64(1 if s.a_trans else s.lda))),
                Op(a_off, "add", (a_row, s.a_off))]
        return c_off, a_off

    def rows(row: Operand, m: int, out: list[Stmt]) -> None:
        c_off, a_off = offsets(row, out)
        out.append(replace(s, c_off=c_off, a_off=a_off, m=m))
        if epilogue is not None:
            r = Var(DType.INT64, "er")
            out.append(Loop(r, i64(0), i64(m), 1, [Op(epilogue.var, "add", (row, r)),
                                                   *epilogue.body]))

    row = Var(DType.INT64, "row")
    extra = s.m - nblk * mb
    if BALANCED_BLOCKS and extra:
        mb, extra = divmod(s.m, nblk)  # 100 rows: 2 x 48 and 4 left -> 2 x 50
    if BALANCED_BLOCKS and extra:
        # the rows left go one each to the first blocks (heights mb + 1, then mb): block t
        # starts at t * mb + min(t, extra), and runs one of two products of those heights
        # (a loop of 0 or 1 iteration each), not a product of `extra` rows after the loop
        first, start, trips, short = (Var(DType.INT64, h) for h in ("first", "start", "trip",
                                                                    "trip"))
        taller = Var(DType.BOOL, "taller")
        body += [Op(first, "min", (t, i64(extra))), Op(start, "mul", (t, i64(mb))),
                 Op(row, "add", (start, first)), Op(taller, "lt", (t, i64(extra))),
                 Op(trips, "cast", (taller,)), Op(short, "sub", (i64(1), trips))]
        for trip, height in ((trips, mb + 1), (short, mb)):
            guard: list[Stmt] = []
            rows(row, height, guard)
            body.append(Loop(Var(DType.INT64, "once"), i64(0), trip, 1, guard))
        return Loop(t, i64(0), i64(nblk), 1, body, parallel=True), []
    body.append(Op(row, "mul", (t, i64(mb))))
    rows(row, mb, body)
    loop = Loop(t, i64(0), i64(nblk), 1, body, parallel=True)
    tail: list[Stmt] = []
    if extra:
        rows(i64(nblk * mb), extra, tail)
    return loop, tail


def split_columns(s: Matmul) -> tuple[Loop, list[Stmt]] | None:
    """A product of at most COLUMN_SPLIT_ROWS rows over a large prepacked B as a parallel
    loop over blocks of whole panels of columns (plus a serial product for the columns after
    the last block, the narrow edge panel among them); None when it does not qualify."""
    if not s.b_packed or s.m > COLUMN_SPLIT_ROWS or s.ldb <= 0 or \
            s.n * s.k * s.c.dtype.itemsize < COLUMN_SPLIT_BYTES:
        return None
    width = s.ldb  # a packed B's panel width
    panels = s.n // width
    if panels < 2:
        return None
    per = max(1, panels // COLUMN_BLOCKS)  # panels a block
    nblk = panels // per
    t = Var(DType.INT64, "cblk")

    def window(col: Operand, n: int, out: list[Stmt]) -> None:
        c_off, b_col, b_off = (Var(DType.INT64, h) for h in ("coff", "bcol", "boff"))
        out += [Op(c_off, "add", (col, s.c_off)), Op(b_col, "mul", (col, i64(s.k))),
                Op(b_off, "add", (b_col, s.b_off)), replace(s, c_off=c_off, b_off=b_off, n=n)]

    col = Var(DType.INT64, "col")
    body: list[Stmt] = [Op(col, "mul", (t, i64(per * width)))]
    window(col, per * width, body)
    tail: list[Stmt] = []
    done = nblk * per * width
    if done < s.n:
        window(i64(done), s.n - done, tail)
    return Loop(t, i64(0), i64(nblk), 1, body, parallel=True), tail


def plan_kernel(kernel: Kernel) -> dict[int, tuple[Loop, list[Var], list[Stmt]]]:
    """Statements (by id: top-level, or parallel loops directly inside a serial top-level loop)
    to run on the pool: (parallel loop, captured vars, serial statements to run after it)."""
    plan: dict[int, tuple[Loop, list[Var], list[Stmt]]] = {}

    def consider(loop: Loop, threshold: int) -> None:
        t = trip_count(loop)
        if t is not None and (t < 2 or t * body_cost(loop.body) < threshold):
            return
        captured = _vars(kernel.body, loop)
        if captured is not None:
            plan[id(loop)] = (loop, captured, [])

    for k, s in enumerate(kernel.body):
        if plan.get(id(s)) is ABSORBED:
            continue
        if isinstance(s, Loop) and s.parallel:
            consider(s, SERIAL_OPS)
        elif isinstance(s, Loop):
            outer = trip_count(s)
            threshold = NESTED_OPS if outer is None or outer >= NESTED_MIN_TRIP else SERIAL_OPS
            for inner in s.body:
                if isinstance(inner, Loop) and inner.parallel:
                    consider(inner, threshold)
        elif isinstance(s, Matmul):
            nxt = kernel.body[k + 1] if k + 1 < len(kernel.body) else None
            if ABSORB_EPILOGUES and isinstance(nxt, Loop) and nxt.step == 1 and match_epilogue(
                    s, Loop(nxt.var, nxt.start, nxt.stop, 1, nxt.body), vector=False) is not None:
                split = split_matmul(s, nxt)
                rest = [x for x in kernel.body if x is not nxt]
                captured = None if split is None else _vars(rest, split[0])
                if split is not None and captured is not None:
                    plan[id(s)] = (split[0], captured, split[1])
                    plan[id(nxt)] = ABSORBED
                    continue
            split = split_matmul(s) or (split_columns(s) if COLUMN_SPLIT else None)
            if split is not None:
                loop, tail = split
                captured = [x for x in (s.c_off, s.a_off, s.b_off) if isinstance(x, Var)]
                plan[id(s)] = (loop, list({id(v): v for v in captured}.values()), tail)
    return plan


def grain_of(kernel: Kernel, loop: Loop) -> int:
    """The fewest iterations of `loop` (planned in `kernel`) a chunk gets."""
    nested = any(isinstance(o, Loop) and any(x is loop for x in o.body) for o in kernel.body)
    return max(1, -(-(NESTED_CHUNK_OPS if nested else CHUNK_OPS) // body_cost(loop.body)))


def emit_parallel(kt, loop: Loop, captured: list[Var], index: int) -> None:
    """Emit `loop` (a top-level statement of the kernel `kt` translates) as a pool dispatch."""
    b = kt.b
    lo, hi = Var(DType.INT64, "lo"), Var(DType.INT64, "hi")
    serial = Loop(loop.var, lo, hi, loop.step, loop.body, parallel=False)
    name = f"{kt.fn.name}.par{index}"
    body = Kernel(kt.kernel.name, [serial], kt.kernel.contract)
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
