"""Helpers shared by the shape and data-movement ops (tensor.shape, tensor.movement).

Three groups:

- reading integer operands: `int_values` gives the contents of an int tensor when it is known
  at compile time (a constant of any size, or a fully concrete `sym_value`); `axes_list`
  normalises a list of axes and rejects duplicates;
- symbolic dim arithmetic: `prod_dims` multiplies dims, `div_dims` divides one product by
  another after cancelling equal factors (so `(batch*784) / batch` is `784`, not an opaque
  floor-division), `slice_dim` is the length of a slice of a dim;
- loop nests: `strided_copy` is the one nest behind Transpose, Concat, Slice, Split and Tile.
  Algorithm: every such op copies a box of `shape` from `src` to `dst` where each side's flat
  index is `offset + sum(idx[k] * strides[k])`; adjacent dims that both sides walk contiguously
  are merged (`loop_builder.coalesce`), so a copy of contiguous rows becomes one flat loop, and
  a box with a zero-size dim emits nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir import symbolic
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.loop_builder import Builder, coalesce
from onnxjit.ir.loops import Buffer, Operand, i64, size_operand
from onnxjit.ir.types import Dim, DType, Sym, TensorType, sym_floordiv, sym_max, sym_min

#: Kernels copying at least this many elements mark their outer loop parallel.
PARALLEL_MIN = 1 << 14

#: A slice end at or beyond this means "to the end" whatever the (symbolic) dim is (a
#: symbolic program assumes its dims are at most this, `_below_big`).
BIG = (1 << 31) - 1


# --------------------------------------------------------------------------- int operands


def int_values(v: Value | None) -> tuple[int, ...] | None:
    """The integers an int tensor holds when known at compile time (flattened), else None."""
    if v is None:
        return None
    c = v.const
    if isinstance(c, np.ndarray) and c.dtype.kind in "iu":
        return tuple(int(x) for x in c.reshape(-1))
    if v.sym_value is not None and all(isinstance(d, int) for d in v.sym_value):
        return tuple(v.sym_value)
    return None


def check_int_input(node: Node, i: int, what: str, int32: bool = False) -> TensorType:
    """Input i must be an int64 (or int32 if allowed) tensor of rank <= 1."""
    v = node.input(i)
    t = v.type if v is not None else None
    if not isinstance(t, TensorType):
        raise ModelError(f"input {i} ({what}) must be a tensor", where=node)
    ok = (DType.INT64, DType.INT32) if int32 else (DType.INT64,)
    if t.dtype not in ok:
        want = " or ".join(d.short for d in ok)
        raise ModelError(f"input {i} ({what}) must be {want}, got {t.dtype.short}", where=node)
    if t.shape is not None and len(t.shape) > 1:
        raise ModelError(f"input {i} ({what}) must be 1-D, got shape {t}", where=node)
    return t


def input_length(v: Value | None) -> int | None:
    """The static number of elements of a 1-D (or 0-D) value, if known."""
    if v is None or not isinstance(v.type, TensorType) or v.type.shape is None:
        return None
    shape = v.type.shape
    if len(shape) == 0:
        return 1
    return shape[0] if len(shape) == 1 and isinstance(shape[0], int) else None


def axes_list(axes: Sequence[int], rank: int, node: Node, what: str = "axes") -> list[int]:
    """Axes normalised into [0, rank); ModelError on out-of-range or repeated axes."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ModelError(f"{what} value {a} is out of range for rank {rank}", where=node)
        a = a + rank if a < 0 else a
        if a in out:
            raise ModelError(f"{what} {list(axes)} repeats axis {a}", where=node)
        out.append(a)
    return out


# --------------------------------------------------------------------------- symbolic dims


def prod_dims(dims: Sequence[Dim]) -> Dim:
    """Product of dims; None when any is unknown."""
    p: Dim = 1
    for d in dims:
        if d is None:
            return None
        p = p * d  # type: ignore[operator]
    return p


