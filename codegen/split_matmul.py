"""Splitting a large Matmul statement over the worker pool's threads.

`split_matmul` rewrites a product as a parallel loop over blocks of rows of C (each block a
Matmul of its rows, plus the rows left over: `BALANCED_BLOCKS` gives them one each to the first
blocks), and with a run-time m (a symbolic program) as a parallel loop over blocks of MB rows
whose last one is shorter (`split_runtime_rows`); `split_columns` splits a product of few rows
over a large prepacked B by blocks of its column panels (a GEMV: each thread streams its share
of B), as is a product of a few tens of rows over a B larger than a core's cache
(`streams_b`). An epilogue nest that follows the product (`epilogue_fuse`) moves into the
blocks, on each block's rows. `parallel.plan_kernel` decides which products to split.
"""

from __future__ import annotations

from dataclasses import replace

from onnxjit.codegen.cost import CHUNK_OPS, hinted
from onnxjit.ir.loops import Loop, Matmul, Op, Operand, Stmt, Var, i64
from onnxjit.ir.quad_panels import is_int8_product  # its panels are not float panels
from onnxjit.ir.types import DType

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
#: A product of at most COLUMN_SPLIT_ROWS rows (a GEMV: bound by the bytes of B it streams,
#: not by its multiply-adds) over a prepacked B of at least COLUMN_SPLIT_BYTES is split over
#: blocks of whole panels of columns, up to COLUMN_BLOCKS of them (`split_columns`): each
#: thread streams its share of B (from its own L2 when a call repeats). Measured, two threads,
#: against one thread's GEMV: MatMul 1x512x512 2.03x (onnxruntime 1.0 -> 2.1x), MLP batch 1
#: 1.69x (0.97 -> 1.59x), AlexNet 1.05x, ZFNet 1.02x, ResNet-50 1.01x (their classifiers).
#: From 256 KB (was 512 KB): a GPT-style decoder's steps (hidden 256: 256x256 projections,
#: 3 MB of weights, which two 2 MB L2s hold when each thread streams its own share on every
#: call) 1.23-1.27x, its stream steady 0.94x -> about 1.2x onnxruntime (Intel guest, same
#: process, both compile orders); MLP batch 1 1.07x, MiniLM stream 0.99x
COLUMN_SPLIT, COLUMN_SPLIT_ROWS, COLUMN_SPLIT_BYTES, COLUMN_BLOCKS = True, 4, 256 << 10, 8
#: A product of at most WIDE_B_ROWS rows over a prepacked B of at least WIDE_B_BYTES (more than
#: a core's L2, so B comes from L3 or DRAM on every call) is split by columns too, not by
#: rows: row blocks would each stream ALL of B, column blocks stream a share each, and a few
#: rows' multiply-adds do not hide the stream. Measured, two threads, interleaved (load 7.5):
#: a CRNN's classifier 20x1024x8210 (33 MB of B) 1.39-1.48x (CPU time 1.47x less), the CRNN
#: (ddddocr common.onnx) 1.04x at width 160, 1.10x at 256. From 512 KB (was 4 MB): a
#: transformer's layers at a few tokens stream all their weights from DRAM on every call.
#: Measured, two threads, same process (noisy machine, two runs each): MiniLM-style encoder
#: (hidden 384, FFN 1536) 1x16 tokens 0.71-0.85x -> 0.97-1.00x onnxruntime, 1x32 0.68-0.99x ->
#: 0.98-1.04x, 2x16 0.86-0.91x -> 0.95-1.24x; 16x384x1536 91 -> 111-118 GFLOP/s. Up to
#: 64 rows (was 32), and in a symbolic program by the call's m at run time (`_or_columns`):
#: MiniLM-style symbolic program, same process, columns over rows at 16 rows 1.41x, 48 rows
#: 1.20x, 256 1.03x, 1024 0.95x
WIDE_B_ROWS, WIDE_B_BYTES = 64, 512 << 10
#: The columns a column split leaves after its last block of whole panels are one more
#: parallel iteration (`split_columns`), not a product on one thread after the loop: the OCR
#: recognizer's classifier (6625 columns: 8 blocks of 12 panels, 7.5 panels left) ran those
#: 480 columns, 38 us, on one thread: that width (96) specialised 1.11x, AlexNet 1.015x.
TAIL_BLOCK = True
#: A run-time m is cut into blocks of MATMUL_MIN_ROWS (rounded to tiles) rows or more, as
#: `split_matmul` cuts a concrete m: m // cap blocks, made even. False: ceil(m / cap) blocks,
#: which made 160 rows four blocks (two for a concrete m), each streaming all of a large
#: prepacked B.
RUNTIME_WHOLE_BLOCKS = True
#: A run-time row block's height rounded up to whole MR-row tiles: 80 rows in blocks of 42
#: and 38, where the kernel's run-time rows (`TileGemm.runtime_rows`) run 40 as 6 tiles of 6
#: and one of 4 as a concrete m's do (and 8 as 4 + 4, not 6 + 1 + 1: the reason the rounding
#: was there). False, measured, two threads: the OCR recognizer's classifier 80x256x6625
#: (the caller's block had been 63 us late)
RUNTIME_TILE_BLOCKS = False


