"""The widening 8-bit product on AVX-512 VNNI: `C (+)= A @ B`, A u8, B i8 packed in quads, C i32.

`vpdpbusd acc, a, b` (`llvm.x86.avx512.vpdpbusd.512`) multiplies, in each of 16 i32 lanes, the
4 unsigned bytes of `a` by the 4 signed bytes of `b` and adds the 4 products to the lane
(non-saturating: exact sums, wrapping like ONNX's int32 results). B is packed at compile time
so that one 64-byte load holds 16 columns x 4 depths (`ir.quad_panels`: panels of NR = 64
columns, depth padded to a multiple of 4 with zeros).

Microkernel (one internal function per tile height, shared by the module's products):
an MR x NR tile of C lives in MR * NV accumulators (NV = 4 vectors of 16 lanes); each step over
a quad g loads NV vectors of the panel and, per row, the 4 bytes A[row, 4g .. 4g+3] as one i32
broadcast to all lanes, then MR * NV vpdpbusd. A last partial quad (k mod 4 depths) is read
byte by byte (never past A's row: B's padding makes the missing bytes' products zero whatever
they are, but reading them could fault at A's end). The tile is then stored (C = acc, or
C += acc, plus the statement's rank-1 terms: row value times column vector, the zero-point
corrections), the panel's columns past n masked off.
Driver: for each panel of n, the rows in MR-row tiles, then one tile of the m mod MR rows left
(a switch on the count: m may be a run-time size). Panels outermost: a panel (kp x 64 bytes)
stays in L1/L2 while the rows sweep it. Threads: the lowering (`ir.ops.linalg.matmul_integer`)
runs blocks of panels and rows in a parallel loop.
On hosts with AMX-INT8 the tiles run on `amx_gemm` instead (16 x 64 tiles of C, 16 times the
multiply-adds an instruction), the same panels, stores and results.
Without VNNI (`VNNI` False, or a host lacking it) the same code runs on an emulation of the
instruction (bytes deinterleaved by shuffles, widened, multiplied and added): slow, but the
same results, so a program built for one host computes the same everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from onnxjit.codegen.amx_gemm import TBYTES, granted, has_amx, panel_tiles, tile_function
from onnxjit.codegen.irutil import for_range, for_range_carry, i64c, imin, splat
from onnxjit.codegen.kernel_shapes import INT8_PANEL, has_vnni
from onnxjit.codegen.mathlib import intrinsic
from onnxjit.errors import CompileError
from onnxjit.ir.loops import Matmul

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
VL, NV = 16, INT8_PANEL // 16
V32, V8 = ir.VectorType(I32, VL), ir.VectorType(I8, 4 * VL)
#: rows of a tile: MR * NV = 24 accumulators + NV panel vectors + a broadcast of 32 registers
MR = 6
#: use the instruction when the host has it (False: the emulation, for tests of it)
VNNI = True


def micro_function(module: ir.Module, mr: int, terms: int) -> ir.Function:
    """The module's microkernel for tiles of `mr` rows and `terms` rank-1 terms, defined on
    first use: `void (ptr a, i64 lda, ptr b, i64 quads, i64 krem, ptr c, i64 ldc, i64 ncols,
    i1 acc, then per term: ptr row, i64 row_step, ptr col)`."""
    vnni = VNNI and has_vnni()
    name = f"onnxjit.qgemm.{mr}x{NV}.r{terms}" + ("" if vnni else ".emul")
    fn = module.globals.get(name)
    if fn is None:
        fn = _define(module, name, mr, terms, vnni)
    return fn


def _dot(b: ir.IRBuilder, vnni: bool, acc: ir.Value, a: ir.Value, w: ir.Value) -> ir.Value:
    """vpdpbusd(acc, a, w): a's bytes unsigned, w's signed."""
    if vnni:
        f = intrinsic(b.module, "llvm.x86.avx512.vpdpbusd.512", V32, [V32, V8, V8])
        return b.call(f, [acc, a, w])
    for r in range(4):  # emulation: depth r of every lane
        idx = ir.Constant(ir.VectorType(I32, VL), [4 * j + r for j in range(VL)])
        x = b.zext(b.shuffle_vector(a, a, idx), V32)
        y = b.sext(b.shuffle_vector(w, w, idx), V32)
        acc = b.add(acc, b.mul(x, y))
    return acc


def _define(module: ir.Module, name: str, mr: int, terms: int, vnni: bool) -> ir.Function:
    fnty = ir.FunctionType(ir.VoidType(), [PTR, I64, PTR, I64, I64, PTR, I64, I64, I1]
                           + [PTR, I64, PTR] * terms)
    fn = ir.Function(module, fnty, name)
    fn.linkage = "internal"
    for attr in ("nounwind", "noinline"):
        fn.attributes.add(attr)
    a, lda, bp, quads, krem, c, ldc, ncols, accumulate = fn.args[:9]
    rank1 = [fn.args[9 + 3 * t: 12 + 3 * t] for t in range(terms)]
    for arg, n in zip(fn.args, ("a", "lda", "b", "quads", "krem", "c", "ldc", "ncols", "acc")):
        arg.name = n
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    rows = [b.gep(a, [b.mul(i64c(q), lda)], source_etype=I8) for q in range(mr)]

    def step(g: ir.Value, accs: list[ir.Value], a_word=None) -> list[ir.Value]:
        pq = b.gep(bp, [b.mul(g, i64c(4 * INT8_PANEL))], source_etype=I8)
        w = [b.load(b.gep(pq, [i64c(64 * v)], source_etype=I8), typ=V8, align=1)
             for v in range(NV)]
        out = []
        for q in range(mr):
            word = a_word(q) if a_word else b.load(
                b.gep(rows[q], [b.shl(g, i64c(2))], source_etype=I8), typ=I32, align=1)
            av = b.bitcast(splat(b, word, VL), V8)
            out += [_dot(b, vnni, accs[q * NV + v], av, w[v]) for v in range(NV)]
        return out

    zero = ir.Constant(V32, [0] * VL)
    accs = for_range_carry(b, 0, quads, 1, [zero] * (mr * NV), step, "g")
    # the last partial quad: its krem bytes of each row, the others zero
    pre = b.block
    tail, join = fn.append_basic_block("tail"), fn.append_basic_block("join")
    b.cbranch(b.icmp_signed(">", krem, i64c(0)), tail, join)
    b.position_at_end(tail)

    def tail_word(q: int) -> ir.Value:
        start = b.shl(quads, i64c(2))

        def byte(r: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            x = b.load(b.gep(rows[q], [b.add(start, r)], source_etype=I8), typ=I8)
            sh = b.trunc(b.shl(r, i64c(3)), I32)
            return [b.or_(acc[0], b.shl(b.zext(x, I32), sh))]

        return for_range_carry(b, 0, krem, 1, [ir.Constant(I32, 0)], byte, "kr")[0]

    tailed = step(quads, accs, tail_word)
    tail_end = b.block
    b.branch(join)
    b.position_at_end(join)
    phis = []
    for x, y in zip(accs, tailed):
        phi = b.phi(V32)
        phi.add_incoming(x, pre)
        phi.add_incoming(y, tail_end)
        phis.append(phi)
    _store(b, phis, c, ldc, ncols, accumulate, mr, rank1)
    b.ret_void()
    return fn


def _store(b: ir.IRBuilder, accs: list[ir.Value], c: ir.Value, ldc: ir.Value,
           ncols: ir.Value, accumulate: ir.Value, mr: int, rank1: list) -> None:
    """C (+)= accs + the rank-1 terms, the lanes past `ncols` columns of the panel masked
    off."""
    st = _Store(b, ncols, rank1)
    for q in range(mr):
        st.row(accs[q * NV:(q + 1) * NV], i64c(q), c, ldc, accumulate)


def store_rows(b: ir.IRBuilder, tile: ir.Value, c: ir.Value, ldc: ir.Value, ncols: ir.Value,
               rows: ir.Value, accumulate: ir.Value, rank1: list) -> None:
    """`_store` of the first `rows` rows (a run-time count) of a 16 x 64 i32 tile in memory
    (the AMX kernel's accumulators)."""
    st = _Store(b, ncols, rank1)

    def row(q: ir.Value) -> None:
        base = b.gep(tile, [b.mul(q, i64c(INT8_PANEL))], source_etype=I32)
        accs = [b.load(b.gep(base, [i64c(v * VL)], source_etype=I32), typ=V32, align=64)
                for v in range(NV)]
        st.row(accs, q, c, ldc, accumulate)

    for_range(b, 0, rows, 1, row, "sq")


class _Store:
    """Stores rows of a C tile: masks of the panel's `ncols` columns and the rank-1 terms'
    column vectors, computed once."""

    def __init__(self, b: ir.IRBuilder, ncols: ir.Value, rank1: list):
        self.b, self.rank1 = b, rank1
        mty = ir.VectorType(I1, VL)
        self.mload = intrinsic(b.module, "llvm.masked.load.v16i32.p0", V32,
                               [PTR, I32, mty, V32])
        self.mstore = intrinsic(b.module, "llvm.masked.store.v16i32.p0", ir.VoidType(),
                                [V32, PTR, I32, mty])
        iota = ir.Constant(ir.VectorType(I64, VL), list(range(VL)))
        self.masks = [b.icmp_signed("<", iota, splat(b, b.sub(ncols, i64c(v * VL)), VL))
                      for v in range(NV)]
        self.four, self.zero = ir.Constant(I32, 4), ir.Constant(V32, [0] * VL)
        self.cols = [[self.masked(b.gep(col, [i64c(v * VL)], source_etype=I32), v)
                      for v in range(NV)] for _, _, col in rank1]

    def masked(self, p: ir.Value, v: int) -> ir.Value:
        return self.b.call(self.mload, [p, self.four, self.masks[v], self.zero])

    def row(self, accs: list[ir.Value], q: ir.Value, c: ir.Value, ldc: ir.Value,
            accumulate: ir.Value) -> None:
        """Row q of the tile: C[q, :] (+)= accs + sum of row value * column vector."""
        b = self.b
        crow = b.gep(c, [b.mul(q, ldc)], source_etype=I32)
        rows = [splat(b, b.load(b.gep(row, [b.mul(q, step)], source_etype=I32), typ=I32,
                                align=4), VL) for row, step, _ in self.rank1]
        for v in range(NV):
            p = b.gep(crow, [i64c(v * VL)], source_etype=I32)
            acc = accs[v]
            for rv, cv in zip(rows, self.cols):
                acc = b.add(acc, b.mul(rv, cv[v]))
            out = b.select(accumulate, b.add(acc, self.masked(p, v)), acc)
            b.call(self.mstore, [out, p, self.four, self.masks[v]])


def emit_int8_matmul(b: ir.IRBuilder, s: Matmul, ptrs: Sequence[ir.Value],
                     offs: Sequence[ir.Value], sizes: dict | None = None,
                     terms: Sequence[tuple] = ()) -> None:
    """Emit the 8-bit product `s` (see the module docstring) at the builder's position;
    `sizes`: the run-time values of the fields that are variables; `terms`: its rank-1 terms
    as (row pointer, row offset, row step, column pointer, column offset)."""
    if s.ldb != INT8_PANEL or not s.b_packed or s.a_trans or s.b_trans:
        raise CompileError(f"8-bit Matmul needs B packed in quads of {INT8_PANEL}-column "
                           f"panels (got ldb={s.ldb}, packed={s.b_packed})")
    sizes = sizes or {}

    def val(f: str) -> ir.Value:
        x = sizes.get(f, getattr(s, f))
        return i64c(x) if isinstance(x, int) else x

    m, n, k, lda, ldc = (val(f) for f in ("m", "n", "k", "lda", "ldc"))
    pc, pa, pb = ptrs
    oc, oa, ob = offs
    kp = b.and_(b.add(k, i64c(3)), i64c(-4))
    quads, krem = b.ashr(k, i64c(2)), b.and_(k, i64c(3))
    acc = ir.Constant(I1, int(s.accumulate))
    npanels = b.sdiv(b.add(n, i64c(INT8_PANEL - 1)), i64c(INT8_PANEL))
    mfull = b.sub(m, b.srem(m, i64c(MR)))

    def panel_at(p: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        """(first column, columns, B's panel) of panel p."""
        col = b.mul(p, i64c(INT8_PANEL))
        ncols = imin(b, i64c(INT8_PANEL), b.sub(n, col))
        return col, ncols, b.gep(pb, [b.add(ob, b.mul(col, kp))], source_etype=I8)

    def rows_at(i: ir.Value, col: ir.Value) -> list[ir.Value]:
        """A's and C's pointers at row i (C at column col), then each rank-1 term's."""
        ap = b.gep(pa, [b.add(oa, b.mul(i, lda))], source_etype=I8)
        cp = b.gep(pc, [b.add(oc, b.add(b.mul(i, ldc), col))], source_etype=I32)
        extra = []
        for rp, ro, step, cpt, co in terms:
            extra += [b.gep(rp, [b.add(ro, b.mul(i, i64c(step)))], source_etype=I32),
                      i64c(step), b.gep(cpt, [b.add(co, col)], source_etype=I32)]
        return [ap, cp, *extra]

    def panel(p: ir.Value) -> None:
        col, ncols, bpanel = panel_at(p)

        def tile(i: ir.Value, rows: int) -> None:
            ap, cp, *extra = rows_at(i, col)
            b.call(micro_function(b.module, rows, len(terms)),
                   [ap, lda, bpanel, quads, krem, cp, ldc, ncols, acc, *extra])

        for_range(b, 0, mfull, MR, lambda i: tile(i, MR), "qi")
        left = b.srem(m, i64c(MR))
        done = b.append_basic_block("qrows.done")
        sw = b.switch(left, done)
        for r in range(1, MR):
            blk = b.append_basic_block(f"qrows.{r}")
            sw.add_case(i64c(r), blk)
            b.position_at_end(blk)
            tile(mfull, r)
            b.branch(done)
        b.position_at_end(done)

    # Whole 64-deep chunks only: with a partial chunk the tile function needs all 8 tile
    # registers (two shapes of A and B), and LLVM's allocator ran out of them on some
    # shapes (K = 24 with two rank-1 terms), which ends the process in `exit(1)`.
    use_amx = has_amx() and isinstance(s.k, int) and s.k % TBYTES == 0
    if not use_amx:
        for_range(b, 0, npanels, 1, panel, "qp")
        return
    ok = granted(b)  # the process may use AMX (asked once per module)

    def amx_panel(p: ir.Value) -> None:
        col, ncols, bpanel = panel_at(p)

        def tile(i: ir.Value, tiles: ir.Value, rows: ir.Value) -> None:
            ap, cp, *extra = rows_at(i, col)
            b.call(tile_function(b.module, len(terms), s.k % 64 != 0, store_rows),
                   [ap, lda, bpanel, k, cp, ldc, ncols, tiles, rows, acc, *extra])

        panel_tiles(b, m, tile)

    with b.if_else(ok) as (on_amx, on_vnni):
        with on_amx:
            for_range(b, 0, npanels, 1, amx_panel, "qa")
        with on_vnni:
            for_range(b, 0, npanels, 1, panel, "qp")
