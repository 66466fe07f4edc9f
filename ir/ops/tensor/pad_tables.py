"""Index tables shared by the padding ops (and helpers other table-driven ops use).

A padded (or cropped, or center-cropped) tensor is separable: each axis k has a source-index
table `src_k[o]` for every output position o along it, computed with numpy at compile time
(`axis_table`): the input index read there, or -1 where the constant fills. Negative pads crop
first (onnxruntime's order: the kept window is then padded), so
`src_k = np.pad(window, (max(pb,0), max(pe,0)), mode)`. An output element reads
`x[sum(src_k[o_k] * stride_k)]` when every table says >= 0, else the constant.

`lower_tables` emits the kernel. Algorithm: 1) runs of untouched leading / trailing axes merge
into one dim each (a parallel outer loop with enough iterations, a contiguous inner one);
2) when every table is a shifted window (`_classify`: constant mode, the common case) the
kernel fills the output and copies the input box into it (both vectorize); 3) otherwise one
nest over the output: window-shaped axes index arithmetically (a range test), the others load
their table from a const buffer, and the last axis is split into up to three loops so that its
middle run (`_segments`, where the table is `o + offset`) reads the input contiguously.
`apply_tables` is the numpy form used by constant folding (one source of truth).

Also here: `const_buffer` (a compile-time table as a const buffer), `static_ints` /
`require_static` (compile-time integer inputs; UnsupportedError naming the node and input when
an output shape depends on a non-constant one) and `load_scalar`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.tensor.indexing import PARALLEL_MIN, int_values, row_strides, strided_copy
from onnxjit.ir.ops.tensor.indexing import fill as fill_all
from onnxjit.ir.types import DType, TensorType

# --------------------------------------------------------------------------- shared helpers


def const_buffer(ctx: LowerContext, array: np.ndarray) -> Buffer:
    """A const buffer holding a table computed at compile time (passed by pointer)."""
    arr = np.ascontiguousarray(array)
    v = Value(TensorType(DType.from_numpy(arr.dtype), tuple(arr.shape)), "table", const=arr)
    return ctx.buf(v)


def static_ints(node: Node, i: int, what: str) -> tuple[int, ...] | None:
    """The integers of input i when known at compile time (None when omitted or unknown)."""
    v = node.input(i)
    if v is None:
        return None
    vals = int_values(v)
    if vals is None and v.const is not None and np.asarray(v.const).dtype.kind == "f":
        vals = tuple(int(x) for x in np.asarray(v.const).reshape(-1))
    return vals


def require_static(node: Node, i: int, what: str) -> tuple[int, ...]:
    """Like `static_ints` but the input must be there and constant (UnsupportedError if not:
    the output shape depends on its value, which the compiler must know)."""
    vals = static_ints(node, i, what)
    if vals is None:
        if node.input(i) is None:
            raise ModelError(f"required input {i} ({what}) is missing", where=node)
        raise UnsupportedError(
            f"input {i} ({what}, {node.inputs[i].describe()}) of {node.op} is not a "
            "compile-time constant; the output shape depends on its value, which is not "
            "supported yet", where=node)
    return vals


def load_scalar(b: Builder, ctx: LowerContext, v: Value | None, dtype: DType,
                default: float | int | bool = 0) -> Operand:
    """A one-element input as an operand of `dtype`: the constant, a run-time load, or default."""
    if v is None:
        return const(default, dtype)
    if v.const is not None:
        arr = np.asarray(v.const).reshape(-1)
        return const(arr[0].item() if arr.size else default, dtype)
    buf = ctx.buf(v)
    if buf.numel == 0:
        return const(default, dtype)
    return b.cast(b.load(buf, i64(0)), dtype)


# --------------------------------------------------------------------------- tables

_NUMPY_MODE = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def axis_table(node: Node, d: int, pb: int, pe: int, mode: str) -> np.ndarray:
    """Source index (or -1: constant) for every output position of one padded axis."""
    lo, hi = max(-pb, 0), d - max(-pe, 0)
    if hi < lo:
        raise ModelError(f"pads ({pb}, {pe}) crop more than the axis size {d}", where=node)
    window = np.arange(lo, hi, dtype=np.int64)
    width = (max(pb, 0), max(pe, 0))
    if width == (0, 0):
        return window
    if mode == "constant":
        return np.pad(window, width, mode="constant", constant_values=-1)
    if window.size == 0:
        raise ModelError(f"cannot pad an empty axis in mode '{mode}'", where=node)
    return np.pad(window, width, mode=_NUMPY_MODE[mode])  # type: ignore[call-overload]


def apply_tables(x: np.ndarray, tables: Sequence[np.ndarray], fill: object) -> np.ndarray:
    """numpy semantics of a table-driven pad: out[o] = x[src(o)] or `fill`."""
    out_shape = tuple(len(t) for t in tables)
    if any(n == 0 for n in out_shape):
        return np.zeros(out_shape, dtype=x.dtype)
    if x.size == 0:
        return np.full(out_shape, fill, dtype=x.dtype)
    clipped = [np.maximum(t, 0) for t in tables]
    y = x[np.ix_(*clipped)]
    mask = np.ones(out_shape, dtype=bool)
    for k, t in enumerate(tables):
        shape = [1] * len(tables)
        shape[k] = len(t)
        mask = mask & (t >= 0).reshape(shape)
    return np.where(mask, y, np.asarray(fill).astype(x.dtype)).astype(x.dtype)


def _classify(t: np.ndarray) -> tuple[int, int, int] | None:
    """(offset, lo, hi) when the table is `o + offset` on one run of positions, reading the
    source window [lo, hi), and -1 (fill) elsewhere; None when it needs a real table."""
    pos = np.nonzero(t >= 0)[0]
    if pos.size == 0 or (np.diff(pos) != 1).any():
        return None
    off = int(t[pos[0]]) - int(pos[0])
    if (t[pos] != pos + off).any():
        return None
    return off, int(t[pos[0]]), int(t[pos[-1]]) + 1


def _merge_identity(xs: list[int], os_: list[int], tables: list[np.ndarray]
                    ) -> tuple[list[int], list[int], list[np.ndarray]]:
    """Merge the leading and the trailing runs of untouched axes (each into one dim), so the
    outer loop has enough iterations to run in parallel and the inner one is contiguous."""
    ident = [len(t) == d and bool((t == np.arange(d)).all()) for t, d in zip(tables, xs)]
    k0 = len(xs)
    while k0 > 0 and ident[k0 - 1]:
        k0 -= 1
    lead = 0
    while lead < k0 and ident[lead]:
        lead += 1
    if k0 < len(xs) - 1:
        n = math.prod(xs[k0:])
        xs, os_, tables = xs[:k0] + [n], os_[:k0] + [n], tables[:k0] + [np.arange(n)]
    if lead > 1:
        n = math.prod(xs[:lead])
        xs, os_, tables = [n] + xs[lead:], [n] + os_[lead:], [np.arange(n)] + tables[lead:]
    return xs, os_, tables


def _segments(t: np.ndarray) -> list[tuple[int, int, int | None]]:
    """Split an axis into (start, stop, offset) loops: the longest run where the table is
    `o + offset` (all valid) gets its offset, the positions around it None (table loads)."""
    n = len(t)
    delta = t - np.arange(n)
    best, run = (0, 0), 0
    for o in range(n):
        run = run + 1 if o and t[o] >= 0 and t[o - 1] >= 0 and delta[o] == delta[o - 1] else \
            int(t[o] >= 0)
        if run > best[1] - best[0]:
            best = (o + 1 - run, o + 1)
    a, e = best
    if e - a < 2:
        return [(0, n, None)]
    segs = [(0, a, None), (a, e, int(delta[a])), (e, n, None)]
    return [seg for seg in segs if seg[1] > seg[0]]


def lower_tables(ctx: LowerContext, x: Buffer, out: Buffer, tables: Sequence[np.ndarray],
                 fill: Operand | None, b: Builder, name: str) -> None:
    """Emit the nest out[o] = x[src(o)] (or `fill` where a table holds -1); see the docstring.

    An axis whose table is a shifted window (`_classify`) indexes arithmetically (a range
    test instead of a table load); other axes load their table from a const buffer.
    """
    if out.numel == 0:
        return
    if x.numel == 0 or not out.shape:
        with b.loop(0, out.numel, parallel=out.numel >= PARALLEL_MIN) as i:
            b.store(out, i, fill if x.numel == 0 else b.load(x, i))  # type: ignore[arg-type]
        ctx.kernel(name, b.body)
        return
    xs, os_, tabs = _merge_identity(list(x.shape), list(out.shape), list(tables))
    kinds = [_classify(t) for t in tabs]
    in_st, out_st = row_strides(xs), row_strides(os_)
    if all(k is not None for k in kinds) and fill is not None:
        # Only shifted windows: fill everything, then copy the input box (both vectorize).
        fill_all(b, out, fill)
        box = [hi - lo for _, lo, hi in kinds]  # type: ignore[misc]
        dst = sum((lo - off) * st for (off, lo, _), st in zip(kinds, out_st))  # type: ignore
        src = sum(lo * st for (_, lo, _), st in zip(kinds, in_st))  # type: ignore[misc]
        strided_copy(b, box, out, dst, out_st, x, src, in_st)
        ctx.kernel(name, b.body)
        return
    offsets, parts, pos = {}, [], 0
    for k, kind in enumerate(kinds):
        if kind is None:
            offsets[k] = pos
            parts.append(tabs[k])
            pos += len(tabs[k])
    table = const_buffer(ctx, np.concatenate(parts)) if parts else None
    big = out.numel >= PARALLEL_MIN

    def axis_src(k: int, i: Operand, valid: Operand | None) -> tuple[Operand, Operand | None]:
        """Source index along axis k at output index i, and the running validity."""
        kind = kinds[k]
        if kind is not None:
            off, lo, hi = kind
            s = b.iadd(i, i64(off))
            if lo > off or hi < os_[k] + off:  # some positions fall outside the window
                ok = b.op("and", b.op("ge", s, i64(lo)), b.op("lt", s, i64(hi)))
                valid = ok if valid is None else b.op("and", valid, ok)
                s = b.op("min", b.op("max", s, i64(lo)), i64(hi - 1))
            return s, valid
        s = b.load(table, b.iadd(i, i64(offsets[k])))  # type: ignore[arg-type]
        if (tabs[k] < 0).any():
            ok = b.op("ge", s, i64(0))
            valid = ok if valid is None else b.op("and", valid, ok)
            s = b.op("max", s, i64(0))
        return s, valid

    last = len(os_) - 1
    with b.nest(os_[:last], parallel_outer=big) as idx:
        src: Operand = i64(0)
        valid: Operand | None = None
        for k in range(last):
            s, valid = axis_src(k, idx[k], valid)
            src = b.iadd(src, b.imul(s, in_st[k]))
        dst = b.linear(idx, out_st[:last])
        # The last axis runs in up to three loops: table-driven borders around the middle
        # run that reads the input contiguously (no table load: it vectorizes).
        for lo, hi, off in _segments(tabs[last]):
            with b.loop(lo, hi, parallel=big and last == 0, hint="j") as j:
                if off is None:
                    sj, ok = axis_src(last, j, valid)
                else:
                    sj, ok = b.iadd(j, i64(off)), valid
                v: Operand = b.load(x, b.iadd(src, sj))
                if ok is not None:
                    v = b.op("select", ok, v, fill)  # type: ignore[arg-type]
                b.store(out, b.iadd(dst, j), v)
    ctx.kernel(name, b.body)
