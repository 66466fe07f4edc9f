"""The GEMM microkernel as one function per tile shape, shared by every product of a module.

`matmul_kernel.TileGemm` computes each tile of C (an MR x (NV * VL) block, see there) by a
call to `micro_function(module, key)`: an internal `noinline` function per `MicroKey`
(element type, tile rows, vectors per row, whether the last vector is narrower, A' read
transposed, A prefetched, rows counted at run time), defined on first use and named after the
key. Everything else that varies between products (depth, strides, pointers, alpha, the first
block's overwrite, the lanes of the edge vector, the rows that are C's) is an argument, so the
kernels of a CNN whose layers differ in their channel counts call a handful of functions
instead of each emitting tens of specialised tiles (DenseNet-121: 84 products, 311 tiles).
LLVM compiles each once per module; internal linkage lets it specialise them to the arguments
their calls pass. A symbolic program compiled in parts declares them instead
(`module_text(module, shared=True)`): their object code is compiled once per host and shared
by its modules and later programs (`gemm_objects`).

The function, `void (ptr a, i64 lda, ptr b, i64 ldb, i64 kc, ptr c, i64 ldc, i1 overwrite,
<elt> alpha, i64 lanes, ptr a_next, i64 valid)`:
  a: &A'[row 0, k 0] of the tile; row q, depth kk at a + q*lda + kk (A' transposed:
     a + kk*lda + q); b: row 0 of the B panel, row kk at b + kk*ldb (NV vectors wide; the
     last one's first `lanes` lanes only when the key says it is narrower); c: &C[row 0,
     column 0] of the tile, row q at c + q*ldc.
  The k loop keeps the MR * NV accumulators in phis; each step loads the NV vectors of a B row
  and broadcasts MR values of A' into MR * NV FMAs (and, when `fetch`, prefetches row
  kk mod MR of the next tile, `a_next` + (kk mod MR)*lda + kk + PREFETCH_A elements: one line
  a step of the rows the hardware prefetcher does not follow); when `fetch_b`, a_next is the
  first row of B's next slice instead, whose row kk (NV lines) is prefetched into L2; when
  `fetch_at`, the line of A' FETCH_AT steps ahead is (`matmul_kernel.FETCH_B`, `FETCH_AT`).
  Then C = alpha * acc when `overwrite`, else C += alpha * acc (one FMA); a key without
  `scaled` (alpha = 1, most products) stores acc or old + acc, the same bits without the
  multiplies (a shared function cannot have alpha = 1 folded in by LLVM, and a small depth's
  call is short).
  With `rows` in the key only the first `valid` rows are C's: the others compute row 0 again
  and their stores are skipped (a branch per row).
The epilogue a product fuses (bias, activation, residual: `epilogue_fuse`) runs at the call
site on the tile just stored (in L1), row by row (`TileGemm.epilogue`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from llvmlite import ir

from onnxjit.codegen.irutil import for_range_carry, i64c, splat
from onnxjit.codegen.kernel_shapes import tile_shape
from onnxjit.codegen.mathlib import intrinsic

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
#: Elements ahead along k that the next tile's constant A rows are prefetched (see the module
#: docstring); 0 turns the prefetch off. Measured against off, two threads: Inception-v2 1.16x,
#: Inception-v1 1.04x, ResNet-50 1.02-1.04x (one thread 1.03x), SqueezeNet 1.03x, DenseNet-121
#: 1.03x, VGG-19 1.02x, MobileNetV2-like 1.01x; distances 16 and 128 alike, two tiles ahead
#: alike; prefetching in every panel instead of the first one ~0.7% slower. A non-constant A
#: (an MLP's activations, already in cache) gets none: 0.97x there.
PREFETCH_A = 64
#: Steps ahead that a transposed A' (`MicroKey.fetch_at`) is prefetched into L2: one depth block
#: of the panels-outer order (`matmul_kernel.KC_OUTER`), so a tile's rows of the next block are
#: on their way while the panels of this one run. 0 turns it off. A T-form conv's input (A' is
#: X transposed, `conv.few_positions`) was mostly written by the other thread into its own L2:
#: the transposed reads, a line per k step, waited on the other core, and its products ran 40%
#: slower per thread on two threads than on one. Measured against 0 (several builds a variant,
#: interleaved, two threads, Intel AVX-512 host): ResNet-50 1.065x, eight 1x1 256<->1024
#: convs at 14x14 1.20x; the streams 0.99-1.02x (noise); locality 2 beat 3 by 5%.
FETCH_AT = 128


class MicroKey(NamedTuple):
    """What a shared microkernel is specialised on (the rest are its arguments)."""

    itemsize: int  # 4: f32, 8: f64
    mr: int  # tile rows
    nv: int  # vectors per tile row
    masked: bool  # the last vector's lanes are the `lanes` argument
    trans: bool  # A' is A transposed (its k stride is lda, its row stride 1)
    fetch: bool  # prefetch the next tile's A rows
    rows: bool  # the first `valid` rows alone are C's
    scaled: bool = False  # alpha is not 1 (else the `alpha` argument is not read)
    fetch_b: bool = False  # prefetch B's next slice (its rows at `a_next`) into L2
    fetch_at: bool = False  # prefetch A' (transposed) FETCH_AT steps ahead into L2

    @property
    def prefetches(self) -> bool:
        return self.fetch or self.fetch_b or self.fetch_at

    def name(self) -> str:
        flags = "".join(c for c, on in zip("mtfrsba", self[3:]) if on)
        sfx = "f32" if self.itemsize == 4 else "f64"
        return f"onnxjit.gemm.{sfx}.{self.mr}x{self.nv}" + (f".{flags}" if flags else "")


#: Build each microkernel's LLVM IR once per process: a module declares it, and its text
#: (`module_text`) gets the definition's text in place of the declaration. The text does not
#: depend on the module, and building it was a quarter of Inception-v1's IR building (each
#: group of kernels compiled in a worker has its own copy: `codegen.workers`).
SHARED_TEXT = True
_TEXTS: dict[MicroKey, str] = {}
#: the attribute of an `ir.Module` mapping its declarations' lines to the definitions' text
_PENDING = "_onnxjit_micro_texts"


def micro_function(module: ir.Module, key: MicroKey) -> ir.Function:
    """The module's microkernel for `key`, defined on first use (see the module docstring)."""
    fn = module.globals.get(key.name())
    if fn is not None:
        return fn
    if not SHARED_TEXT:
        return _Builder(module, key).fn
    text = _TEXTS.get(key)
    if text is None:
        text = _TEXTS[key] = str(_Builder(ir.Module(), key).fn)
    fn = _Builder(module, key, body=False).fn
    if not hasattr(module, _PENDING):
        setattr(module, _PENDING, {})
    getattr(module, _PENDING)[str(fn)] = (key, text)
    return fn


