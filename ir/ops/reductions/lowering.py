"""Loop nests of the reductions (the lowering half of `reductions.semantics`), and `Lanes`, the
multi-accumulator fold the Softmax family shares.

Each reduction is `combine` (add/mul/max/min) over `elem(x)` (x, |x| or x*x) from the combining
op's identity, then `final` (divide by the count, sqrt, log). `emit_reduce` emits one loop nest:
1) drop size-1 dims and merge adjacent dims that are both kept or both reduced (the input is
   row-major, so a merged group is one strided dim); the output's flat index is row-major over
   the kept groups whatever `keepdims` says;
2) if the innermost group is reduced (or the op needs two passes, ReduceLogSumExp): loops over
   the kept groups (outermost parallel), accumulators, loops over the reduced groups (the
   innermost walks memory contiguously, folded by `Lanes`), then store `final(acc)`;
3) otherwise (reducing outer dims): loops over the leading kept groups (outermost parallel),
   inside them the output block is set to the identity, then the remaining groups run in memory
   order accumulating straight into the output buffer (the innermost loop is a contiguous kept
   dim, so it vectorizes), then `final` runs over the block; when no kept dim lies outside the
   first reduced one (a (rows, cols) view reduced over rows) the parallel loop runs over chunks
   of columns instead, so the work still spreads over threads. float16 inputs always take
   step 2: their accumulators are f32 (`narrow.accumulator`), which the output cannot hold.

`Lanes`: without fast-math a floating-point fold is one serial dependency chain and does not
vectorize. Keeping L independent partial accumulators (element j goes to lane j % L, the tail
to lane 0) and combining them pairwise at the end gives the vectorizer L independent chains
(an L-wide vector accumulator; code generation keeps the fold's loop rolled so the
vectorizer sees one body, `llvmgen.KEEP_FOLDS`). The summation order changes as numpy's
pairwise sum does. Products keep the serial order (both references multiply in order).
The combine "fmax" is the ordered maximum `acc > v ? acc : v` (one `maxps`): a NaN is dropped,
not propagated (a NaN accumulator is replaced by the next value), for folds whose result is
NaN anyway when a NaN is present (a softmax's row max: the NaN then reaches the sum). "max"
propagates NaN as ONNX's Max and numpy do, at about four instructions a vector instead of one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from onnxjit.ir.loop_builder import Builder, const, row_major_strides
from onnxjit.ir.loops import Buffer, Const, Operand, Size, i64, size_operand
from onnxjit.ir.narrow import accumulator
from onnxjit.ir.types import DType, Sym

D = DType


@dataclass(frozen=True)
class Kind:
    """How one reduction op computes: `combine` over `elem(x)` from its identity, then
    `final` ("mean", "sqrt", "log" or "" for none); `lse` marks ReduceLogSumExp."""

    combine: str
    elem: str = ""  # "" | "abs" | "square"
    final: str = ""
    lse: bool = False


KINDS: dict[str, Kind] = {
    "ReduceSum": Kind("add"),
    "ReduceMean": Kind("add", final="mean"),
    "ReduceMax": Kind("max"),
    "ReduceMin": Kind("min"),
    "ReduceProd": Kind("mul"),
    "ReduceL1": Kind("add", "abs"),
    "ReduceL2": Kind("add", "square", "sqrt"),
    "ReduceSumSquare": Kind("add", "square"),
    "ReduceLogSum": Kind("add", final="log"),
    "ReduceLogSumExp": Kind("add", final="log", lse=True),
}


def identity(combine: str, dtype: DType) -> int | float | bool:
    """The value an empty reduction gives before `final`."""
    if combine in ("add", "mul"):
        return 0 if combine == "add" else 1
    hi = combine == "min"
    if dtype == D.BOOL:
        return hi
    if dtype.is_float:
        return math.inf if hi else -math.inf
    info = np.iinfo(dtype.numpy)
    return int(info.max if hi else info.min)



# --------------------------------------------------------------------------- Lanes

#: Bytes of partial accumulators per fold: one 512-bit vector.
LANE_BYTES = 64
#: A float sum of NUMPY_BLOCK or fewer elements (8 at least) that asks for it (`numpy_order`:
#: a reduction's one contiguous stretch) adds in numpy's pairwise order: 8 lanes over blocks of
#: 8, ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the rest one by one. A sum's last
#: bit decides what Mod, Floor or a comparison of it gives: 12 squares summed in order differed
#: there from onnx.reference's (and onnxruntime's, which agreed; fuzz seeds 9562077, 9890679).
NUMPY_SHORT_SUMS, NUMPY_BLOCK = True, 128
#: A long float sum or ordered maximum ("fmax") is one accumulator in a `fold` loop, which
#: LLVM's loop vectorizer splits into vector partial accumulators (`codegen.folds`); False:
#: LANE_BYTES of scalar lanes, which the SLP vectorizer joined into 2-wide pieces and
#: shuffles. Measured: see `codegen.folds`.
FOLD_LOOPS = True
#: A float sum of run-time length whose terms may cancel runs in order when the call's length
#: is under 8 (`Lanes.run`; the exps of a softmax keep the one vectorized fold).
SHORT_IN_ORDER = True


class Lanes:
    """Partial accumulators of one fold (see module docstring). Create before the loops that
    feed it, call `run` for each contiguous stretch, read `result()` after."""

    def __init__(self, b: Builder, init: Const, combine: str, n: Size, hint: str = "acc",
                 numpy_order: bool = False, terms_signed: bool = True):
        self.b = b
        self.combine = combine
        #: the terms may cancel (False: a softmax's exps, whose order moves only last bits)
        self.in_order_short = terms_signed and SHORT_IN_ORDER
        self.tail: list[Operand] | None = None  # `numpy_order`: the rest after the blocks
        if numpy_order and NUMPY_SHORT_SUMS and combine == "add" and init.dtype.is_float \
                and isinstance(n, int) and 8 <= n <= NUMPY_BLOCK:
            self.fold, self.lanes, self.tail = False, 8, []
            self.accs = [b.var(init, hint=hint) for _ in range(8)]
            return
        width = max(1, min(16, LANE_BYTES // init.dtype.itemsize))
        # a symbolic length is taken to be long (the tail loop takes short ones). Products
        # stay one serial chain: onnxruntime and numpy multiply in order and agree bit for
        # bit, which partial products would not (ReduceProd is rare; its speed matters less)
        long = not isinstance(n, int) or n >= 2 * width
        # a long float sum or ordered maximum: one accumulator in a `fold` loop, which the
        # loop vectorizer splits into vector partial accumulators (`codegen.folds`)
        self.fold = FOLD_LOOPS and long and init.dtype.is_float and combine in ("add", "fmax")
        self.lanes = width if long and combine != "mul" and not self.fold else 1
        self.accs = [b.var(init, hint=hint) for _ in range(self.lanes)]

    def run(self, n: Size, value_at: Callable[[Operand], Operand]) -> None:
        """Fold value_at(j) for j in [0, n) (value_at may also emit stores)."""
        b, accs, lanes = self.b, self.accs, self.lanes
        if lanes == 1 and self.fold and self.combine == "add" and self.in_order_short \
                and not isinstance(n, int):
            # a run-time length: under 8 elements in order (numpy's and onnxruntime's order
            # there), from 8 on the vectorized fold (whose masked tail summed 5 elements as a
            # tree: -1e30 + 1e30 cancelled after the small ones, fuzz seed 10050802)
            nv = size_operand(n) if isinstance(n, Sym) else n
            short = b.op("lt", nv, i64(8))
            with b.loop(0, b.op("select", short, nv, i64(0)), hint="js") as j:
                self._fold(accs[0], value_at(j))
            with b.loop(0, b.op("select", short, i64(0), nv), hint="j", fold=True) as j:
                self._fold(accs[0], value_at(j))
            return
        if lanes == 1:
            with b.loop(0, n, hint="j", fold=self.fold) as j:
                self._fold(accs[0], value_at(j))
            return
        q = n // lanes
        with b.loop(0, q, hint="jq") as t:
            j0 = b.imul(t, lanes)
            for k in range(lanes):
                self._fold(accs[k], value_at(b.iadd(j0, i64(k))))
        if self.tail is not None:  # numpy's rest: added one by one after the blocks' tree
            self.tail += [value_at(i64(j)) for j in range(q * lanes, n)]  # type: ignore[arg-type]
            return
        if not isinstance(n, int) or q * lanes < n:
            with b.loop(q * lanes, n, hint="j") as j:
                self._fold(accs[0], value_at(j))

    def _fold(self, acc: Operand, v: Operand) -> None:
        if self.combine == "fmax":
            self.b.assign(acc, "select", self.b.op("gt", acc, v), acc, v)
        else:
            self.b.assign(acc, self.combine, acc, v)

    def _pair(self, x: Operand, y: Operand) -> Operand:
        if self.combine == "fmax":
            return self.b.op("select", self.b.op("gt", x, y), x, y)
        return self.b.op(self.combine, x, y)

    def result(self) -> Operand:
        # Combine by halving (k with k + L/2), the order of a vector's horizontal reduction:
        # LLVM's SLP vectorizer then keeps the L accumulators as one L-wide vector. Adjacent
        # pairs (k with k + 1) were seen to become 4-wide pieces joined by shuffles, several
        # times slower (InstanceNorm: 1.5x -> 0.9x onnxruntime's time).
        vals: list[Operand] = list(self.accs)
        if self.tail is not None:  # numpy's ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
            while len(vals) > 1:
                vals = [self._pair(vals[k], vals[k + 1]) for k in range(0, len(vals), 2)]
            total = vals[0]
            for v in self.tail:
                total = self._pair(total, v)
            return total
        while len(vals) > 1:
            h = len(vals) // 2
            rest = [vals[-1]] if len(vals) % 2 else []
            vals = [self._pair(vals[k], vals[k + h]) for k in range(h)] + rest
        return vals[0]


# --------------------------------------------------------------------------- reductions

def _elem(b: Builder, kind: Kind, x: Operand) -> Operand:
    if kind.elem == "abs":
        return b.op("abs", x)
    if kind.elem == "square":
        return b.op("mul", x, x)
    return x


def size_value(b: Builder, n: Size, dtype: D) -> Operand:
    """The size `n` as a value of `dtype` (a constant, or a symbolic size converted)."""
    return const(n, dtype) if isinstance(n, int) else b.cast(size_operand(n), dtype)


def _final(b: Builder, kind: Kind, acc: Operand, count: Size) -> Operand:
    if kind.final == "mean":
        return b.op("div", acc, size_value(b, count, acc.dtype))
    if kind.final in ("sqrt", "log"):
        if acc.dtype.is_float:
            return b.op(kind.final, acc)
        return b.cast(b.op(kind.final, b.cast(acc, D.DOUBLE)), acc.dtype)
    return acc


def groups(shape: Sequence[int], axes: Sequence[int]) -> list[tuple[int, int, bool]]:
    """Merged dims as (size, input stride, reduced) (step 1 of the module docstring)."""
    strides = row_major_strides(shape)
    out: list[list] = []
    for k, n in enumerate(shape):
        if n == 1:
            continue
        red = k in axes
        if out and out[-1][2] == red and out[-1][1] == strides[k] * n:
            out[-1][0] *= n
            out[-1][1] = strides[k]
        else:
            out.append([n, strides[k], red])
    return [(n, s, r) for n, s, r in out]


def emit_reduce(b: Builder, name: str, x: Buffer, y: Buffer, axes: Sequence[int],
                parallel: bool = True) -> None:
    """Emit the loop nest of reduction `name` of x over normalized `axes` into y."""
    kind = KINDS[name]
    if y.numel == 0:
        return
    g = groups(x.shape, axes)
    kept = [k for k, (_, _, r) in enumerate(g) if not r]
    out_strides = dict(zip(kept, row_major_strides([g[k][0] for k in kept])))
    count = math.prod(x.shape[a] for a in axes)
    # A float16 fold accumulates in f32 registers: it cannot accumulate in the f16 output.
    if kind.lse or accumulator(x.dtype) != x.dtype or not g or g[-1][2] \
            or not any(r for _, _, r in g):
        _register_acc(b, kind, x, y, g, out_strides, count, parallel)
    else:
        _into_output(b, kind, x, y, g, out_strides, count, parallel)


def _register_acc(b: Builder, kind: Kind, x: Buffer, y: Buffer, g: list, out_strides: dict,
                  count: int, parallel: bool) -> None:
    kept = [k for k, (_, _, r) in enumerate(g) if not r]
    red = [k for k, (_, _, r) in enumerate(g) if r]
    # float16 folds accumulate in f32 (`narrow.accumulator`), and like onnxruntime take the
    # element transform (|x|, x*x: 300^2 overflows f16) and the final step (mean, sqrt, log)
    # in f32 too, rounding once at the end.
    wide = D.DOUBLE if kind.lse and not x.dtype.is_float else accumulator(x.dtype)
    # The innermost reduced group is folded by Lanes; any outer reduced groups loop around it.
    inner_n, inner_s = (g[red[-1]][0], g[red[-1]][1]) if red else (1, 0)
    outer_red = red[:-1]
    with b.nest([g[k][0] for k in kept], parallel_outer=parallel) as kidx:
        base = b.linear(kidx, [g[k][1] for k in kept])
        out = b.linear(kidx, [out_strides[k] for k in kept])

        def fold(init: float, combine: str, fn: Callable[[Operand], Operand],
                 elem_first: bool = False) -> Operand:
            lanes = Lanes(b, const(init, wide), combine, inner_n,
                          numpy_order=not outer_red and inner_s == 1)
            with b.nest([g[k][0] for k in outer_red]) as ridx:
                row = b.iadd(base, b.linear(ridx, [g[k][1] for k in outer_red]))

                def value(j: Operand) -> Operand:
                    v = b.load(x, b.iadd(row, b.imul(j, inner_s)))
                    return b.cast(fn(v), wide) if elem_first else fn(b.cast(v, wide))

                lanes.run(inner_n, value)
            return lanes.result()

        if kind.lse:
            m = fold(-math.inf, "max", lambda v: v)
            # Shift by a finite max only: an all -inf (or empty) row gives log(0) = -inf and
            # an +inf gives +inf, as the unshifted formula does.
            finite = b.op("eq", b.op("sub", m, m), const(0, wide))
            shift = b.op("select", finite, m, const(0, wide))
            s = fold(0, "add", lambda v: b.op("exp", b.op("sub", v, shift)))
            r = b.op("add", b.op("log", s), shift)
        else:
            acc = fold(identity(kind.combine, wide), kind.combine,
                       lambda v: _elem(b, kind, v), elem_first=wide == x.dtype)
            r = _final(b, kind, acc, count)
        b.store(y, out, b.cast(r, y.dtype))


def _into_output(b: Builder, kind: Kind, x: Buffer, y: Buffer, g: list, out_strides: dict,
                 count: int, parallel: bool) -> None:
    p = next(k for k, (_, _, r) in enumerate(g) if r)
    if p == 0 and len(g) == 2:
        _columns(b, kind, x, y, g[0][0], g[1][0], count, parallel)
        return
    block = math.prod(n for n, _, r in g[p:] if not r)
    init = const(identity(kind.combine, y.dtype), y.dtype)
    with b.nest([n for n, _, _ in g[:p]], parallel_outer=parallel) as oidx:
        ibase = b.linear(oidx, [s for _, s, _ in g[:p]])
        obase = b.linear(oidx, [out_strides[k] for k in range(p)])
        with b.loop(0, block, hint="t") as t:
            b.store(y, b.iadd(obase, t), init)
        inner = list(range(p, len(g)))
        with b.nest([g[k][0] for k in inner]) as idx:
            src = b.iadd(ibase, b.linear(idx, [g[k][1] for k in inner]))
            dst = b.iadd(obase, b.linear([i for i, k in zip(idx, inner) if not g[k][2]],
                                         [out_strides[k] for k in inner if not g[k][2]]))
            v = _elem(b, kind, b.load(x, src))
            b.store(y, dst, b.op(kind.combine, b.load(y, dst), v))
        if kind.final:
            with b.loop(0, block, hint="t") as t:
                at = b.iadd(obase, t)
                b.store(y, at, b.cast(_final(b, kind, b.load(y, at), count), y.dtype))


#: Parallel tasks a (rows, cols) column reduction is split into (at most), and the smallest
#: slice of columns one task gets.
TASKS, MIN_CHUNK = 64, 64


def _columns(b: Builder, kind: Kind, x: Buffer, y: Buffer, rows: int, cols: int, count: int,
             parallel: bool) -> None:
    """y[c] = combine over r of x[r, c]: no kept dim is outside the reduced one, so the
    parallel loop runs over chunks of columns (each task owns its slice of y)."""
    init = const(identity(kind.combine, y.dtype), y.dtype)
    chunk = max(MIN_CHUNK, -(-cols // TASKS)) if isinstance(cols, int) else MIN_CHUNK
    nchunks = -(-cols // chunk) if isinstance(cols, int) else (cols + chunk - 1) // chunk
    with b.loop(0, nchunks, parallel=parallel, hint="c") as c:
        lo = b.imul(c, chunk)
        hi = b.op("min", b.iadd(lo, i64(chunk)), size_operand(cols))
        with b.loop(lo, hi, hint="t") as t:
            b.store(y, t, init)
        with b.loop(0, rows, hint="r") as r:
            row = b.imul(r, cols)
            with b.loop(lo, hi, hint="t") as t:
                v = _elem(b, kind, b.load(x, b.iadd(row, t)))
                b.store(y, t, b.op(kind.combine, b.load(y, t), v))
        if kind.final:
            with b.loop(lo, hi, hint="t") as t:
                b.store(y, t, b.cast(_final(b, kind, b.load(y, t), count), y.dtype))
