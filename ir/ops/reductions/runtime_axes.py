"""Reductions whose axes input is only known at run time.

The generated code is specialised to concrete shapes, so the output shape must be known (the
model declares it, or a later pass found it); the axes values are then checked at run time
against what that shape allows. Algorithm (`lower_runtime_axes`):
1) an empty axes input (static length 0) is a static case: reduce all, or the noop;
2) with keepdims, the shapes fix the reduced set: a dim of the input that is not 1 is reduced
   when the output has 1 there and kept when it has the input's size (size-1 dims do not
   matter); one Check verifies that every runtime axis is in range, names no kept dim, and that
   every reduced dim is named;
3) without keepdims, every set of L axes (L = the axes input's static length) whose removal
   gives the output shape is a candidate; candidates that differ only in size-1 dims compute
   the same thing and are grouped. A candidate matches when each of its axes appears among
   the runtime values (L values covering L axes: exactly that set). With several groups each
   nest runs under a loop of 0 or 1 iterations (the match flag), and a Check demands a match.
A mismatch stops the call with InputError naming the node: never a silently wrong result.
"""

from __future__ import annotations

import itertools

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.elementwise.arithmetic import int_attr
from onnxjit.ir.ops.reductions.axes import norm_axes
from onnxjit.ir.ops.reductions.lowering import emit_reduce
from onnxjit.ir.types import DType

#: Most candidate axis sets tried for a keepdims=0 reduction (combinations of rank over L).
MAX_CANDIDATES = 256


def _any(b: Builder, flags: list[Operand]) -> Operand:
    out: Operand = const(False, DType.BOOL)
    for f in flags:
        out = f if out == const(False, DType.BOOL) else b.op("or", out, f)
    return out


def _all(b: Builder, flags: list[Operand]) -> Operand:
    out: Operand = const(True, DType.BOOL)
    for f in flags:
        out = f if out == const(True, DType.BOOL) else b.op("and", out, f)
    return out


def _candidates(xs: tuple, ys: tuple, n: int) -> list[tuple[int, ...]]:
    combos = list(itertools.islice(itertools.combinations(range(len(xs)), n),
                                   MAX_CANDIDATES + 1))
    if len(combos) > MAX_CANDIDATES:
        raise UnsupportedError(f"too many ways to reduce {n} of {len(xs)} axes at run time")
    return [c for c in combos
            if tuple(d for k, d in enumerate(xs) if k not in c) == ys]


def lower_runtime_axes(ctx: LowerContext, node: Node, x: Buffer, y: Buffer) -> None:
    """Lower a reduction whose axes input is not a constant (see module docstring)."""
    keep = int_attr(node, "keepdims", 1) != 0
    axes_buf = ctx.buf(node.inputs[1])
    xs, ys, rank = tuple(x.shape), tuple(y.shape), len(x.shape)
    n = axes_buf.numel
    b = Builder()
    where = f"input shape {list(xs)}, output shape {list(ys)}"
    if n == 0:
        emit_reduce(b, node.op, x, y, norm_axes(node, (), rank))
    else:
        vals = []
        for k in range(n):
            v = b.load(axes_buf, i64(k), hint="axis")
            v = b.op("select", b.op("lt", v, i64(0)), b.op("add", v, i64(rank)), v)
            b.check(b.op("and", b.op("ge", v, i64(0)), b.op("lt", v, i64(rank))),
                    f"{node.describe()}: axes value out of range for rank {rank}")
            vals.append(v)

        def named(d: int) -> Operand:
            return _any(b, [b.op("eq", v, i64(d)) for v in vals])

        mismatch = (f"{node.describe()}: the axes values do not give the output shape "
                    f"compiled for ({where})")
        if keep:
            if len(ys) != rank or any(yd not in (1, xd) for xd, yd in zip(xs, ys)):
                raise ModelError(f"output shape does not come from a reduction ({where})",
                                 where=node)
            red = [d for d in range(rank) if xs[d] != 1 and ys[d] == 1]
            kept = [d for d in range(rank) if xs[d] != 1 and ys[d] == xs[d]]
            ok = [named(d) for d in red]
            ok += [b.op("ne", v, i64(d)) for v in vals for d in kept]
            b.check(_all(b, ok), mismatch)
            emit_reduce(b, node.op, x, y, red)
        else:
            groups: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
            for c in _candidates(xs, ys, n):
                groups.setdefault(tuple(d for d in c if xs[d] != 1), []).append(c)
            if not groups:
                raise ModelError(f"output shape does not come from reducing {n} axes "
                                 f"({where})", where=node)
            flags = {g: _any(b, [_all(b, [named(d) for d in c]) for c in cs])
                     for g, cs in groups.items()}
            b.check(_any(b, list(flags.values())), mismatch)
            for g, flag in flags.items():
                if len(flags) == 1:
                    emit_reduce(b, node.op, x, y, g)
                else:
                    with b.loop(0, b.cast(flag, DType.INT64), hint="when"):
                        emit_reduce(b, node.op, x, y, g, parallel=False)
    ctx.kernel(node.op.lower(), b.body)
