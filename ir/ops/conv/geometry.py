"""The concrete geometry of one conv node, and the loop helpers every conv lowering shares.

`Geometry` holds a conv's concrete sizes (N, C, M, spatial dims, kernel, output, pads, groups)
once its shapes are bound; `Load` reads one input element and `EpilogueHook` runs a fused
epilogue on a block of Y (see `conv.lower_gemm_conv`).

Loop helpers: `taps` (the innermost kernel dim, unrolled up to MAX_UNROLL taps), `tap_shift`,
`tap_bounds`, `tap_row` and `tap_edges` (one tap's row of an im2col panel), `valid_range` (the
output positions of one kernel tap whose input lies inside the image, a compile-time pair),
`outer_positions` (the flat offset and the "inside" test of the outer spatial dims at run
time), `row_bounds` (a range emptied when an outer dim is outside: a `select` on loop bounds,
not a branch per element), `Nest`, `fill_channels` (per-channel bias fill) and
`for_each_block` (per image and group).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

from onnxjit.ir.loop_builder import Builder, const, row_major_strides
from onnxjit.ir.loops import Buffer, Const, Operand, Size, SymVal, Var, i64, size_operand
from onnxjit.ir.ops.conv.attrs import ConvAttrs, conv_pads
from onnxjit.ir.types import Sym, sym_max, sym_min

#: Largest im2col/col2im panel (bytes) built for several images at once.
PANEL_BYTES = 64 << 20

#: Depthwise kernels (`depthwise_direct`, `depthwise_phased`, `depthwise_tiny`) fuse each tap's
#: multiply and add into an FMA (`loops.Kernel.contract`), as the GEMM kernels do: one rounding a
#: tap instead of two, a third fewer vector ops. Measured in MobileNetV2-like on two threads, per
#: dispatch against False: the direct kernels (rows of 56 and 112) 1.04-1.18x faster (stride 2 the
#: most), the phased ones (rows of 14 and 28) alike; the model 1.01-1.03x.
CONTRACT = True

Load = Callable[[Builder, Operand], Operand]


class Geometry:
    """Concrete geometry of one conv node (see the module docstring for the names)."""

    def __init__(self, a: ConvAttrs, x: Sequence[int], w: Sequence[int], y: Sequence[int]):
        self.a = a
        self.n, self.c = x[0], x[1]
        self.m = y[1]
        self.ins, self.k, self.out = list(x[2:]), list(w[2:]), list(y[2:])
        self.begin, _ = conv_pads(a, self.ins)
        self.g = a.group
        self.cg, self.mg = self.c // self.g, self.m // self.g
        self.kprod, self.p = math.prod(self.k), math.prod(self.out)
        self.kk = self.cg * self.kprod
        self.in_plane = math.prod(self.ins)
        self.pointwise = all(k == 1 for k in self.k) and all(s == 1 for s in a.strides) \
            and all(p == 0 for p in self.begin) and self.ins == self.out


#: `epilogue(b, off, ld, rows, cols, row0)`: see `lower_gemm_conv`.
EpilogueHook = Callable[[Builder, Operand, int, int, int, Operand], None]



#: Kernel widths up to this are unrolled (compile-time tap ranges); wider ones loop.
MAX_UNROLL = 16


def taps(b: Builder, kw: int) -> Iterator[int | Operand]:
    """The taps of the innermost kernel dim: Python ints (unrolled), or for wide kernels one
    loop variable (the caller's statements go into the loop's body)."""
    if kw <= MAX_UNROLL:
        yield from range(kw)
        return
    with b.loop(0, kw, hint="tw") as v:
        yield v


def operand(v: Size | Operand) -> Operand:
    return size_operand(v) if isinstance(v, (int, Sym)) else v


def smin(a: Size, b: Size) -> Size:
    """min of two sizes (ints, or `Sym`s in a symbolic program)."""
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else sym_min(a, b)


def smax(a: Size, b: Size) -> Size:
    return max(a, b) if isinstance(a, int) and isinstance(b, int) else sym_max(a, b)


def is_static(*sizes: object) -> bool:
    return all(isinstance(d, int) for d in sizes)


def tap_shift(b: Builder, tw: int | Operand, dl: int, pad: Size) -> Size | Operand:
    """`tw*dl - pad`: a size for an unrolled tap (a `Sym` when the pad is), else an operand."""
    if isinstance(tw, int):
        return tw * dl - pad
    return b.iadd(b.imul(tw, dl), operand(0 - pad))


def tap_bounds(b: Builder, valid: Operand | None, shift: Size | Operand, s: int, size: Size,
               n: Size) -> tuple[Operand, Operand]:
    """`row_bounds` of `valid_range` for a compile-time (or symbolic) or run-time shift."""
    if isinstance(shift, (int, Sym)):
        return row_bounds(b, valid, *valid_range(shift, s, size, n), n)
    size_op, n_op = operand(size), operand(n)
    big = (1 << 40) // s  # ceil(a / s) = (a + s*big + s - 1) // s - big for |a| < 2**40

    def ceil_div(a: Operand) -> Operand:
        return b.op("sub", b.op("div", b.op("add", a, i64(s * big + s - 1)), i64(s)), i64(big))

    lo = b.op("min", b.op("max", ceil_div(b.op("neg", shift)), i64(0)), n_op)
    hi = b.op("min", b.op("max", ceil_div(b.op("sub", size_op, shift)), lo), n_op)
    if valid is None:
        return lo, hi
    return b.op("select", valid, lo, n_op), b.op("select", valid, hi, n_op)


def tap_row(b: Builder, col: Buffer, row: Operand, load: Callable, x_at: Operand, s: int,
            zero: Operand, span: tuple[Operand | int, Operand | int],
            copy: tuple[Operand, Operand], edges: tuple[bool, bool]) -> None:
    """One im2col row of a kernel tap over panel columns `span` = [start, stop): zeros up to
    `copy[0]`, input pixels `x_at + w*s` for w in `copy`, zeros after `copy[1]`; `edges` says
    which zero loops can be non-empty (a tap whose valid range reaches a side needs none)."""
    start, stop = span
    lo, hi = copy
    if edges[0]:
        with b.loop(start, lo, hint="z") as z:
            b.store(col, b.iadd(row, z), zero)
    with b.loop(lo, hi, hint="w") as w:
        b.store(col, b.iadd(row, w), load(b, b.iadd(x_at, b.imul(w, s))))
    if edges[1]:
        with b.loop(hi, stop, hint="z") as z:
            b.store(col, b.iadd(row, z), zero)


def tap_edges(lo: Operand, hi: Operand, n: Size) -> tuple[bool, bool]:
    """Which zero loops of a tap row over [0, n) with valid range [lo, hi) can be non-empty."""
    return (not (isinstance(lo, Const) and lo.value == 0),
            not (isinstance(hi, Const) and hi.value == n
                 or isinstance(hi, SymVal) and hi.expr == n))


def valid_range(shift: Size, s: int, size: Size, n: Size) -> tuple[Size, Size]:
    """[lo, hi) of the o in [0, n) with 0 <= o*s + shift < size (lo == hi when empty); the
    sizes may be `Sym`s (a symbolic program: bounds fixed for a call, not per element)."""
    if is_static(shift, size, n):
        lo = min(n, max(0, -(shift // s)))  # ceil(-shift / s)
        return lo, min(n, max(lo, -((shift - size) // s)))  # ceil((size - shift) / s)
    lo = smin(n, smax(0, (s - 1 - shift) // s))
    return lo, smin(n, smax(lo, (size - shift + (s - 1)) // s))


def outer_positions(b: Builder, o: Sequence[Operand], t: Sequence[Operand], a: ConvAttrs,
                    begin: Sequence[Size], sizes: Sequence[Size], iters: Sequence[Size],
                    kernel: Sequence[int]) -> tuple[Operand | None, Operand]:
    """For the outer spatial dims (all but the last): positions `o*s + t*dl - pad` in a tensor
    of spatial `sizes` (o < iters, t < kernel); returns (bool "all inside", or None when that
    holds statically, and the flat offset of the positions)."""
    valid: Operand | None = None
    off: Operand = i64(0)
    strides = row_major_strides(sizes)
    for j, (oj, tj) in enumerate(zip(o, t)):
        s, dl = a.strides[j], a.dilations[j]
        pos = b.iadd(b.iadd(b.imul(oj, s), b.imul(tj, dl)), operand(0 - begin[j]))
        off = b.iadd(off, b.imul(pos, strides[j]))
        if is_static(begin[j], sizes[j], iters[j]) and begin[j] <= 0 and \
                (iters[j] - 1) * s + (kernel[j] - 1) * dl - begin[j] < sizes[j]:
            continue
        v = b.op("and", b.op("ge", pos, i64(0)), b.op("lt", pos, operand(sizes[j])))
        valid = v if valid is None else b.op("and", valid, v)
    return valid, off


def row_bounds(b: Builder, valid: Operand | None, lo: Size, hi: Size, n: Size
               ) -> tuple[Operand, Operand]:
    """Bounds of a row's valid range: empty (n, n) when an outer dim is outside."""
    if valid is None:
        return operand(lo), operand(hi)
    return (b.op("select", valid, operand(lo), operand(n)),
            b.op("select", valid, operand(hi), operand(n)))


