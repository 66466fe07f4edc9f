"""How the im2col + Matmul conv (`conv.conv.lower_gemm_conv`) cuts its work into blocks.

Three choices, all at compile time from the concrete geometry:
1) `block_rows`: output rows (of the first spatial dim) per im2col panel. The largest divisor
   of the first output dim whose panel fits `BLOCK_BYTES` (the panel is then still in cache when
   the Matmul reads it) - but with `WIDE_BLOCKS` never fewer than MIN_PANEL_COLS columns (one
   packed panel: a narrower block runs the microkernel on a few lanes of its vectors), and
   never fewer than `MIN_BLOCK_COLS` when the weights (M/G x K) exceed `WEIGHT_BYTES`: every
   block multiplies the whole weight matrix again, from L3 when it does not stay in L2.
   Measured, one thread: a 3x3 512->512 conv at 7x7 had one-row blocks of 7 columns (the
   9.4 MB of weights streamed 7 times, 7 of 16 lanes at work): 5.1 ms; one block of 49
   columns: 2.8 ms. 3x3 256->256 at 14x14: 2.6 ms with 28 or 98 columns, 2.36 ms with 196.
   3x3 128->128 at 28x28 (590 KB of weights): 112 columns (the cache rule) beat 196 by 4%.
2) `pointwise_blocks`: positions per block of a pointwise conv with an epilogue (the epilogue
   then reads the block from cache); with too few blocks for the threads, equal blocks of
   positions (`SPLIT_P`; MobileNetV2's 1x1 convs at 28x28 and 14x14 ran as one or two
   parallel iterations, or three on two threads); an odd number of few blocks made even
   (`EVEN_BLOCKS`).
3) `m_split`: when (images x groups x blocks) gives fewer than `MIN_TASKS` parallel
   iterations (deep layers of a batch-1 CNN: one 14x14 or 7x7 block), the output channels of
   each block are split into equal chunks of at least `MIN_SPLIT_ROWS` rows (`EQUAL_ROWS`; a
   single block with too few channels for that still splits them in two from 4 tile rows,
   `PAIR_SPLIT`), each chunk one parallel iteration (its own Matmul on the shared packed
   panel, then the epilogue on its rows), and the panels are built first by a separate
   parallel loop over (block, chunk of input channels) (`c_split`).
   A split pointwise conv multiplies X's columns directly in each chunk. Without this the
   second core idled on those layers (2-thread speed-up 1.0x; 1.7-1.9x with it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Operand, i64

if TYPE_CHECKING:  # conv.conv imports this module
    from onnxjit.ir.ops.conv.geometry import Geometry

#: Target size of one im2col panel (about half of a core's L2).
BLOCK_BYTES = 512 << 10
#: Fewest columns of a panel (unless the image has fewer positions) when the weights exceed
#: WEIGHT_BYTES (they come from L3 for every block), else MIN_PANEL_COLS; see `block_rows`.
MIN_BLOCK_COLS, WEIGHT_BYTES, MIN_PANEL_COLS = 192, 1 << 20, 64
#: Blocks are at least MIN_BLOCK_COLS wide; False restores the BLOCK_BYTES-only choice.
WIDE_BLOCKS = True
#: Parallel iterations wanted per conv: two per thread on 2 cores, one on 4 (more chunks cost
#: each thread 1-3% on one-row-block layers: shorter products, more dispatches).
MIN_TASKS = 4
#: Fewest output channels per chunk of a split block.
MIN_SPLIT_ROWS = 32
#: Smallest product (multiply-adds of the whole conv) worth splitting over channels or
#: positions: about 5 us on one thread, more than a dispatch to a spinning worker costs. It
#: was 2M: a MobileNetV2 at 96x96 ran its stem and 1x1 convs of 1-2M at 48x48 and 24x24 on one
#: thread (150 of its 860 us). Measured, two threads, against 2M: that MobileNetV2 1.16-1.20x,
#: at 160x160 1.035x, SqueezeNet 1.08x, Inception-v1 1.015x; MobileNetV2-like, ResNet-like,
#: ShuffleNet, DenseNet-121, Inception-v2 unchanged
SPLIT_WORK = 1 << 19
#: Split the output channels of too few blocks over threads; False restores one iteration
#: per block.
SPLIT_M = True
#: A single block whose channels are too few for MIN_SPLIT_ROWS still splits them in two
#: (from 4 tile rows); False leaves it one iteration.
PAIR_SPLIT = True
#: Cut a pointwise conv's positions into MIN_TASKS blocks (of MIN_SPLIT_COLS or more) before
#: splitting its channels; False restores the cache-only block choice.
SPLIT_P, MIN_SPLIT_COLS = True, 64
#: An odd number (3 to 15) of blocks becomes an even one (blocks at least half as wide): on two
#: threads, 7 blocks ran as 4 + 3. Measured, 24->144 at 56x56 (7 blocks of 448 -> 8 of 392):
#: two threads 1.04-1.10x, one thread 0.99x; MobileNetV2-like two threads 1.009-1.018x, one
#: thread 0.993x. False restores the cache-only choice.
EVEN_BLOCKS = True
#: Chunks of a split are equal (`split_rows`), not whole microkernel tiles with a short last
#: one: on two threads each takes half the chunks, so 196 positions as 54 + 54 | 54 + 34 gave
#: one thread 108 rows and the other 88 (49 each now; the microkernel ends any chunk in
#: balanced tiles). Measured, two threads: MobileNetV2-like's 384->64 and 384->96 at 14x14
#: 1.09x each, the model 1.005x; Inception-v1 1.036x, Inception-v2 1.03x, DenseNet-121 1.02x,
#: ResNet-50 0.999-1.009x. False restores chunks of whole tiles.
EQUAL_ROWS = True


def host_tile(itemsize: int) -> tuple[int, int, int]:
    """The host's GEMM microkernel tile: (vector lanes, tile rows, vectors a row)."""
    from onnxjit.codegen.kernel_shapes import tile_shape  # lazy: ir/ must not load llvmlite

    return tile_shape(itemsize)


