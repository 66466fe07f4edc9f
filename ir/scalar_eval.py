"""numpy semantics of the loop IR's scalar ops, and constant folding of elementwise ops.

`eval_op(op, args, dtype)` computes one `SCALAR_OPS` operation on numpy arrays (vectorised,
broadcasting like numpy) with exactly the semantics code generation gives it:

- add/sub/mul/neg/abs wrap around for ints; float32 arithmetic stays float32;
- div: floats IEEE; ints truncate toward zero, x/0 -> 0 and INT_MIN/-1 -> INT_MIN (never traps);
- rem: floats C fmod; ints C `%` (sign of the dividend), x%0 -> 0;
- min/max propagate NaN for floats; on bool they are and/or;
- pow: floats `np.power`; ints by repeated squaring with wrap-around, and for a negative
  exponent the truncated value of 1/x**-e (1 for x=1, +-1 for x=-1, 0 otherwise; 0**-e -> 0);
- comparisons are ordered (false when a NaN is involved) except `ne`; isnan;
- cast: float->int saturates (NaN -> 0), ->bool is `x != 0` (NaN -> true), bool->number is 0/1.
- float16/bfloat16 (`NARROW_FLOATS`): operands are widened to float32 (exactly), the op runs in
  float32, and a narrow result is rounded once to its type (`ir/narrow.py`): numpy's per-op
  semantics for float16. Casts from a narrow float widen first; casts to one round as
  `narrow.narrow` says (f64 -> f16 directly, everything -> bf16 through f32).
- cast-only types (float8, float4e2m1, 4-/2-bit ints; `types.CAST_ONLY_DTYPES`): `cast` is
  the only op besides copy/select; it converts through f32 or int8 exactly as
  `narrow.to_cast_only`/`from_cast_only` say (ml_dtypes' non-saturating semantics).

`evaluate_elementwise(opdef, node, inputs)` folds an elementwise node: it runs the node's
`scalar` rule once on a fresh `Builder` with one variable per input, then interprets the emitted
`Op` statements over the (broadcast) input arrays. The rule that codegen compiles is the rule that
folding evaluates: one source of truth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from onnxjit.errors import CompileError
from onnxjit.ir.loops import SCALAR_OPS, Const, Op, Operand, Var
from onnxjit.ir.narrow import (
    from_cast_only,
    is_cast_only_array,
    is_narrow_array,
    narrow,
    to_cast_only,
    widen,
)
from onnxjit.ir.types import CAST_ONLY_DTYPES, NARROW_FLOATS, DType

if TYPE_CHECKING:
    from onnxjit.ir.graph import Node
    from onnxjit.ir.opdef import OpDef

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _int_info(dt: np.dtype) -> np.iinfo:
    return np.iinfo(dt)


def _div_int(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    info = _int_info(a.dtype)
    zero = b == 0
    overflow = (a == info.min) & (b == -1)
    safe_b = np.where(zero | overflow, np.ones_like(b), b)
    q = a // safe_b  # floor division; move toward zero when the signs differ and it is inexact
    r = a - q * safe_b
    q = q + ((r != 0) & ((a < 0) != (safe_b < 0))).astype(a.dtype)
    return np.where(zero, np.zeros_like(q), q)


def _rem_int(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    zero = b == 0
    safe_b = np.where(zero | (b == -1), np.ones_like(b), b)  # x % -1 == 0 == x % 1
    r = np.fmod(a, safe_b)  # fmod on ints keeps the dividend's sign, like C
    return np.where(zero, np.zeros_like(r), r)


def _pow_int(a: np.ndarray, e: np.ndarray) -> np.ndarray:
    a, e = np.broadcast_arrays(a, e)
    result = np.ones(a.shape, dtype=a.dtype)
    base = a.copy()
    # Unsigned exponents >= 2**63 must stay positive: square on an unsigned copy.
    n = np.where(e < 0, 0, e).astype(np.uint64)
    while np.any(n > 0):
        odd = (n & 1) == 1
        result = np.where(odd, result * base, result)
        base = base * base
        n = n >> 1
    neg = e < 0
    if np.any(neg):
        inv = np.where(a == 1, 1, np.where(a == -1, np.where((e & 1) == 1, -1, 1), 0))
        result = np.where(neg, inv.astype(a.dtype), result)
    return result


def _cast(x: np.ndarray, dtype: DType) -> np.ndarray:
    target = dtype.numpy
    if x.dtype == target:
        return x.copy()
    if is_cast_only_array(x):
        x = from_cast_only(x)  # exact: f32 or int8
        if x.dtype == target:
            return x
    if dtype in CAST_ONLY_DTYPES:
        return to_cast_only(x, dtype)
    if dtype in NARROW_FLOATS:
        return narrow(x != 0 if x.dtype == np.bool_ else x, dtype)
    x = widen(x)
    if x.dtype == target:
        return x
    if dtype == DType.BOOL:
        return x != 0  # NaN != 0 is True, as `fcmp une` gives
    if x.dtype.kind == "f" and dtype.is_int:
        info = _int_info(target)
        y = np.where(np.isnan(x), 0.0, x).astype(np.float64)
        # Saturate like llvm.fptosi.sat; compare in float64 so the bounds are exact enough.
        out = np.clip(np.trunc(y), float(info.min), float(info.max))
        res = out.astype(target)
        res = np.where(y >= float(info.max), info.max, res)
        res = np.where(y <= float(info.min), info.min, res)
        return np.asarray(res, dtype=target)
    return x.astype(target)


def _as_array(x: object, dtype: np.dtype | None = None) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    return np.asarray(x, dtype=dtype)


def eval_op(op: str, args: Sequence[object], dtype: DType | None = None) -> np.ndarray:
    """One scalar op over numpy arrays; `dtype` is the result dtype (needed by `cast`)."""
    a = [_as_array(x) for x in args]
    with np.errstate(all="ignore"):
        if op == "cast" or not any(is_narrow_array(x) for x in a):
            return _eval(op, a, dtype)
        # Narrow floats: compute in float32, round a narrow result once (module docstring).
        first = a[1] if op == "select" else a[0]
        out = _eval(op, [widen(x) for x in a], dtype)
        if SCALAR_OPS[op][1] == "same" and is_narrow_array(first):
            return narrow(out, DType.from_numpy(first.dtype))
        return out


def _eval(op: str, a: list[np.ndarray], dtype: DType | None) -> np.ndarray:
    x = a[0]
    kind = x.dtype.kind
    if op == "copy":
        return x.copy()
    if op == "cast":
        assert dtype is not None, "cast needs a result dtype"
        return _cast(x, dtype)
    if op == "select":
        return np.where(a[0], a[1], a[2]).astype(a[1].dtype)
    if op in ("add", "sub", "mul") and kind == "b":
        fn = {"add": np.logical_or, "sub": np.logical_xor, "mul": np.logical_and}[op]
        return fn(x, a[1])
    if op == "add":
        return np.add(x, a[1])
    if op == "sub":
        return np.subtract(x, a[1])
    if op == "mul":
        return np.multiply(x, a[1])
    if op == "div":
        return np.divide(x, a[1]) if kind == "f" else _div_int(*np.broadcast_arrays(x, a[1]))
    if op == "rem":
        return np.fmod(x, a[1]) if kind == "f" else _rem_int(*np.broadcast_arrays(x, a[1]))
    if op == "min":
        return np.logical_and(x, a[1]) if kind == "b" else np.minimum(x, a[1])
    if op == "max":
        return np.logical_or(x, a[1]) if kind == "b" else np.maximum(x, a[1])
    if op == "pow":
        if kind == "f":
            return np.power(x, a[1].astype(x.dtype))
        return _pow_int(x, a[1].astype(x.dtype))
    if op == "neg":
        return np.negative(x) if kind != "b" else x.copy()
    if op == "abs":
        return np.abs(x)
    if op in _FLOAT_MATH:
        return np.asarray(_FLOAT_MATH[op](x), dtype=x.dtype)
    if op in ("and", "or", "xor"):
        fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
        return fn(x, a[1])
    if op == "not":
        return np.logical_not(x) if kind == "b" else np.invert(x)
    if op in _CMP:
        return _CMP[op](x, a[1])
    if op == "isnan":
        return np.isnan(x) if kind == "f" else np.zeros(x.shape, dtype=bool)
    raise CompileError(f"scalar op '{op}' has no evaluator")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # As codegen computes it: e = exp(-|x|) never overflows, r = 1/(1+e) is sigmoid(|x|), and
    # sigmoid(x) = e*r for negative x, which keeps subnormal results instead of flushing to 0.
    e = np.exp(-np.abs(x))
    r = np.asarray(1.0, x.dtype) / (np.asarray(1.0, x.dtype) + e)
    return np.where(x < 0, e * r, r)


def _in_f64(fn):
    """fn computed in float64 (rounded back by the caller): codegen evaluates sin/cos/tan of
    a float32 in float64 too, so both give the correctly rounded result in practice."""
    return lambda x: fn(x.astype(np.float64))


_FLOAT_MATH = {
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
    "floor": np.floor, "ceil": np.ceil, "sigmoid": _sigmoid, "erf": _erf,
    "sin": _in_f64(np.sin), "cos": _in_f64(np.cos), "tan": _in_f64(np.tan),
}
_CMP = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}


def _const_array(c: Const) -> np.ndarray:
    if c.dtype in CAST_ONLY_DTYPES:
        return to_cast_only(np.asarray(c.value, np.float64), c.dtype)
    if c.dtype in NARROW_FLOATS:
        return narrow(np.asarray(float(c.value), np.float64), c.dtype)
    return np.asarray(c.value, dtype=c.dtype.numpy)


def run_ops(body: Sequence[object], env: dict[Var, np.ndarray]) -> None:
    """Interpret straight-line `Op` statements, updating `env` (Var -> array)."""
    for s in body:
        if not isinstance(s, Op):
            raise CompileError(f"a scalar rule emitted {type(s).__name__}; only Op is allowed")
        vals = [operand_value(x, env) for x in s.args]
        res = eval_op(s.op, vals, s.dst.dtype)
        env[s.dst] = np.asarray(res, dtype=s.dst.dtype.numpy)


def operand_value(x: Operand, env: dict[Var, np.ndarray]) -> np.ndarray:
    if isinstance(x, Const):
        return _const_array(x)
    try:
        return env[x]
    except KeyError:
        raise CompileError(f"variable {x!r} is read before it is assigned") from None


def evaluate_elementwise(opdef: OpDef, node: Node, inputs: Sequence[np.ndarray | None]
                         ) -> list[np.ndarray]:
    """Fold an elementwise node by interpreting its scalar rule over the input arrays."""
    from onnxjit.ir.loop_builder import Builder

    assert opdef.scalar is not None
    b = Builder()
    env: dict[Var, np.ndarray] = {}
    args: list[Operand | None] = []
    arrays = []
    for v, arr in zip(node.inputs, inputs):
        if v is None or arr is None:
            args.append(None)
            continue
        arr = np.asarray(arr)
        dt = DType.from_numpy(arr.dtype)
        var = Var(dt, "x")
        env[var] = arr
        args.append(var)
        arrays.append(arr)
    result = opdef.scalar(b, node, args)  # type: ignore[arg-type]
    run_ops(b.body, env)
    out = operand_value(result, env)
    shape = np.broadcast_shapes(*(a.shape for a in arrays)) if arrays else ()
    out_t = node.outputs[0].dtype
    if out_t is not None and out.dtype != out_t.numpy:
        out = eval_op("cast", [out], out_t)
    # asarray(order="C"), not ascontiguousarray, which turns a 0-d result into shape (1,).
    return [np.asarray(np.broadcast_to(out, shape), order="C")]
