"""Building loop IR: one helper for every loop nest (elementwise, broadcast, reduction).

`Builder` appends statements to the current body; `with b.loop(0, n) as i:` opens a loop and
routes the statements emitted inside it into the loop's body. Integer index arithmetic on
constants folds immediately, so indexes stay short in the printed IR.

`elementwise(b, out, ins, fn)` is the nest behind every elementwise/broadcast kernel. Algorithm:
1) give each input its broadcast strides against the output shape (0 on broadcast dims);
2) coalesce adjacent dims where every operand's stride of the outer dim equals inner stride times
   inner size (so contiguous operands collapse to one flat loop the vectorizer likes);
3) open one loop per remaining dim, compute each operand's flat index as sum(idx*stride),
   load (or use the scalar constant of a one-element const buffer), call `fn` for the result,
   and store it.

Sizes may be symbolic (`Sym`, in a program compiled for every size of some dims): loop bounds,
strides and offsets then become `SymVal` operands, and index arithmetic on them folds into one
symbolic expression (`SymVal(S*384)`, not a run-time multiply). Broadcasting a symbolic dim
against another size records the assumption that they are equal (`ir.symbolic`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from onnxjit.ir.loops import (
    Buffer,
    Check,
    Const,
    Load,
    Loop,
    Op,
    Operand,
    Size,
    Stmt,
    Store,
    SymVal,
    Var,
    i64,
    size_operand,
)
from onnxjit.ir.loops import result_dtype as _result_dtype
from onnxjit.ir.symbolic import assume_equal
from onnxjit.ir.types import DType, Sym


class Builder:
    """Appends loop-IR statements; see the module docstring."""

    def __init__(self) -> None:
        self.body: list[Stmt] = []
        self._stack: list[list[Stmt]] = [self.body]
        #: loops opened now are `rolled` (`keep_rolled`)
        self._rolled = False

    # statements ---------------------------------------------------------------------------
    def emit(self, stmt: Stmt) -> None:
        self._stack[-1].append(stmt)

    def op(self, op: str, *args: Operand, dtype: DType | None = None, hint: str = "") -> Var:
        dst = Var(_result_dtype(op, args, dtype), hint)
        self.emit(Op(dst, op, tuple(args)))
        return dst

    def assign(self, dst: Var, op: str, *args: Operand) -> Var:
        """Re-assign an existing variable (accumulators)."""
        self.emit(Op(dst, op, tuple(args)))
        return dst

    def var(self, init: Operand, hint: str = "acc") -> Var:
        """A fresh mutable variable initialised to `init`."""
        dst = Var(init.dtype, hint)
        self.emit(Op(dst, "copy", (init,)))
        return dst

    def load(self, buf: Buffer, index: Operand, hint: str = "") -> Var:
        dst = Var(buf.dtype, hint)
        self.emit(Load(dst, buf, index))
        return dst

    def store(self, buf: Buffer, index: Operand, value: Operand) -> None:
        self.emit(Store(buf, index, value))

    def check(self, cond: Operand, message: str) -> None:
        """Stop the call with InputError(message) unless `cond` holds."""
        self.emit(Check(cond, message))

    def cast(self, x: Operand, dtype: DType) -> Operand:
        if x.dtype == dtype:
            return x
        if isinstance(x, Const):
            return const(x.value, dtype)
        return self.op("cast", x, dtype=dtype)

    @contextlib.contextmanager
    def loop(self, start: Operand | Size, stop: Operand | Size, step: int = 1,
             parallel: bool = False, hint: str = "i", rolled: bool = False,
             few: bool = False, fold: bool = False) -> Iterator[Var]:
        """A Loop (see `ir.loops`); yields its index variable."""
        var = Var(DType.INT64, hint)
        start = size_operand(start) if isinstance(start, (int, Sym)) else start
        stop = size_operand(stop) if isinstance(stop, (int, Sym)) else stop
        loop = Loop(var, start, stop, step, [], parallel, rolled or self._rolled, few, fold)
        self.emit(loop)
        self._stack.append(loop.body)
        try:
            yield var
        finally:
            self._stack.pop()

    @contextlib.contextmanager
    def keep_rolled(self, on: bool = True) -> Iterator[None]:
        """Every loop opened inside (by the caller or a helper it calls) is `rolled`."""
        saved, self._rolled = self._rolled, self._rolled or on
        try:
            yield
        finally:
            self._rolled = saved

    @contextlib.contextmanager
    def nest(self, shape: Sequence[Size], parallel_outer: bool = False) -> Iterator[list[Var]]:
        """Loops over every dim of `shape` (outermost first); yields the index variables."""
        with contextlib.ExitStack() as stack:
            idx = [stack.enter_context(self.loop(0, n, parallel=parallel_outer and k == 0,
                                                 hint=f"i{k}"))
                   for k, n in enumerate(shape)]
            yield idx

    # index arithmetic that folds constants ---------------------------------------------------
    def iadd(self, a: Operand, b: Operand) -> Operand:
        if isinstance(a, Const) and isinstance(b, Const):
            return i64(a.value + b.value)
        if isinstance(a, Const) and a.value == 0:
            return b
        if isinstance(b, Const) and b.value == 0:
            return a
        if _sized(a) and _sized(b):  # both fixed for the call: one symbolic expression
            return size_operand(_size(a) + _size(b))
        return self.op("add", a, b)

    def imul(self, a: Operand, c: Size) -> Operand:
        if isinstance(c, Sym):
            if _sized(a):
                return size_operand(_size(a) * c)
            return self.op("mul", a, SymVal(c))
        if isinstance(a, Const):
            return i64(a.value * c)
        if c == 0:
            return i64(0)
        if c == 1:
            return a
        if isinstance(a, SymVal):
            return size_operand(a.expr * c)
        return self.op("mul", a, i64(c))

    def linear(self, idx: Sequence[Operand], strides: Sequence[Size]) -> Operand:
        """sum(idx[k] * strides[k]) with constant folding."""
        out: Operand = i64(0)
        for i, s in zip(idx, strides):
            out = self.iadd(out, self.imul(i, s))
        return out


def const(value: int | float | bool, dtype: DType) -> Const:
    """A constant of `dtype`, its Python value normalised (bool/int/float)."""
    if dtype == DType.BOOL:
        return Const(bool(value), dtype)
    if dtype.is_float:
        return Const(float(value), dtype)
    return Const(int(value), dtype)


def _sized(x: Operand) -> bool:
    return isinstance(x, SymVal) or isinstance(x, Const) and x.dtype == DType.INT64


def _size(x: Operand) -> Size:
    return x.expr if isinstance(x, SymVal) else int(x.value)  # type: ignore[union-attr]


def row_major_strides(shape: Sequence[Size]) -> list[Size]:
    strides: list[Size] = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    return strides


def broadcast_strides(in_shape: Sequence[Size], out_shape: Sequence[Size]) -> list[Size]:
    """Strides of an input read at the output's indexes under numpy broadcasting. A symbolic
    dim read against another size is assumed equal to it (checked when a shape is bound)."""
    pad = len(out_shape) - len(in_shape)
    assert pad >= 0, (in_shape, out_shape)
    full = [1] * pad + list(in_shape)
    strides = row_major_strides(full)
    out: list[Size] = []
    for k in range(len(full)):
        if full[k] == 1 and out_shape[k] != 1:
            out.append(0)
            continue
        if full[k] != out_shape[k]:
            assume_equal(full[k], out_shape[k], "a broadcast operand's dim")
        out.append(strides[k])
    return out


def coalesce(shape: Sequence[Size], strides: Sequence[Sequence[Size]]
             ) -> tuple[list[Size], list[list[Size]]]:
    """Merge adjacent dims that every operand walks contiguously (see module docstring)."""
    dims = [k for k, n in enumerate(shape) if n != 1] or []
    out_shape: list[Size] = []
    out_strides: list[list[Size]] = [[] for _ in strides]
    for k in dims:
        if out_shape and all(st[k] * shape[k] == os_[-1] for st, os_ in zip(strides, out_strides)):
            out_shape[-1] *= shape[k]
            for st, os_ in zip(strides, out_strides):
                os_[-1] = st[k]
        else:
            out_shape.append(shape[k])
            for st, os_ in zip(strides, out_strides):
                os_.append(st[k])
    return out_shape, out_strides


ScalarFn = Callable[[Builder, list[Operand]], "Operand | list[Operand]"]


def elementwise(b: Builder, out: Buffer | Sequence[Buffer], ins: Sequence[Buffer], fn: ScalarFn,
                parallel: bool = True) -> None:
    """Emit the loop nest computing `out[i] = fn(ins...[i])` with numpy broadcasting.

    `out` may be several buffers of one shape; `fn` then returns one operand per output.
    """
    outs = [out] if isinstance(out, Buffer) else list(out)
    shape = list(outs[0].shape)
    if outs[0].numel == 0:
        return
    own = row_major_strides(shape)
    strides = [own] + [broadcast_strides(x.shape, shape) for x in ins]
    cshape, cstrides = coalesce(shape, strides)
    with b.nest(cshape, parallel_outer=parallel) as idx:
        args: list[Operand] = []
        for buf, st in zip(ins, cstrides[1:]):
            if buf.kind == "const" and buf.numel == 1 and buf.data is not None:
                args.append(const(buf.data.reshape(-1)[0].item(), buf.dtype))
            else:
                args.append(b.load(buf, b.linear(idx, st)))
        results = fn(b, args)
        if not isinstance(results, list):
            results = [results]
        index = b.linear(idx, cstrides[0])
        for o, r in zip(outs, results):
            b.store(o, index, b.cast(r, o.dtype))