def _b_bytes(s: Matmul, hints: dict | None) -> int:
    """Bytes of B (n concrete; a run-time depth by its hint: a kernel shared by layers of
    other depths, `passes.parametrize_kernels`), which the column-split thresholds compare."""
    return s.n * hinted(s.k, hints) * s.c.dtype.itemsize  # type: ignore[operator]


def _operand(x: object) -> Operand:
    return x if isinstance(x, Var) else i64(x)  # type: ignore[arg-type]


def _column_blocks(s: Matmul) -> tuple[int, int, int]:
    """(panels a block, blocks, columns the blocks cover) of a column split of `s` (n and
    ldb, the packed panel width, concrete): up to COLUMN_BLOCKS blocks of whole panels."""
    per = max(1, (s.n // s.ldb) // COLUMN_BLOCKS)
    nblk = (s.n // s.ldb) // per
    return per, nblk, nblk * per * s.ldb


def _column_window(s: Matmul, col: Operand, n: int) -> list[Stmt]:
    """`s` on its n columns from `col`: C's and B's offsets moved there."""
    c_off, b_col, b_off = (Var(DType.INT64, h) for h in ("coff", "bcol", "boff"))
    return [Op(c_off, "add", (col, s.c_off)), Op(b_col, "mul", (col, _operand(s.k))),
            Op(b_off, "add", (b_col, s.b_off)), replace(s, c_off=c_off, b_off=b_off, n=n)]


def _once(flag: Operand, stmts: list[Stmt]) -> Loop:
    """`stmts` when the i64 `flag` is 1, not when it is 0: a loop of that many trips."""
    return Loop(Var(DType.INT64, "once"), i64(0), flag, 1, stmts)


def _block_or_tail(s: Matmul, t: Var, nblk: int, done: int, on: Operand
                   ) -> tuple[list[Stmt], Loop, Var]:
    """A column trip `t` (`TAIL_BLOCK`) is a block of panels while t < nblk, else the columns
    after the blocks, when the i64 flag `on` is 1: (the flags' statements, the loop running
    the tail, the i64 flag under which the trip runs its block)."""
    is_block, block, last = (Var(DType.BOOL, "isblk"), Var(DType.INT64, "colblk"),
                             Var(DType.INT64, "coltail"))
    return ([Op(is_block, "lt", (t, i64(nblk))), Op(block, "select", (is_block, on, i64(0))),
             Op(last, "sub", (on, block))],
            _once(last, _column_window(s, i64(done), s.n - done)), block)


def split_runtime_rows(s: Matmul, epilogue: Loop | None, hints: dict | None
                       ) -> tuple[Loop, list[Stmt], list[Stmt]]:
    """`s` with a run-time m as a parallel loop over blocks of MB rows (the last one shorter,
    a run-time height the tiled kernel takes). MB is computed at run time the way
    `split_matmul` sizes a concrete m's blocks: an even number of blocks (two at least) of
    about MATMUL_MIN_ROWS rows, each of at least 4 * CHUNK_OPS multiply-adds (by the usual n
    and k), in whole tiles of MR rows (a block of 8 rows ran as a 6-row tile and two 1-row
    tiles, each streaming all of B: the product 1.5-1.8x slower than specialised). The pool
    runs it on one thread when m is small, so it is planned whatever m turns out to be.
    Returns (loop, statements before it, statements after it): with a large prepacked B, a
    call whose m is COLUMN_SPLIT_ROWS or fewer runs the blocks of `split_columns` instead
    (`_or_columns`)."""
    from onnxjit.codegen.kernel_shapes import tile_shape

    mr = tile_shape(s.c.dtype.itemsize)[1]
    nk = max(1, hinted(s.n, hints) * hinted(s.k, hints))
    least = -(-max(mr, -(-(4 * CHUNK_OPS) // nk)) // mr) * mr
    cap = max(least, -(-MATMUL_MIN_ROWS // mr) * mr)
    m = s.m
    t, row, end, height = (Var(DType.INT64, h) for h in ("blk", "row", "end", "height"))
    if hints is not None:
        hints[height] = cap
    c_row, c_off, a_row, a_off = (Var(DType.INT64, h) for h in ("crow", "coff", "arow", "aoff"))
    head: list[Stmt] = []

    def arith(kind: str, x: Operand, y: Operand | int) -> Var:
        dst = Var(DType.INT64, "mb")
        head.append(Op(dst, kind, (x, i64(y) if isinstance(y, int) else y)))
        return dst

    # blocks of cap rows at least (RUNTIME_WHOLE_BLOCKS), else at most
    nb = arith("div", m, cap) if RUNTIME_WHOLE_BLOCKS else \
        arith("div", arith("add", m, cap - 1), cap)  # type: ignore[arg-type]
    # an even number of blocks, two at least, of whole tiles and enough work each
    nb = arith("max", arith("mul", arith("div", arith("add", nb, 1), 2), 2), 2)
    mb = arith("div", arith("sub", arith("add", m, nb), 1), nb)  # type: ignore[arg-type]
    if RUNTIME_TILE_BLOCKS:
        mb = arith("mul", arith("div", arith("add", mb, mr - 1), mr), mr)
    mb = arith("max", mb, least)
    nblk = arith("div", arith("sub", arith("add", m, mb), 1), mb)  # type: ignore[arg-type]
    body: list[Stmt] = [
        Op(row, "mul", (t, mb)), Op(end, "add", (row, mb)),
        Op(end, "min", (end, m)), Op(height, "sub", (end, row)),  # type: ignore[arg-type]
        Op(c_row, "mul", (row, _operand(s.ldc))), Op(c_off, "add", (c_row, s.c_off)),
        Op(a_row, "mul", (row, i64(1) if s.a_trans else _operand(s.lda))),
        Op(a_off, "add", (a_row, s.a_off)),
        replace(s, c_off=c_off, a_off=a_off, m=height)]
    if epilogue is not None:
        r = Var(DType.INT64, "er")
        body.append(Loop(r, i64(0), height, 1, [Op(epilogue.var, "add", (row, r)),
                                                *epilogue.body]))
    cols = _or_columns(s, epilogue, t, nblk, body, head, hints)
    if cols is not None:
        return cols
    return Loop(t, i64(0), nblk, 1, body, parallel=True), head, []


def _or_columns(s: Matmul, epilogue: Loop | None, t: Var, nblk: Var, rows: list[Stmt],
                head: list[Stmt], hints: dict | None
                ) -> tuple[Loop, list[Stmt], list[Stmt]] | None:
    """The run-time split of `s` by rows (`rows`: a block's statements, `nblk` blocks) or,
    when this call's m is COLUMN_SPLIT_ROWS or fewer (WIDE_B_ROWS for a B of WIDE_B_BYTES),
    by column panels as `split_columns` splits a concrete few-row product: one parallel loop
    whose body runs one of the two (a loop of 0 or 1 trips each), the columns after the last
    panel block, and after it the epilogue rows of the column case (a parallel loop of 0 trips
    in the row case, which `parallel.plan_kernel` gives the pool; `t`: the block index). None
    when B is not a large prepacked constant."""
    if not COLUMN_SPLIT or not s.b_packed or is_int8_product(s) or not all(
            isinstance(x, int) for x in (s.n, s.ldb)) or s.ldb <= 0 or \
            _b_bytes(s, hints) < COLUMN_SPLIT_BYTES or s.n // s.ldb < 2:
        return None
    width = s.ldb
    per, nblkc, done = _column_blocks(s)
    few, small, big, trip = (Var(DType.BOOL, "few"), Var(DType.INT64, "small"),
                             Var(DType.INT64, "big"), Var(DType.INT64, "trip"))
    at_most = WIDE_B_ROWS if _b_bytes(s, hints) >= WIDE_B_BYTES else COLUMN_SPLIT_ROWS
    tail_in_loop = TAIL_BLOCK and done < s.n  # the columns after the blocks: one more trip
    head += [Op(few, "le", (s.m, i64(at_most))),
             Op(small, "cast", (few,)), Op(big, "sub", (i64(1), small)),
             Op(trip, "select", (few, i64(nblkc + tail_in_loop), nblk))]

    col = Var(DType.INT64, "col")
    block: Var = small
    body: list[Stmt] = []
    after: list[Stmt] = []
    if tail_in_loop:  # a column trip is a block of panels, or (the last) the columns after
        flags, tail, block = _block_or_tail(s, t, nblkc, done, small)
        body += [*flags, tail]
    elif done < s.n:
        after.append(_once(small, _column_window(s, i64(done), s.n - done)))
    body += [_once(block, [Op(col, "mul", (t, i64(per * width))),
                          *_column_window(s, col, per * width)]),
             _once(big, rows)]
    if epilogue is not None:  # a copy (the planned kernel skips the nest itself: absorbed)
        # on the column case's rows only, a loop the pool may run (`parallel.EPILOGUE_ROWS`)
        stop = Var(DType.INT64, "erows")
        after += [Op(stop, "mul", (epilogue.stop, small)),
                  Loop(epilogue.var, epilogue.start, stop, 1, epilogue.body, parallel=True)]
    return Loop(t, i64(0), trip, 1, body, parallel=True), head, after  # type: ignore[arg-type]


def split_matmul(s: Matmul, epilogue: Loop | None = None, hints: dict | None = None
                 ) -> tuple[Loop, list[Stmt]] | tuple[Loop, list[Stmt], list[Stmt]] | None:
    """`s` as a parallel loop over blocks of MB rows of C, plus statements computing the
    leftover rows (or None when it is too small to split; with BALANCED_BLOCKS the leftover
    rows go one each to the first blocks instead). `epilogue`, the nest over C's rows that
    follows `s` (an `epilogue_fuse` match), goes into each block for the block's rows,
    `for r in [0, mb): er = row + r; <its body>`, and after the leftover rows' product for
    those rows. Run-time sizes: `split_runtime_rows` for m, the hints for n and k (the head
    statements then come before the loop: see `plan_kernel`)."""
    if isinstance(s.m, Var):
        return split_runtime_rows(s, epilogue, hints)
    if not isinstance(s.n, int):
        return None
    # a run-time depth or leading dim (a kernel shared by layers of other depths:
    # `passes.parametrize_kernels`) by its hint, the first such layer's
    k = hinted(s.k, hints)
    work = s.m * s.n * k
    if work < MATMUL_SPLIT_WORK:
        return None
    mb = max(-(-(4 * CHUNK_OPS) // max(1, s.n * k)), -(-s.m // 32))
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
        out += [Op(c_row, "mul", (row, _operand(s.ldc))), Op(c_off, "add", (c_row, s.c_off)),
                Op(a_row, "mul", (row, i64(1) if s.a_trans else _operand(s.lda))),
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


def streams_b(s: Matmul, hints: dict | None = None) -> bool:
    """Whether `s` is a product of few rows over a prepacked B too large for a core's cache
    (WIDE_B_ROWS, WIDE_B_BYTES): split by columns (`split_columns`) before rows."""
    return isinstance(s.m, int) and s.m <= WIDE_B_ROWS and s.b_packed and \
        isinstance(s.n, int) and not is_int8_product(s) and _b_bytes(s, hints) >= WIDE_B_BYTES


def split_columns(s: Matmul, hints: dict | None = None) -> tuple[Loop, list[Stmt]] | None:
    """A product of at most COLUMN_SPLIT_ROWS rows over a large prepacked B as a parallel
    loop over blocks of whole panels of columns, the columns after the last block (the narrow
    edge panel among them) one more iteration (`TAIL_BLOCK`; else a serial product after the
    loop); None when it does not qualify. A run-time depth (a parametrized kernel's) counts
    by its hint."""
    if not all(isinstance(x, int) for x in (s.m, s.n, s.ldb)):
        return None
    if not s.b_packed or is_int8_product(s) or s.ldb <= 0 or \
            _b_bytes(s, hints) < COLUMN_SPLIT_BYTES:
        return None
    if s.m > COLUMN_SPLIT_ROWS and not streams_b(s, hints):
        return None
    width = s.ldb  # a packed B's panel width
    if s.n // width < 2:
        return None
    per, nblk, done = _column_blocks(s)
    t = Var(DType.INT64, "cblk")
    col = Var(DType.INT64, "col")
    body: list[Stmt] = [Op(col, "mul", (t, i64(per * width))),
                        *_column_window(s, col, per * width)]
    if done == s.n or not TAIL_BLOCK:
        tail = _column_window(s, i64(done), s.n - done) if done < s.n else []
        return Loop(t, i64(0), i64(nblk), 1, body, parallel=True), tail
    # the columns after the last block are one more iteration (t = nblk)
    flags, tail_loop, block = _block_or_tail(s, t, nblk, done, i64(1))
    return Loop(t, i64(0), i64(nblk + 1), 1, [*flags, _once(block, body), tail_loop],
                parallel=True), []


