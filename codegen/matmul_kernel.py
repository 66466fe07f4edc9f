"""Register-tiled float GEMM: broadcast-FMA into a tile of vector accumulators over packed B.

`C (+)= alpha * A' @ B'` (see `onnxjit.ir.loops.Matmul`) for f32/f64, emitted as explicit
vector IR (`<VL x float>` values, `llvm.fmuladd` on vectors) so the register tile does not
depend on the vectorizer finding it.

Microkernel: an MR x (NRV * VL) tile of C lives in MR * NRV vector accumulators (phis of the k
loop, never loaded or stored per k step). Each k step loads NRV vectors of a B row slice and
broadcasts MR values of A', then does MR * NRV independent FMAs. At the end of the k range the
tile is written as `C = alpha * acc` or `C += alpha * acc` (alpha applied once, as numpy's
`alpha * (A @ B)` does). The last vector of an edge tile (n not a multiple of VL) is loaded and
stored with a lane mask (`llvm.masked.load/store`), so no element outside C is touched. The
microkernel is a function shared by every product of the module (`gemm_micro`: one per tile
shape, taking the depth, strides and pointers as arguments); a tile here is a call of it, then
the fused epilogue, if any, on the stored tile.

Driver (Goto/BLIS order, B packed, A read in place: MR rows of A' are MR sequential streams):
  for each group of up to NCP panels of NR = NRV*VL columns (the edge panel, narrower, alone):
    for pc in steps of KC over k (depth block: a packed B block of KC x NC stays in L2):
      pack B'[pc:pc+kc, panels] into a stack buffer, panel after panel, each kc x NR row-major
        (the microkernel then reads B contiguously; edge columns are zero-padded);
      for each MR-row tile of C (then the leftover rows as one narrower tile, or a leftover
      of 1-2 rows and the tile before it as two tiles of about equal height, `row_tiles`):
        for each panel: microkernel over kc, accumulating into C unless first block and
        not `accumulate`.
  When A is not a constant (`PANELS_OUTER`) the two innermost loops swap, in depth blocks of
  KC_OUTER: for each panel, for each row tile (the panel's B slice stays in L1).
A constant A (a conv's weights, read in place) is prefetched a tile ahead: its MR rows are MR
short streams (one line of each per 16 k steps) that the hardware prefetcher does not run ahead
of, and a batch-1 CNN's weights come from DRAM on every call. So the first panel's k loop of
each tile also prefetches the next tile's rows (`gemm_micro.PREFETCH_A`; x86 prefetches never
fault, so the last tile's reach past A is harmless). The other panels read the tile's rows
from L1 and prefetch nothing. In the panels-outer order a prepacked constant B is what comes
from far: the first row tile of each panel prefetches the next panel's slice (`FETCH_B`), and
a transposed A' a depth block ahead (`gemm_micro.FETCH_AT`).
`unpacked=True` skips packing and reads B rows in place (B not transposed; for small m, where
packing B would cost as much as the product). A Matmul with `b_packed` (a constant weight the
prepack-weights pass packed at compile time with `panel_width` columns a panel, the whole
depth at once: `loops.pack_panels`) skips packing too and reads panel rows straight from the
constant: row pc+kk of the panel at column col is at `b_off + col*k + (pc+kk)*width`, with the
same loop order, hence the same sums bit for bit, as packing per call.

Run-time sizes (a symbolic program's Matmul, `sizes`): m, n, k and the leading dims may be i64
values instead of ints. Then the column edge panel runs as many vectors as its columns need
(one tile call per count, chosen at run time: a narrow run-time n would otherwise run every
vector, most fully masked), the last one's lanes counted from the columns left; B is packed
in KC-deep blocks of NCP panels (the stack buffer sized for them), the depth loop decides
first/last block at run time, and the rows run as MR-row tiles whose last one stores only the
rows that are C's (its other rows recompute row i, their stores masked off): one tile call,
whatever m is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir

from onnxjit.codegen.gemm_micro import FETCH_AT, PREFETCH_A, MicroKey, micro_function
from onnxjit.codegen.gemm_pack import pack
from onnxjit.codegen.irutil import for_range, i64c, imin, no_unroll_md, splat
from onnxjit.codegen.kernel_shapes import tile_shape
from onnxjit.codegen.mathlib import intrinsic
from onnxjit.errors import CompileError
from onnxjit.ir.loops import Matmul

I1 = ir.IntType(1)
#: depth of a B block (rows of packed B), and its size budget (it should sit in L2)
KC, PACK_BYTES = 256, 256 * 1024
#: A product whose A is not a constant (activations times weights: a transformer's layers, an
#: MLP, a classifier head) runs each panel against every row tile (`block`), in depth blocks of
#: KC_OUTER, so a panel's kc x NR slice of B (32 KB with 16 lanes) stays in L1 while the tiles'
#: A rows stream from L2; the other order kept a tile's A rows in L1 and streamed each 64 KB B
#: slice from L2 once per tile. A constant A (a conv's weights, `fetch_a`) keeps that order:
#: its rows, not B's, are what comes from far. Measured (Intel AVX-512 guest, 2 threads, same
#: process, both compile orders, against False): MiniLM stream 1.04x, OCR recognizer stream
#: 1.03x, BERT-tiny 1.05x, MLP batch 32 1.06x, GEMM 1024^3 (one thread) 1.06x, LSTM 1.00x;
#: the CNNs (OCR detector, MobileNetV2-like, Inception-v1, VGG-19) 0.99-1.00x. With the
#: conv GEMMs in the new order too, the OCR detector was at 0.93x and MobileNetV2-like 0.96x.
PANELS_OUTER, KC_OUTER = True, 128
#: In that order a prepacked B's slices are read once, by the first row tile, each 32 KB slice
#: in 4 KB pieces a panel's depth apart, which the hardware prefetcher starts afresh on every
#: page: from L3 or DRAM (a model's weights, read once a call) the first tile waited on them.
#: So the first row tile also prefetches the slice the next panel reads (`gemm_micro`, key
#: `fetch_b`, into L2), while the other tiles compute from this one. Measured against False
#: (several builds a variant, interleaved, two threads, this Intel AVX-512 host): streams
#: MiniLM 1.06-1.10x, OCR recognizer 1.06x, decoder 1.00x (0.97x before products of one
#: row tile were left out), OCR detector 1.00x; ResNet-50 1.02x, BERT-tiny 1.03x, eight
#: 1x1 512<->2048 convs at 7x7 1.20x.
FETCH_B = True
#: A product whose rows leave 1 or 2 over whole tiles ends in two tiles of about equal height
#: instead (8 rows: 4 + 4, not 6 + 2; 7: 4 + 3): a 1- or 2-row tile reads the whole B panel
#: for 4 or 8 FMAs a k step, more than L2 delivers when the panel is not in L1. Measured
#: against False, two threads: the LSTM's steps (8 x 64 x 256 blocks) 1.03-1.08x per
#: dispatch, the model 1.03x; GEMM 64x784x512 1.014x; MLP b32 alike (its blocks are 16 rows).
BALANCED_TAIL = True
#: A run-time m leaving this many rows or fewer over whole tiles runs them as 1-row tiles (a
#: masked MR-row tile computes all MR rows). Measured, one thread, 1 x 256 x 1024 by a prepacked
#: B: 1.0x the product specialised for m = 1 (with the masked tile: 0.66x); a GPT-style
#: decoder's steps (m = 1) within 5% of the specialised program (with `split_columns`).
SINGLE_ROWS = 2


def row_tiles(m: int, mr: int) -> tuple[int, list[int]]:
    """(rows covered by whole mr-row tiles from row 0, heights of the tiles after them)."""
    rem = m % mr
    if BALANCED_TAIL and m > mr and 0 < rem <= 2:
        high = (mr + rem + 1) // 2
        return m - mr - rem, [high, mr + rem - high]
    return m - rem, [rem] if rem else []


class TileGemm:
    """Emits one float Matmul as the tiled/packed kernel at the builder's position."""

    def __init__(self, b: ir.IRBuilder, s: Matmul, ptrs, offs, unpacked: bool = False,
                 epilogue=None, sizes: dict[str, ir.Value] | None = None):
        """`epilogue`: an `epilogue_fuse.Fused` applied in the stores of the last depth block
        (`micro`'s `last`), whose stores are final. `sizes`: the run-time values of the
        Matmul's fields that are variables (m, n, k, lda, ldb, ldc)."""
        self.b, self.s = b, s
        sizes = sizes or {}
        self.M, self.N, self.K, self.LDA, self.LDB, self.LDC = (
            sizes.get(f, getattr(s, f)) for f in ("m", "n", "k", "lda", "ldb", "ldc"))
        self.pc, self.pa, self.pb = ptrs
        self.c_off, self.a_off, self.b_off = offs
        self.ety = ir.FloatType() if s.c.dtype.itemsize == 4 else ir.DoubleType()
        self.isz = s.c.dtype.itemsize
        self.vl, self.mr, self.nrv = tile_shape(self.isz)
        self.vty = ir.VectorType(self.ety, self.vl)
        self.prepacked = s.b_packed
        if self.prepacked:
            # the panel width was fixed at compile time (normally panel_width(): same nrv)
            if s.ldb % self.vl or not 0 < s.ldb // self.vl <= 8 or s.b_trans or unpacked:
                raise CompileError(f"packed B with panels of {s.ldb} columns does not fit "
                                   f"vectors of {self.vl} lanes")
            self.nrv = s.ldb // self.vl
        elif unpacked and isinstance(self.M, int) and self.M < self.mr:
            # fewer rows than a tile: wider tiles keep as many accumulators (FMA chains) busy
            self.nrv = max(self.nrv, min(8, self.mr * self.nrv // self.M))
        self.nr = self.nrv * self.vl
        self.unpacked = unpacked
        self.fetch_a = PREFETCH_A > 0 and not s.a_trans and s.a.kind == "const"
        self.outer = PANELS_OUTER and s.a.kind != "const"
        # a constant B streamed panel after panel (a transformer's or a T-form conv's
        # weights): the first row tile prefetches the next slice (`FETCH_B`), unless one row
        # tile is the whole product (nothing to overlap with); its A' read transposed (a
        # T-form conv's input, often written by the other thread) is prefetched too
        self.fetch_b = FETCH_B and self.outer and self.prepacked and (
            not isinstance(self.M, int) or self.M > self.mr)
        self.fetch_at = FETCH_AT > 0 and self.outer and self.prepacked and s.a_trans
        kc = KC_OUTER if self.outer else KC
        self.kc = min(kc, self.K) if isinstance(self.K, int) else kc
        self.epi = epilogue
        # panels per packed block: the block (kc x ncp*nr) within PACK_BYTES
        self.ncp = max(1, PACK_BYTES // (self.kc * self.nr * self.isz))
        vs = f"v{self.vl}{'f32' if self.isz == 4 else 'f64'}"
        mty, ptr = ir.VectorType(I1, self.vl), ir.PointerType()
        self.mload = intrinsic(b.module, f"llvm.masked.load.{vs}.p0", self.vty,
                               [ptr, ir.IntType(32), mty, self.vty])
        self.mstore = intrinsic(b.module, f"llvm.masked.store.{vs}.p0", ir.VoidType(),
                                [self.vty, ptr, ir.IntType(32), mty])
        self.zero = ir.Constant(self.vty, [0.0] * self.vl)
        self.alpha = ir.Constant(self.ety, float(s.alpha))
        panels = -(-self.N // self.nr) if isinstance(self.N, int) else self.ncp
        self.bp = None if unpacked or self.prepacked else self._stack_buffer(
            self.kc * min(self.ncp, panels) * self.nr, "bpack")

    # helpers -----------------------------------------------------------------------------------
    def _stack_buffer(self, size: int, name: str) -> ir.Value:
        """A packing buffer in the function's entry block (static frame slot, 64-aligned)."""
        fn = self.b.function
        eb = ir.IRBuilder(fn.entry_basic_block)
        eb.position_at_start(fn.entry_basic_block)
        slot = eb.alloca(ir.ArrayType(self.ety, size), name=name)
        slot.align = 64
        slot.type = ir.PointerType()  # llvmlite would print a typed pointer; LLVM 22 is opaque
        return slot

    def gep(self, base: ir.Value, index: ir.Value) -> ir.Value:
        return self.b.gep(base, [index], inbounds=True, source_etype=self.ety)

    def add(self, *xs: ir.Value) -> ir.Value:
        out = xs[0]
        for x in xs[1:]:
            out = self.b.add(out, x, flags=["nsw"])
        return out

    def mul(self, x: ir.Value, c: int | ir.Value) -> ir.Value:
        return self.b.mul(x, i64c(c) if isinstance(c, int) else c, flags=["nsw"])

    @staticmethod
    def v(x: int | ir.Value) -> ir.Value:
        """A size as an i64 value."""
        return i64c(x) if isinstance(x, int) else x

    def mask(self, lanes: int | ir.Value) -> ir.Value:
        if not isinstance(lanes, int):  # the first `lanes` lanes, counted at run time
            iota = ir.Constant(ir.VectorType(ir.IntType(64), self.vl), list(range(self.vl)))
            return self.b.icmp_signed("<", iota, splat(self.b, lanes, self.vl))
        return ir.Constant(ir.VectorType(I1, self.vl), [int(q < lanes) for q in range(self.vl)])

    def vload(self, p: ir.Value, lanes: int | ir.Value, align: int) -> ir.Value:
        if isinstance(lanes, int) and lanes >= self.vl:
            return self.b.load(p, typ=self.vty, align=align)
        return self.b.call(self.mload, [p, ir.Constant(ir.IntType(32), self.isz),
                                        self.mask(lanes), self.zero])

    def vstore(self, v: ir.Value, p: ir.Value, lanes: int | ir.Value) -> None:
        if isinstance(lanes, int) and lanes >= self.vl:
            self.b.store(v, p, align=self.isz)
        else:
            self.b.call(self.mstore, [v, p, ir.Constant(ir.IntType(32), self.isz),
                                      self.mask(lanes)])

    def a_ptr(self, i: ir.Value, kk: ir.Value) -> ir.Value:
        """&A'[i, kk]"""
        s = self.s
        if s.a_trans:
            return self.gep(self.pa, self.add(self.a_off, self.mul(kk, self.LDA), i))
        return self.gep(self.pa, self.add(self.a_off, self.mul(i, self.LDA), kk))

    def loop(self, start, stop, step: int, body: Callable[[ir.Value], None], name: str
             ) -> None:
        """A driver loop, kept rolled: its body is calls of the shared microkernel, which
        unrolling copies for nothing (a product's depth blocks and tiles, fully unrolled,
        were most of a 1x1 conv's code)."""
        for_range(self.b, start, stop, step, body, name, loop_md=no_unroll_md(self.b.module))

    # microkernel -------------------------------------------------------------------------------
    def micro(self, i: ir.Value, mr: int, lanes: list, col: ir.Value, pc: ir.Value,
              kc: ir.Value, bptr: ir.Value, ldb: int | ir.Value,
              first: ir.Value | bool | None, fetch: ir.Value | bool,
              last: ir.Value | bool = True, valid: ir.Value | None = None,
              epilogue: bool = True, b_next: ir.Value | None = None) -> None:
        """C[i:i+mr, col:col+sum(lanes)] (+)= alpha * A'[i:i+mr, pc:pc+kc] @ Bpanel by a call
        of the shared microkernel (`gemm_micro`): row kk of the B panel at bptr + kk*ldb;
        `first` (True: always, an i1, None: never) selects overwriting C instead of adding;
        `fetch` (a bool or an i1): prefetch the next tile's A rows, or with `b_next` the
        rows of B's next slice there (`FETCH_B`). `last` (True, or an i1:
        the depth block is the product's last) says when the stores are final: then the
        epilogue (`self.epi`), if any, runs on the stored tile (unless not `epilogue`: the
        caller runs it, `final`). `valid` (a run-time m): the tile's first `valid` rows are
        C's, the others are computed on row i and not stored."""
        b = self.b
        edge = lanes[-1]
        masked = not isinstance(edge, int) or edge < self.vl
        if any(not isinstance(x, int) or x != self.vl for x in lanes[:-1]):
            raise CompileError("the tiled GEMM's panels have full vectors but the last")
        key = MicroKey(self.isz, mr, len(lanes), masked, self.s.a_trans, False,
                       valid is not None, float(self.s.alpha) != 1.0, fetch_at=self.fetch_at)
        over = {True: ir.Constant(I1, 1), None: ir.Constant(I1, 0)}.get(first, first)
        if b_next is not None:  # the prefetch is B's next slice
            a_next, on = b_next, key._replace(fetch_b=True)
        else:  # A's next tile
            a_next = (b.gep(self.pa, [self.add(self.a_off, self.mul(self.add(i, i64c(mr)),
                                                                     self.LDA), pc)],
                            source_etype=self.ety) if fetch is not False
                      else ir.Constant(ir.PointerType(), None))
            on = key._replace(fetch=True)
        row = self.add(self.c_off, self.mul(i, self.LDC), col)
        args = [self.a_ptr(i, pc), self.v(self.LDA), bptr, self.v(ldb), kc,
                self.gep(self.pc, row), self.v(self.LDC), over, self.alpha,
                self.v(edge if masked else self.vl), a_next, i64c(mr) if valid is None else valid]
        if isinstance(fetch, bool):
            b.call(micro_function(b.module, on if fetch else key), args)
        else:  # one tile prefetches, the others find their data near: two calls, one body
            with b.if_else(fetch) as (yes, no):
                with yes:
                    b.call(micro_function(b.module, on), args)
                with no:
                    b.call(micro_function(b.module, key), args)
        if epilogue:
            self.final(i, mr, lanes, col, valid, last)

    def final(self, i: ir.Value, mr: int, lanes: list, col: ir.Value, valid: ir.Value | None,
              last: ir.Value | bool) -> None:
        """The epilogue, if any, on a tile whose depth block is the product's `last`."""
        if self.epi is None:
            return
        if last is True:
            self.epilogue(i, mr, lanes, col, valid)
            return
        with self.b.if_then(last):
            self.epilogue(i, mr, lanes, col, valid)

    def epilogue(self, i: ir.Value, mr: int, lanes: list, col: ir.Value,
                 valid: ir.Value | None) -> None:
        """The fused epilogue on the tile the microkernel just stored (in L1): a loop over
        its rows that are C's (kept rolled: one copy of the epilogue's code per tile shape;
        vectors whose lanes are counted at run time run only when they have some)."""
        b = self.b

        def row(q: ir.Value) -> None:
            r = self.add(i, q)
            self.epi.row(b, r)
            base = self.add(self.c_off, self.mul(r, self.LDC), col)
            for v, ln in enumerate(lanes):
                if v and not isinstance(ln, int):  # an edge's vector past its columns: none
                    with b.if_then(b.icmp_signed(">", ln, i64c(0))):
                        vector(base, v, ln)
                else:
                    vector(base, v, ln)

        def vector(base: ir.Value, v: int, ln: int | ir.Value) -> None:
            p = self.gep(self.pc, self.add(base, i64c(v * self.vl)))
            out = self.epi.apply(b, self.add(col, i64c(v * self.vl)),
                                 self.vload(p, ln, self.isz), ln, self.vload)
            self.vstore(out, p, ln)

        for_range(b, 0, i64c(mr) if valid is None else valid, 1, row, "er",
                  loop_md=no_unroll_md(b.module))

    # driver ------------------------------------------------------------------------------------
    def emit(self) -> None:
        if not isinstance(self.N, int):
            self.emit_runtime_n()
            return
        full, w = divmod(self.N, self.nr)
        if full:
            lanes = [self.vl] * self.nrv
            if self.unpacked or full <= self.ncp:
                self.block(i64c(0), i64c(full), lanes)
            else:
                self.loop(0, full, self.ncp,
                          lambda p0: self.block(self.mul(p0, self.nr),
                                                imin(self.b, i64c(self.ncp),
                                                     self.b.sub(i64c(full), p0)), lanes), "jc")
        if w:
            nv = -(-w // self.vl)
            lanes = [self.vl] * (nv - 1) + [w - (nv - 1) * self.vl]
            self.block(i64c(full * self.nr), i64c(1), lanes)

    def emit_runtime_n(self) -> None:
        """`emit` for a run-time n: whole panels in groups of NCP, then an edge panel of as
        many vectors as its columns need, the last one's lanes counted from the columns left.
        Measured, one thread, symbolic conv 2x2 64->64 at 2x25 (a 24-column product; 4
        vectors of 16 lanes, two fully masked): all NRV vectors masked 19.5 us, by vectors
        10.0 us."""
        b = self.b
        full = b.udiv(self.N, i64c(self.nr))
        w = b.sub(self.N, b.mul(full, i64c(self.nr)))
        lanes = [self.vl] * self.nrv
        self.loop(0, full, self.ncp,
                  lambda p0: self.block(self.mul(p0, self.nr),
                                        imin(b, i64c(self.ncp), b.sub(full, p0)), lanes), "jc")
        # the edge panel in as many vectors as its columns need (a tile call per count): a
        # narrow run-time n would otherwise run every vector, most fully masked. One depth
        # loop and one packing at full width (the lanes past `w` zeros) serve every count:
        # a copy of them per count was two thirds of an attention-score kernel's LLVM time
        nv = b.udiv(b.add(w, i64c(self.vl - 1)), i64c(self.vl))
        with b.if_then(b.icmp_signed(">", w, i64c(0))):
            self.block(self.mul(full, self.nr), i64c(1),
                       [b.sub(w, i64c(v * self.vl)) for v in range(self.nrv)], width=w, nv=nv)

    def block(self, col0: ir.Value, npanels: ir.Value, lanes: list, width: Any = None,
              nv: ir.Value | None = None) -> None:
        """Columns col0 .. col0 + npanels panels (each of len(lanes) vectors); `width` the
        columns of the edge panel when they are counted at run time; `nv` (with `width`): the
        edge panel's vectors in use, one tile call per count of them (`lanes` then the
        packing's, a vector's lanes counted from the columns left; the packing zeroes past
        `width` only the columns of those vectors)."""
        s, b = self.s, self.b
        pw = len(lanes) * self.vl  # packed panel width
        if width is None:
            width = sum(lanes)  # a prepacked panel's width (the edge panel is not padded)
        counts = None if nv is None else [  # (condition, the lanes of that many vectors)
            (b.icmp_signed("==", nv, i64c(v)),
             [self.vl] * (v - 1) + [b.sub(width, i64c((v - 1) * self.vl))])
            for v in range(1, self.nrv + 1)]
        k_static = isinstance(self.K, int) and self.K <= self.kc

        def depth(pc: ir.Value) -> None:
            kc = imin(b, i64c(self.kc), b.sub(self.v(self.K), pc))
            if s.accumulate:
                first = None
            elif k_static:
                first = True
            else:
                first = b.icmp_signed("==", pc, i64c(0))
            last = True if k_static else b.icmp_signed(">=", b.add(pc, kc), self.v(self.K))
            if self.bp is not None:
                pack(self, pc, kc, col0, npanels, lanes, width,
                     None if nv is None else b.mul(nv, i64c(self.vl)))
            pstride = b.mul(kc, i64c(pw), flags=["nsw"])

            def one(p: ir.Value, i: ir.Value, mr: int, valid: ir.Value | None) -> None:
                col = self.add(col0, self.mul(p, pw))
                if self.unpacked:
                    start = self.add(self.b_off, self.mul(pc, self.LDB), col)
                    bptr, ldb = self.gep(self.pb, start), self.LDB
                elif self.prepacked:  # panel rows of `width` from column col * k
                    start = self.add(self.b_off, self.mul(col, self.K), self.mul(pc, width))
                    bptr, ldb = self.gep(self.pb, start), width
                else:
                    bptr, ldb = self.gep(self.bp, b.mul(p, pstride, flags=["nsw"])), pw
                b_next = None
                if not self.fetch_b:  # a constant A's next tile, from the first panel
                    fetch = self.fetch_a and b.icmp_signed("==", p, i64c(0))
                else:  # the next panel's slice, or the next block's first one
                    fetch = b.icmp_signed("==", i, i64c(0))
                    if not isinstance(self.M, int):
                        fetch = b.and_(fetch, b.icmp_signed(">", self.M, i64c(self.mr)))
                    b_next = b.select(
                        b.icmp_signed("<", b.add(p, i64c(1)), npanels),
                        self.gep(bptr, self.mul(self.v(self.K), pw)),
                        self.gep(self.pb, self.add(self.b_off, self.mul(col0, self.K),
                                                   self.mul(b.add(pc, kc), width))))
                if counts is None:
                    self.micro(i, mr, lanes, col, pc, kc, bptr, ldb, first, fetch, last, valid,
                               b_next=b_next)
                    return
                for cond, used in counts:  # then one epilogue, its lanes counted at run time
                    with b.if_then(cond):
                        self.micro(i, mr, used, col, pc, kc, bptr, ldb, first, fetch, last,
                                   valid, epilogue=False, b_next=b_next)
                self.final(i, mr, lanes, col, valid, last)

            def rows(tile: Callable[..., None]) -> None:
                if not isinstance(self.M, int):
                    self.runtime_rows(tile)
                    return
                m_full, tails = row_tiles(self.M, self.mr)
                if m_full:
                    self.loop(0, m_full, self.mr, lambda i: tile(i, self.mr), "ir")
                if len(tails) == 2 and tails[0] == tails[1]:  # one body for the balanced pair
                    self.loop(m_full, self.M, tails[0], lambda i: tile(i, tails[0]), "it")
                    return
                for high in tails:
                    tile(i64c(m_full), high)
                    m_full += high

            if self.outer:  # each panel against every row tile: its B rows stay in L1
                self.loop(0, npanels, 1, lambda p: rows(
                    lambda i, mr, valid=None: one(p, i, mr, valid)), "jr")
                return

            def tile(i: ir.Value, mr: int, valid: ir.Value | None = None) -> None:
                """rows i .. i+mr against every panel (the first `valid` of them, when given,
                are C's: the others read row i)"""
                self.loop(0, npanels, 1, lambda p: one(p, i, mr, valid), "jr")

            rows(tile)

        # a run-time depth of 0 still runs one block (kc = 0): its tiles store C = 0 (or add
        # nothing) and the epilogue runs on them, as for any other depth
        depth_end = self.K if isinstance(self.K, int) else b.select(
            b.icmp_signed(">", self.K, i64c(0)), self.K, i64c(1))
        self.loop(0, self.v(depth_end), self.kc, depth, "pc")

    def runtime_rows(self, tile: Callable[..., None]) -> None:
        """Tiles over a run-time m: MR-row tiles from row 0, then the rows left over (rem):
        - 1 or 2 past whole tiles: `row_tiles`' balanced pair, the last whole tile and they
          as two tiles of H rows, so B is streamed once a tile, not once a row (8 rows: 4 + 4,
          not 6 + 1 + 1; measured, two threads, interleaved: the bench LSTM's symbolic
          program, whose steps multiply 8 x 256 x 256 blocks, 1.14-1.19x);
        - up to SINGLE_ROWS alone (all of a decoder step's m = 1): 1-row tiles, which do no
          FMA for rows not stored;
        - up to H: one H-row tile (16 rows: 6 + 6 + 4, not a third 6-row tile);
        - more: one MR-row tile.
        A tile taller than its rows keeps only the rows that are C's (`micro`'s `valid`).
        Three tile bodies whatever m is (MR, H and 1 rows), where a concrete m has up to
        three."""
        b, mr, m = self.b, self.mr, self.M
        high = (mr + 3) // 2  # row_tiles' taller tile for 1 or 2 rows over
        rem = b.urem(m, i64c(mr))
        whole = b.sub(m, rem)
        few = b.and_(b.icmp_unsigned(">", rem, i64c(0)),
                     b.icmp_unsigned("<=", rem, i64c(SINGLE_ROWS)))
        # where the H-row tiles start and end (the 1-row tiles run from that end to m)
        h_from, h_to = whole, b.select(few, whole, m)
        if BALANCED_TAIL and high < mr:
            pair = b.and_(b.and_(few, b.icmp_unsigned("<=", rem, i64c(2))),
                          b.icmp_unsigned(">", m, i64c(mr)))
            h_from = b.select(pair, b.sub(whole, i64c(mr)), whole)
            h_to = b.select(pair, m, h_to)
        big = b.icmp_unsigned(">", rem, i64c(high)) if high < mr else b.not_(few)
        h_from = b.select(big, m, h_from)
        h_to = b.select(big, m, h_to)

        def rows(top: int) -> Callable[[ir.Value], None]:
            return lambda i: tile(i, top, imin(b, i64c(top), b.sub(m, i)))

        self.loop(0, h_from, mr, rows(mr), "ir")
        if high < mr:
            self.loop(h_from, h_to, high, rows(high), "ih")
        self.loop(h_to, m, 1, lambda i: tile(i, 1), "i1")
