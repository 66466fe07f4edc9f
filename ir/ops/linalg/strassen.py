"""Products by a constant B with one level of Strassen's algorithm: 7 half-size products
instead of 8 (Strassen, "Gaussian elimination is not optimal", 1969).

C (m x n) = A (m x k) @ B (k x n). C's columns are cut into SLICES slices of w = n / SLICES
columns, one parallel iteration each (A @ B[:, slice] is independent of the other slices).
In a slice, with quadrants A_ij (m/2 x k/2), B_ij (k/2 x w/2) and C_ij (m/2 x w/2):

    M1 = (A11 + A22) (B11 + B22)    M2 = (A21 + A22) B11    M3 = A11 (B12 - B22)
    M4 = A22 (B21 - B11)            M5 = (A11 + A12) B22    M6 = (A21 - A11) (B11 + B12)
    M7 = (A12 - A22) (B21 + B22)
    C11 = M1 + M4 - M5 + M7    C12 = M3 + M5    C21 = M2 + M4    C22 = M1 - M2 + M3 + M6

7 products of m/2 x k/2 x w/2 multiply-adds: 12.5% fewer than the one product. The adds run
over quadrants (m/2 x k/2 for A, m/2 x w/2 for C), small next to the products when k and w
are large. B is a weight, so its 7 right operands are computed at compile time (in float64,
rounded once) and stored in the tiled kernel's packed layout (`loops.pack_panels`, the host's
panel width): the products read them as `b_packed` and nothing packs B per call.

Lowering, one kernel parallel over the slices; slice s works in its own part of a workspace
that every Strassen kernel of the program shares (`LowerContext.workspace`; the part starts
at s * SLICE_BYTES), so a part stays in one core's cache across layers and calls. With one
scratch per kernel, plan-memory put one layer's slice-1 part on the next one's slice-0 part,
the cores took the lines from each other on every write, and an MLP's second layer waited
10 us for its worker. A slice runs over blocks of rows (the quadrants above are a block's)
and, in each, over chunks of its quadrants' columns (`plan`: what fits SLICE_BYTES). The
last block takes the rows left; with an odd number t of them its bottom quadrants have
(t - 1) / 2 rows, the missing row reading as zeros and never stored:
1) per block, the 5 left operands that are sums (one nest over the quadrant's elements:
   4 loads, 5 stores, and whether the loads were finite); M3 and M4 read A11 and A22 in
   place (an odd block builds them too);
2) per chunk, the 7 products: one loop around one Matmul for the 5 sums, one for A11 and A22
   (same leading dims in each loop), into the slice's 7 product blocks;
3) per chunk, one nest over the C quadrants' elements: 7 loads, the four sums, alpha, Y's old
   value (a Gemm's beta * C), the epilogue (bias, activation, residual of a FusedMatMul),
   4 stores.

Numerics: every C element is the same sum of products in another association: the rounding of
the operand sums and of the final combination add to the error, which stays within float
tolerance for one level, but its bound is norm-wise rather than element-wise: an element much
smaller than its row of A times its column of B has a larger relative error. Measured at
32x784x512: at most 2.3e-7 of |A| @ |B| (the direct product: 1.1e-7); the tests allow 1e-6.
Non-finite values: the sums pair row r of A with row r + m/2, so an infinity or NaN in one
row would reach the other's results (an inf in one sample of a batch, NaN in another's). The
left operands' nest therefore also notes whether every value it read is finite; when one is
not, the block flags each row holding an inf or NaN and rebuilds its left operands with the
flagged rows read as zeros, and the combining pass zeroes the flagged rows' in-place
products (M3, M4) and makes the flagged rows' results NaN (the direct product gives +-inf or
NaN there). Every other row gets what it would without them. The flags cost a store per row
and a few selects in the combining pass; the products are the same code. Finite values keep
the norm-wise bound above: a row's rounding error grows with its partner row's magnitude.
`plan` keeps the direct product where the adds cost more than the products save, where
the right operands (7/4 of B's bytes: they replace the packed weight) would not stay in L3,
and for shapes this lowering does not cover (odd depth or slice width, A transposed,
batched B).

The compile option `fast_algorithms=False` (`LowerContext.fast_algorithms`) keeps every
product direct.

Measured, two threads, a layer with bias and Relu against the direct product: 32x784x512
1.08-1.09x, 128x768x3072 1.09x, 128x3072x768 1.03-1.09x, 197x768x768 1.14x, 197x768x3072
1.06-1.13x, 1024^3 1.09-1.10x (one thread 1.07-1.09x). Models: MLP 784-512-512-10 at batch
32 (the bench's) 1.06x, 1.22x onnxruntime (from 1.15x); MLP 784-1024-10 1.10x; MLP at batch
256 1.07x; a BERT-base-like layer (seq 128, hidden 768) 1.05x; MatMul 64x784x512 1.08x.
"""

