"""sin, cos and tan of f32 and f64 values as vectorizable LLVM IR, exact over the whole range.

Every input is computed in f64 (an f32 is widened exactly and the result rounded once, which
makes f32 results correctly rounded in practice):
- fast path, every lane: k = round(x 2/pi) by adding 1.5 2^52 (whose low bits then hold k, so
  q = k mod 4 is an integer `and`), r = x - k pi/2 with pi/2 in three 33-bit parts, so that
  k * part is exact for |k| < 2^20 (f64 inputs subtract a fourth, 53-bit part too: r stays
  accurate to a few units of 2^-100 near multiples of pi/2); then Taylor series of sin r and
  cos r on |r| <= pi/4 (terms to r^17 / r^18, truncation < 1e-18) by Horner's rule with
  `llvm.fmuladd` (for f64 results sin as r + r^3 S'(r^2) and cos as fdlibm's 1 - r^2/2
  plus the rounding error of that difference), and the quadrant q picks +-sin r or +-cos r;
  tan = sin/cos of one reduction. inf and NaN give NaN.
- lanes with |x| > LIMIT (k could reach 2^20) take the exact Payne-Hanek reduction of
  `trig_reduce` in a cold function, `onnxjit.<fn>_big`, called through masked vector variants
  (`vector_variants`): a vector of ordinary arguments pays one compare and one branch. The cold
  function evaluates the same series at r_hi and adds r_lo's first-order term
  (sin(r_hi + r_lo) ~ s + r_lo c, cos ~ c - r_lo s).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llvmlite import ir

from onnxjit.codegen import trig_reduce
from onnxjit.codegen.vector_variants import cold_call, rare_weights

F32 = ir.FloatType()
F64 = ir.DoubleType()
I64 = ir.IntType(64)
TRIG = ("sin", "cos", "tan")
SIN = [(-1) ** n / math.factorial(2 * n + 1) for n in range(9)]
COS = [(-1) ** n / math.factorial(2 * n) for n in range(10)]
P1, P2, P3, P3T = trig_reduce.pio2_parts(4, 33)
MAGIC = 6755399441055744.0  # 1.5 * 2^52: x + MAGIC rounds x (|x| < 2^51) to an integer k
LIMIT = 2.0 ** 20  # |x| above it: |k| may exceed 2^20 - 1, so k * P1 may be inexact


class Trig:
    """Emits sin/cos/tan calls into a module, defining the functions on first use."""

    def __init__(self, module: ir.Module):
        self.module = module

    def call(self, b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
        """`name`(x) for an f32 or f64 x."""
        suffix = "f32" if x.type == F32 else "f64"
        fname = f"onnxjit.{name}.{suffix}"
        fn = self.module.globals.get(fname)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(x.type, [x.type]), fname)
            fn.linkage = "internal"
            fn.attributes.add("alwaysinline")
            fn.attributes.add("nounwind")
            fb = ir.IRBuilder(fn.append_basic_block("entry"))
            fb.ret(self._body(fb, name, fn.args[0]))
        return b.call(fn, [x])

    def _body(self, b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
        """The fast path, and the cold call for lanes beyond LIMIT (and inf)."""
        x64 = x if x.type == F64 else b.fpext(x, F64)
        fast = self._fast(b, name, x64, x.type == F64)
        fast = fast if x.type == F64 else b.fptrunc(fast, F32)
        start = b.block
        fabs = self._intrinsic("llvm.fabs.f64", F64, [F64])
        big = b.fcmp_ordered(">", b.call(fabs, [x64]), ir.Constant(F64, LIMIT))
        rare = b.append_basic_block("big")
        join = b.append_basic_block("join")
        br = b.cbranch(big, rare, join)
        br.set_metadata("prof", rare_weights(self.module))
        b.position_at_end(rare)
        slow = cold_call(b, self._big(name), x64)
        slow = slow if x.type == F64 else b.fptrunc(slow, F32)
        b.branch(join)
        b.position_at_end(join)
        out = b.phi(x.type)
        out.add_incoming(fast, start)
        out.add_incoming(slow, rare)
        return out

    def _fast(self, b: ir.IRBuilder, name: str, x: ir.Value, exact_tail: bool) -> ir.Value:
        t = self.fma(b, x, _f(2 / math.pi), _f(MAGIC))
        k = b.fsub(t, _f(MAGIC))
        q = b.bitcast(t, I64)  # its low bits hold k (two's complement)
        r = x
        for part in (P1, P2, P3, P3T) if exact_tail else (P1, P2, P3):
            r = self.fma(b, b.fneg(k), _f(part), r)
        s, c = self.sincos(b, r, exact_tail)
        return self.quadrant(b, name, s, c, q)

    def sincos(self, b: ir.IRBuilder, r: ir.Value, precise: bool
               ) -> tuple[ir.Value, ir.Value]:
        """(sin r, cos r) for |r| <= pi/4 (a little beyond is fine). f32 results take the
        plain Horner sums r S(r^2) and C(r^2), correct to far below their half ulp; `precise`
        (f64 results) adds a small correction to the exact r, sin = r + r^3 S'(r^2) (r itself
        at r = +-0, whose sign the sum would lose), and computes cos as fdlibm does: w =
        1 - r^2/2 rounded, plus its rounding error and the r^4 terms."""
        r2 = b.fmul(r, r)
        if not precise:
            return b.fmul(self.poly(b, SIN, r2), r), self.poly(b, COS, r2)
        s = self.fma(b, b.fmul(r, r2), self.poly(b, SIN[1:], r2), r)
        s = b.select(b.fcmp_ordered("==", r, _f(0.0)), r, s)
        hz = b.fmul(r2, _f(0.5))
        w = b.fsub(_f(1.0), hz)
        tail = self.fma(b, b.fmul(r2, r2), self.poly(b, COS[2:], r2),
                        b.fsub(b.fsub(_f(1.0), w), hz))
        return s, b.fadd(w, tail)

    def quadrant(self, b: ir.IRBuilder, name: str, s: ir.Value, c: ir.Value, q: ir.Value
                 ) -> ir.Value:
        """sin/cos/tan of r + q pi/2 from s = sin r, c = cos r (q: an i64, mod 4 used)."""
        odd = b.trunc(q, ir.IntType(1))
        if name == "tan":
            return b.select(odd, b.fdiv(b.fneg(c), s), b.fdiv(s, c))
        if name == "sin":  # s, c, -s, -c
            v, flip = b.select(odd, c, s), b.and_(q, ir.Constant(I64, 2))
        else:  # c, -s, -c, s
            v = b.select(odd, s, c)
            flip = b.and_(b.add(q, ir.Constant(I64, 1)), ir.Constant(I64, 2))
        return b.select(b.icmp_unsigned("!=", flip, ir.Constant(I64, 0)), b.fneg(v), v)

    def _big(self, name: str) -> ir.Function:
        """`double onnxjit.<name>_big(double x)`: the cold, exact path for |x| > LIMIT."""
        fname = f"onnxjit.{name}_big"
        fn = self.module.globals.get(fname)
        if fn is not None:
            return fn
        fn = ir.Function(self.module, ir.FunctionType(F64, [F64]), fname)
        fn.linkage = "internal"
        for attr in ("noinline", "nounwind", "cold"):
            fn.attributes.add(attr)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        x = fn.args[0]
        fabs = self._intrinsic("llvm.fabs.f64", F64, [F64])
        a = b.call(fabs, [x])
        finite = b.fcmp_ordered("<", a, _f(math.inf))
        reduce = b.append_basic_block("reduce")
        other = b.append_basic_block("nonfinite")
        b.cbranch(finite, reduce, other)
        b.position_at_end(other)
        b.ret(b.fsub(x, x))  # inf - inf, NaN - NaN: NaN
        b.position_at_end(reduce)
        red = b.call(trig_reduce.rem_pio2(self.module), [a])
        hi, lo, q = (b.extract_value(red, i) for i in range(3))
        s, c = self.sincos(b, hi, True)
        s, c = self.fma(b, lo, c, s), self.fma(b, b.fneg(lo), s, c)
        y = self.quadrant(b, name, s, c, b.zext(q, I64))
        if name != "cos":  # odd functions: f(-x) = -f(x)
            y = b.select(b.fcmp_ordered("<", x, _f(0.0)), b.fneg(y), y)
        b.ret(y)
        return fn

    # helpers ------------------------------------------------------------------------------------
    def _intrinsic(self, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, list(args)), name)
        return fn

    def fma(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        return b.call(self._intrinsic("llvm.fmuladd.f64", F64, [F64] * 3), [x, y, z])

    def poly(self, b: ir.IRBuilder, coeffs: Sequence[float], t: ir.Value) -> ir.Value:
        """sum coeffs[i] * t^i by Horner's rule."""
        acc: ir.Value = _f(coeffs[-1])
        for co in reversed(coeffs[:-1]):
            acc = self.fma(b, acc, t, _f(co))
        return acc


def _f(v: float) -> ir.Constant:
    return ir.Constant(F64, v)
