"""Value ranges of a kernel's float variables, so code generation can specialise math.

`tanh`, `erf` and `sigmoid` cost a range reduction, an `expm1` and often a division over their
whole domain, but on a small interval each is a short odd polynomial. A fused elementwise chain
often feeds one bounded function into another (erf(tanh(x)), sigmoid(erf(...)), GELU-like
forms), so knowing the interval of an argument lets `codegen.mathlib` pick the cheap form.

Algorithm: one forward walk over the kernel's statements in program order (into loop bodies).
A variable assigned more than once anywhere in the kernel (an accumulator, a loop counter) or
defined by a `Load` is unknown, (-inf, inf); a variable defined once by an `Op` gets the
interval of the op's result computed from its operands' intervals (a `Const` is a point):
monotone functions map the end points (tanh, erf, sigmoid, exp), add/sub/mul/neg/abs/min/max
use interval arithmetic, select joins its two branches, copy and float casts keep the interval.
Intervals bound the non-NaN values only: a NaN flows through the specialised polynomials as a
NaN, exactly as through the general forms. Anything not covered is unknown, so the analysis
is conservative: a bound it reports always holds mathematically (computed results may exceed
it by an ulp of rounding; the specialised forms stay accurate a little beyond their bound).
"""

from __future__ import annotations

import math

from onnxjit.ir.loops import Const, Load, Loop, Op, Stmt, Var, walk

Interval = tuple[float, float]
UNKNOWN: Interval = (-math.inf, math.inf)


def _sigmoid(v: float) -> float:
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


def _exp(v: float) -> float:
    try:
        return math.exp(v)
    except OverflowError:
        return math.inf


_MONOTONE = {"tanh": math.tanh, "erf": math.erf, "sigmoid": _sigmoid, "exp": _exp}


def _mul(a: Interval, b: Interval) -> Interval:
    prods = [x * y for x in a for y in b]
    if any(math.isnan(p) for p in prods):  # 0 * inf: no useful bound
        return UNKNOWN
    return min(prods), max(prods)


def _abs(a: Interval) -> Interval:
    lo, hi = a
    if lo >= 0:
        return a
    if hi <= 0:
        return -hi, -lo
    return 0.0, max(-lo, hi)


def _result(op: str, args: list[Interval]) -> Interval:
    if op in _MONOTONE:
        f = _MONOTONE[op]
        return f(args[0][0]), f(args[0][1])
    if op in ("copy", "cast"):
        return args[0]
    if op == "neg":
        return -args[0][1], -args[0][0]
    if op == "abs":
        return _abs(args[0])
    if op == "add":
        return args[0][0] + args[1][0], args[0][1] + args[1][1]
    if op == "sub":
        return args[0][0] - args[1][1], args[0][1] - args[1][0]
    if op == "mul":
        return _mul(args[0], args[1])
    if op == "min":
        return min(args[0][0], args[1][0]), min(args[0][1], args[1][1])
    if op == "max":
        return max(args[0][0], args[1][0]), max(args[0][1], args[1][1])
    if op == "select":
        return min(args[1][0], args[2][0]), max(args[1][1], args[2][1])
    return UNKNOWN


def value_ranges(body: list[Stmt]) -> dict[Var, Interval]:
    """Interval of every float variable of `body` with a known bound (others are absent)."""
    defs: dict[Var, int] = {}
    for s in walk(body):
        if isinstance(s, (Op, Load)):
            defs[s.dst] = defs.get(s.dst, 0) + (1 if isinstance(s, Op) else 2)
        elif isinstance(s, Loop):
            defs[s.var] = 2
    ranges: dict[Var, Interval] = {}

    def of(a: object) -> Interval:
        if isinstance(a, Const):
            v = float(a.value)
            return UNKNOWN if math.isnan(v) else (v, v)
        return ranges.get(a, UNKNOWN)  # type: ignore[arg-type]

    for s in walk(body):
        if isinstance(s, Op) and defs.get(s.dst) == 1 and s.dst.dtype.is_float:
            if s.op == "cast" and not s.args[0].dtype.is_float:
                continue
            lo, hi = _result(s.op, [of(a) for a in s.args])
            if not (math.isnan(lo) or math.isnan(hi)) and (lo, hi) != UNKNOWN:
                ranges[s.dst] = (lo, hi)
    return ranges


def magnitude(ranges: dict[Var, Interval], a: object) -> float:
    """The bound of |a| (inf when unknown) for an operand `a`."""
    if isinstance(a, Const):
        v = abs(float(a.value))
        return math.inf if math.isnan(v) else v
    lo, hi = ranges.get(a, UNKNOWN)  # type: ignore[arg-type]
    return max(-lo, hi)