def whole_vectors(lo: int, hi: int, itemsize: int, stride: int) -> list[tuple[int, int]]:
    """Column ranges covering [lo, hi) in whole vectors: the largest multiple of the host's
    vector lanes from lo, then one vector ending at hi that overlaps it; one range when the
    stride is not 1 or the columns are whole vectors already. For rows whose columns are pure
    functions of the input (a depthwise conv's fused row, a pool's), so the overlap is
    recomputed to the same values; without it the vectorizer finishes a 54-column row with
    half and quarter vectors and scalars (3 full vectors + 4 partial steps per tap, not 4)."""
    vl = host_tile(itemsize)[0]
    n = hi - lo
    if stride != 1 or n <= vl or n % vl == 0:
        return [(lo, hi)]
    return [(lo, hi - n % vl), (hi - vl, hi)]


def runtime_vectors(b: Builder, lo: Operand, hi: Operand, lanes: int,
                    column: Callable[[Operand], None], smallest: int = 4,
                    rolled: bool = True) -> None:
    """column(i) for i in [lo, hi) of run-time bounds, as loops of one vector each (constant
    trip counts, `rolled`, so LLVM emits each as the vector it is and adds no remainder loop),
    the last one overlapping its neighbour: the widest vector, `lanes`, when n = hi - lo >=
    lanes, else the widest of lanes/2, lanes/4, ... >= `smallest` that n holds, else a
    scalar loop (`smallest` = `lanes`: whole vectors of `lanes` only). `rolled`: the
    one-vector loops are `Loop.rolled`. For columns that are pure functions of what they
    read and write elsewhere (a copy, a depthwise sum), so the overlap recomputes the same
    values. A plain loop of run-time trip count vectorizes for long runs only: a 14- or
    28-column row ran in scalar remainders, and a pure copy became a call to memcpy a row."""
    n = b.op("sub", hi, lo)
    wider: Operand | None = None  # n >= the previous (wider) width: that one ran
    width = lanes
    while width >= max(2, smallest):
        fits = b.op("ge", n, i64(width))
        mine = fits if wider is None else b.op("and", fits, b.op("not", wider))
        count = b.op("div", n, i64(width))  # 0 below the widest width
        if wider is not None:
            count = b.op("select", mine, count, i64(0))
        with b.loop(0, count, hint="v") as v:
            base = b.iadd(lo, b.imul(v, width))
            with b.loop(0, width, hint="w", rolled=rolled) as j:
                column(b.iadd(base, j))
        tail = b.op("and", mine, b.op("gt", b.op("rem", n, i64(width)), i64(0)))
        with b.loop(0, b.op("select", tail, i64(1), i64(0)), hint="tail"):
            base = b.op("sub", hi, i64(width))
            with b.loop(0, width, hint="w", rolled=rolled) as j:
                column(b.iadd(base, j))
        wider = fits
        width //= 2
    scalar_end = hi if wider is None else b.op("select", wider, lo, hi)
    with b.loop(lo, scalar_end, hint="w") as i:  # n below every width
        column(i)


def block_rows(gm: Geometry, itemsize: int) -> int:
    """Rows of the first output dim per panel (see the module docstring)."""
    if len(gm.out) < 2:
        return 1
    per_row = gm.p // gm.out[0]
    divisors = [r for r in range(1, gm.out[0] + 1) if gm.out[0] % r == 0]
    fits = max((r for r in divisors if r * gm.kk * per_row * itemsize <= BLOCK_BYTES),
               default=1)
    if not WIDE_BLOCKS:
        return fits
    weights = gm.mg * gm.kk * itemsize
    need = MIN_BLOCK_COLS if weights > WEIGHT_BYTES else MIN_PANEL_COLS
    wide = min((r for r in divisors if r * per_row >= need), default=gm.out[0])
    return max(fits, wide)