def module_text(module: ir.Module, shared: bool = False) -> str:
    """`str(module)` with each microkernel declared by `micro_function` defined, or, when
    `shared`, declared with external linkage (its code comes from `gemm_objects`)."""
    text = str(module)
    for decl, (key, definition) in getattr(module, _PENDING, {}).items():
        text = text.replace(decl, shared_header(decl.replace("declare internal ", "declare ", 1),
                                                key) if shared else definition, 1)
    return text


def shared_header(text: str, key: MicroKey) -> str:
    """`text` with the header of microkernel `key` given the attributes LLVM infers for it
    when it is internal, which an external declaration would lose: it touches only memory its
    arguments point to (and the prefetch's inaccessible state), keeps no pointer, frees
    nothing, does not synchronise. Without them the caller must assume the call changed any
    memory and reload what it kept in registers (measured: a 64x784x512 product 8% slower)."""
    memory = "argmem: readwrite" + (", inaccessiblemem: readwrite" if key.prefetches else "")
    head = f'@"{key.name()}"('
    start = text.index(head)
    end = text.index(") noinline nounwind", start)
    return (text[:end] + f") noinline nounwind nofree nosync memory({memory})"
            + text[end + len(") noinline nounwind"):])


def used_keys(module: ir.Module) -> list[MicroKey]:
    """The microkernels `micro_function` gave the module (with SHARED_TEXT)."""
    return [key for key, _ in getattr(module, _PENDING, {}).values()]


