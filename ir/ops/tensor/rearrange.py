"""Rearranging ops: DepthToSpace, SpaceToDepth, ReverseSequence, OneHot.

- DepthToSpace / SpaceToDepth are a reshape to 6-D, a transpose and a reshape back, so they
  lower to one box copy (`tensor.indexing.strided_copy`): the output, read as the transposed 6-D
  box, is contiguous; the source strides are the 6-D input strides permuted. DCR vs CRD only
  changes the 6-D split and the permutation.
- ReverseSequence: out[b, t] = in[b, len[b]-1-t] for t < len[b], else in[b, t]; the lengths
  are a run-time input, loaded and range-checked (InputError) per batch entry.
- OneHot: out[o, d, i] = on if index[o, i] (negative wrapped by +depth) == d else off; an index
  outside [-depth, depth) matches nothing (all off), like the reference. `depth` sets the output
  shape, so it must be a compile-time constant; `values` (off, on) may be a run-time input.
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Operand, i64
from onnxjit.ir.opdef import LowerContext, op, since_version
from onnxjit.ir.ops.elementwise.arithmetic import arity, int_attr
from onnxjit.ir.ops.elementwise.inference import check_dtype, tensor
from onnxjit.ir.ops.shape_utils import normalize_axis, tensor_input
from onnxjit.ir.ops.tensor.indexing import PARALLEL_MIN, loop_or_zero, row_strides, strided_copy
from onnxjit.ir.ops.tensor.pad_tables import require_static, static_ints
from onnxjit.ir.types import Dim, DType, ValueType, sym_floordiv

# --------------------------------------------------------------------------- Depth/Space


def _block(node: Node) -> tuple[int, str]:
    bs = node.attr("blocksize")
    if bs is None:
        raise ModelError("missing required attribute 'blocksize'", where=node)
    if int(bs) < 1:
        raise ModelError(f"blocksize must be >= 1, got {bs}", where=node)
    has_mode = node.op == "DepthToSpace" and since_version(node) >= 11 or \
        node.op == "SpaceToDepth" and since_version(node) >= 28
    mode = node.attr("mode", "DCR") if has_mode else "DCR"
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("DCR", "CRD"):
        raise ModelError(f"mode must be 'DCR' or 'CRD', got '{mode}'", where=node)
    return int(bs), mode


def _d2s_infer(node: Node) -> list[ValueType | None]:
    arity(node, 1)
    dt = check_dtype(node, 0)
    bs, _ = _block(node)
    shape = tensor_input(node, 0).shape
    if shape is None:
        return tensor(dt, (None,) * 4)
    if len(shape) != 4:
        raise ModelError(f"{node.op} needs a 4-D input (N, C, H, W), got rank {len(shape)}",
                         where=node)
    n, c, h, w = shape
    if node.op == "DepthToSpace":
        if isinstance(c, int) and c % (bs * bs):
            raise ModelError(f"channels ({c}) must be a multiple of blocksize^2 ({bs * bs})",
                             where=node)
        out: tuple[Dim, ...] = (n, None if c is None else sym_floordiv(c, bs * bs),
                                None if h is None else h * bs, None if w is None else w * bs)
    else:
        for name, d in (("height", h), ("width", w)):
            if isinstance(d, int) and d % bs:
                raise ModelError(f"{name} ({d}) must be a multiple of blocksize ({bs})",
                                 where=node)
        out = (n, None if c is None else c * (bs * bs),
               None if h is None else sym_floordiv(h, bs), None if w is None else
               sym_floordiv(w, bs))
    return tensor(dt, out)


def _d2s_plan(node: Node, shape: tuple[int, ...]) -> tuple[tuple[int, ...], list[int]]:
    """(6-D input shape, permutation) such that transpose(reshape(x, shape6), perm) is the
    6-D form of the output."""
    bs, mode = _block(node)
    n, c, h, w = shape
    if node.op == "DepthToSpace":
        if mode == "DCR":
            return (n, bs, bs, c // (bs * bs), h, w), [0, 3, 4, 1, 5, 2]
        return (n, c // (bs * bs), bs, bs, h, w), [0, 1, 4, 2, 5, 3]
    six = (n, c, h // bs, bs, w // bs, bs)
    return six, ([0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4])


def _d2s_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    six, perm = _d2s_plan(node, x.shape)
    y = np.transpose(x.reshape(six), perm)
    out = _d2s_infer_static(node, x.shape)
    return [np.ascontiguousarray(y).reshape(out)]


def _d2s_infer_static(node: Node, shape: tuple[int, ...]) -> tuple[int, ...]:
    bs, _ = _block(node)
    n, c, h, w = shape
    if node.op == "DepthToSpace":
        return (n, c // (bs * bs), h * bs, w * bs)
    return (n, c * bs * bs, h // bs, w // bs)


def _d2s_lower(ctx: LowerContext, node: Node) -> None:
    x, out = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])  # type: ignore[arg-type]
    six, perm = _d2s_plan(node, x.shape)
    st = row_strides(six)
    box = tuple(six[p] for p in perm)
    b = Builder()
    strided_copy(b, box, out, 0, row_strides(box), x, 0, [st[p] for p in perm])
    ctx.kernel(node.op.lower(), b.body)


op("DepthToSpace", (1, 11, 13, 28), infer=_d2s_infer, evaluate=_d2s_evaluate, lower=_d2s_lower,
   doc="move channel blocks into spatial blocks (DCR or CRD order)")
op("SpaceToDepth", (1, 13, 28), infer=_d2s_infer, evaluate=_d2s_evaluate, lower=_d2s_lower,
   doc="move spatial blocks into channels")

# --------------------------------------------------------------------------- ReverseSequence


def _rs_axes(node: Node, rank: int) -> tuple[int, int]:
    t = normalize_axis(int_attr(node, "time_axis", 0), rank, node, "time_axis")
    b = normalize_axis(int_attr(node, "batch_axis", 1), rank, node, "batch_axis")
    if t not in (0, 1) or b not in (0, 1) or t == b:
        raise ModelError(f"time_axis ({t}) and batch_axis ({b}) must be 0 and 1 in some order",
                         where=node)
    return t, b


def _rs_infer(node: Node) -> list[ValueType | None]:
    arity(node, 2)
    dt = check_dtype(node, 0)
    lens = tensor_input(node, 1, "sequence_lens")
    if lens.dtype != DType.INT64:
        raise ModelError(f"sequence_lens must be i64, got {lens.dtype.short}", where=node)
    shape = tensor_input(node, 0).shape
    if shape is not None:
        if len(shape) < 2:
            raise ModelError(f"input must have rank >= 2, got {len(shape)}", where=node)
        _, ba = _rs_axes(node, len(shape))
        if lens.shape is not None and (len(lens.shape) != 1 or isinstance(lens.shape[0], int)
                                       and isinstance(shape[ba], int)
                                       and lens.shape[0] != shape[ba]):
            raise ModelError(f"sequence_lens must have shape [{shape[ba]}] (the batch size), "
                             f"got {lens}", where=node)
    return tensor(dt, shape)


def _rs_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, lens = np.asarray(inputs[0]), np.asarray(inputs[1]).reshape(-1)
    ta, ba = _rs_axes(node, x.ndim)
    y = x.copy()
    for i, n in enumerate(lens):
        if not 0 <= n <= x.shape[ta]:
            raise ModelError(f"sequence_lens[{i}] = {n} is outside [0, {x.shape[ta]}]",
                             where=node)
        src = [slice(None)] * x.ndim
        src[ba], src[ta] = i, slice(None, None, None)
        idx = np.concatenate([np.arange(n)[::-1], np.arange(n, x.shape[ta])]).astype(np.int64)
        moved = np.take(x[tuple(src)], idx, axis=0 if ta < ba else ta - 1)
        y[tuple(src)] = moved
    return [y]


def _rs_lower(ctx: LowerContext, node: Node) -> None:
    x, lens, out = (ctx.buf(v) for v in (node.inputs[0], node.inputs[1], node.outputs[0]))
    ta, ba = _rs_axes(node, len(x.shape))
    st = row_strides(x.shape)
    steps, batch = x.shape[ta], x.shape[ba]
    if batch == 0:  # no lengths to check (an empty time axis still checks them: <= 0)
        return
    inner = math.prod(x.shape[2:])
    msg = (f"{node.describe()}: sequence_lens values must be in [0, {steps}] "
           f"(the size of time axis {ta})")
    b = Builder()
    with b.loop(0, batch, parallel=x.numel >= PARALLEL_MIN, hint="b") as bi:
        n = b.load(lens, bi)
        b.check(b.op("and", b.op("ge", n, i64(0)), b.op("le", n, i64(steps))), msg)
        with b.loop(0, steps, hint="t") as t:
            rev = b.op("sub", b.op("sub", n, i64(1)), t)
            src_t = b.op("select", b.op("lt", t, n), rev, t)
            dst = b.iadd(b.imul(bi, st[ba]), b.imul(t, st[ta]))
            src = b.iadd(b.imul(bi, st[ba]), b.imul(src_t, st[ta]))
            with loop_or_zero(b, inner, hint="i") as i:
                b.store(out, b.iadd(dst, i), b.load(x, b.iadd(src, i)))
    ctx.kernel("reverse_sequence", b.body)


op("ReverseSequence", (10, 28), infer=_rs_infer, evaluate=_rs_evaluate, lower=_rs_lower,
   doc="reverse the first sequence_lens[b] steps of each batch entry")

# --------------------------------------------------------------------------- OneHot


def _depth(node: Node) -> int | None:
    vals = static_ints(node, 1, "depth")
    if vals is None:
        return None
    if len(vals) != 1:
        raise ModelError(f"depth must hold one value, got {len(vals)}", where=node)
    if vals[0] < 1:
        raise ModelError(f"depth must be >= 1, got {vals[0]}", where=node)
    return vals[0]


def _oh_axis(node: Node, rank: int) -> int:
    return normalize_axis(int_attr(node, "axis", -1), rank + 1, node)


def _oh_infer(node: Node) -> list[ValueType | None]:
    arity(node, 3)
    check_dtype(node, 0)
    check_dtype(node, 1)
    dt = check_dtype(node, 2)
    if tensor_input(node, 0).dtype == DType.BOOL or tensor_input(node, 1).dtype == DType.BOOL:
        raise ModelError("indices and depth must be numeric", where=node)
    vals = tensor_input(node, 2, "values").shape
    if vals is not None and (len(vals) != 1 or isinstance(vals[0], int) and vals[0] != 2):
        raise ModelError(f"values must be a 2-element [off, on] tensor, got shape {vals}",
                         where=node)
    shape = tensor_input(node, 0).shape
    if shape is None:
        return tensor(dt, None)
    ax = _oh_axis(node, len(shape))
    return tensor(dt, shape[:ax] + (_depth(node),) + shape[ax:])


def _oh_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    ind, vals = np.asarray(inputs[0]), np.asarray(inputs[2]).reshape(-1)
    depth = _depth(node)
    assert depth is not None
    ax = _oh_axis(node, ind.ndim)
    ind = np.where(ind < 0, ind + depth, ind)
    targets = np.arange(depth).reshape((depth,) + (1,) * (ind.ndim - ax))
    hit = np.expand_dims(ind, ax) == targets
    return [np.where(hit, vals[1], vals[0]).astype(vals.dtype)]


def _oh_lower(ctx: LowerContext, node: Node) -> None:
    require_static(node, 1, "depth")
    ind, vals, out = (ctx.buf(v) for v in (node.inputs[0], node.inputs[2], node.outputs[0]))
    if out.numel == 0:
        return
    depth = _depth(node)
    ax = _oh_axis(node, len(ind.shape))
    outer, inner = math.prod(ind.shape[:ax]), math.prod(ind.shape[ax:])
    b = Builder()
    off, on = b.load(vals, i64(0), "off"), b.load(vals, i64(1), "on")
    it = ind.dtype
    with loop_or_zero(b, outer, parallel=out.numel >= PARALLEL_MIN, hint="o") as o:
        with loop_or_zero(b, inner, hint="i") as i:
            k: Operand = b.load(ind, b.iadd(b.imul(o, inner), i))
            k = b.op("select", b.op("lt", k, b.cast(i64(0), it)),
                     b.op("add", k, b.cast(i64(depth), it)), k)  # type: ignore[arg-type]
            with b.loop(0, depth, hint="d") as d:  # type: ignore[arg-type]
                hit = b.op("eq", k, b.cast(d, it))
                dst = b.iadd(b.iadd(b.imul(o, depth * inner), b.imul(d, inner)), i)
                b.store(out, dst, b.op("select", hit, on, off))
    ctx.kernel("one_hot", b.body)


op("OneHot", (9, 11, 28), infer=_oh_infer, evaluate=_oh_evaluate, lower=_oh_lower,
   value_inputs=(1,),
   doc="one-hot encode indices along a new axis of size depth")
