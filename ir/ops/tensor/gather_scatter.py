"""Index-driven gathers and scatters: GatherND, ScatterElements, Scatter, ScatterND, TensorScatter.

Indices are ordinary run-time buffers (they never change shapes). Every index loaded from data
is wrapped (negative + dim) and range-checked with a `Check` (InputError at run time naming the
node and the bound) before it addresses memory.

- GatherND: the data is viewed as [B, d_b .. d_{b+m-1}, S] (B the batch_dims product, m the
  last indices dim, S the trailing slice); for every batch entry and index tuple the m indices
  give an offset and a contiguous slice of S elements is copied. Outer loop parallel.
- Scatters: a parallel copy kernel (output := data), then a serial kernel walking the updates in
  order and combining each into the output element (or slice, for ScatterND) its index names:
  `reduction` none stores, add/mul/max/min fold with the old value. Serial because two updates
  may hit one element (the reference applies them in order; with reduction none the last wins).
  NaN under max/min: onnx.reference's ScatterElements takes an update only when it compares
  greater (less), so a NaN update is skipped and a NaN element stays; onnxruntime takes the
  update unless the element compares greater, so both NaNs win there. Where the two agree
  (1.09, then updates NaN and 1.23: both 1.23, fuzz seed 9450404) the first rule gives their
  answer and NaN propagation did not. ScatterND's max/min propagate NaN (onnx.reference's
  np.maximum, which onnxruntime's rule matches whenever they agree).
- TensorScatter (KV-cache write): for each prefix of the dims before `axis`, the `update` rows
  go to positions write_indices[batch] + s (modulo the axis size in circular mode; in linear
  mode a position past the end is an InputError).
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.opdef import LowerContext, op, since_version
from onnxjit.ir.ops.elementwise.arithmetic import arity, int_attr
from onnxjit.ir.ops.elementwise.inference import check_dtype, tensor
from onnxjit.ir.ops.shape_utils import normalize_axis, tensor_input
from onnxjit.ir.ops.tensor.indexing import PARALLEL_MIN, loop_or_zero, row_strides, wrap_index
from onnxjit.ir.types import Dim, DType, ValueType


def _index_type(node: Node, i: int, int32: bool = True) -> None:
    t = tensor_input(node, i, "indices")
    ok = (DType.INT32, DType.INT64) if int32 else (DType.INT64,)
    if t.dtype not in ok:
        want = " or ".join(d.short for d in ok)
        raise ModelError(f"indices must be {want}, got {t.dtype.short}", where=node)


def _copy(b: Builder, src: Buffer, dst: Buffer) -> None:
    if dst.numel:
        with b.loop(0, dst.numel, parallel=dst.numel >= PARALLEL_MIN) as i:
            b.store(dst, i, b.load(src, i))


def _bad(node: Node, what: str) -> str:
    return f"{node.describe()}: {node.op} index out of range: {what}"


# --------------------------------------------------------------------------- GatherND


def _gnd_infer(node: Node) -> list[ValueType | None]:
    arity(node, 2)
    dt = check_dtype(node, 0)
    _index_type(node, 1, int32=False)
    bd = int_attr(node, "batch_dims", 0) if since_version(node) >= 12 else 0
    data, ind = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if data is None or ind is None:
        return tensor(dt, None)
    if len(ind) < 1 or len(data) < 1:
        raise ModelError("data and indices must have rank >= 1", where=node)
    if not 0 <= bd < min(len(data), len(ind)):
        raise ModelError(f"batch_dims {bd} must be in [0, {min(len(data), len(ind))})",
                         where=node)
    m = ind[-1]
    if not isinstance(m, int):
        return tensor(dt, None)
    if m > len(data) - bd:
        raise ModelError(f"the last indices dim ({m}) exceeds data rank - batch_dims "
                         f"({len(data) - bd})", where=node)
    for k in range(bd):
        if isinstance(data[k], int) and isinstance(ind[k], int) and data[k] != ind[k]:
            raise ModelError(f"batch dim {k} differs: data {data[k]}, indices {ind[k]}",
                             where=node)
    return tensor(dt, tuple(ind[:-1]) + tuple(data[bd + m:]))


def _gnd_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    data, ind = np.asarray(inputs[0]), np.asarray(inputs[1], dtype=np.int64)
    bd = int(node.attr("batch_dims", 0))
    m = ind.shape[-1]
    dims = np.array(data.shape[bd:bd + m])
    if ((ind < -dims) | (ind >= dims)).any():
        raise ModelError("a constant GatherND index is out of range", where=node)
    ind = np.where(ind < 0, ind + dims, ind)
    # The kernel's view (module docstring): data as [B, prod(d_b..), S], each index tuple a
    # row offset. Sizes are spelled out (B, the tuple count or m may be 0; m = 0 takes row 0).
    batch, slab = math.prod(data.shape[:bd]), math.prod(data.shape[bd + m:])
    d3 = data.reshape(batch, math.prod(data.shape[bd:bd + m]), slab)
    i2 = ind.reshape(batch, math.prod(ind.shape[bd:-1]), m)
    row = np.zeros(i2.shape[:2], np.int64)
    for j in range(m):
        row = row * int(dims[j]) + i2[..., j]
    out = d3[np.arange(batch)[:, None], row]
    return [out.reshape(ind.shape[:-1] + data.shape[bd + m:])]


def _gnd_lower(ctx: LowerContext, node: Node) -> None:
    data, ind, out = (ctx.buf(v) for v in (node.inputs[0], node.inputs[1], node.outputs[0]))
    if out.numel == 0:
        return
    bd = int(node.attr("batch_dims", 0))
    m = ind.shape[-1]
    batch = math.prod(data.shape[:bd])
    n = math.prod(ind.shape[bd:-1])
    s = math.prod(data.shape[bd + m:])
    st = row_strides(data.shape)
    bstride = math.prod(data.shape[bd:])
    b = Builder()
    big = out.numel >= PARALLEL_MIN
    with loop_or_zero(b, batch, parallel=big and batch > 1, hint="b") as bi:
        with loop_or_zero(b, n, parallel=big and batch == 1, hint="j") as j:
            row = b.iadd(b.imul(bi, n), j)
            src: Operand = b.imul(bi, bstride)
            for k in range(m):
                dim = data.shape[bd + k]
                msg = _bad(node, f"indices[..., {k}] must be in [-{dim}, {dim}) "
                                 f"(data axis {bd + k})")
                idx = wrap_index(b, b.load(ind, b.iadd(b.imul(row, m), i64(k))), dim, msg)
                src = b.iadd(src, b.imul(idx, st[bd + k]))
            dst = b.imul(row, s)
            with loop_or_zero(b, s, hint="s") as t:
                b.store(out, b.iadd(dst, t), b.load(data, b.iadd(src, t)))
    ctx.kernel("gather_nd", b.body)


op("GatherND", (11, 12, 13), infer=_gnd_infer, evaluate=_gnd_evaluate, lower=_gnd_lower,
   doc="gather slices addressed by index tuples (with leading batch dims)")

# --------------------------------------------------------------------------- scatters


def _reduction(node: Node) -> str:
    ver = since_version(node)
    if node.op in ("Scatter",) or ver < 16:
        return "none"
    red = node.attr("reduction", "none")
    red = red.decode() if isinstance(red, bytes) else str(red)
    allowed = ("none", "add", "mul") + (("max", "min") if ver >= 18 else ())
    if red not in allowed:
        raise ModelError(f"reduction '{red}' is not one of {list(allowed)} (opset "
                         f"{node.version})", where=node)
    return red


def _combine(b: Builder, red: str, old: Operand, new: Operand, beats: bool = False
             ) -> Operand:
    """The element after `new` meets `old`. With `beats` (ScatterElements), max/min take the
    update only when it compares greater/less, as onnx.reference does: a NaN update is
    skipped and a NaN element stays (module docstring); else NaN propagates (ScatterND)."""
    if red == "none":
        return new
    if old.dtype == DType.BOOL:  # add/mul on bool are or/and (numpy's bool arithmetic)
        return b.op({"add": "or", "mul": "and", "max": "or", "min": "and"}[red], old, new)
    if beats and red in ("max", "min"):
        return b.op("select", b.op("gt" if red == "max" else "lt", new, old), new, old)
    return b.op(red, old, new)


def _np_combine(red: str, old: np.ndarray, new: np.ndarray, beats: bool = False
                ) -> np.ndarray:
    if red == "none":
        return new
    if beats and red in ("max", "min") and old.dtype != np.bool_:
        return np.where(new > old if red == "max" else new < old, new, old)
    fn = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[red]
    return fn(old, new)


def _se_infer(node: Node) -> list[ValueType | None]:
    arity(node, 3)
    dt = check_dtype(node, 0)
    _index_type(node, 1)
    if check_dtype(node, 2) != dt:
        raise ModelError(f"updates ({tensor_input(node, 2).dtype.short}) and data "
                         f"({dt.short}) must have one dtype", where=node)
    _reduction(node)
    data, ind, upd = (tensor_input(node, i).shape for i in range(3))
    if data is not None and ind is not None:
        if len(data) != len(ind) or len(data) == 0:
            raise ModelError(f"data (rank {len(data)}) and indices (rank {len(ind)}) must have "
                             "one rank >= 1", where=node)
        normalize_axis(int_attr(node, "axis", 0), len(data), node)
    if ind is not None and upd is not None and len(ind) == len(upd) and any(
            isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(ind, upd)) \
            or ind is not None and upd is not None and len(ind) != len(upd):
        raise ModelError(f"indices {ind} and updates {upd} must have one shape", where=node)
    return tensor(dt, data)


def _se_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    data, ind, upd = (np.asarray(x) for x in inputs[:3])
    axis = normalize_axis(int_attr(node, "axis", 0), data.ndim, node)
    red = _reduction(node)
    dim = data.shape[axis]
    if ((ind < -dim) | (ind >= dim)).any():
        raise ModelError(f"a constant index is outside [-{dim}, {dim})", where=node)
    ind = np.where(ind < 0, ind + dim, ind)
    out = data.copy()
    for pos in np.ndindex(*ind.shape):
        dst = pos[:axis] + (int(ind[pos]),) + pos[axis + 1:]
        out[dst] = _np_combine(red, out[dst], upd[pos], beats=True)
    return [out]


def _se_lower(ctx: LowerContext, node: Node) -> None:
    data, ind, upd, out = (ctx.buf(v) for v in (*node.inputs[:3], node.outputs[0]))
    axis = normalize_axis(int_attr(node, "axis", 0), len(data.shape), node)
    red = _reduction(node)
    dim = data.shape[axis]
    b = Builder()
    _copy(b, data, out)
    if ind.numel:
        msg = _bad(node, f"indices must be in [-{dim}, {dim}) (axis {axis} of size {dim})")
        with b.nest(ind.shape) as idx:
            pos = b.linear(idx, row_strides(ind.shape))
            k = wrap_index(b, b.load(ind, pos), dim, msg)
            dst = b.linear(idx[:axis] + [k] + idx[axis + 1:], row_strides(data.shape))
            new = b.load(upd, pos)
            val = new if red == "none" else _combine(b, red, b.load(out, dst), new,
                                                       beats=True)
            b.store(out, dst, val)
    ctx.kernel(node.op.lower(), b.body)


op("ScatterElements", (11, 13, 16, 18), infer=_se_infer, evaluate=_se_evaluate, lower=_se_lower,
   doc="write (or fold) updates into a copy of data at per-element indices along axis")
op("Scatter", (9, 11), infer=_se_infer, evaluate=_se_evaluate, lower=_se_lower,
   doc="deprecated alias of ScatterElements without reduction")


def _snd_infer(node: Node) -> list[ValueType | None]:
    arity(node, 3)
    dt = check_dtype(node, 0)
    _index_type(node, 1, int32=False)
    if check_dtype(node, 2) != dt:
        raise ModelError("updates and data must have one dtype", where=node)
    _reduction(node)
    data, ind, upd = (tensor_input(node, i).shape for i in range(3))
    if data is not None and ind is not None and upd is not None:
        if len(ind) < 1 or len(data) < 1:
            raise ModelError("data and indices must have rank >= 1", where=node)
        m = ind[-1]
        if isinstance(m, int):
            if m > len(data):
                raise ModelError(f"the last indices dim ({m}) exceeds the data rank "
                                 f"({len(data)})", where=node)
            want: tuple[Dim, ...] = tuple(ind[:-1]) + tuple(data[m:])
            if len(want) != len(upd) or any(isinstance(x, int) and isinstance(y, int)
                                            and x != y for x, y in zip(want, upd)):
                raise ModelError(f"updates must have shape {list(want)}, got {list(upd)}",
                                 where=node)
    return tensor(dt, data)


def _snd_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    data, ind, upd = np.asarray(inputs[0]), np.asarray(inputs[1]), np.asarray(inputs[2])
    red = _reduction(node)
    m = ind.shape[-1]
    dims = np.array(data.shape[:m])
    if ((ind < -dims) | (ind >= dims)).any():
        raise ModelError("a constant ScatterND index is out of range", where=node)
    ind = np.where(ind < 0, ind + dims, ind)
    out = data.copy()
    for pos in np.ndindex(*ind.shape[:-1]):
        dst = tuple(int(v) for v in ind[pos])
        out[dst] = _np_combine(red, out[dst], upd[pos])
    return [out]


def _snd_lower(ctx: LowerContext, node: Node) -> None:
    data, ind, upd, out = (ctx.buf(v) for v in (*node.inputs[:3], node.outputs[0]))
    red = _reduction(node)
    m = ind.shape[-1]
    n, s = math.prod(ind.shape[:-1]), math.prod(data.shape[m:])
    st = row_strides(data.shape)
    b = Builder()
    _copy(b, data, out)
    if n and s:
        with b.loop(0, n, hint="j") as j:
            dst: Operand = i64(0)
            for k in range(m):
                dim = data.shape[k]
                msg = _bad(node, f"indices[..., {k}] must be in [-{dim}, {dim}) (data axis {k})")
                idx = wrap_index(b, b.load(ind, b.iadd(b.imul(j, m), i64(k))), dim, msg)
                dst = b.iadd(dst, b.imul(idx, st[k]))
            with loop_or_zero(b, s, hint="s") as t:
                at = b.iadd(dst, t)
                new = b.load(upd, b.iadd(b.imul(j, s), t))
                val = new if red == "none" else _combine(b, red, b.load(out, at), new)
                b.store(out, at, val)
    ctx.kernel("scatter_nd", b.body)


op("ScatterND", (11, 13, 16, 18), infer=_snd_infer, evaluate=_snd_evaluate, lower=_snd_lower,
   doc="write (or fold) update slices into a copy of data at index tuples")

# --------------------------------------------------------------------------- TensorScatter


def _ts_params(node: Node, rank: int) -> tuple[int, bool]:
    axis = normalize_axis(int_attr(node, "axis", -2), rank, node)
    if axis == 0:
        raise ModelError("axis must not be the batch axis 0", where=node)
    mode = node.attr("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("linear", "circular"):
        raise ModelError(f"mode must be 'linear' or 'circular', got '{mode}'", where=node)
    return axis, mode == "circular"


def _ts_infer(node: Node) -> list[ValueType | None]:
    arity(node, 2, 3)
    dt = check_dtype(node, 0)
    if check_dtype(node, 1) != dt:
        raise ModelError("update and past_cache must have one dtype", where=node)
    if node.input(2) is not None:
        _index_type(node, 2, int32=False)
    cache, upd = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if cache is not None:
        if len(cache) < 2:
            raise ModelError("past_cache must have rank >= 2", where=node)
        axis, _ = _ts_params(node, len(cache))
        if upd is not None:
            bad = len(upd) != len(cache) or any(
                isinstance(x, int) and isinstance(y, int) and (x < y if k == axis else x != y)
                for k, (x, y) in enumerate(zip(cache, upd)))
            if bad:
                raise ModelError(f"update shape {list(upd)} does not fit past_cache "
                                 f"{list(cache)} (axis {axis})", where=node)
    return tensor(dt, cache)


def _ts_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    cache, upd = np.asarray(inputs[0]), np.asarray(inputs[1])
    axis, circular = _ts_params(node, cache.ndim)
    wi = inputs[2] if len(inputs) > 2 and inputs[2] is not None else \
        np.zeros(cache.shape[0], np.int64)
    out = cache.copy()
    size = cache.shape[axis]
    for prefix in np.ndindex(*cache.shape[:axis]):
        for s in range(upd.shape[axis]):
            t = int(wi[prefix[0]]) + s
            t = t % size if circular else t
            if not 0 <= t < size:
                raise ModelError(f"write position {t} is outside [0, {size})", where=node)
            out[prefix + (t,)] = upd[prefix + (s,)]
    return [out]


def _ts_lower(ctx: LowerContext, node: Node) -> None:
    cache, upd, out = (ctx.buf(v) for v in (node.inputs[0], node.inputs[1], node.outputs[0]))
    axis, circular = _ts_params(node, len(cache.shape))
    size, seq = cache.shape[axis], upd.shape[axis]
    batch, mid = cache.shape[0], math.prod(cache.shape[1:axis])
    inner = math.prod(cache.shape[axis + 1:])
    b = Builder()
    _copy(b, cache, out)
    if upd.numel:
        wi = ctx.buf(node.inputs[2]) if node.input(2) is not None else None  # type: ignore
        msg = (f"{node.describe()}: TensorScatter write position out of range: "
               f"write_indices + update length must stay within [0, {size}] (axis {axis})")
        with b.loop(0, batch, parallel=True, hint="b") as bi:
            start = b.load(wi, bi) if wi is not None else i64(0)
            with loop_or_zero(b, mid, hint="m") as mi:
                pre = b.iadd(b.imul(bi, mid), mi)
                with b.loop(0, seq, hint="s") as s:
                    t = b.iadd(start, s)
                    if circular:
                        r = b.op("rem", t, i64(size))
                        t = b.op("select", b.op("lt", r, i64(0)), b.iadd(r, i64(size)), r)
                    else:
                        b.check(b.op("and", b.op("ge", t, i64(0)), b.op("lt", t, i64(size))),
                                msg)
                    dst = b.imul(b.iadd(b.imul(pre, size), t), inner)
                    src = b.imul(b.iadd(b.imul(pre, seq), s), inner)
                    with loop_or_zero(b, inner, hint="i") as i:
                        b.store(out, b.iadd(dst, i), b.load(upd, b.iadd(src, i)))
    ctx.kernel("tensor_scatter", b.body)


op("TensorScatter", (24,), infer=_ts_infer, evaluate=_ts_evaluate, lower=_ts_lower,
   doc="write update rows into a copy of a cache at per-batch positions (linear/circular)")
