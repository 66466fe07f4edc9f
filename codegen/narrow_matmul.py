"""`Matmul` statements on float16/bfloat16 buffers: a plain loop nest accumulating in f32.

The register-blocked microkernel (`matmul.py`) computes in its buffers' storage type, which for
the narrow floats would be neither fast nor numpy's semantics. Here each C element is
`sum_k widen(A'[i, k]) * widen(B'[k, j])` accumulated in f32 (k innermost, a phi-carried
accumulator), scaled by alpha, added to the widened old C with `accumulate`, and rounded once to
the narrow type at the store, as numpy's float16 matmul does (it accumulates in float).
The j loop is innermost but one so that consecutive C stores are contiguous.
"""

from __future__ import annotations

from llvmlite import ir

from onnxjit.codegen.irutil import for_range, for_range_carry, i64c, load_elem, store_elem
from onnxjit.codegen.scalar import F32, ScalarEmitter, from_storage, storage_type, to_storage
from onnxjit.ir.loops import Matmul


def emit_narrow_matmul(b: ir.IRBuilder, scalar: ScalarEmitter, s: Matmul,
                       ptrs: tuple[ir.Value, ir.Value, ir.Value],
                       offs: tuple[ir.Value, ir.Value, ir.Value], sizes: dict | None = None
                       ) -> None:
    """Emit `s` (all three buffers one narrow float dtype) as scalar loops at `b`; `sizes`:
    the run-time values of fields that are variables."""
    sizes = sizes or {}

    def v(f: str) -> ir.Value:
        x = sizes.get(f, getattr(s, f))
        return i64c(x) if isinstance(x, int) else x

    dt = s.c.dtype
    ty = storage_type(dt)
    align = dt.itemsize
    pc, pa, pb = ptrs
    oc, oa, ob = offs

    def elem(ptr: ir.Value, off: ir.Value, r: ir.Value, c: ir.Value, ld: ir.Value) -> ir.Value:
        idx = b.add(off, b.add(b.mul(r, ld), c))
        return from_storage(b, load_elem(b, ptr, idx, ty, align), dt)

    def row(i: ir.Value) -> None:
        def col(j: ir.Value) -> None:
            def step(k: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
                a = elem(pa, oa, k, i, v("lda")) if s.a_trans else elem(pa, oa, i, k, v("lda"))
                x = elem(pb, ob, j, k, v("ldb")) if s.b_trans else elem(pb, ob, k, j, v("ldb"))
                return [b.fadd(acc[0], b.fmul(a, x))]

            total = for_range_carry(b, 0, v("k"), 1, [ir.Constant(F32, 0.0)], step,
                                    name="k")[0]
            if s.alpha != 1.0:
                total = b.fmul(total, ir.Constant(F32, float(s.alpha)))
            cidx = b.add(oc, b.add(b.mul(i, v("ldc")), j))
            if s.accumulate:
                total = b.fadd(from_storage(b, load_elem(b, pc, cidx, ty, align), dt), total)
            total = scalar.round_narrow(b, total, dt)
            store_elem(b, to_storage(b, total, dt), pc, cidx, ty, align)

        for_range(b, 0, v("n"), 1, col, name="j")

    for_range(b, 0, v("m"), 1, row, name="i")
