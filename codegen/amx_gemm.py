"""The 8-bit product's tiles on AMX (`tdpbusd`), for hosts with AMX-INT8.

`tdpbusd c, a, b` adds to a tile of up to 16 x 16 i32 the products of a u8 tile (16 rows x 64
bytes: 64 depths of A) by an i8 tile in the quad layout (16 quads x 16 columns x 4 bytes):
16K multiply-adds an instruction, about 16x `vpdpbusd`. The B panels of `ir.quad_panels`
(64 columns, quads 256 bytes apart) hold such tiles as they are: columns 16t .. 16t+15 of
depths 64c .. 64c+63 are 16 rows of 64 bytes at panel + 16c * 256 + 64t, stride 256; A's
tiles are read in place (stride lda). So a tile of C (up to 16 rows x one 64-column panel)
is 4 accumulator tiles; each depth chunk loads one A tile and 4 B tiles (the last chunk
K mod 64 deep: K must be a multiple of 4, the lowering's quads having no partial one here).
The accumulators go to a stack buffer (`tilestored`), then the VNNI kernel's store
(`int8_gemm.store_tile`) adds the rank-1 terms and writes the rows and columns that are C's.
LLVM configures the tiles (`ldtilecfg`) from the shapes at each tile function's entry.

Linux gives a process the AMX state only on request (arch_prctl ARCH_REQ_XCOMP_PERM); the
code asks once per loaded module, by a `syscall` in inline assembly (the program may come
from the disk cache into a process that never compiled anything), and takes the VNNI path
when refused.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from onnxjit.codegen.irutil import for_range, for_range_carry, i64c
from onnxjit.codegen.mathlib import intrinsic

I1, I8, I16, I32, I64 = (ir.IntType(w) for w in (1, 8, 16, 32, 64))
PTR = ir.PointerType()
#: rows of an AMX tile (and of a C tile here), bytes of a tile row
TROWS, TBYTES = 16, 64
#: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
_SYS_ARCH_PRCTL, _REQ_XCOMP_PERM, _XTILEDATA = 158, 0x1023, 18
#: use AMX when the host has it (False: the VNNI kernel, for measurements and tests)
AMX = True


class _AmxType(ir.Type):
    """LLVM's `x86_amx`: a tile register value (llvmlite has no class for it)."""

    def _to_string(self) -> str:
        return "x86_amx"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _AmxType)

    def __hash__(self) -> int:
        return hash("x86_amx")


TILE = _AmxType()


def has_amx() -> bool:
    from onnxjit.codegen.target import host

    features = host()[2].split(",")
    return AMX and "+amx-int8" in features and "+amx-tile" in features


def granted(b: ir.IRBuilder) -> ir.Value:
    """An i1: whether this process may use AMX, asking the kernel once per module."""
    module = b.module
    flag = module.globals.get("onnxjit.amx.state")
    if flag is None:  # 0: not asked yet, 1: granted, 2: refused
        flag = ir.GlobalVariable(module, I32, "onnxjit.amx.state")
        flag.linkage = "internal"
        flag.initializer = ir.Constant(I32, 0)
    state = b.load(flag, typ=I32)
    with b.if_then(b.icmp_signed("==", state, ir.Constant(I32, 0)), likely=False):
        asm = ir.InlineAsm(ir.FunctionType(I64, [I64, I64, I64]), "syscall",
                           "={rax},{rax},{rdi},{rsi},~{rcx},~{r11},~{memory}",
                           side_effect=True)
        ret = b.call(asm, [i64c(_SYS_ARCH_PRCTL), i64c(_REQ_XCOMP_PERM), i64c(_XTILEDATA)])
        ok = b.icmp_signed("==", ret, i64c(0))
        b.store(b.select(ok, ir.Constant(I32, 1), ir.Constant(I32, 2)), flag)
    return b.icmp_signed("==", b.load(flag, typ=I32), ir.Constant(I32, 1))