from __future__ import annotations

import numpy as np

from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Matmul, Operand, i64, pack_panels
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.types import DType

#: Use one Strassen level where `plan` applies; False keeps every product direct.
#: Off since 2026-11-29: against today's direct product (its few-row column split, the
#: shared microkernels) Strassen lost in one process, interleaved, at load 5-8: 1024^3 0.80x
#: (one thread) and 0.60-0.79x (two), 128x768x3072 0.77x / 0.54-0.90x, 20x1024x1024 0.87x,
#: 64x784x512 0.93x / 1.02x, 32x784x512 0.83-0.92x / 1.01-1.07x; the measurements of the
#: docstring (up to 1.14x) predate those changes. Its extra memory traffic also suffers most
#: from a shared machine's caches. The tests switch it on to keep it right.
STRASSEN = False
#: Column slices: one parallel iteration each (the two cores of the machines we target).
SLICES = 2
#: Smallest sizes where the 7 products pay for the adds (see `plan`). Measured, two
#: threads, a layer with bias and Relu against the direct product: 32x784x512 1.09x,
#: 32x512x512 1.075x, 16x1024x1024 1.11x, 64x1024x1024 1.10x, 128x768x768 1.10x, 32x512x256
#: 1.02x, 16x512x512 1.02x; with depth 256 it lost (32x256x256 0.95x, 64x256x256 0.92x),
#: and with quadrants of 64 columns (a BERT's 64x1024x256 FFN: the model 0.984x).
MIN_ROWS, MIN_DEPTH, MIN_COLS = 16, 512, 128
#: Only quadrants of whole vectors of columns: MLP 784-300 at batch 32 (quadrants of 75
#: columns, a narrow edge panel in each product) ran 0.98x.
WHOLE_VECTORS = True
#: Most bytes of right operands (7/4 of B's): each block of rows streams them again, and
#: from DRAM they make a product memory-bound (64x4096x4096, 112 MB of them in blocks of 16
#: rows: 0.74x; 256x4096x4096 1.01x). Three quarters of this host's 32 MB L3 (a BERT-base
#: FFN's 16.5 MB run 1.09x).
RIGHTS_BYTES = 24 << 20
#: Widest chunk of a quadrant's columns the products of one pass cover (wider quadrants are
#: done in chunks, the left operands of a block of rows built once for all of them).
CHUNK_COLS = 256
#: Bytes of the shared workspace each slice owns (a block's left operands and a chunk's 7
#: products must fit): slice s's part starts at s * SLICE_BYTES in every Strassen kernel of
#: the program, so it stays in one core's cache. Half a core's L2 (the products' packed B
#: panels stream through the other half). Measured against 1 MB, two threads: 1024^3,
#: 197x768x3072 and 128x3072x768 1.0-1.02x (noise-level), the MLP alike (its workspace is
#: 183 KB either way).
SLICE_BYTES = 1 << 19

#: The 7 products in the order they are computed and stored: M1, M2, M5, M6, M7 (whose left
#: operand is a sum, built in the workspace; one loop runs them), then M3 and M4 (left operand
#: A11 / A22, read in place). Left operands as coefficients of (A11, A12, A21, A22), right
#: operands of (B11, B12, B21, B22).
_LEFT = ((1, 0, 0, 1), (0, 0, 1, 1), (1, 1, 0, 0), (-1, 0, 1, 0), (0, 1, 0, -1),
         (1, 0, 0, 0), (0, 0, 0, 1))