class Nest:
    """Loops over `shape` (ints or run-time operands) as a context manager (an empty shape
    opens none)."""

    def __init__(self, b: Builder, shape: Sequence[int | Operand], hint: str):
        self.b, self.shape, self.hint = b, list(shape), hint
        self._cms: list = []

    def __enter__(self) -> list[Var]:
        out = []
        for k, n in enumerate(self.shape):
            cm = self.b.loop(0, n, hint=f"{self.hint}{k}")
            out.append(cm.__enter__())
            self._cms.append(cm)
        return out

    def __exit__(self, *exc: object) -> None:
        for cm in reversed(self._cms):
            cm.__exit__(None, None, None)


def fill_channels(b: Builder, y: Buffer, bias: Buffer | None, m: int, p: Size) -> None:
    """y[(n, m), :] = bias[m] (or 0): one parallel loop over rows (sizes may be `Sym`s)."""
    rows = (y.numel // p if p else 0) if y.is_static else y.shape[0] * y.shape[1]
    with b.loop(0, rows, parallel=True, hint="q") as q:
        v: Operand = const(0, y.dtype)
        if bias is not None:
            v = b.load(bias, b.op("rem", q, i64(m)) if not is_static(rows) or rows > m else q)
        with b.loop(0, p, hint="p") as i:
            b.store(y, b.iadd(b.imul(q, p), i), v)


def for_each_block(b: Builder, n: Size, g: int, fn: Callable[[Builder, Operand, Operand], None]
                   ) -> None:
    """Call fn(b, image, group) for every (image, group): a few as top-level statements (the
    code generator splits a big top-level Matmul over threads), more (or a run-time number
    of images) as one parallel loop."""
    if is_static(n) and n * g <= 4:
        for i in range(n):
            for j in range(g):
                fn(b, i64(i), i64(j))
        return
    with b.loop(0, n * g, parallel=True, hint="q") as q:
        if g == 1:
            fn(b, q, i64(0))
        else:
            fn(b, b.op("div", q, i64(g)), b.op("rem", q, i64(g)))
