"""Packing a block of B' into the tiled GEMM's stack buffer (`matmul_kernel.TileGemm`).

`pack(t, pc, kc, col0, npanels, lanes, width)` copies rows pc .. pc+kc of B' for `npanels`
panels of pw = len(lanes) * VL columns from column col0 into the buffer, panel after panel,
each kc x pw row-major: bp[p*kc*pw + kk*pw + jj] = B'[pc + kk, col0 + p*pw + jj], so the
microkernel reads a panel's rows contiguously. B not transposed: a row of a panel is
len(lanes) vector loads (the edge vector's lanes masked, the rest of it zeros) and stores.
B transposed: the window's row col+jj (contiguous in k) becomes packed column jj; a packed
row (one depth kk) gathers element kk of each of the window's rows; the columns past the edge
(`width`, an int or a run-time value) are zeroed, up to the columns the microkernel reads.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from onnxjit.codegen.irutil import for_range, i64c, no_unroll_md


def pack(t: Any, pc: ir.Value, kc: ir.Value, col0: ir.Value, npanels: ir.Value,
         lanes: list, width: Any = None, used: ir.Value | None = None) -> None:
    """Pack for the `TileGemm` `t` (see the module docstring); `used`: the columns of a
    panel the microkernel reads, when fewer than its width (the zeros stop there)."""
    s, b = t.s, t.b
    pw = len(lanes) * t.vl
    if width is None:
        width = sum(lanes)

    def panel(p: ir.Value) -> None:
        col = t.add(col0, t.mul(p, pw))
        dst0 = b.mul(p, b.mul(kc, i64c(pw)), flags=["nsw"])
        if not s.b_trans:
            def row(kk: ir.Value) -> None:
                dst = t.add(dst0, t.mul(kk, pw))
                src = t.add(t.b_off, t.mul(t.add(pc, kk), t.LDB), col)
                for v in range(len(lanes)):
                    x = t.vload(t.gep(t.pb, t.add(src, i64c(v * t.vl))), lanes[v], t.isz)
                    b.store(x, t.gep(t.bp, t.add(dst, i64c(v * t.vl))), align=t.isz)

            # kept rolled: a row is NV vector copies already, and unrolled (and unswitched)
            # the loop was most of a 1x1 conv's code
            for_range(b, 0, kc, 1, row, "pk", loop_md=no_unroll_md(b.module))
            return

        # one packed row (depth kk) per iteration of a rolled loop: unrolled over a constant
        # kc, its hundreds of strided loads cost LLVM's LoopLoadElimination seconds
        ldb = t.v(t.LDB)

        def packed_row(kk: ir.Value) -> None:
            src = t.add(t.b_off, t.mul(col, ldb), pc, kk)  # element kk of the window's row 0
            dst = t.add(dst0, t.mul(kk, pw))
            if not isinstance(width, int):  # the first `width` columns, one by one
                for_range(b, 0, width, 1, lambda jj: b.store(
                    b.load(t.gep(t.pb, t.add(src, t.mul(jj, ldb))), typ=t.ety, align=t.isz),
                    t.gep(t.bp, t.add(dst, jj)), align=t.isz), "pj")
                return
            for v in range(len(lanes)):  # each vector from its columns' elements, one store
                vec: ir.Value = ir.Constant(t.vty, [0.0] * t.vl)
                for q in range(min(t.vl, width - v * t.vl)):
                    x = b.load(t.gep(t.pb, t.add(src, t.mul(ldb, v * t.vl + q))),
                               typ=t.ety, align=t.isz)
                    vec = b.insert_element(vec, x, ir.Constant(ir.IntType(32), q))
                b.store(vec, t.gep(t.bp, t.add(dst, i64c(v * t.vl))), align=t.isz)

        for_range(b, 0, kc, 1, packed_row, "pk", loop_md=no_unroll_md(b.module))
        if isinstance(width, int):
            return

        def zero_row(kk: ir.Value) -> None:  # the columns past the run-time edge
            row = t.add(dst0, t.mul(kk, pw))
            for_range(b, width, used or i64c(pw), 1, lambda jj: b.store(
                ir.Constant(t.ety, 0.0), t.gep(t.bp, t.add(row, jj)), align=t.isz), "pzj")

        for_range(b, 0, kc, 1, zero_row, "pz")

    for_range(b, 0, npanels, 1, panel, "pp")