_RIGHT = ((1, 0, 0, 1), (1, 0, 0, 0), (0, 0, 0, 1), (1, 1, 0, 0), (0, 0, 1, 1),
          (0, 1, 0, -1), (-1, 0, 1, 0))
#: Products whose left operand is built (the first SUMS of the order above).
SUMS = 5
#: C11, C12, C21, C22 as coefficients of the products in that order.
_OUT = ((1, 0, -1, 0, 1, 0, 1), (0, 0, 1, 0, 0, 1, 0), (0, 1, 0, 0, 0, 0, 1),
        (1, -1, 0, 1, 0, 1, 0))


def plan(m: int, k: int, n: int, dtype: DType) -> tuple[int, int] | None:
    """(rows a block, columns a quadrant chunk) for this product, None when Strassen does not
    apply. Chunks: the largest width that divides the slice's quadrants, in whole vectors, and
    is at most CHUNK_COLS. Blocks: as few as fit a slice's workspace (SLICE_BYTES), of equal
    even height; the last block takes the rows left (fewer, maybe an odd number)."""
    if not (STRASSEN and dtype in (DType.FLOAT, DType.DOUBLE)):
        return None
    from onnxjit.codegen.kernel_shapes import tile_shape  # ir/ loads no llvmlite at import

    vl = tile_shape(dtype.itemsize)[0]
    wh = n // (2 * SLICES)
    if not (k % 2 == 0 and n % (2 * SLICES) == 0 and m >= MIN_ROWS and k >= MIN_DEPTH
            and wh >= MIN_COLS):
        return None
    if WHOLE_VECTORS and wh % vl:
        return None
    if 7 * (k // 2) * (n // 2) * dtype.itemsize > RIGHTS_BYTES:
        return None
    step = vl if WHOLE_VECTORS else 1
    cw = max(d for d in range(step, min(wh, CHUNK_COLS) + 1, step) if wh % d == 0)
    room = SLICE_BYTES // dtype.itemsize
    for blocks in range(1, m // MIN_ROWS + 1):
        rows = 2 * -(-m // (2 * blocks))
        if _slice_need(m, rows, k, cw) <= room:
            return rows, cw
    return None


def _block_need(t: int, k: int, cw: int) -> int:
    """Elements of the workspace a block of t rows uses with chunks of cw columns: its left
    operands (5, or 7 when t is odd) and 7 products, (t + 1) / 2 rows each, and t row
    flags."""
    return (t + 1) // 2 * ((SUMS if t % 2 == 0 else 7) * (k // 2) + 7 * cw) + t


def _slice_need(m: int, rows: int, k: int, cw: int) -> int:
    """Elements of a slice's workspace: its largest block's (blocks of `rows`, the rest)."""
    full, tail = divmod(m, rows)
    return max(_block_need(rows, k, cw) if full else 0, _block_need(tail, k, cw))


def constant_operand(bm: Buffer, trans: bool) -> np.ndarray | None:
    """B' (k x n) when B is a 2-D constant (read as B^T under `trans`), else None."""
    if bm.kind != "const" or bm.data is None or bm.base is not None or len(bm.shape) != 2:
        return None
    data = np.asarray(bm.data).reshape(bm.shape)
    return data.T if trans else data


def right_operands(b: np.ndarray, cw: int, width: int) -> np.ndarray:
    """The 7 right operands of every slice and chunk of `cw` quadrant columns of `b` (k x n),
    each packed in panels of `width` columns: shape (SLICES, chunks, 7, k/2 * cw), computed
    in float64 and rounded once."""
    k, n = b.shape
    kh, w = k // 2, n // SLICES
    wh = w // 2
    b64 = b.astype(np.float64)
    out = np.empty((SLICES, wh // cw, 7, kh * cw), dtype=b.dtype)
    for s in range(SLICES):
        for ch in range(wh // cw):
            c0 = s * w + ch * cw
            quads = [b64[i * kh:(i + 1) * kh, c0 + j * wh:c0 + j * wh + cw]
                     for i in (0, 1) for j in (0, 1)]
            for p, coef in enumerate(_RIGHT):
                r = sum(c * q for c, q in zip(coef, quads) if c)
                out[s, ch, p] = pack_panels(np.asarray(r).astype(b.dtype), width)
    return out


def _nonfinite(b: Builder, x: Operand) -> Operand:
    """1 (i64) when x is an infinity or NaN (x - x is then NaN), else 0."""
    return b.cast(b.op("isnan", b.op("sub", x, x)), DType.INT64)


def _combine(b: Builder, terms: list[Operand], coef: tuple[int, ...]) -> Operand:
    """sum(c * t) for coefficients c in {-1, 0, 1}, left to right after the first positive
    term (A21 - A11 is one subtraction)."""
    pairs = sorted(zip(coef, terms), key=lambda ct: ct[0] <= 0)
    acc: Operand | None = None
    for c, t in pairs:
        if c == 0:
            continue
        if acc is None:
            acc = t  # the sort puts a positive term first (every sum here has one)
        else:
            acc = b.op("add" if c > 0 else "sub", acc, t)
    assert acc is not None
    return acc


def lower_if_applies(ctx: LowerContext, b: Builder, y: Buffer, a: Buffer, bm: Buffer,
                     trans_b: bool, m: int, name: str, alpha: float = 1.0, epilogue=None,
                     accumulate: bool = False) -> bool:
    """When B (`bm`, read as B^T under `trans_b`) is a 2-D constant, the compile allows fast
    algorithms and `plan` applies: append to `b` the Strassen products of Y (m x n, row-major)
    (+)= alpha * A (m x k, row-major) @ B', then `epilogue` (an `fused.linear.Epilogue`)
    on each element, and make `b`'s statements the kernel `name`; whether it did. With
    `accumulate` the product is added to Y's old value (a Gemm's beta * C)."""
    bt = constant_operand(bm, trans_b)
    planned = plan(m, *bt.shape, y.dtype) if bt is not None and ctx.fast_algorithms else None
    if planned is None:
        return False
    _lower(ctx, b, y, a, bt, m, planned, alpha, epilogue, accumulate)
    ctx.kernel(name, b.body)
    return True


def _lower(ctx: LowerContext, b: Builder, y: Buffer, a: Buffer, bt: np.ndarray, m: int,
           planned: tuple[int, int], alpha: float, epilogue, accumulate: bool) -> None:
    """The loops of `lower_if_applies`, for bt (k x n, the constant B') and `plan`'s
    (rows a block, columns a chunk)."""
    from onnxjit.codegen.kernel_shapes import panel_width  # ir/ loads no llvmlite at import

    dt = y.dtype
    k, n = bt.shape
    rows, cw = planned
    kh, chunks = k // 2, n // SLICES // 2 // cw
    nr = panel_width(dt.itemsize)
    rights = ctx.constant("strassen_b", right_operands(bt.astype(dt.numpy), cw, nr).reshape(-1))
    part = SLICE_BYTES // dt.itemsize
    work = ctx.workspace("strassen_work", dt, (SLICES - 1) * part + _slice_need(m, rows, k, cw))
    full, tail = divmod(m, rows)
    with b.loop(0, SLICES, parallel=True, hint="sl") as s:
        abase = b.imul(s, part)
        blk = _Block(b, a, y, work, rights, abase, s, kh, k, n, cw, chunks, nr)
        if full:
            with b.loop(0, full, hint="rb") as rb:
                blk.emit(b.imul(rb, rows), rows, alpha, epilogue, accumulate)
        if tail:
            blk.emit(i64(full * rows), tail, alpha, epilogue, accumulate)


class _Block:
    """The code of a block of rows in slice s (see the module docstring): `emit` for a block
    starting at row r0 with t rows (t odd: its bottom quadrants have one row fewer, which
    reads as zeros and is not stored)."""

    def __init__(self, b: Builder, a: Buffer, y: Buffer, work: Buffer, rights: Buffer,
                 abase: Operand, s: Operand, kh: int, k: int, n: int, cw: int, chunks: int,
                 nr: int):
        self.b, self.a, self.y, self.work, self.rights = b, a, y, work, rights
        self.abase, self.s, self.kh, self.k, self.n = abase, s, kh, k, n
        self.cw, self.chunks, self.nr = cw, chunks, nr
        self.w = n // SLICES

    def emit(self, r0: Operand, t: int, alpha: float, epilogue, accumulate: bool) -> None:
        """The block's code: its left operands (noting whether A's values were finite), its
        row flags, then its chunks. A row with an inf or NaN is flagged: its left operands
        are rebuilt with the flagged rows as zeros, and the combining pass keeps the flagged
        rows' in-place products (M3 from A11, M4 from A22) out of their partner rows and
        makes the flagged rows' results NaN."""
        b, k = self.b, self.k
        h = (t + 1) // 2
        built = SUMS if t % 2 == 0 else 7  # A11 and A22 are read in place when whole
        fbase = b.iadd(self.abase, i64(h * (built * self.kh + 7 * self.cw)))
        bad = self._lefts(r0, t, built)
        zero = const(0, self.y.dtype)
        with b.loop(0, t, hint="r") as r:
            b.store(self.work, b.iadd(fbase, r), zero)
        with b.loop(0, b.cast(b.op("ne", bad, i64(0)), DType.INT64), hint="guard"):
            with b.loop(0, t, hint="r") as r:
                row = b.var(i64(0), "bad")
                src = b.imul(b.iadd(r0, r), k)
                with b.loop(0, k, hint="c") as c:
                    b.assign(row, "or", row, _nonfinite(b, b.load(self.a, b.iadd(src, c))))
                b.store(self.work, b.iadd(fbase, r), b.cast(row, self.y.dtype))
            self._lefts(r0, t, built, fbase)
        self._chunks(r0, t, built, fbase, alpha, epilogue, accumulate)

    def _lefts(self, r0: Operand, t: int, built: int, flags: Operand | None = None
               ) -> Operand | None:
        """The first `built` left operands of the block into the workspace. Without `flags`,
        returns an i64 that is nonzero when one of the values read is not finite; with
        `flags` (the guarded form), a flagged row reads as zeros."""
        b, kh, k = self.b, self.kh, self.k
        h = (t + 1) // 2
        low = t - h  # rows of the bottom quadrants
        qa = h * kh
        a0 = b.imul(r0, k)  # the block's first element in A
        zero = const(0, self.y.dtype)
        bad = b.var(i64(0), "bad") if flags is None else None
        for lo, hi, bottom in ((0, low, True), (low, h, False)):
            if lo == hi:
                continue
            with b.loop(lo, hi, hint="r") as r:
                src, dst = b.iadd(a0, b.imul(r, k)), b.iadd(self.abase, b.imul(r, kh))
                skip = [] if flags is None else \
                    [b.op("ne", b.load(self.work, b.iadd(flags, b.iadd(r, i64(d)))), zero)
                     for d in ((0, h) if bottom else (0,))]
                with b.loop(0, kh, hint="c") as c:
                    at = b.iadd(src, c)
                    quads = [b.load(self.a, b.iadd(at, i64(off))) for off in (0, kh)]
                    if bottom:
                        quads += [b.load(self.a, b.iadd(at, i64(h * k + off)))
                                  for off in (0, kh)]
                    if bad is not None:
                        for x in quads:
                            b.assign(bad, "or", bad, _nonfinite(b, x))
                    for i, cond in enumerate(skip):
                        quads[2 * i:2 * i + 2] = [b.op("select", cond, zero, x)
                                                  for x in quads[2 * i:2 * i + 2]]
                    quads += [zero] * (4 - len(quads))
                    to = b.iadd(dst, c)
                    for p, coef in enumerate(_LEFT[:built]):
                        b.store(self.work, b.iadd(to, i64(p * qa)), _combine(b, quads, coef))
        return bad

    def _chunks(self, r0: Operand, t: int, built: int, flags: Operand, alpha: float,
                epilogue, accumulate: bool) -> None:
        """Per chunk of columns: the 7 products (`built` of them from the workspace's left
        operands, the rest from A11 and A22 in place), then C's quadrant chunks."""
        b, kh, k, cw = self.b, self.kh, self.k, self.cw
        h = (t + 1) // 2
        low = t - h
        qa, qb, qm = h * kh, kh * cw, h * cw
        a0 = b.imul(r0, k)
        mbase = b.iadd(self.abase, i64(built * qa))
        with b.loop(0, self.chunks, hint="ch") as ch:
            rbase = b.imul(b.iadd(b.imul(self.s, self.chunks), ch), 7 * qb)

            def product(p: Operand, left: Buffer, a_off: Operand, lda: int) -> None:
                b.emit(Matmul(self.work, b.iadd(mbase, b.imul(p, qm)), cw, left, a_off, lda,
                              self.rights, b.iadd(rbase, b.imul(p, qb)), self.nr, h, cw, kh,
                              b_packed=True))

            with b.loop(0, built, hint="p") as p:
                product(p, self.work, b.iadd(self.abase, b.imul(p, qa)), kh)
            if built < 7:
                with b.loop(0, 7 - built, hint="q") as q:  # A11 then A22, in place
                    product(b.iadd(q, i64(built)), self.a, b.iadd(a0, b.imul(q, h * k + kh)),
                            k)
            col0 = b.iadd(b.imul(self.s, self.w), b.imul(ch, cw))
            for lo, hi, outs in ((0, low, 4), (low, h, 2)):
                if lo < hi:
                    self._combine_rows(mbase, r0, col0, lo, hi, outs, h, qm, alpha, epilogue,
                                       accumulate, flags)

    def _combine_rows(self, mbase: Operand, r0: Operand, col0: Operand, lo: int, hi: int,
                      outs: int, h: int, qm: int, alpha: float, epilogue,
                      accumulate: bool, flags: Operand) -> None:
        """C's quadrant chunks (rows r0 + r and r0 + h + r for r in [lo, hi), the bottom ones
        only when `outs` is 4; columns col0 + [0, cw) and + w/2) from the 7 product blocks
        at mbase, with alpha, Y's old value and the epilogue. A flagged top row r zeroes its
        M3 row (A11's, read in place), a flagged bottom row its M4 row, and a flagged row's
        results are NaN."""
        b, y, cw, n = self.b, self.y, self.cw, self.n
        wh = self.w // 2
        zero, nan = const(0, y.dtype), const(float("nan"), y.dtype)
        with b.loop(lo, hi, hint="r") as r:
            marked = [b.op("ne", b.load(self.work, b.iadd(flags, b.iadd(r, i64(d)))), zero)
                      for d in (0, h)[:outs // 2]]
            with b.loop(0, cw, hint="c") as c:
                at = b.iadd(b.iadd(mbase, b.imul(r, cw)), c)
                ms = [b.load(self.work, b.iadd(at, i64(p * qm))) for p in range(7)]
                for p, cond in zip((5, 6), marked):  # M3 (A11 row r), M4 (A22 row r)
                    ms[p] = b.op("select", cond, zero, ms[p])
                col = b.iadd(col0, c)
                row = b.iadd(r0, r)
                for q, coef in enumerate(_OUT[:outs]):
                    v = _combine(b, ms, coef)
                    if alpha != 1.0:
                        v = b.op("mul", v, const(alpha, y.dtype))
                    v = b.op("select", marked[q // 2], nan, v)
                    cq = b.iadd(col, i64((q % 2) * wh))
                    yat = b.iadd(b.imul(b.iadd(row, i64((q // 2) * h)), n), cq)
                    if accumulate:
                        v = b.op("add", b.load(y, yat), v)
                    if epilogue is not None:
                        v = epilogue.value(b, v, yat, cq, {})
                    b.store(y, yat, v)
