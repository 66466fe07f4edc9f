"""Elementwise arithmetic ops, and the helpers every elementwise op family shares.

Every op here is pure elementwise: an `infer` rule (checks arity, dtypes against the ONNX type
constraint of the node's opset version, attributes; output shape = numpy broadcast of the
inputs, with the legacy `broadcast`/`axis` attributes of opset < 7 handled by
`elementwise.inference.out_shape`) and a `scalar` rule composed from the loop IR's scalar ops. No
`lower`/`evaluate`: fusion, lowering and constant folding all run the scalar rule.

Dtype checks come in two steps (`accept`): a dtype outside the op's type constraint at the
node's version is a ModelError; an accepted dtype the compiler cannot compute (f16, bf16,
strings) is an UnsupportedError naming op, node and dtype (`check_dtype`).

Ops: Add Sub Mul Div Pow Mod Neg Abs Reciprocal Sign Clip Min Max Sum Mean. The sibling families
(elementwise.unary_math, elementwise.trig, elementwise.activation, elementwise.logic,
elementwise.cast) register through `unary`/`binary`. Pow computes in the base type (in f32 for a
narrow base, in the exponent's type if that is a wider float: `_pow_type`); an int base with a float
exponent goes through f64 and is truncated back (exact for int32 and for int64 results below 2**53).
Sum and Mean of f16/bf16 add in f32 and round once. Integer arithmetic wraps; integer Div
truncates toward zero (the scalar `div`); Mod with fmod=0 is
Python's `%` (sign of the divisor), built from the C remainder plus a sign fix-up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Operand
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.elementwise.c_cast import c_float_to_int
from onnxjit.ir.ops.elementwise.inference import (
    check_dtype,
    out_shape,
    present,
    set_sym_arith,
    tensor,
)
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import NARROW_FLOATS, DType, TensorType

D = DType
#: ONNX type-constraint building blocks (sets of element types).
FLOATS = frozenset({D.FLOAT16, D.FLOAT, D.DOUBLE})
BF16 = frozenset({D.BFLOAT16})
SIGNED = frozenset({D.INT8, D.INT16, D.INT32, D.INT64})
UNSIGNED = frozenset({D.UINT8, D.UINT16, D.UINT32, D.UINT64})
INTS = SIGNED | UNSIGNED
WIDE_INTS = frozenset({D.INT32, D.INT64, D.UINT32, D.UINT64})
BOOL = frozenset({D.BOOL})
NUMERIC = FLOATS | BF16 | INTS

#: A type constraint that changes with the opset: ((since_version, allowed), ...), ascending.
Types = Sequence[tuple[int, frozenset]]


def allowed_at(types: Types, version: int) -> frozenset:
    """The element types a constraint accepts at opset `version`."""
    out: frozenset = frozenset()
    for since, allowed in types:
        if since <= version:
            out = allowed
    return out


def accept(node: Node, i: int, types: Types) -> DType:
    """Input i's dtype: ModelError if the op's constraint rejects it, UnsupportedError if the
    compiler cannot compute it."""
    dt = tensor_input(node, i).dtype
    allowed = allowed_at(types, node.version)
    if dt not in allowed:
        names = ", ".join(sorted(d.short for d in allowed))
        raise ModelError(f"input {i} has element type {dt.short}, which {node.op} (opset "
                         f"{node.version}) does not accept (accepted: {names})", where=node)
    return check_dtype(node, i)


def accept_same(node: Node, idx: Sequence[int], types: Types) -> DType:
    """Inputs `idx` are accepted and share one dtype; returns it."""
    dts = [accept(node, i, types) for i in idx]
    for i, dt in zip(idx, dts):
        if dt != dts[0]:
            raise ModelError(f"input {i} is {dt.short} but input {idx[0]} is {dts[0].short}; "
                             "they must match", where=node)
    return dts[0]


def arity(node: Node, lo: int, hi: int | None = None) -> list[int]:
    """Check the number of inputs (trailing omitted ones do not count); the given positions."""
    hi = lo if hi is None else hi
    n = len(node.inputs)
    while n and node.inputs[n - 1] is None:
        n -= 1
    if not lo <= n <= hi:
        want = str(lo) if lo == hi else f"{lo}..{hi}" if hi < 1 << 30 else f"at least {lo}"
        raise ModelError(f"{node.op} takes {want} inputs, got {n}", where=node)
    for i in range(lo):
        if node.inputs[i] is None:
            raise ModelError(f"required input {i} of {node.op} is missing", where=node)
    return present(node)


def float_attr(node: Node, name: str, default: float) -> float:
    """A float attribute (ints accepted); ModelError on any other kind of value."""
    v = node.attr(name, default)
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise ModelError(f"attribute '{name}' must be a float, got {v!r}", where=node)
    return float(v)


def int_attr(node: Node, name: str, default: int, choices: Sequence[int] | None = None) -> int:
    """An int attribute, optionally one of `choices`; ModelError otherwise."""
    v = node.attr(name, default)
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
        raise ModelError(f"attribute '{name}' must be an int, got {v!r}", where=node)
    if choices is not None and int(v) not in choices:
        raise ModelError(f"attribute '{name}' must be one of {list(choices)}, got {v}",
                         where=node)
    return int(v)


def float_attrs(*names: str) -> Callable[[Node], None]:
    """An attribute check for `unary`: the named attributes, when given, are floats."""

    def check(node: Node) -> None:
        for name in names:
            float_attr(node, name, 0.0)

    return check


def c(value: float | int | bool, like: Operand | DType) -> Operand:
    """A constant of the dtype of `like` (an operand or a dtype)."""
    return const(value, like if isinstance(like, DType) else like.dtype)


ScalarRule = Callable[[Builder, Node, list[Operand]], Operand]


def unary(name: str, versions: tuple[int, ...], types: Types, rule: ScalarRule, doc: str,
          out: DType | None = None, check: Callable[[Node], object] | None = None) -> None:
    """Register a one-input elementwise op whose output has the input's shape; `check`
    validates attributes."""

    def infer(node: Node) -> list:
        arity(node, 1)
        dt = accept(node, 0, types)
        if check is not None:
            check(node)
        return tensor(out or dt, tensor_input(node, 0).shape)

    op(name, versions, infer=infer, scalar=rule, doc=doc)


def binary(name: str, versions: tuple[int, ...], types: Types, rule: ScalarRule, doc: str,
           out: DType | None = None, sym: str | None = None) -> None:
    """Register a two-input broadcasting op over one dtype; `sym` propagates shape values."""

    def infer(node: Node) -> list:
        arity(node, 2)
        dt = accept_same(node, (0, 1), types)
        result = tensor(out or dt, out_shape(node, (0, 1)))
        if sym is not None:
            set_sym_arith(node, sym)
        return result

    op(name, versions, infer=infer, scalar=rule, doc=doc)


def simple(scalar_op: str) -> ScalarRule:
    """The rule applying one scalar op to the given inputs."""
    return lambda b, node, a: b.op(scalar_op, *[x for x in a if x is not None])


def in_f32(rule: ScalarRule) -> ScalarRule:
    """`rule` computed in f32 for f16/bf16 inputs, the result rounded once: a composition
    rounded to the narrow type after every op loses range and precision on the way (the
    exp inside cosh(11.5) overflows f16; 1 + e**-|x| in f16 loses softplus's whole tail)."""

    def wrapped(b: Builder, node: Node, a: list[Operand]) -> Operand:
        narrow = a[0].dtype if a and a[0] is not None else None
        if narrow not in NARROW_FLOATS:
            return rule(b, node, a)
        wide = [b.cast(x, D.FLOAT) if x is not None and x.dtype == narrow else x for x in a]
        return b.cast(rule(b, node, wide), narrow)

    return wrapped


# --------------------------------------------------------------------------- binary arithmetic

_F = FLOATS
_ARITH: Types = ((1, _F), (6, _F | WIDE_INTS), (13, _F | WIDE_INTS | BF16), (14, NUMERIC))
_VERSIONS = (1, 6, 7, 13, 14)

binary("Add", _VERSIONS, _ARITH, simple("add"), "a + b (wraps on ints)", sym="add")
binary("Sub", _VERSIONS, _ARITH, simple("sub"), "a - b (wraps on ints)", sym="sub")
binary("Mul", _VERSIONS, _ARITH, simple("mul"), "a * b (wraps on ints)", sym="mul")
binary("Div", _VERSIONS, _ARITH, simple("div"), "a / b; ints truncate toward zero", sym="div")


_POW_BASE: Types = ((1, _F), (12, _F | {D.INT32, D.INT64}), (13, _F | BF16 | {D.INT32, D.INT64}))
_POW_EXP: Types = ((1, _F), (12, _F | INTS), (15, _F | BF16 | INTS))


def _pow_infer(node: Node) -> list:
    arity(node, 2)
    if node.version < 12:
        dt = accept_same(node, (0, 1), _POW_BASE)
    else:  # Pow-12 lets the exponent have its own type
        dt = accept(node, 0, _POW_BASE)
        accept(node, 1, _POW_EXP)
    return tensor(dt, out_shape(node, (0, 1)))


def _pow(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x, y = a
    if not x.dtype.is_float and y.dtype.is_float:
        # An int base with a float exponent: the real power, truncated back to the base type
        # as Cast converts (NaN and out of range as onnxruntime's C cast gives them)
        r = b.op("pow", b.cast(x, D.DOUBLE), b.cast(y, D.DOUBLE))
        return c_float_to_int(b, r, x.dtype)
    wide = _pow_type(x.dtype, y.dtype)
    if wide != x.dtype:
        return b.cast(b.op("pow", b.cast(x, wide), b.cast(y, wide)), x.dtype)
    return b.op("pow", x, b.cast(y, x.dtype))


def _pow_type(base: DType, exp: DType) -> DType:
    """The type a float Pow computes in: the base's, unless the exponent would lose bits in
    it (f16 ** f32: 10 ** 4.1 rounded the exponent to 4.1016, 5 f16 ulps off; f32 ** f64)
    -- then the wider float, at least f32 for a narrow base, which computes in f32 registers
    anyway. An integer exponent makes it f64, as onnxruntime (std::pow's double overload)
    and onnx.reference (numpy's promotion) do: in f32 an odd exponent above 2**24 rounds to
    an even one, so (-1) ** 16777217 gave 1 and (1 + 2**-23) ** 2**24+1 was 2 ulps off."""
    if exp == base or not base.is_float:
        return base
    if not exp.is_float:
        return D.DOUBLE
    wide = D.FLOAT if base in NARROW_FLOATS else base
    if exp.is_float and exp.itemsize > wide.itemsize:
        wide = exp
    return wide


op("Pow", (1, 7, 12, 13, 15), infer=_pow_infer, scalar=_pow,
   doc="x ** y; in the base type or a wider exponent's (int ** float, float ** int via f64)")


def _mod_infer(node: Node) -> list:
    arity(node, 2)
    dt = accept_same(node, (0, 1), ((10, NUMERIC - BF16), (13, NUMERIC)))
    fmod = int_attr(node, "fmod", 0, (0, 1))
    if fmod == 0 and dt.is_float and node.version < 28:
        raise ModelError("Mod with fmod=0 needs integer inputs before opset 28 (set fmod=1 "
                         f"for {dt.short})", where=node)
    return tensor(dt, out_shape(node, (0, 1)))


def _mod(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x, y = a
    r = b.op("rem", x, y)  # C remainder: sign of the dividend
    if node.attr("fmod", 0) == 1 or x.dtype in UNSIGNED:
        return r
    # Python's %: move a nonzero remainder whose sign differs from the divisor's by one divisor.
    zero = c(0, x)
    differ = b.op("ne", b.op("lt", r, zero), b.op("lt", y, zero))
    fix = b.op("and", b.op("ne", r, zero), differ)
    return b.op("select", fix, b.op("add", r, y), r)


op("Mod", (10, 13, 28), infer=_mod_infer, scalar=_mod,
   doc="remainder: fmod=1 C fmod (sign of a), fmod=0 floor modulo (sign of b)")

# --------------------------------------------------------------------------- unary arithmetic

unary("Neg", (1, 6, 13), ((1, _F), (6, _F | SIGNED), (13, _F | SIGNED | BF16)),
      simple("neg"), "-x")
unary("Abs", (1, 6, 13), ((1, _F), (6, _F | INTS), (13, NUMERIC)), simple("abs"), "|x|")
unary("Reciprocal", (1, 6, 13), ((1, _F), (13, _F | BF16)),
      lambda b, n, a: b.op("div", c(1, a[0]), a[0]), "1 / x")


def _sign(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    pos = b.op("select", b.op("gt", x, c(0, x)), c(1, x), x)
    if x.dtype in UNSIGNED:
        return pos
    # The last branch returns x itself, so zeros keep their sign and NaN stays NaN.
    return b.op("select", b.op("lt", x, c(0, x)), c(-1, x), pos)


unary("Sign", (9, 13), ((9, _F | INTS), (13, NUMERIC)), _sign, "-1, 0 or 1 (NaN stays NaN)")

# --------------------------------------------------------------------------- Clip


def _clip_infer(node: Node) -> list:
    x = tensor_input(node, 0)
    if node.version < 11:
        arity(node, 1)
        dt = accept(node, 0, ((1, _F),))
        for name in ("min", "max"):
            if name in node.attrs:
                float_attr(node, name, 0.0)
        return tensor(dt, x.shape)
    arity(node, 1, 3)
    types: Types = ((11, _F), (12, _F | INTS), (13, NUMERIC))
    dt = accept(node, 0, types)
    for i in (1, 2):
        if node.input(i) is None:
            continue
        if accept(node, i, types) != dt:
            raise ModelError(f"input {i} ({'min' if i == 1 else 'max'}) is "
                             f"{tensor_input(node, i).dtype.short} but the input is {dt.short}",
                             where=node)
        s = tensor_input(node, i).shape
        if s is not None and (any(isinstance(d, int) and d != 1 for d in s)
                              or (x.shape is not None and len(s) > len(x.shape))):
            raise ModelError(f"input {i} ({'min' if i == 1 else 'max'}) must be a scalar, got "
                             f"shape {TensorType(dt, s)}", where=node)
    return tensor(dt, out_shape(node))


_FLT_MAX = float(np.finfo(np.float32).max)


def _clip(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    if node.version < 11:
        # Clip-6 defaults to the float32 range; Clip-1 has no default bound.
        lo_v = node.attr("min", -_FLT_MAX if node.version >= 6 else None)
        hi_v = node.attr("max", _FLT_MAX if node.version >= 6 else None)
        lo = None if lo_v is None else c(lo_v, x)
        hi = None if hi_v is None else c(hi_v, x)
    else:
        lo = a[1] if len(a) > 1 else None
        hi = a[2] if len(a) > 2 else None
    # min(max(x, lo), hi): with lo > hi every element becomes hi, as numpy.clip gives.
    if lo is not None:
        x = b.op("max", x, lo)
    if hi is not None:
        x = b.op("min", x, hi)
    return x if x is not a[0] else b.op("copy", x)


op("Clip", (1, 6, 11, 12, 13), infer=_clip_infer, scalar=_clip,
   doc="min(max(x, lo), hi); bounds are attributes before opset 11, optional inputs after")

# --------------------------------------------------------------------------- variadic


def _variadic(name: str, types: Types, fold: str, mean: bool = False) -> None:
    def infer(node: Node) -> list:
        idx = arity(node, 1, 1 << 31)
        if len(idx) != len(node.inputs):
            raise ModelError(f"{name} has an omitted input", where=node)
        dt = accept_same(node, idx, types)
        return tensor(dt, out_shape(node))

    def rule(b: Builder, node: Node, a: list[Operand]) -> Operand:
        acc = a[0]
        for x in a[1:]:
            acc = b.op(fold, acc, x)
        if mean and len(a) > 1:
            acc = b.op("div", acc, c(len(a), acc))
        return acc if len(a) > 1 else b.op("copy", acc)

    versions = (1, 6, 8, 12, 13) if name in ("Min", "Max") else (1, 6, 8, 13)
    # f16/bf16 sums add in f32 and round once, like onnxruntime: 65500 + 44 overflows f16,
    # the mean of the two does not
    op(name, versions, infer=infer, scalar=in_f32(rule) if fold == "add" else rule,
       doc=f"elementwise {name.lower()} of any number of broadcast inputs")


_MINMAX: Types = ((1, _F), (12, _F | INTS), (13, NUMERIC))
_variadic("Min", _MINMAX, "min")
_variadic("Max", _MINMAX, "max")
_variadic("Sum", ((1, _F), (13, _F | BF16)), "add")
_variadic("Mean", ((1, _F), (13, _F | BF16)), "add", mean=True)