def library_module(module: ir.Module, key: MicroKey) -> None:
    """Define microkernel `key` in `module` with external linkage (`gemm_objects`; the
    module's text then needs `shared_header`)."""
    _Builder(module, key).fn.linkage = ""


class _Builder:
    """Defines one microkernel function (declares it when not `body`)."""

    def __init__(self, module: ir.Module, key: MicroKey, body: bool = True):
        self.key = key
        self.ety = ir.FloatType() if key.itemsize == 4 else ir.DoubleType()
        self.vl = tile_shape(key.itemsize)[0]
        self.vty = ir.VectorType(self.ety, self.vl)
        vs = f"v{self.vl}{'f32' if key.itemsize == 4 else 'f64'}"
        mty = ir.VectorType(I1, self.vl)
        self.fma = intrinsic(module, f"llvm.fmuladd.{vs}", self.vty, [self.vty] * 3)
        self.mload = intrinsic(module, f"llvm.masked.load.{vs}.p0", self.vty,
                               [PTR, I32, mty, self.vty])
        self.mstore = intrinsic(module, f"llvm.masked.store.{vs}.p0", ir.VoidType(),
                                [self.vty, PTR, I32, mty])
        self.prefetch = intrinsic(module, "llvm.prefetch.p0", ir.VoidType(),
                                  [PTR, I32, I32, I32]) if key.prefetches else None
        fnty = ir.FunctionType(ir.VoidType(), [PTR, I64, PTR, I64, I64, PTR, I64, I1,
                                               self.ety, I64, PTR, I64])
        self.fn = ir.Function(module, fnty, key.name())
        self.fn.linkage = "internal"
        for attr in ("nounwind", "noinline"):
            self.fn.attributes.add(attr)
        names = ("a", "lda", "b", "ldb", "kc", "c", "ldc", "overwrite", "alpha", "lanes",
                 "a_next", "valid")
        for arg, name in zip(self.fn.args, names):
            arg.name = name
            if isinstance(arg.type, ir.PointerType):
                arg.add_attribute("captures(none)")
        if not body:
            return
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.zero = ir.Constant(self.vty, [0.0] * self.vl)
        self.emit()

    def gep(self, base: ir.Value, index: ir.Value, inbounds: bool = True) -> ir.Value:
        return self.b.gep(base, [index], inbounds=inbounds, source_etype=self.ety)

    def mul(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.mul(x, y, flags=["nsw"])

    def emit(self) -> None:
        key, b = self.key, self.b
        a, lda, bp, ldb, kc, c, ldc, overwrite, alpha, lanes, a_next, valid = self.fn.args
        isz = ir.Constant(I32, key.itemsize)
        iota = ir.Constant(ir.VectorType(I64, self.vl), list(range(self.vl)))
        edge = b.icmp_signed("<", iota, splat(b, lanes, self.vl)) if key.masked else None
        # row q of the tile: q, or row 0 again past the `valid` rows that are C's
        oks = [b.icmp_signed("<", i64c(q), valid) if key.rows else None for q in range(key.mr)]
        rows = [i64c(q) if ok is None else b.select(ok, i64c(q), i64c(0))
                for q, ok in enumerate(oks)]
        a_rows = rows if key.trans else [self.gep(a, self.mul(r, lda)) for r in rows]

        def mask(v: int) -> ir.Value | None:
            return edge if v == key.nv - 1 else None

        def step(kk: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            brow = self.gep(bp, self.mul(kk, ldb))
            bv = [self.load(self.gep(brow, i64c(v * self.vl)), mask(v), isz)
                  for v in range(key.nv)]
            if key.fetch:
                ahead = b.add(b.add(self.mul(b.urem(kk, i64c(key.mr)), lda), kk),
                              i64c(PREFETCH_A))
                self.fetch(self.gep(a_next, ahead, inbounds=False), 3)
            if key.fetch_b:
                nrow = self.gep(a_next, self.mul(kk, ldb), inbounds=False)
                for v in range(key.nv):
                    self.fetch(self.gep(nrow, i64c(v * self.vl), inbounds=False), 2)
            if key.fetch_at:
                ahead = self.mul(b.add(kk, i64c(FETCH_AT)), lda)
                self.fetch(self.gep(a, ahead, inbounds=False), 2)
            acol = self.gep(a, self.mul(kk, lda)) if key.trans else None
            out = []
            for q in range(key.mr):
                ap = self.gep(acol, a_rows[q]) if key.trans else self.gep(a_rows[q], kk)
                av = splat(b, b.load(ap, typ=self.ety, align=key.itemsize), self.vl)
                out += [b.call(self.fma, [av, bv[v], accs[q * key.nv + v]])
                        for v in range(key.nv)]
            return out

        accs = for_range_carry(b, 0, kc, 1, [self.zero] * (key.mr * key.nv), step, "kr")
        va = splat(b, alpha, self.vl)
        with b.if_else(overwrite) as (first, later):
            for plus, block in ((False, first), (True, later)):
                with block:
                    for q in range(key.mr):
                        if oks[q] is None or q == 0:  # row 0 is always C's (valid >= 1)
                            self.store_row(c, q, ldc, accs, va, plus, mask, isz)
                            continue
                        # a branch, not a row mask: AVX2's masked stores (vmaskmov) are
                        # microcoded, a dozen a tile cost more than the k loop saves
                        with b.if_then(oks[q]):  # (no !prof: the text is shared)
                            self.store_row(c, q, ldc, accs, va, plus, mask, isz)
        b.ret_void()

    def store_row(self, c: ir.Value, q: int, ldc: ir.Value, accs: list[ir.Value],
                  va: ir.Value, plus: bool, mask: Any, isz: ir.Constant) -> None:
        """Row q of the tile: C = alpha * acc, or C += alpha * acc when `plus`."""
        b, nv = self.b, self.key.nv
        crow = self.gep(c, self.mul(i64c(q), ldc))
        for v in range(nv):
            p = self.gep(crow, i64c(v * self.vl))
            acc = accs[q * nv + v]
            if not self.key.scaled:  # alpha = 1: bit for bit the scaled forms' results
                out = b.fadd(acc, self.load(p, mask(v), isz)) if plus else acc
            else:
                out = (b.call(self.fma, [va, acc, self.load(p, mask(v), isz)]) if plus
                       else b.fmul(va, acc))
            self.store(out, p, mask(v), isz)

    def fetch(self, p: ir.Value, locality: int) -> None:
        """A read prefetch of the line at p (locality 3: into L1, 2: into L2)."""
        self.b.call(self.prefetch, [p, ir.Constant(I32, 0), ir.Constant(I32, locality),
                                    ir.Constant(I32, 1)])

    def load(self, p: ir.Value, m: ir.Value | None, align: ir.Constant) -> ir.Value:
        if m is None:
            return self.b.load(p, typ=self.vty, align=self.key.itemsize)
        return self.b.call(self.mload, [p, align, m, self.zero])

    def store(self, v: ir.Value, p: ir.Value, m: ir.Value | None, align: ir.Constant) -> None:
        if m is None:
            self.b.store(v, p, align=self.key.itemsize)
        else:
            self.b.call(self.mstore, [v, p, align, m])