def pointwise_blocks(gm: Geometry, itemsize: int, work: int = 0) -> int:
    """Positions per block of a pointwise conv with an epilogue: the largest divisor of P
    whose (M/G, cols) output block fits `BLOCK_BYTES` (all of P when P is small). With `work`
    (multiply-adds) of at least SPLIT_WORK, fewer than MIN_TASKS blocks over all images and
    groups, and too few channels for `m_split` to make MIN_TASKS chunks, the largest divisor
    that gives MIN_TASKS blocks of MIN_SPLIT_COLS or more (`SPLIT_P`): the threads then share
    equal blocks. Measured, one thread: narrower blocks (49 of a 14x14 image) waste a quarter
    of the microkernel's lanes, and splitting 1024 channels instead was 15% faster."""
    if gm.p <= 256:
        best = gm.p
    else:
        fits = [d for d in range(1, gm.p + 1)
                if gm.p % d == 0 and gm.mg * d * itemsize <= BLOCK_BYTES // 2]
        best = max(fits, default=1)
        best = best if best >= 64 else gm.p
    outer = gm.n * gm.g
    blocks = outer * (gm.p // best)
    if EVEN_BLOCKS and work >= SPLIT_WORK and blocks % 2 == 1 and 1 < blocks < 16:
        even = [d for d in range(max(MIN_SPLIT_COLS, best // 2), best)
                if gm.p % d == 0 and (outer * (gm.p // d)) % 2 == 0]
        best = max(even, default=best)
    if SPLIT_P and work >= SPLIT_WORK and outer * (gm.p // best) < MIN_TASKS \
            and gm.mg < MIN_TASKS * MIN_SPLIT_ROWS:
        want = -(-MIN_TASKS // outer)
        best = max((d for d in range(MIN_SPLIT_COLS, best + 1)
                    if gm.p % d == 0 and gm.p // d >= want), default=best)
    return best


def m_split(gm: Geometry, tasks: int, work: int, itemsize: int) -> tuple[int, int]:
    """(chunks, rows per chunk) of the M/G output channels of each block, for a conv with
    `tasks` parallel iterations of blocks and `work` multiply-adds: (1, M/G) when not split.
    The chunks are as equal as `split_rows` makes them; the last takes what is left."""
    if not SPLIT_M or tasks >= MIN_TASKS or work < SPLIT_WORK:
        return 1, gm.mg
    mr = host_tile(itemsize)[1]
    want = -(-MIN_TASKS // tasks)
    chunks, rows = split_rows(gm.mg, -(-gm.mg // max(-(-gm.mg // want), MIN_SPLIT_ROWS)), mr)
    if chunks == 1 and PAIR_SPLIT and tasks == 1 and gm.mg >= 4 * mr:
        # too few channels for MIN_SPLIT_ROWS: still two chunks, one a thread (DenseNet's
        # 3x3 128->32 convs at 14x14 and 7x7 ran serially: 7 of its 43 ms on two threads)
        chunks, rows = split_rows(gm.mg, 2, mr)
    if EVEN_BLOCKS and chunks > 1 and tasks * chunks % 2:
        # an odd count of equal iterations runs as (n+1)/2 + (n-1)/2 on two threads: 96
        # channels of one block as 4 x 24, not 3 x 32 (symbolic 384->96 at 14x14: 1.3x)
        chunks, rows = split_rows(gm.mg, chunks + 1, mr)
    return (chunks, rows) if chunks > 1 else (1, gm.mg)


def split_rows(total: int, chunks: int, mr: int) -> tuple[int, int]:
    """(chunks, rows of each) for `total` rows cut into at most `chunks` chunks, the last
    taking what is left: equal chunks with EQUAL_ROWS, else whole tiles of `mr` rows each
    (then possibly fewer chunks)."""
    per = -(-total // chunks)
    rows = per if EQUAL_ROWS else -(-per // mr) * mr
    return -(-total // rows), rows


def c_split(gm: Geometry, tasks: int) -> int:
    """Chunks the input channels of each panel are built in, for `tasks` panels."""
    if tasks >= MIN_TASKS:
        return 1
    ok = [d for d in range(1, gm.cg + 1) if gm.cg % d == 0 and tasks * d >= MIN_TASKS]
    return min(ok, default=gm.cg)


def for_chunk(b: Builder, mi: Operand, chunks: int, rows: int, total: int,
              fn: Callable[[Operand, int], None]) -> None:
    """fn(first row, rows) for chunk `mi` (run time) of `chunks` chunks of `rows` rows over
    `total` rows, the last one shorter: two guarded copies (loops of 0 or 1 iteration) when
    the sizes differ, since a Matmul's sizes are compile-time."""
    if chunks == 1:  # one chunk of all the rows (`rows` may be more: whole panels)
        fn(i64(0), total)
        return
    last = total - (chunks - 1) * rows
    if last == rows:
        fn(b.imul(mi, rows), rows)
        return
    full = b.op("select", b.op("lt", mi, i64(chunks - 1)), i64(1), i64(0))
    with b.loop(0, full, hint="full"):
        fn(b.imul(mi, rows), rows)
    with b.loop(full, 1, hint="last"):
        fn(i64((chunks - 1) * rows), last)
