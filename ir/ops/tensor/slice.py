"""Slice: a strided box of the input (starts/ends/axes attributes in opset 1, inputs from 10).

Inference: with starts/ends/axes/steps known at compile time (constants or concrete
`sym_value`s) each sliced dim is `slice_params(...)`'s count (the spec's clamping: like Python
slices, except that a negative step clamps a start below -dim to index 0); a symbolic dim is
known only for the full range; unknown parameters make the sliced dims (or all dims, when the
axes are unknown) unknown. A 1-D int64 input holding dims keeps its `sym_value`. Parameters
take any int64: a dim that keeps at most one element gets step 1 (the same element), so a step
of +-2^63 never reaches a stride product.

Lowering, static parameters: one `strided_copy` starting at `sum(first * stride)` with strides
scaled by the steps. Dynamic parameters (runtime inputs; the output shape then came from the
model's declared types): the same clamping is emitted as loop-IR scalar code per (axis entry,
dim), giving each dim's first index and step as runtime values, and a `Check` per dim compares
the count the parameters give with the static output dim (InputError naming the node on a
mismatch, on a zero step, or on an axis out of range). The copy nest then uses runtime strides.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Buffer, Const, Operand, i64
from onnxjit.ir.opdef import LowerContext, op, since_version
from onnxjit.ir.ops.elementwise.inference import check_dtype, dims_of, tensor
from onnxjit.ir.ops.shape_utils import require_attr, tensor_input
from onnxjit.ir.ops.tensor.indexing import (
    BIG,
    PARALLEL_MIN,
    axes_list,
    check_int_input,
    input_length,
    int_values,
    row_strides,
    size_values,
    slice_dim,
    slice_params,
    slice_params_sym,
    static_lower,
    strided_copy,
)
from onnxjit.ir.types import DType, ValueType


def _slice_spec(node: Node, rank: int) -> tuple[list[int] | None, tuple | None]:
    """(axes, (starts, ends, steps)): axes None if unknown, the triple None if unknown."""
    if since_version(node) < 10:
        starts = tuple(int(s) for s in require_attr(node, "starts"))  # type: ignore
        ends = tuple(int(s) for s in require_attr(node, "ends"))  # type: ignore
        axes = node.attr("axes")
        steps: tuple | None = (1,) * len(starts)
    else:
        for i, what in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")):
            if i < 3 or node.input(i) is not None:
                check_int_input(node, i, what, int32=True)
        starts, ends = size_values(node.input(1)), size_values(node.input(2))
        axes = int_values(node.input(3)) if node.input(3) is not None else None
        if node.input(3) is not None and axes is None:
            return None, None
        n = len(starts) if starts is not None else input_length(node.input(1))
        steps = int_values(node.input(4)) if node.input(4) is not None else \
            None if n is None else (1,) * n
        if axes is None and n is None:
            return None, None
    if axes is None:
        axes = tuple(range(len(starts) if starts is not None else n))  # type: ignore[arg-type]
    norm = axes_list(axes, rank, node)
    if starts is None or ends is None or steps is None:
        return norm, None
    if not len(starts) == len(ends) == len(norm) == len(steps):
        raise ModelError(f"starts, ends, axes and steps have lengths {len(starts)}, "
                         f"{len(ends)}, {len(norm)}, {len(steps)}; they must match", where=node)
    if 0 in steps:
        raise ModelError("slice step cannot be 0", where=node)
    return norm, (starts, ends, steps)


def _slice_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    x = node.inputs[0]
    src = tensor_input(node, 0).shape
    x_out = node.outputs[0]
    x_out.sym_value = None
    if src is None:
        return tensor(dt, None)  # type: ignore[return-value]
    axes, params = _slice_spec(node, len(src))
    out = list(src)
    if params is None:
        for a in axes if axes is not None else range(len(src)):
            out[a] = None
        return tensor(dt, tuple(out))  # type: ignore[return-value]
    for a, s, e, st in zip(axes, *params):  # type: ignore[arg-type]
        out[a] = slice_dim(src[a], s, e, st)
    vals = dims_of(x)
    if vals is not None and len(src) == 1 and src[0] == len(vals) and \
            all(isinstance(p[0], int) for p in params):
        first, count = slice_params(params[0][0], params[1][0], params[2][0], len(vals))
        x_out.sym_value = tuple(vals[first + i * params[2][0]] for i in range(count))
    return tensor(dt, tuple(out))  # type: ignore[return-value]


def _slice_boxes(node: Node, shape: tuple) -> tuple[list, list, list[int]]:
    """(first index, count, step) per dim of the input shape (sizes: ints, or symbolic)."""
    axes, params = _slice_spec(node, len(shape))
    first, count, step = [0] * len(shape), list(shape), [1] * len(shape)
    for a, s, e, st in zip(axes, *params):  # type: ignore[arg-type, misc]
        if all(isinstance(x, int) for x in (s, e, shape[a])):
            first[a], count[a] = slice_params(s, e, st, shape[a])
            one = count[a] <= 1
        else:
            got = slice_params_sym(s, e, st, shape[a])
            if got is None:
                raise TypeError(f"slice {s}:{e}:{st} of a dim of size {shape[a]}")
            first[a], count[a] = got
            one = st >= BIG  # slice_params_sym: at most one element
        step[a] = 1 if one else st
    return first, count, step


def _slice_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    first, count, step = _slice_boxes(node, x.shape)
    idx = tuple(f + s * np.arange(c, dtype=np.int64) for f, c, s in zip(first, count, step))
    return [x[np.ix_(*idx)] if x.ndim else x.copy()]


def _slice_lower(ctx: LowerContext, node: Node) -> None:
    x, out = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])  # type: ignore[arg-type]
    axes, params = _slice_spec(node, len(x.shape))
    if axes is None or params is None:
        _slice_lower_dynamic(ctx, node, x, out)
        return
    first, count, step = _slice_boxes(node, x.shape)
    in_st = row_strides(x.shape)
    b = Builder()
    strided_copy(b, count, out, 0, row_strides(count), x,
                 sum(f * s for f, s in zip(first, in_st)),
                 [s * st for s, st in zip(in_st, step)])
    ctx.kernel("slice", b.body)


def _clamp(b: Builder, s: Operand, e: Operand, st: Operand, d: int) -> tuple[Operand, Operand]:
    """(first index, count) of the slice s:e:st of a dim of size d, as loop-IR values."""
    pos = b.op("gt", st, i64(0))
    s = b.op("select", b.op("lt", s, i64(0)), b.op("add", s, i64(d)), s)
    e = b.op("select", b.op("lt", e, i64(0)), b.op("add", e, i64(d)), e)
    hi = b.op("select", pos, i64(d), i64(d - 1))
    # Clamp up then down, as `slice_params`: an empty dim's negative-step range is then [-1, -1].
    first = b.op("min", b.op("max", s, i64(0)), hi)
    end = b.op("min", b.op("max", e, b.op("select", pos, i64(0), i64(-1))), hi)
    span = b.op("select", pos, b.op("sub", end, first), b.op("sub", first, end))
    # |step|, capped at d + 1 (same count, and no overflow in the rounding below).
    mag = b.op("select", pos, b.op("min", st, i64(d + 1)),
               b.op("neg", b.op("max", st, i64(-(d + 1)))))
    count = b.op("div", b.op("add", span, b.op("sub", mag, i64(1))), mag)
    return first, b.op("max", count, i64(0))


def _slice_lower_dynamic(ctx: LowerContext, node: Node, x: Buffer, out: Buffer) -> None:
    rank = len(x.shape)
    where = node.describe()
    b = Builder()

    def value(i: int, j: int, default: int) -> Operand:
        v = node.input(i)
        if v is None:
            return i64(default)
        if v.const is not None:
            return i64(int(np.asarray(v.const).reshape(-1)[j]))
        return b.cast(b.load(ctx.buf(v), i64(j)), DType.INT64)

    first: list[Operand] = [i64(0)] * rank
    step: list[Operand] = [i64(1)] * rank
    touched: list[Operand] = [Const(False, DType.BOOL)] * rank
    for j in range(ctx.buf(node.inputs[1]).numel):  # type: ignore[arg-type]
        a = value(3, j, j)
        if isinstance(a, Const):
            dims = axes_list([int(a.value)], rank, node)
        else:
            a = b.op("select", b.op("lt", a, i64(0)), b.op("add", a, i64(rank)), a)
            b.check(b.op("and", b.op("ge", a, i64(0)), b.op("lt", a, i64(rank))),
                     f"{where}: Slice axes value out of range for rank {rank}")
            dims = list(range(rank))
        s, e, st = value(1, j, 0), value(2, j, 0), value(4, j, 1)
        b.check(b.op("ne", st, i64(0)), f"{where}: Slice step cannot be 0")
        for k in dims:
            f, c = _clamp(b, s, e, st, x.shape[k])
            msg = (f"{where}: Slice parameters select a different number of elements on axis "
                   f"{k} than the output's size {out.shape[k]}")
            if isinstance(a, Const):
                first[k], step[k], touched[k] = f, st, Const(True, DType.BOOL)
                b.check(b.op("eq", c, i64(out.shape[k])), msg)
                continue
            sel = b.op("eq", a, i64(k))
            first[k] = b.op("select", sel, f, first[k])
            step[k] = b.op("select", sel, st, step[k])
            touched[k] = b.op("or", sel, touched[k])
            b.check(b.op("or", b.op("not", sel), b.op("eq", c, i64(out.shape[k]))), msg)
    for k in range(rank):
        if out.shape[k] != x.shape[k]:  # a dim no entry slices keeps its size
            b.check(touched[k], f"{where}: axis {k} is not sliced, but the output's size "
                                f"{out.shape[k]} differs from the input's {x.shape[k]}")
    in_st = row_strides(x.shape)
    off: Operand = i64(0)
    for k in range(rank):
        off = b.iadd(off, b.op("mul", first[k], i64(in_st[k])))
    strides = [b.op("mul", step[k], i64(in_st[k])) for k in range(rank)]
    if out.numel:
        with b.nest(out.shape, parallel_outer=out.numel >= PARALLEL_MIN) as idx:
            src: Operand = off
            for i, s_k in zip(idx, strides):
                src = b.iadd(src, b.op("mul", i, s_k))
            b.store(out, b.linear(idx, row_strides(out.shape)), b.load(x, src))
    ctx.kernel("slice", b.body)


op("Slice", (1, 10, 11, 13), infer=_slice_infer, evaluate=_slice_eval,
   lower=static_lower(_slice_lower), doc="strided box (attributes in opset 1, inputs from 10)",
   size_inputs=(1, 2, 3, 4), symbolic=True)
