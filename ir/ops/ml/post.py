"""The ONNX-ML post transforms of one row of scores, as loop IR.

`post_row(b, load, store, n, how)` reads score k through `load(k)` (float64 operands) and
writes the transformed value through `store(k, v)`, for k < n:

- NONE: v; LOGISTIC: sigmoid(v);
- SOFTMAX: exp(v - max) / sum(exp(v - max)) (two passes: max, then sum; the exps are
  recomputed in the store pass rather than kept in a scratch row);
- SOFTMAX_ZERO: as SOFTMAX, except that a score within 1e-7 of zero gives v * exp(-max)
  (onnxruntime's rule: zero scores stay near zero), and an all-zero row gives 0.5 everywhere;
- PROBIT: sqrt(2) * erfinv(2v - 1), with onnxruntime's closed-form approximation of erfinv
  (Winitzki: sqrt(sqrt(a^2 - log(1 - y^2) / 0.147) - a), a = 2 / (pi * 0.147) + log(1-y^2)/2).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Operand
from onnxjit.ir.types import DType

F64 = DType.DOUBLE
Load = Callable[[Operand], Operand]
Store = Callable[[Operand, Operand], None]


def _c(v: float) -> Operand:
    return const(v, F64)


def post_row(b: Builder, load: Load, store: Store, n: int, how: str) -> None:
    if how in ("NONE", "LOGISTIC", "PROBIT"):
        with b.loop(0, n, hint="k") as k:
            v = load(k)
            if how == "LOGISTIC":
                v = b.op("sigmoid", v)
            elif how == "PROBIT":
                v = b.op("mul", _c(1.41421356), erfinv(b, b.op("sub", b.op("mul", v, _c(2.0)),
                                                                _c(1.0))))
            store(k, v)
        return
    mx = b.var(_c(-math.inf), hint="max")
    with b.loop(0, n, hint="k") as k:
        b.assign(mx, "max", mx, load(k))
    zero = how == "SOFTMAX_ZERO"
    total = b.var(_c(0.0), hint="sum")
    with b.loop(0, n, hint="k") as k:
        b.assign(total, "add", total, _exp(b, load(k), mx, zero))
    inv = b.op("div", _c(1.0), total)
    with b.loop(0, n, hint="k") as k:
        v = b.op("mul", _exp(b, load(k), mx, zero), inv)
        if zero:
            v = b.op("select", b.op("eq", total, _c(0.0)), _c(0.5), v)
        store(k, v)


def _exp(b: Builder, v: Operand, mx: Operand, zero: bool) -> Operand:
    e = b.op("exp", b.op("sub", v, mx))
    if not zero:
        return e
    small = b.op("le", b.op("abs", v), _c(1e-7))
    return b.op("select", small, b.op("mul", v, b.op("exp", b.op("neg", mx))), e)


def erfinv(b: Builder, x: Operand) -> Operand:
    """onnxruntime's approximation of erf^-1(x) (see the module doc); +-inf at x = +-1."""
    y = b.op("mul", b.op("sub", _c(1.0), x), b.op("add", _c(1.0), x))
    lg = b.op("log", y)
    a = b.op("add", _c(2.0 / (math.pi * 0.147)), b.op("mul", _c(0.5), lg))
    inner = b.op("sub", b.op("mul", a, a), b.op("mul", lg, _c(1.0 / 0.147)))
    r = b.op("sqrt", b.op("sub", b.op("sqrt", inner), a))
    return b.op("select", b.op("lt", x, _c(0.0)), b.op("neg", r), r)