def _factors(dims: Sequence[Dim]) -> list:
    out: list = []
    for d in dims:
        if isinstance(d, Sym) and d.op == "mul":
            out.extend(d.args)
        else:
            out.append(d)
    return out


def div_dims(num: Sequence[Dim], den: Sequence[Dim]) -> Dim:
    """prod(num) / prod(den) for an exact division; None when unknown (or den is 0)."""
    if any(d is None for d in num) or any(d is None for d in den):
        return None
    n, m = _factors(num), _factors(den)
    for f in list(m):
        if not isinstance(f, int) and f in n:
            n.remove(f)
            m.remove(f)
    p, q = prod_dims(n), prod_dims(m)
    if q == 0:
        return None
    if isinstance(p, int) and isinstance(q, int):
        return p // q
    return sym_floordiv(p, q)  # type: ignore[arg-type]


def slice_params(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """(first index, count) of the ONNX slice start:end:step of a dim of size `dim`.

    The spec's clamping: negative start/end count from the end (dim is added once), then for
    a positive step start and end are clamped to [0, dim]; for a negative step start to
    [0, dim-1] and end to [-1, dim-1]. Python's slices differ for a negative step and a start
    below -dim (Python: empty; ONNX: from index 0). Any int64 (INT64_MIN..INT64_MAX, as ints)
    is taken; an empty slice has first index 0.
    """
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        first, stop = min(max(start, 0), dim), min(max(end, 0), dim)
        count = -(-(stop - first) // step)
    else:
        first, stop = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        count = -(-(first - stop) // -step)
    return (first, count) if count > 0 else (0, 0)


def size_values(v: Value | None) -> tuple | None:
    """`int_values`, or, while compiling for symbolic sizes, the sizes (ints and `Sym`s) a
    1-D int tensor of dims holds (its `sym_value`)."""
    vals = int_values(v)
    if vals is not None or v is None or not symbolic.active():
        return vals
    if v.sym_value is not None and all(d is not None for d in v.sym_value):
        return tuple(v.sym_value)
    return None


def _below_big(d: Dim) -> None:
    """Slice bounds at or beyond +-BIG reach past a dim only if it is below BIG: always true
    of real tensors, but a symbolic program records it (`ir.symbolic`), so a larger size
    would be compiled on its own."""
    if isinstance(d, Sym) and symbolic.active():
        symbolic.assume_equal(sym_min(d, BIG), d, "a Slice bound at +-(2^31-1) or beyond "
                              "covers the whole dim")


def _nonneg(x: object) -> bool:
    """A size expression that cannot be negative (symbols are sizes, constants >= 0)."""
    if isinstance(x, int):
        return x >= 0
    if isinstance(x, Sym):
        return x.op == "var" or all(_nonneg(a) for a in x.args)
    return False


def slice_params_sym(start: Dim, end: Dim, step: int, d: Dim) -> tuple[Dim, Dim] | None:
    """`slice_params` when a parameter or the dim is symbolic: (first index, count) as
    sizes, for a positive step and symbolic parameters that cannot be negative (ints may
    count from the end); None when that cannot be said without the values."""
    if step <= 0 or d is None or start is None or end is None:
        return None
    if any(isinstance(x, Sym) and not _nonneg(x) for x in (start, end)):
        return None

    def norm(x: Dim) -> Dim:
        if isinstance(x, int) and x >= BIG:
            _below_big(d)
            return d
        if isinstance(x, int) and x <= -BIG:
            _below_big(d)
            return 0
        if isinstance(x, int) and x < 0:
            return sym_max(d + x, 0)  # type: ignore[operator]
        return x

    first = sym_min(norm(start), d)  # type: ignore[arg-type]
    stop = sym_min(norm(end), d)  # type: ignore[arg-type]
    span = sym_max(stop - first, 0)  # type: ignore[operator]
    if step >= BIG:  # at most one element, and no huge constant to overflow
        _below_big(d)
        return first, sym_min(span, 1)  # type: ignore[arg-type]
    count = span if step == 1 else sym_floordiv(span + (step - 1), step)  # type: ignore
    return first, count


def slice_dim(d: Dim, start: Dim, end: Dim, step: int) -> Dim:
    """Length of a slice of a dim; a symbolic dim is only known for the full range (or,
    while compiling for symbolic sizes, as `slice_params_sym` gives it)."""
    if isinstance(d, int) and isinstance(start, int) and isinstance(end, int):
        return slice_params(start, end, step, d)[1]
    if isinstance(start, int) and isinstance(end, int) and d is not None:
        if step == 1 and (start == 0 or start <= -BIG) and end >= BIG or \
                step == -1 and start >= BIG and end <= -BIG:
            _below_big(d)
            return d
    if symbolic.active():
        got = slice_params_sym(start, end, step, d)
        return None if got is None else got[1]
    return None


# --------------------------------------------------------------------------- loop nests


def static_lower(fn: Callable[[Any, Node], None]) -> Callable[[Any, Node], None]:
    """Wrap a `lower` rule: an output shape still unknown once the inputs are bound depends on
    input values, which shape specialisation cannot compile (UnsupportedError, not a crash)."""

    def lower(ctx: Any, node: Node) -> None:
        for v in node.outputs:
            t = v.type
            if isinstance(t, TensorType) and symbolic.known_shape(t) is None and \
                    (v.name or v is node.outputs[0]):
                raise UnsupportedError(
                    f"the shape of {v.describe()} ({t}) depends on input values; data-dependent "
                    "output shapes are not supported yet (onnxjit specialises on input shapes)",
                    where=node)
        fn(ctx, node)

    lower.__name__ = fn.__name__
    lower.__doc__ = fn.__doc__
    return lower



def row_strides(shape: Sequence[int]) -> list[int]:
    strides = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    return strides


def strided_copy(b: Builder, shape: Sequence[int], dst: Buffer, dst_off: Operand | int,
                 dst_strides: Sequence[int], src: Buffer, src_off: Operand | int,
                 src_strides: Sequence[int], parallel: bool | None = None) -> None:
    """dst[dst_off + idx . dst_strides] = src[src_off + idx . src_strides] over `shape`."""
    n = prod_dims(shape)
    if n == 0:
        return
    if parallel is None:  # (a symbolic size: the pool decides at run time)
        parallel = not isinstance(n, int) or n >= PARALLEL_MIN
    d_off = size_operand(dst_off) if isinstance(dst_off, (int, Sym)) else dst_off
    s_off = size_operand(src_off) if isinstance(src_off, (int, Sym)) else src_off
    cshape, (d_st, s_st) = coalesce(shape, [list(dst_strides), list(src_strides)])
    with b.nest(cshape, parallel_outer=parallel) as idx:
        v = b.load(src, b.iadd(s_off, b.linear(idx, s_st)))
        b.store(dst, b.iadd(d_off, b.linear(idx, d_st)), v)


@contextlib.contextmanager
def loop_or_zero(b: Builder, n: object, parallel: bool = False, hint: str = "i"
                 ) -> Iterator[Operand]:
    """A loop over range(n), or just the constant 0 when n == 1 (keeps nests short)."""
    if isinstance(n, int) and n == 1:
        yield i64(0)
        return
    with b.loop(0, n, parallel=parallel, hint=hint) as i:
        yield i


def fill(b: Builder, dst: Buffer, value: Operand) -> None:
    """Store `value` into every element of `dst`."""
    if dst.numel == 0:
        return
    with b.loop(0, dst.numel, parallel=dst.numel >= PARALLEL_MIN) as i:
        b.store(dst, i, value)


def wrap_index(b: Builder, k: Operand, dim: object, message: str) -> Operand:
    """An index loaded from data as i64, negative values wrapped (+dim), range-checked."""
    k = b.cast(k, DType.INT64)
    neg = b.op("lt", k, i64(0))
    d = size_operand(dim)  # type: ignore[arg-type]
    k = b.op("select", neg, b.iadd(k, d), k)
    ok = b.op("and", b.op("ge", k, i64(0)), b.op("lt", k, d))
    b.check(ok, message)
    return k