def tile_function(module: ir.Module, terms: int, tailed: bool, store: Callable
                  ) -> ir.Function:
    """`void (ptr a, i64 lda, ptr b, i64 k, ptr c, i64 ldc, i64 ncols, i64 tiles, i64 rows,
    i1 acc, then per rank-1 term: ptr row, i64 row_step, ptr col)`: `tiles` C tiles of `rows`
    <= 16 rows each, one after the other, by the 64-column panel at b (k a multiple of 4, of
    64 unless `tailed`);
    each computed into a stack buffer that `store(b, buffer, c, ldc, ncols, rows, acc,
    terms)` writes. One shape a call: the tiles are configured once (a call per tile spent
    more in `ldtilecfg`/`tilerelease` than in its products)."""
    name = f"onnxjit.qgemm.amx.r{terms}" + (".t" if tailed else "")
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64, PTR, I64, PTR, I64,
                                                             I64, I64, I64, I1]
                                             + [PTR, I64, PTR] * terms), name)
    fn.linkage = "internal"
    for attr in ("nounwind", "noinline"):
        fn.attributes.add(attr)
    a, lda, bp, k, c, ldc, ncols, ntiles, nrows, accumulate = fn.args[:10]
    rank1 = [fn.args[10 + 3 * t: 13 + 3 * t] for t in range(terms)]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    out = b.alloca(ir.ArrayType(I32, TROWS * 64), name="tile")
    out.align = 64
    rows = b.trunc(nrows, I16)
    load = intrinsic(module, "llvm.x86.tileloadd64.internal", TILE, [I16, I16, PTR, I64])
    dot = intrinsic(module, "llvm.x86.tdpbusd.internal", TILE, [I16, I16, I16] + [TILE] * 3)
    zero = intrinsic(module, "llvm.x86.tilezero.internal", TILE, [I16, I16])
    tstore = intrinsic(module, "llvm.x86.tilestored64.internal", ir.VoidType(),
                       [I16, I16, PTR, I64, TILE])
    width, qstride = ir.Constant(I16, TBYTES), i64c(4 * 64)
    full = b.and_(k, i64c(-TBYTES))
    rem = b.trunc(b.sub(k, full), I16)

    def one_tile(tt: ir.Value) -> None:
        r0 = b.mul(tt, i64c(TROWS))
        at = b.gep(a, [b.mul(r0, lda)], source_etype=I8)

        def chunk(k0: ir.Value, depth: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            """accs += A[:, k0:k0+depth] @ B[k0:k0+depth, :] (depth a multiple of 4)."""
            ta = b.call(load, [rows, depth, b.gep(at, [k0], source_etype=I8), lda])
            qrows = b.trunc(b.lshr(b.zext(depth, I64), i64c(2)), I16)
            base = b.gep(bp, [b.mul(b.lshr(k0, i64c(2)), qstride)], source_etype=I8)

            def tb(t: int) -> ir.Value:
                return b.call(load, [qrows, width, b.gep(base, [i64c(TBYTES * t)],
                                                         source_etype=I8), qstride])

            # Without a partial chunk, B tiles are loaded two ahead of their products, so two
            # of them are live and take two tile registers (one register for all of them
            # serialized each load behind the product reading its predecessor: 4% slower).
            # With one, its A and B shapes need tile registers of their own (a register has
            # one shape a configuration): 4 accumulators + 2 + 2 are all 8 of them.
            ahead = 1 if tailed else 2
            tiles, out = [tb(t) for t in range(ahead)], []
            for t, acc in enumerate(accs):
                out.append(b.call(dot, [rows, width, depth, acc, ta, tiles[t]]))
                if t + ahead < len(accs):
                    tiles.append(tb(t + ahead))
            return out

        accs = [b.call(zero, [rows, width]) for _ in range(4)]
        accs = for_range_carry(b, 0, full, TBYTES, accs,
                               lambda k0, acc: chunk(k0, width, acc), "kc")
        if tailed:  # the last chunk, K mod 64 deep
            accs = chunk(full, rem, accs)
        for t, phi in enumerate(accs):
            b.call(tstore, [rows, width, b.gep(out, [i64c(0), i64c(16 * t)]), i64c(256), phi])
        terms_t = [(b.gep(row, [b.mul(r0, step)], source_etype=I32), step, col)
                   for row, step, col in rank1]
        store(b, b.gep(out, [i64c(0), i64c(0)]), b.gep(c, [b.mul(r0, ldc)], source_etype=I32),
              ldc, ncols, nrows, accumulate, terms_t)

    for_range(b, 0, ntiles, 1, one_tile, "tt")
    b.ret_void()
    return fn


def panel_tiles(b: ir.IRBuilder, m: ir.Value, call: Callable) -> None:
    """call(first row, tiles, rows): the whole tiles of 16 rows of m, then the rows left."""
    whole = b.sdiv(m, i64c(TROWS))
    with b.if_then(b.icmp_signed(">", whole, i64c(0))):
        call(i64c(0), whole, i64c(TROWS))
    left = b.srem(m, i64c(TROWS))
    with b.if_then(b.icmp_signed(">", left, i64c(0))):
        call(b.mul(whole, i64c(TROWS)), i64c(1), left)
