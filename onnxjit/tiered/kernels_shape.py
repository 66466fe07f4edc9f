"""Tier-0 kernels of shape and data-movement ops: numpy with ONNX semantics.

As `kernels`: each builder reads its node's attributes once and returns `fn(*inputs) ->
[outputs]`, covering the cases whose numpy meaning is exactly ONNX's (others raise `Decline`).
Views are fine as results. A shape-typed input that is a constant (Reshape's shape, Unsqueeze's
axes, Slice's bounds) is read into ints once, at build time (`_ints_of`): on a decoder step these
ops see tiny arrays, and converting them at every call was most of their time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnxjit.ir.graph import Node
from onnxjit.tiered.registry import Decline, kernel


# ------------------------------------------------------------------------------- shapes
@kernel("Shape")
def _shape(node: Node) -> Any:
    start, end = node.attr("start", 0), node.attr("end", None)
    return lambda x: [np.array(x.shape[slice(start, end)], np.int64)]


@kernel("Size")
def _size(node: Node) -> Any:
    return lambda x: [np.array(x.size, np.int64)]


def _ints(a: np.ndarray | None) -> list[int]:
    if a is None:
        return []
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        return a.reshape(-1).tolist()  # Python ints, ~10x faster than int() per element
    return [int(v) for v in a.reshape(-1)]


def _ints_of(node: Node, i: int) -> Callable[[np.ndarray | None], Sequence[int]]:
    """`_ints` for input i of the node, read once when that input is a constant array: the
    call then gives the same tuple back (a graph input with a default value may be given
    another array: that one is read as it comes)."""
    v = node.input(i)
    c = None if v is None else v.const
    if c is None:
        return _ints
    pre = tuple(_ints(c))
    return lambda a: pre if a is c else _ints(a)


@kernel("Unsqueeze", "Squeeze")
def _squeeze(node: Node) -> Any:
    attr = node.attr("axes", None) if node.version < 13 else None
    unsq = node.op == "Unsqueeze"
    ints = (lambda _: attr) if attr is not None else _ints_of(node, 1)
    placed: dict[tuple, list[int]] = {}  # (rank, axes) -> the new axes' sorted positions

    def run(x: np.ndarray, axes: np.ndarray | None = None) -> list:
        ax = ints(axes)
        if unsq:
            key = (x.ndim, tuple(ax))
            pos = placed.get(key)
            if pos is None:
                r = x.ndim + len(ax)
                pos = sorted(a % r for a in ax)
                if len(set(pos)) != len(pos):
                    raise Decline
                placed[key] = pos
            shape = list(x.shape)
            for a in pos:
                shape.insert(a, 1)
            return [x.reshape(shape)]
        if attr is None and axes is None:
            return [np.squeeze(x)]
        return [np.squeeze(x, tuple(a % x.ndim for a in ax))]
    return run


@kernel("Reshape")
def _reshape(node: Node) -> Any:
    if node.version < 5:
        return None
    allowzero = int(node.attr("allowzero", 0))
    ints = _ints_of(node, 1)

    def run(x: np.ndarray, shape: np.ndarray) -> list:
        dims = ints(shape)
        if not allowzero and 0 in dims:
            dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        if -1 in dims and x.size == 0:
            raise Decline
        return [x.reshape(dims)]
    return run


@kernel("Flatten")
def _flatten(node: Node) -> Any:
    axis = int(node.attr("axis", 1))

    def run(x: np.ndarray) -> list:
        a = axis + x.ndim if axis < 0 else axis
        return [x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))]
    return run


@kernel("Transpose")
def _transpose(node: Node) -> Any:
    perm = node.attr("perm", None)
    return lambda x: [np.transpose(x, perm)]


@kernel("Concat")
def _concat(node: Node) -> Any:
    axis = int(node.attr("axis"))

    def run(*xs: np.ndarray) -> list:
        if len({x.dtype for x in xs}) != 1:
            raise Decline
        return [np.concatenate(xs, axis=axis)]
    return run


@kernel("Expand")
def _expand(node: Node) -> Any:
    ints = _ints_of(node, 1)

    def run(x: np.ndarray, shape: np.ndarray) -> list:
        return [np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(ints(shape))))]
    return run


@kernel("Tile")
def _tile(node: Node) -> Any:
    return lambda x, reps: [np.tile(x, _ints(reps))]


@kernel("Gather")
def _gather(node: Node) -> Any:
    axis = int(node.attr("axis", 0))

    def run(x: np.ndarray, idx: np.ndarray) -> list:
        if idx.dtype.kind not in "iu":
            raise Decline
        return [np.take(x, idx, axis=axis)]  # IndexError beyond +-dim: native code reports
    return run


def _slice_bound(v: int, dim: int, step: int, is_start: bool) -> int | None:
    """An ONNX Slice start/end clamped as the spec says, as a Python slice bound: forward,
    both to [0, dim]; backward, the start to [0, dim - 1] and the end to [-1, dim - 1], where
    -1 (before the first element) is None for Python; None also for a start in an empty dim."""
    if v < 0:
        v += dim
    if step > 0:
        return min(max(v, 0), dim)
    if is_start:
        return None if dim == 0 else min(max(v, 0), dim - 1)
    v = min(max(v, -1), dim - 1)
    return None if v < 0 else v


@kernel("Slice")
def _slice(node: Node) -> Any:
    if node.version < 10:
        return None
    i_st, i_en, i_ax, i_sp = (_ints_of(node, i) for i in range(1, 5))

    def run(x: np.ndarray, starts: np.ndarray, ends: np.ndarray,
            axes: np.ndarray | None = None, steps: np.ndarray | None = None) -> list:
        st, en = i_st(starts), i_en(ends)
        ax = i_ax(axes) if axes is not None else range(len(st))
        sp = i_sp(steps) if steps is not None else [1] * len(st)
        index = [slice(None)] * x.ndim
        for s, e, a, k in zip(st, en, ax, sp):
            if k == 0:
                raise Decline
            a %= x.ndim
            d = x.shape[a]
            lo = _slice_bound(s, d, k, True)
            index[a] = (slice(0, 0) if lo is None and k < 0 else  # an empty dim backwards
                        slice(lo, _slice_bound(e, d, k, False), k))
        return [x[tuple(index)]]
    return run


@kernel("Split")
def _split(node: Node) -> Any:
    axis = int(node.attr("axis", 0))
    attr = node.attr("split", None) if node.version < 13 else None
    n = len(node.outputs)

    def run(x: np.ndarray, split: np.ndarray | None = None) -> list:
        sizes = list(attr) if attr is not None else _ints(split) if split is not None else None
        d = x.shape[axis]
        if sizes is None:
            if d % n:
                raise Decline  # uneven num_outputs chunks
            sizes = [d // n] * n
        if sum(sizes) != d or len(sizes) != n:
            raise Decline
        return list(np.split(x, np.cumsum(sizes)[:-1], axis=axis))
    return run


@kernel("Range")
def _range(node: Node) -> Any:
    def run(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> list:
        if start.dtype.kind == "f":
            raise Decline
        s, lim, d = int(start), int(limit), int(delta)
        n = max(-((s - lim) // d), 0) if d else None
        if n is None:
            raise Decline
        return [(s + d * np.arange(n)).astype(start.dtype)]
    return run


@kernel("ConstantOfShape")
def _const_of_shape(node: Node) -> Any:
    value = node.attr("value", None)
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)

    def run(shape: np.ndarray) -> list:
        return [np.full(_ints(shape), fill[0], dtype=fill.dtype)]
    return run


@kernel("Pad")
def _pad(node: Node) -> Any:
    if node.version < 11 or node.attr("mode", "constant") not in ("constant", b"constant"):
        return None

    def run(x: np.ndarray, pads: np.ndarray, value: np.ndarray | None = None,
            axes: np.ndarray | None = None) -> list:
        p = _ints(pads)
        if axes is not None or min(p, default=0) < 0:
            raise Decline
        r = x.ndim
        v = 0 if value is None or value.size == 0 else value.reshape(-1)[0]
        return [np.pad(x, list(zip(p[:r], p[r:])), constant_values=v)]
    return run
