"""The blend loops of Resize's lowering: sum over the taps of the resized axes of their
weights times the input, read from the interpolation tables (`resize_tables`, `resize_ort`).

`blend` multiplies the weights of one corner innermost axis first and adds the corners
innermost-fastest (onnxruntime's bilinear/trilinear order), unrolled for up to 16 corners,
else as loops over the taps; `cubic_blend` is onnxruntime's bicubic: a 1-D sum along the inner
axis per tap row of the outer axis, each times its weight (divided by the row's weight sum
with exclude_outside), summed from 0.0 in float32. `round_half_even` turns float results into
integer outputs as the reference's saturate_cast does.
"""

from __future__ import annotations

import contextlib
import itertools
import math

from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.ops.vision.resize_tables import AxisTables
from onnxjit.ir.types import DType


def round_half_even(b: Builder, v: Operand) -> Operand:
    f = b.op("floor", v)
    d = b.op("sub", v, f)
    odd = b.op("ne", b.op("rem", f, const(2, v.dtype)), const(0, v.dtype))
    up = b.op("or", b.op("gt", d, const(0.5, v.dtype)),
              b.op("and", b.op("eq", d, const(0.5, v.dtype)), odd))
    return b.op("select", up, b.op("add", f, const(1, v.dtype)), f)


def tap_rows(b: Builder, tables: dict[int, AxisTables], axes: list[int], idx: list,
          itab: Buffer, wtab: Buffer, offs: dict[int, int], in_st: list[int]) -> list[list]:
    """Per axis, per tap: (source offset, weight) read from the tables' rows."""
    rows = []
    for a in axes:
        n = tables[a].idx.shape[1]
        first = b.iadd(b.imul(idx[a], n), i64(offs[a]))
        rows.append([(b.imul(b.load(itab, b.iadd(first, i64(t))), in_st[a]),
                      b.load(wtab, b.iadd(first, i64(t)))) for t in range(n)])
    return rows


def blend(b: Builder, x: Buffer, in_st: list[int], tables: dict[int, AxisTables],
           axes: list[int], idx: list, base: Operand, itab: Buffer, wtab: Buffer,
           offs: dict[int, int], cdt: DType) -> Operand:
    """sum over the taps of every resized axis of prod(weights) * x[source] (in `cdt`):
    the weights multiplied innermost axis first and the corners added innermost-fastest,
    onnxruntime's order (`resize_ort`)."""
    taps = [tables[a].idx.shape[1] for a in axes]
    if math.prod(taps) <= 16:
        # Few taps (linear, cubic): unrolled straight-line code, each table row read once.
        rows = tap_rows(b, tables, axes, idx, itab, wtab, offs, in_st)
        total: Operand | None = None
        for combo in itertools.product(*rows):
            src, w = base, None
            for off, _ in combo:
                src = b.iadd(src, off)
            for _, wk in reversed(combo):
                w = wk if w is None else b.op("mul", w, wk)
            v = b.cast(b.load(x, src), cdt)
            term = v if w is None else b.op("mul", w, v)
            total = term if total is None else b.op("add", total, term)
        return total  # type: ignore[return-value]
    acc = b.var(const(0, cdt))
    with contextlib.ExitStack() as stack:
        src, w = base, None
        for a, n in zip(axes, taps):
            t = stack.enter_context(b.loop(0, n, hint=f"t{a}")) if n > 1 else i64(0)
            row = b.iadd(b.iadd(b.imul(idx[a], n), t), i64(offs[a]))
            src = b.iadd(src, b.imul(b.load(itab, row), in_st[a]))
            wk = b.load(wtab, row)
            w = wk if w is None else b.op("mul", w, wk)
        v = b.cast(b.load(x, src), cdt)
        b.assign(acc, "add", acc, v if w is None else b.op("mul", w, v))
    return acc


def cubic_blend(b: Builder, x: Buffer, in_st: list[int], tables: dict[int, AxisTables],
                 axes: list[int], idx: list, base: Operand, itab: Buffer, wtab: Buffer,
                 offs: dict[int, int], dtab: Buffer | None) -> Operand:
    """onnxruntime's bicubic: per tap row j of the outer axis, the inner axis' 1-D sum
    (from 0.0), times the outer weight, divided by the row's weight sum with exclude_outside
    (`resize_ort`), summed from 0.0; float32."""
    f32 = DType.FLOAT
    ay, _ = axes
    rows_y, rows_x = tap_rows(b, tables, axes, idx, itab, wtab, offs, in_st)
    total: Operand = const(0.0, f32)
    for off_y, wy in rows_y:
        inner: Operand = const(0.0, f32)
        for off_x, wx in rows_x:
            v = b.cast(b.load(x, b.iadd(b.iadd(base, off_y), off_x)), f32)
            inner = b.op("add", inner, b.op("mul", wx, v))
        term = b.op("mul", inner, wy)
        if dtab is not None:
            term = b.op("div", term, b.load(dtab, idx[ay]))
        total = b.op("add", total, term)
    return total
