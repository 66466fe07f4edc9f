"""Scalar operations of the loop IR as LLVM IR, with exactly `onnxjit.ir.scalar_eval`'s semantics.

`ScalarEmitter.op(b, name, args, arg_dtypes, dst_dtype)` emits one `SCALAR_OPS` operation on
LLVM values in *compute* form (bool is `i1`, the other types their natural LLVM type) and returns
the result. The translation is table-driven: a dict per operand class (float, signed int,
unsigned int, bool) maps the simple binary ops to an IRBuilder method; the ops whose numpy
semantics need guards are spelled out:

- int div/rem never trap: the divisor is replaced by 1 where it is 0 (or, signed, where the
  dividend is INT_MIN and the divisor -1, or for rem any -1), then the result is 0 where the
  divisor was 0 (INT_MIN / -1 = INT_MIN falls out of dividing by 1; x % -1 = 0 = x % 1);
- float min/max propagate NaN like numpy's scalar loop: `a < b || isnan(a) ? a : b` (a select,
  so it vectorizes; `llvm.minnum` would drop NaNs); with a constant operand c (not NaN) that is
  `c < x ? c : x` (c first; or second when c != 0, ties then being the same bits), the form
  x86's minps/maxps implement (`CONST_MINMAX`);
- int pow is repeated squaring unrolled over the exponent's bits (branch-free, wraps), with
  scalar_eval's rule for negative exponents; float pow calls libm `powf`/`pow`;
- casts: float->int saturate with NaN -> 0 (`irutil.fp_to_int_sat`), ->bool is
  `x != 0` (`fcmp une`, so NaN -> true), unsigned sources zero-extend / convert unsigned;
- f32 exp/expm1/log/tanh/sigmoid/erf and f32/f64 sin/cos/tan go through `MathLib`
  (vectorizable polynomials), never `llvm.exp.f32` (scalarized into libm calls per lane);
  sqrt/floor/ceil/fabs are intrinsics.
Fast-math flags are never set: ONNX needs IEEE semantics (NaN and inf tests exist).

Narrow floats (float16, bfloat16; `types.NARROW_FLOATS`) are f32 in registers and 16 bits in
memory: a load widens exactly (`fpext half`, or the bf16 bits shifted into the top half of an
i32), every op computes in f32 and an op whose result is narrow rounds it once, to nearest even
(`fptrunc` to half and back, F16C's vcvtps2ph/vcvtph2ps on x86; for bf16 the integer rounding
of `ir/narrow.py`, which vectorizes), so a store narrows exactly. f64 -> f16 must round once:
the double is first rounded to f32 *to odd* (exact enough that the second rounding is correct),
which avoids both double rounding and the `__truncdfhf2` libcall a direct `fptrunc` needs.

Cast-only types (`types.CAST_ONLY_DTYPES`: float8, float4e2m1, 4-/2-bit ints) are their i8
storage byte in registers too; only copy/select/cast see them, and `cast` decodes/encodes them
through f32 or i8 with the bit manipulation of `codegen/cast_only.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from llvmlite import ir

from onnxjit.codegen.cast_only import (
    decode_e8m0,
    decode_small_float,
    decode_small_int,
    encode_e8m0,
    encode_small_float,
)
from onnxjit.codegen.irutil import float_constant, fp_to_int_sat
from onnxjit.codegen.mathlib import MathLib, intrinsic
from onnxjit.errors import UnsupportedError
from onnxjit.ir.narrow import SMALL_INTS, narrow_value, to_cast_only
from onnxjit.ir.types import CAST_ONLY_DTYPES, NARROW_FLOATS, DType

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()
HALF = ir.HalfType()

_FLOAT_TYPES = {DType.FLOAT: F32, DType.DOUBLE: F64}


def compute_type(dt: DType) -> ir.Type:
    """The LLVM type a value of `dt` has in registers (bool -> i1)."""
    if dt == DType.BOOL:
        return I1
    if dt in CAST_ONLY_DTYPES:
        return I8  # the storage byte; only copy/select/cast see it
    if dt in _FLOAT_TYPES:
        return _FLOAT_TYPES[dt]
    if dt in NARROW_FLOATS:
        return F32
    if dt.is_int:
        return ir.IntType(dt.itemsize * 8)
    raise UnsupportedError(f"element type {dt.short} is not supported by code generation")


def storage_type(dt: DType) -> ir.Type:
    """The LLVM type of one element in memory (bool is numpy's one byte, bf16 its bits)."""
    if dt == DType.BOOL or dt in CAST_ONLY_DTYPES:
        return I8
    if dt == DType.FLOAT16:
        return HALF
    if dt == DType.BFLOAT16:
        return I16
    return compute_type(dt)


def constant(value: int | float | bool, dt: DType) -> ir.Constant:
    """A compute-form constant; unsigned values above the signed range are wrapped so the IR
    text always holds a value LLVM accepts for the width."""
    ty = compute_type(dt)
    if dt == DType.BOOL:
        return ir.Constant(I1, 1 if value else 0)
    if dt in CAST_ONLY_DTYPES:
        bits = int(to_cast_only(np.asarray([float(value)]), dt).view(np.uint8)[0])
        return ir.Constant(I8, bits - 256 if bits >= 128 else bits)
    if dt in NARROW_FLOATS:
        return ir.Constant(ty, narrow_value(float(value), dt))
    if dt.is_float:
        return ir.Constant(ty, float(value))
    bits = dt.itemsize * 8
    v = int(value) & ((1 << bits) - 1)
    if v >= 1 << (bits - 1):
        v -= 1 << bits
    return ir.Constant(ty, v)


def _kind(dt: DType) -> str:
    if dt == DType.BOOL:
        return "b"
    if dt.is_float:
        return "f"
    if dt.is_signed:
        return "s"
    if dt.is_int:
        return "u"
    raise UnsupportedError(f"element type {dt.short} is not supported by code generation")


B = ir.IRBuilder
_BINARY: dict[str, dict[str, Callable]] = {
    "f": {"add": B.fadd, "sub": B.fsub, "mul": B.fmul},
    "s": {"add": B.add, "sub": B.sub, "mul": B.mul, "and": B.and_, "or": B.or_, "xor": B.xor},
    "u": {"add": B.add, "sub": B.sub, "mul": B.mul, "and": B.and_, "or": B.or_, "xor": B.xor},
    # numpy's bool arithmetic: + is or, - is xor, * is and; min/max are and/or
    "b": {"add": B.or_, "sub": B.xor, "mul": B.and_, "and": B.and_, "or": B.or_, "xor": B.xor,
          "min": B.and_, "max": B.or_},
}
_FCMP = {"eq": ("==", True), "ne": ("!=", False), "lt": ("<", True), "le": ("<=", True),
         "gt": (">", True), "ge": (">=", True)}
_ICMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_FLOAT_UNARY = {"sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "abs": "fabs"}
_MATH = ("exp", "expm1", "log", "tanh", "sigmoid", "erf", "sin", "cos", "tan")
#: Ops whose result needs no rounding to a narrow float: they return an operand, one already
#: rounded (cast), or an exactly representable value of representable operands.
_EXACT_ON_NARROW = ("cast", "copy", "select", "neg", "abs", "min", "max", "floor", "ceil")
#: Float min/max with a usable constant operand as x86's minps/maxps (see `_minmax`): one
#: instruction, not a compare, a NaN test and a blend; the same bits. Measured, two threads:
#: MobileNetV2-like 1.037-1.046x (the min(x, 6) of its Clip epilogues); ResNet-50, DenseNet,
#: SqueezeNet, the MLP, the chain, BERT-tiny unchanged. False restores the generic select.
CONST_MINMAX = True


class ScalarEmitter:
    """Emits scalar ops into a module (declaring intrinsics and math functions on first use)."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.math = MathLib(module)

    def intrinsic(self, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
        return intrinsic(self.module, name, ret, args)

    # ------------------------------------------------------------------------------------------
    def op(self, b: ir.IRBuilder, name: str, args: Sequence[ir.Value],
           dtypes: Sequence[DType], dst: DType, bound: float = math.inf) -> ir.Value:
        """`name`(args) where args[i] has dtype dtypes[i]; `dst` is the result dtype; `bound`
        bounds |args[0]| (see `ir.loop_ranges`: math functions may then take a cheaper form)."""
        if name in _MATH and _kind(dtypes[0]) == "f":
            res = self.math.call(b, name, args[0], bound)
            return self.round_narrow(b, res, dst) if dst in NARROW_FLOATS else res
        res = self._op(b, name, args, dtypes, dst)
        if dst in NARROW_FLOATS and name not in _EXACT_ON_NARROW:
            res = self.round_narrow(b, res, dst)
        return res

    def _op(self, b: ir.IRBuilder, name: str, args: Sequence[ir.Value],
            dtypes: Sequence[DType], dst: DType) -> ir.Value:
        if name == "cast":
            return self.cast(b, args[0], dtypes[0], dst)
        if name == "copy":
            return args[0]
        if name == "select":
            cond = args[0]
            if dtypes[0] != DType.BOOL:
                cond = self.cast(b, cond, dtypes[0], DType.BOOL)
            sel = b.select(cond, args[1], self.cast(b, args[2], dtypes[2], dtypes[1]))
            if isinstance(cond.type, ir.IntType):
                # a loop-IR select is data flow: marked unpredictable, LLVM keeps it a cmov.
                # Unmarked, a select on a compare of loaded values became a branch (a tree
                # walk's next node: mispredicted half the time, 2-3x slower steps)
                sel.set_metadata("unpredictable", b.block.module.add_metadata([]))
            return sel
        dt = dtypes[0]
        k = _kind(dt)
        if len(args) == 2 and dtypes[1] != dt:  # scalar_eval converts the second operand
            # (to f32 when the first is narrow: the op computes in f32)
            wide = DType.FLOAT if dt in NARROW_FLOATS else dt
            args = [args[0], self.cast(b, args[1], dtypes[1], wide)]
        table = _BINARY[k]
        if name in table:
            return table[name](b, args[0], args[1])
        if name in _FCMP or name == "isnan":
            return self._compare(b, name, args, k)
        if name in _MATH or name in ("sqrt", "floor", "ceil"):
            return self._unary_math(b, name, args, dt, k)
        fn = getattr(self, f"_op_{name}", None)
        if fn is None:
            raise UnsupportedError(f"scalar op '{name}' is not supported on {dt.short}")
        return fn(b, args, dt, k)

    def _compare(self, b: ir.IRBuilder, name: str, args: Sequence[ir.Value], k: str
                 ) -> ir.Value:
        if name == "isnan":
            if k != "f":
                return ir.Constant(I1, 0)
            return b.fcmp_unordered("uno", args[0], args[0])
        if k == "f":
            pred, ordered = _FCMP[name]
            if ordered:
                return b.fcmp_ordered(pred, args[0], args[1])
            return b.fcmp_unordered(pred, args[0], args[1])
        if k == "s":
            return b.icmp_signed(_ICMP[name], args[0], args[1])
        return b.icmp_unsigned(_ICMP[name], args[0], args[1])

    # arithmetic with guards --------------------------------------------------------------------
    def _op_div(self, b: ir.IRBuilder, a: Sequence[ir.Value], dt: DType, k: str) -> ir.Value:
        x, y = a
        if k == "f":
            return b.fdiv(x, y)
        if k == "b":
            raise UnsupportedError("scalar op 'div' is not supported on bool")
        ty = x.type
        zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
        yzero = b.icmp_unsigned("==", y, zero)
        bad = yzero
        if k == "s":
            int_min = ir.Constant(ty, -(1 << (ty.width - 1)))
            overflow = b.and_(b.icmp_signed("==", x, int_min),
                              b.icmp_signed("==", y, ir.Constant(ty, -1)))
            bad = b.or_(bad, overflow)
        safe = b.select(bad, one, y)
        q = b.sdiv(x, safe) if k == "s" else b.udiv(x, safe)
        return b.select(yzero, zero, q)

    def _op_rem(self, b: ir.IRBuilder, a: Sequence[ir.Value], dt: DType, k: str) -> ir.Value:
        x, y = a
        if k == "f":
            return b.frem(x, y)  # LLVM frem is C fmod, like np.fmod
        if k == "b":
            raise UnsupportedError("scalar op 'rem' is not supported on bool")
        ty = x.type
        zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
        yzero = b.icmp_unsigned("==", y, zero)
        bad = yzero
        if k == "s":  # x % -1 == 0 == x % 1, and INT_MIN % -1 would trap
            bad = b.or_(bad, b.icmp_signed("==", y, ir.Constant(ty, -1)))
        safe = b.select(bad, one, y)
        r = b.srem(x, safe) if k == "s" else b.urem(x, safe)
        return b.select(yzero, zero, r)

    def _op_min(self, b: ir.IRBuilder, a: Sequence[ir.Value], dt: DType, k: str) -> ir.Value:
        return self._minmax(b, a, k, "<")

    def _op_max(self, b: ir.IRBuilder, a: Sequence[ir.Value], dt: DType, k: str) -> ir.Value:
        return self._minmax(b, a, k, ">")

    def _minmax(self, b: ir.IRBuilder, a: Sequence[ir.Value], k: str, pred: str) -> ir.Value:
        x, y = a
        if k == "f" and CONST_MINMAX:
            cx, cy = float_constant(x), float_constant(y)
            if cx is not None and not math.isnan(cx):  # c < x || isnan(c) ? c : x
                return b.select(b.fcmp_ordered(pred, x, y), x, y)
            if cy is not None and not math.isnan(cy) and cy != 0:
                # x < c || isnan(x) ? x : c  ==  c < x ? c : x (ties: x == c, the same bits)
                return b.select(b.fcmp_ordered(pred, y, x), y, x)
        if k == "f":
            take_x = b.or_(b.fcmp_ordered(pred, x, y), b.fcmp_unordered("uno", x, x))
        elif k == "s":
            take_x = b.icmp_signed(pred, x, y)
        else:
            take_x = b.icmp_unsigned(pred, x, y)
        return b.select(take_x, x, y)

    def _op_pow(self, b: ir.IRBuilder, a: Sequence[ir.Value], dt: DType, k: str) -> ir.Value:
        x, e = a
        if k == "f":
            name = "powf" if x.type == F32 else "pow"
            return b.call(self.intrinsic(name, x.type, [x.type, x.type]), [x, e])
        if k == "b":
            raise UnsupportedError("scalar op 'pow' is not supported on bool")
        ty = x.type
        zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
        neg = b.icmp_signed("<", e, zero) if k == "s" else ir.Constant(I1, 0)
        n = b.select(neg, zero, e) if k == "s" else e
        result: ir.Value = one
        base: ir.Value = x
        # The exponent has at most `width` significant bits: unrolled square-and-multiply.
        bits = ty.width - 1 if k == "s" else ty.width
        for step in range(bits):
            odd = b.trunc(n, I1)
            result = b.select(odd, b.mul(result, base), result)
            if step + 1 < bits:
                base = b.mul(base, base)
                n = b.lshr(n, one)
        if k == "u":
            return result
        # negative exponent: truncated 1/x**-e -> 1 for x=1, +-1 for x=-1, else 0
        minus_one = ir.Constant(ty, -1)
        e_odd = b.trunc(e, I1)
        inv_m1 = b.select(e_odd, minus_one, one)
        inv = b.select(b.icmp_signed("==", x, one), one,
                       b.select(b.icmp_signed("==", x, minus_one), inv_m1, zero))
        return b.select(neg, inv, result)

    def _op_neg(self, b: ir.IRBuilder, a: Sequence[ir.Value], dt: DType, k: str) -> ir.Value:
        if k == "f":
            return b.fneg(a[0])
        if k == "b":
            return a[0]
        return b.sub(ir.Constant(a[0].type, 0), a[0])

    def _op_abs(self, b: ir.IRBuilder, a: Sequence[ir.Value], dt: DType, k: str) -> ir.Value:
        x = a[0]
        if k == "f":
            return self._float_unary(b, "fabs", x)
        if k == "s":
            return b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)),
                            b.sub(ir.Constant(x.type, 0), x), x)
        return x

    def _op_not(self, b: ir.IRBuilder, a: Sequence[ir.Value], dt: DType, k: str) -> ir.Value:
        if k == "f":
            raise UnsupportedError(f"scalar op 'not' is not supported on {dt.short}")
        return b.xor(a[0], ir.Constant(a[0].type, -1 if k != "b" else 1))

    def _float_unary(self, b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
        suffix = "f32" if x.type == F32 else "f64"
        return b.call(self.intrinsic(f"llvm.{name}.{suffix}", x.type, [x.type]), [x])

    def _unary_math(self, b: ir.IRBuilder, name: str, a: Sequence[ir.Value], dt: DType,
                    k: str) -> ir.Value:
        if k != "f":
            if name in ("floor", "ceil"):
                return a[0]  # integers are already whole
            raise UnsupportedError(f"scalar op '{name}' is not supported on {dt.short}")
        if name in _MATH:
            return self.math.call(b, name, a[0])
        return self._float_unary(b, _FLOAT_UNARY[name], a[0])

    # casts -------------------------------------------------------------------------------------
    def cast(self, b: ir.IRBuilder, x: ir.Value, src: DType, dst: DType) -> ir.Value:
        """Convert a compute-form value from `src` to `dst` (numpy astype, float->int
        saturating with NaN -> 0)."""
        if src == dst:
            return x
        if src in CAST_ONLY_DTYPES:  # decode exactly to f32 / i8, then convert those
            if src in SMALL_INTS:
                x, src = decode_small_int(b, x, src), DType.INT8
            elif src == DType.FLOAT8E8M0:
                x, src = decode_e8m0(b, x), DType.FLOAT
            else:
                x, src = decode_small_float(b, x, src), DType.FLOAT
            if src == dst:
                return x
        if src in NARROW_FLOATS:
            src = DType.FLOAT  # the register holds the exact f32 value
            if src == dst:
                return x
        if dst in CAST_ONLY_DTYPES:
            return self._to_cast_only(b, x, src, dst)
        if dst in NARROW_FLOATS:
            return self._to_narrow(b, x, src, dst)
        ks, kd = _kind(src), _kind(dst)
        ty = compute_type(dst)
        if kd == "b":
            if ks == "f":
                return b.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))
            return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
        if ks == "b":
            return b.uitofp(x, ty) if kd == "f" else b.zext(x, ty)
        if ks == "f" and kd == "f":
            if ty == x.type:
                return x
            return b.fpext(x, ty) if ty == F64 else b.fptrunc(x, ty)
        if ks == "f":
            return fp_to_int_sat(b, x, ty, kd == "s")
        if kd == "f":
            return b.sitofp(x, ty) if ks == "s" else b.uitofp(x, ty)
        # int -> int: wrap like numpy astype; the source's signedness decides the extension
        if ty.width == x.type.width:
            return x
        if ty.width < x.type.width:
            return b.trunc(x, ty)
        return b.sext(x, ty) if ks == "s" else b.zext(x, ty)


    def _to_cast_only(self, b: ir.IRBuilder, x: ir.Value, src: DType, dst: DType) -> ir.Value:
        """A compute-form value (not itself cast-only) as the byte of `dst` (narrow.py)."""
        ks = _kind(src)
        if dst in SMALL_INTS:
            nbits, _ = SMALL_INTS[dst]
            if ks == "f":  # truncate toward zero; NaN, inf and huge values give 0
                # (an f32 >= 2**31 is a multiple of 16, so i32 suffices for it: same low bits)
                wide = I32 if x.type == F32 else I64
                fabs = self._float_unary(b, "fabs", x)
                ok = b.fcmp_ordered("<", fabs, ir.Constant(x.type, 2.0 ** (wide.width - 2)))
                fn = self.intrinsic(f"llvm.fptosi.sat.i{wide.width}."
                                    f"{'f32' if x.type == F32 else 'f64'}", wide, [x.type])
                v = b.select(ok, b.call(fn, [x]), ir.Constant(wide, 0))
                x = b.trunc(v, I8)
            elif ks == "b":
                x = b.zext(x, I8)
            elif x.type.width > 8:
                x = b.trunc(x, I8)
            return b.and_(x, ir.Constant(I8, (1 << nbits) - 1))
        if ks == "b":
            x = b.uitofp(x, F32)
        elif ks in "su":
            x = b.sitofp(x, F32) if ks == "s" else b.uitofp(x, F32)
        elif x.type == F64 and dst == DType.FLOAT8E8M0:
            x = b.fptrunc(x, F32)  # the reference rounds to f32 first
        elif x.type == F64:
            x = self._f64_to_f32_odd(b, x)
        if dst == DType.FLOAT8E8M0:
            return encode_e8m0(b, x)
        return encode_small_float(b, x, dst)

    # narrow floats --------------------------------------------------------------------------------
    def _to_narrow(self, b: ir.IRBuilder, x: ir.Value, src: DType, dst: DType) -> ir.Value:
        """Round a compute-form `src` value to the narrow float `dst` (as `ir/narrow.py`)."""
        ks = _kind(src)
        if dst == DType.FLOAT16:
            if ks == "b":
                return b.uitofp(x, F32)  # 0 and 1 are exact
            if ks in "su":  # like numpy: through f64 (exact for <= 32 bits), rounded once
                x = b.sitofp(x, F64) if ks == "s" else b.uitofp(x, F64)
            if x.type == F64:
                x = self._f64_to_f32_odd(b, x)
            return b.fpext(b.fptrunc(x, HALF), F32)
        # bf16: ints and f64 go through f32 first, like ml_dtypes
        if ks == "b":
            return b.uitofp(x, F32)
        if ks in "su":
            x = b.sitofp(x, F32) if ks == "s" else b.uitofp(x, F32)
        elif x.type == F64:
            x = b.fptrunc(x, F32)
        return self.round_narrow(b, x, dst)

    def _f64_to_f32_odd(self, b: ir.IRBuilder, d: ir.Value) -> ir.Value:
        """`d` rounded to f32 toward zero with the last bit set when inexact (round to odd):
        a later rounding to f16 (11 bits) is then the correct rounding of `d` itself."""
        t = b.fptrunc(d, F32)
        back = b.fpext(t, F64)
        inexact = b.fcmp_ordered("!=", back, d)  # false for NaN
        fabs = self.intrinsic("llvm.fabs.f64", F64, [F64])
        away = b.fcmp_ordered(">", b.call(fabs, [back]), b.call(fabs, [d]))
        bits = b.bitcast(t, I32)
        toward0 = b.select(away, b.sub(bits, ir.Constant(I32, 1)), bits)
        odd = b.select(inexact, b.or_(toward0, ir.Constant(I32, 1)), bits)
        return b.bitcast(odd, F32)

    def round_narrow(self, b: ir.IRBuilder, x: ir.Value, dt: DType) -> ir.Value:
        """An f32 value rounded to nearest even in the narrow float `dt`, still as f32."""
        if dt == DType.FLOAT16:
            return b.fpext(b.fptrunc(x, HALF), F32)
        bits = b.bitcast(x, I32)
        lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
        rounded = b.add(b.add(bits, ir.Constant(I32, 0x7FFF)), lsb)
        quiet = b.or_(bits, ir.Constant(I32, 0x400000))
        isnan = b.fcmp_unordered("uno", x, x)
        out = b.and_(b.select(isnan, quiet, rounded), ir.Constant(I32, 0xFFFF0000 - (1 << 32)))
        return b.bitcast(out, F32)


def to_storage(b: ir.IRBuilder, x: ir.Value, dt: DType) -> ir.Value:
    """A compute-form value as stored in memory (bool i1 -> i8 0/1; narrow floats are already
    rounded, so narrowing them is exact)."""
    if dt == DType.BOOL:
        return b.zext(x, I8)
    if dt == DType.FLOAT16:
        return b.fptrunc(x, HALF)
    if dt == DType.BFLOAT16:
        return b.trunc(b.lshr(b.bitcast(x, I32), ir.Constant(I32, 16)), I16)
    return x


def from_storage(b: ir.IRBuilder, x: ir.Value, dt: DType) -> ir.Value:
    """A loaded element in compute form (any nonzero byte is true, as numpy reads it)."""
    if dt == DType.BOOL:
        return b.icmp_unsigned("!=", x, ir.Constant(I8, 0))
    if dt == DType.FLOAT16:
        return b.fpext(x, F32)
    if dt == DType.BFLOAT16:
        return b.bitcast(b.shl(b.zext(x, I32), ir.Constant(I32, 16)), F32)
    return x
