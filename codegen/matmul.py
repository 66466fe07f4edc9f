"""The `Matmul` statement: dispatch to the register-tiled kernel, or LLVM loop nests the
vectorizer turns into broadcast-FMA code.

`C (+)= alpha * A' @ B'` on row-major windows (see `onnxjit.ir.loops.Matmul`). Float products of
at least TILE_WORK multiply-adds go to `matmul_kernel.TileGemm` (explicit vector register tile;
B packed on the stack from PACK_MIN_M rows, PACK_MIN_M_T when transposed, else read in place;
`uses_tiles` says which do, and `emit_outlined` runs one as a function of its own, for kernels
whose other code would crowd the tile out of registers: `llvmgen.OUTLINE_PRODUCTS`).
The rest (ints, small products, one-row products, few rows with B transposed) use two forms
here, both needing no extra memory. A B packed at compile time (`Matmul.b_packed`, see
`packs_b`) always goes to the tiled kernel, which alone reads that layout:

- axpy form (B not transposed, A either way): C's row i is accumulated as
  `C[i, :] += (alpha * A'[i, kk]) * B[kk, :]`, so the innermost loop runs over j along
  contiguous rows of B and C and vectorizes to broadcast-FMA. It is register-blocked over
  R rows of C and U values of kk (each C vector is loaded once, gets U FMAs and is stored
  once; each B vector feeds R FMAs) and cache-blocked: NB columns of C by KB rows of
  B (a B panel that stays in L2, its U-row slices in L1). Without `accumulate` C is zeroed
  first.
- dot form (B transposed): `C[i, j] = dot(A'[i, :], B[j, :])` over contiguous rows of B,
  computing RJ columns of C at once so each A' value feeds RJ FMAs; float sums carry
  `reassoc contract` flags so the vectorizer may split them into vector partial sums
  (accumulation order differs from numpy's, within the tolerance matmul results have anyway).
  B rows are blocked so a block of them stays in L2 while all rows i sweep it.

Small products (m*n*k <= SMALL_WORK) skip register blocking: their loops have small constant
trip counts that LLVM unrolls fully, and the blocked form only costs compile time there.

Floats multiply-add with `llvm.fmuladd` (fused on FMA hardware); alpha multiplies the sum,
as numpy's `alpha * (A @ B)` and the tiled kernel do (the dot form at its store, the axpy form
in a pass over C after the product), so a sum near float max overflows, or not, as the
references' does (folded into A', `alpha * a` overflowed where `alpha * (a . b)` did not, and
the other way round); the axpy form with `accumulate` and the run-time loops of
`_runtime_loops` (a symbolic program's products of other than f32/f64) still fold it into
the A' value.
Integers wrap (mul/add), and alpha is converted to the integer type as numpy's
`prod * np.asarray(alpha, dtype)` does (truncation): in wrap-around arithmetic
`sum((alpha * a) * b) == alpha * sum(a * b)` exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from onnxjit.codegen.irutil import for_range, for_range_carry, i64c, imin, load_elem, store_elem
from onnxjit.codegen.kernel_shapes import PACK_MIN_M, PACK_MIN_M_T, uses_tiles
from onnxjit.codegen.mathlib import intrinsic
from onnxjit.codegen.matmul_kernel import TileGemm
from onnxjit.codegen.scalar import constant, storage_type
from onnxjit.errors import UnsupportedError
from onnxjit.ir.loops import Matmul

#: axpy form blocking: rows of C and values of kk per inner loop, columns and depth of a block
R_ROWS, U_DEPTH, NB_BYTES, KB = 4, 4, 2048, 256
#: dot form: rows x columns of C per reduction loop, bytes of B rows kept in cache per block
RI_ROWS, RJ_COLS, DOT_BLOCK_BYTES = 2, 4, 256 * 1024
#: dot form: a depth up to this adds its products in order with fused multiply-adds, as the
#: references' BLAS does (one rounding per step); a longer one is a reduction the vectorizer
#: splits into partial sums. Attention's scores over a head of 8 with a query near float max
#: (fuzz seed 10131671): the partial sums rounded a product of 3.8e38 to inf on its own, where
#: in order it met the -1.1e38 before it (2.7e38, finite, in both references).
DOT_IN_ORDER = 16
#: below this many multiply-adds the blocking buys nothing but compile time (fully unrolled
#: constant-trip loops): one row, one kk, one column at a time
SMALL_WORK = 8192


class _Emitter:
    def __init__(self, b: ir.IRBuilder, s: Matmul, ptrs: Sequence[ir.Value],
                 offs: Sequence[ir.Value]):
        self.b, self.s = b, s
        self.pc, self.pa, self.pb = ptrs
        self.c_off, self.a_off, self.b_off = offs
        self.dt = s.c.dtype
        self.ty = storage_type(self.dt)
        self.align = self.dt.itemsize
        self.is_float = self.dt.is_float
        if self.is_float:
            self.alpha = None if s.alpha == 1.0 else constant(s.alpha, self.dt)
        else:
            alpha = int(s.alpha)  # numpy converts alpha to the integer dtype by truncation
            self.alpha = None if alpha == 1 else constant(alpha, self.dt)
        self.zero = constant(0, self.dt)
        # a float axpy form that overwrites C scales it after the product (`scale_c`)
        self.alpha_after = self.is_float and self.alpha is not None and not s.accumulate
        small = s.m * s.n * s.k <= SMALL_WORK
        self.r, self.u = (1, 1) if small else (R_ROWS, U_DEPTH)
        self.ri, self.rj = (1, 1) if small else (RI_ROWS, RJ_COLS)

    # element access --------------------------------------------------------------------------
    def idx(self, off: ir.Value, row: ir.Value, ld: int, col: ir.Value) -> ir.Value:
        b = self.b
        return b.add(off, b.add(b.mul(row, i64c(ld), flags=["nsw"]), col, flags=["nsw"]),
                     flags=["nsw"])

    def load(self, ptr: ir.Value, index: ir.Value) -> ir.Value:
        return load_elem(self.b, ptr, index, self.ty, self.align)

    def store(self, value: ir.Value, ptr: ir.Value, index: ir.Value) -> None:
        store_elem(self.b, value, ptr, index, self.ty, self.align)

    def a_value(self, i: ir.Value, kk: ir.Value) -> ir.Value:
        """A'[i, kk] for the axpy form, times alpha unless C is scaled after (`scale_c`)"""
        s = self.s
        index = (self.idx(self.a_off, kk, s.lda, i) if s.a_trans
                 else self.idx(self.a_off, i, s.lda, kk))
        a = self.load(self.pa, index)
        return a if self.alpha_after else self.scale(a)

    def scale(self, x: ir.Value) -> ir.Value:
        if self.alpha is None:
            return x
        return self.b.fmul(x, self.alpha) if self.is_float else self.b.mul(x, self.alpha)

    def madd(self, x: ir.Value, y: ir.Value, acc: ir.Value, reduce: bool = False) -> ir.Value:
        b = self.b
        if not self.is_float:
            return b.add(acc, b.mul(x, y))
        if reduce:  # a reduction chain the vectorizer may reassociate into partial sums
            return b.fadd(acc, b.fmul(x, y, flags=["contract"]), flags=["reassoc", "contract"])
        suffix = "f32" if self.ty == ir.FloatType() else "f64"
        fma = intrinsic(b.module, f"llvm.fmuladd.{suffix}", self.ty, [self.ty] * 3)
        return b.call(fma, [x, y, acc])

    # forms -------------------------------------------------------------------------------------
    def each_c(self, visit, hint: str) -> None:
        """visit(index) for every element of C's window, row by row."""
        s = self.s

        def row(i: ir.Value) -> None:
            base = self.idx(self.c_off, i, s.ldc, i64c(0))
            for_range(self.b, 0, s.n, 1, lambda j: visit(self.b.add(base, j)), hint + "j")

        for_range(self.b, 0, s.m, 1, row, hint + "i")

    def zero_c(self) -> None:
        self.each_c(lambda ci: self.store(self.zero, self.pc, ci), "z")

    def scale_c(self) -> None:
        """C *= alpha over the window, after an axpy product that left alpha out."""
        if self.alpha_after:
            self.each_c(lambda ci: self.store(self.scale(self.load(self.pc, ci)), self.pc, ci),
                        "s")

    def axpy(self) -> None:
        s, b = self.s, self.b
        nb = max(16, NB_BYTES // self.dt.itemsize)

        def k_block(j0: ir.Value, jend: ir.Value, k0: ir.Value, kend: ir.Value) -> None:
            u, r = self.u, self.r
            kfull = b.sub(kend, b.srem(b.sub(kend, k0), i64c(u)))
            m_full = s.m - s.m % r

            def rows(i: ir.Value, r: int) -> None:
                for_range(b, k0, kfull, u, lambda kk: self.axpy_inner(i, r, kk, u, j0, jend),
                          "kk")
                if u > 1:
                    for_range(b, kfull, kend, 1,
                              lambda kk: self.axpy_inner(i, r, kk, 1, j0, jend), "kr")

            if m_full:
                for_range(b, 0, m_full, r, lambda i: rows(i, r), "i")
            if m_full < s.m:
                for_range(b, m_full, s.m, 1, lambda i: rows(i, 1), "ir")

        def j_block(j0: ir.Value, jend: ir.Value) -> None:
            if s.k <= KB:
                k_block(j0, jend, i64c(0), i64c(s.k))
            else:
                for_range(b, 0, s.k, KB,
                          lambda k0: k_block(j0, jend, k0, imin(b, b.add(k0, i64c(KB)),
                                                                i64c(s.k))), "k0")

        if s.n <= nb:
            j_block(i64c(0), i64c(s.n))
        else:
            for_range(b, 0, s.n, nb,
                      lambda j0: j_block(j0, imin(b, b.add(j0, i64c(nb)), i64c(s.n))), "j0")

    def axpy_inner(self, i: ir.Value, r: int, kk: ir.Value, u: int, j0: ir.Value,
                   jend: ir.Value) -> None:
        """C[i:i+r, j0:jend] += A'[i:i+r, kk:kk+u] @ B[kk:kk+u, j0:jend]"""
        s, b = self.s, self.b
        rows = [b.add(i, i64c(q)) for q in range(r)]
        ks = [b.add(kk, i64c(q)) for q in range(u)]
        av = [[self.a_value(row, k) for k in ks] for row in rows]
        b_base = [self.idx(self.b_off, k, s.ldb, i64c(0)) for k in ks]
        c_base = [self.idx(self.c_off, row, s.ldc, i64c(0)) for row in rows]

        def body(j: ir.Value) -> None:
            bv = [self.load(self.pb, b.add(base, j)) for base in b_base]
            for q in range(r):
                ci = b.add(c_base[q], j)
                acc = self.load(self.pc, ci)
                for p in range(u):
                    acc = self.madd(av[q][p], bv[p], acc)
                self.store(acc, self.pc, ci)

        for_range(b, j0, jend, 1, body, "j")

    def dot(self) -> None:
        s, b = self.s, self.b
        rows_per_block = DOT_BLOCK_BYTES // max(1, s.k * self.dt.itemsize)
        ri, rj = self.ri, self.rj
        nbj = max(rj, rows_per_block // rj * rj)
        m_full = s.m - s.m % ri

        def j_block(j0: ir.Value, jend: ir.Value) -> None:
            jfull = b.sub(jend, b.srem(b.sub(jend, j0), i64c(rj)))

            def row(i: ir.Value, ri: int) -> None:
                for_range(b, j0, jfull, rj, lambda j: self.dot_inner(i, ri, j, rj), "j")
                if rj > 1:
                    for_range(b, jfull, jend, 1, lambda j: self.dot_inner(i, ri, j, 1), "jr")

            if m_full:
                for_range(b, 0, m_full, ri, lambda i: row(i, ri), "i")
            if m_full < s.m:
                for_range(b, m_full, s.m, 1, lambda i: row(i, 1), "ir")

        if s.n <= nbj:
            j_block(i64c(0), i64c(s.n))
        else:
            for_range(b, 0, s.n, nbj,
                      lambda j0: j_block(j0, imin(b, b.add(j0, i64c(nbj)), i64c(s.n))), "j0")

    def dot_inner(self, i: ir.Value, ri: int, j: ir.Value, rj: int) -> None:
        """C[i:i+ri, j:j+rj] (+)= alpha * A'[i:i+ri, :] @ B[j:j+rj, :]^T"""
        s, b = self.s, self.b
        rows = [b.add(i, i64c(p)) for p in range(ri)]
        b_base = [self.idx(self.b_off, b.add(j, i64c(q)), s.ldb, i64c(0)) for q in range(rj)]
        a_base = [self.idx(self.a_off, row, s.lda, i64c(0)) for row in rows]

        def body(kk: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            if s.a_trans:
                av = [self.load(self.pa, self.idx(self.a_off, kk, s.lda, row)) for row in rows]
            else:
                av = [self.load(self.pa, b.add(base, kk)) for base in a_base]
            bv = [self.load(self.pb, b.add(base, kk)) for base in b_base]
            return [self.madd(av[p], bv[q], accs[p * rj + q], reduce=s.k > DOT_IN_ORDER)
                    for p in range(ri) for q in range(rj)]

        sums = for_range_carry(b, 0, s.k, 1, [self.zero] * (ri * rj), body, "k")
        for p in range(ri):
            for q in range(rj):
                ci = self.idx(self.c_off, rows[p], s.ldc, b.add(j, i64c(q)))
                v = self.scale(sums[p * rj + q])
                if s.accumulate:
                    old = self.load(self.pc, ci)
                    v = b.fadd(old, v) if self.is_float else b.add(old, v)
                self.store(v, self.pc, ci)


def emit_matmul(b: ir.IRBuilder, s: Matmul, ptrs: Sequence[ir.Value], offs: Sequence[ir.Value],
                where: object = None, epilogue=None, sizes: dict | None = None,
                m_hint: int = 0) -> bool:
    """Emit `s` at the builder's position; `ptrs` are the (C, A, B) root pointers and `offs`
    the i64 element offsets of the windows. `epilogue` (an `epilogue_fuse.Fused`) is applied
    in the tiled kernel's stores when it can be; returns whether it was. `sizes`: the run-time
    values of the fields that are variables (a symbolic program), `m_hint` m's usual size."""
    dt = s.c.dtype
    if s.a.dtype != dt or s.b.dtype != dt or not (dt.is_float or dt.is_int):
        raise UnsupportedError(f"Matmul of {s.a.dtype.short} x {s.b.dtype.short} -> "
                               f"{dt.short} is not supported", where=where)
    if sizes:
        return emit_runtime(b, s, ptrs, offs, sizes, m_hint, epilogue)
    if s.m == 0 or s.n == 0:
        return False
    if uses_tiles(s):
        packs = s.b_packed or s.m >= PACK_MIN_M or s.b_trans and s.m >= PACK_MIN_M_T
        tile = TileGemm(b, s, ptrs, offs, unpacked=not packs, epilogue=epilogue)
        tile.emit()
        return tile.epi is not None
    e = _Emitter(b, s, ptrs, offs)
    if s.k == 0:  # an empty sum: C = 0, or C unchanged
        if not s.accumulate:
            e.zero_c()
    elif s.b_trans:
        e.dot()
    else:
        if not s.accumulate:
            e.zero_c()
        e.axpy()
        e.scale_c()
    return False


def emit_outlined(b: ir.IRBuilder, s: Matmul, ptrs: Sequence[ir.Value],
                  offs: Sequence[ir.Value], name: str, where: object = None,
                  sizes: dict | None = None, m_hint: int = 0) -> None:
    """Emit `s` (no epilogue) as an internal function `name` of its own, taking the C, A, B
    pointers and their offsets (then the run-time `sizes`, in their order), and call it at the
    builder's position. Its register tile is allocated there with nothing else live: inline,
    LLVM hoists the splat constants of a nest after the product (an LSTM cell's polynomial
    coefficients) above it, and the allocator spilled the tile's accumulators rather than
    them."""
    sizes = sizes or {}
    fn = ir.Function(b.module, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 3
                                               + [ir.IntType(64)] * (3 + len(sizes))), name)
    fn.linkage = "internal"
    for attr in ("nounwind", "noinline"):
        fn.attributes.add(attr)
    entry = fn.append_basic_block("entry")  # the kernel's stack buffers, then the body
    body = ir.IRBuilder(fn.append_basic_block("body"))
    inner = dict(zip(sizes, fn.args[6:]))
    emit_matmul(body, s, fn.args[:3], fn.args[3:6], where=where, sizes=inner, m_hint=m_hint)
    body.ret_void()
    ir.IRBuilder(entry).branch(fn.blocks[1])
    b.call(fn, [*ptrs, *offs, *sizes.values()])


def emit_runtime(b: ir.IRBuilder, s: Matmul, ptrs: Sequence[ir.Value], offs: Sequence[ir.Value],
                 sizes: dict, m_hint: int, epilogue=None) -> bool:
    """A Matmul with run-time sizes: floats on the tiled kernel (B packed unless it is read in
    place for few rows, by `m_hint`), ints as plain loops; with k = 0, C = 0 (or unchanged)."""
    dt = s.c.dtype
    vals = {f: sizes.get(f, i64c(getattr(s, f)) if isinstance(getattr(s, f), int) else None)
            for f in ("m", "n", "k", "lda", "ldb", "ldc")}
    if not s.accumulate:  # an empty sum writes zeros: the depth loop below would not run
        with b.if_then(b.icmp_signed("==", vals["k"], i64c(0))):
            _zero_window(b, s, ptrs[0], offs[0], vals)
    if dt.is_float and dt.itemsize in (4, 8):
        packs = s.b_packed or s.b_trans or m_hint >= PACK_MIN_M
        tile = TileGemm(b, s, ptrs, offs, unpacked=not packs, epilogue=epilogue, sizes=sizes)
        tile.emit()
        return tile.epi is not None
    _runtime_loops(b, s, ptrs, offs, vals)
    return False


def _zero_window(b: ir.IRBuilder, s: Matmul, pc: ir.Value, c_off: ir.Value, v: dict) -> None:
    ty, align = storage_type(s.c.dtype), s.c.dtype.itemsize
    zero = constant(0, s.c.dtype)

    def row(i: ir.Value) -> None:
        base = b.add(c_off, b.mul(i, v["ldc"]))
        for_range(b, 0, v["n"], 1, lambda j: store_elem(b, zero, pc, b.add(base, j), ty,
                                                         align), "zj")

    for_range(b, 0, v["m"], 1, row, "zi")


def _runtime_loops(b: ir.IRBuilder, s: Matmul, ptrs: Sequence[ir.Value],
                   offs: Sequence[ir.Value], v: dict) -> None:
    """C (+)= alpha * A' @ B' as i, kk, j loops (j innermost, contiguous in C)."""
    pc, pa, pb = ptrs
    oc, oa, ob = offs
    dt = s.c.dtype
    ty, align = storage_type(dt), dt.itemsize
    alpha = None if s.alpha == 1 else constant(s.alpha if dt.is_float else int(s.alpha), dt)

    def at(off: ir.Value, r: ir.Value, ld: ir.Value, c: ir.Value) -> ir.Value:
        return b.add(off, b.add(b.mul(r, ld), c))

    def row(i: ir.Value) -> None:
        def depth(kk: ir.Value) -> None:
            ai = at(oa, kk, v["lda"], i) if s.a_trans else at(oa, i, v["lda"], kk)
            a = load_elem(b, pa, ai, ty, align)
            if alpha is not None:
                a = b.fmul(a, alpha) if dt.is_float else b.mul(a, alpha)

            def col(j: ir.Value) -> None:
                bi = at(ob, j, v["ldb"], kk) if s.b_trans else at(ob, kk, v["ldb"], j)
                ci = at(oc, i, v["ldc"], j)
                x, old = load_elem(b, pb, bi, ty, align), load_elem(b, pc, ci, ty, align)
                new = b.fadd(old, b.fmul(a, x)) if dt.is_float else b.add(old, b.mul(a, x))
                store_elem(b, new, pc, ci, ty, align)

            for_range(b, 0, v["n"], 1, col, "j")

        for_range(b, 0, v["k"], 1, depth, "kk")

    if not s.accumulate:
        _zero_window(b, s, pc, oc, v)
    for_range(b, 0, v["m"], 1, row, "i")
