"""Transcendental functions as plain LLVM IR that the loop vectorizer can widen.

`llvm.exp`/`llvm.tanh` and friends on vectors become one libm call per lane, so for float32 each
function is emitted once per module as an internal `alwaysinline` function built only from
arithmetic, bit casts, selects and intrinsics that have vector instructions; after inlining, a
scalar loop calling it vectorizes to the host's full width. float64 calls libm (scalar), except
sigmoid (composed as below around libm's exp) and sin/cos/tan, which for both types are f64
polynomials in `mathlib_trig` (exact reduction over the whole range; a cold path for huge
arguments behind one branch a vector).

Algorithms (coefficients fitted by `tools/fit_math.py`, which replays this float32 code and
reports its error; the worst errors measured, in ulps of the float32-rounded float64 result,
by it and on ~11M native results over every binade, are given with each function).
Branch-free throughout: one form per function over its whole range.
- exp: x clamped to [-104, 89] (beyond it the result is 0 or inf; NaN passes), n = round(x
  log2e) by adding 1.5*2^23 (whose bits then hold n), r = x - n ln2 (ln2 in a high and a low
  part so n ln2_hi is exact), e^r = 1 + r + r^2 P(r) by Horner, times 2^n. With AVX-512,
  2^n scaling is `llvm.ldexp` (one vscalefps: subnormal results rounded once, overflow to
  inf); elsewhere two steps of 2^(n/2) do the same. 0.91 ulp.
- expm1_neg (internal, for w in [-87, 0]): the same reduction with ln2 in one part (its rounding
  error, n*2e-9, is below half an ulp of e^w - 1 in this range), em1 = r + r^2 P(r), s = 2^n
  built in the exponent field from the rounding bits, e^w - 1 = s em1 + (s - 1) in one fma.
  Exact for w = 0 and relatively accurate near 0. 0.91 ulp.
- tanh: m = expm1(-2 min(|x|, 9.1)), tanh = copysign(m / (-2 - m), x); tanh rounds to 1 beyond
  9.01, so the clamp makes +-inf exact and tanh(-0) = -0. 2.49 ulp.
- sigmoid: e = exp(max(-|x|, -104)), (x >= 0 ? 1 : e) / (1 + e): no overflow, and results in the
  subnormal range for x < -87 are exact to rounding. 2.25 ulp.
- erf: log(erfc(a)) = a H(a) with H a polynomial in a = min(|x|, 3.92) (erf rounds to 1 beyond
  3.92), erf = copysign(-expm1(a H(a)), x): expm1 keeps erf relatively accurate near 0 (H(0) =
  -2/sqrt(pi)) and the fit weights H's error by erfc/erf, which is all erf sees of it. 2.83 ulp.
  Where the result meets 1 its rounding is exact: 1 from |x| = ERF_ONE_AT on (the first float
  whose erf rounds to 1), at most 1 - 2^-24 below (a Cast of erf to an integer then agrees with
  the references: erf(3.889) gave 1 for their 0.99999994, fuzz seed 10141081).
- expm1 (the scalar op): x clamped to [-80, 89] (-1 below -17.33 after rounding, inf above
  88.73), the same reduction and P as exp (ln2 in two parts), em1 = r + r^2 P(r), h = 2^(n-1)
  built in the exponent field (2^n would overflow for n = 128), e^x - 1 = 2 (h em1 + (h - 1/2))
  in one fma (h - 1/2 is exact for small n; for large n the result is e^x to within far less
  than an ulp), then x's sign copied (expm1(-0) = -0). The scaling is exact for n = 0, so
  relatively accurate near 0. 1.33 ulp (measured on ~300K native results, not by fit_math).
- log: x = m * 2^e with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^23 first), f = m - 1,
  log(1+f) = f - f^2/2 + f^3 P(f), plus e*ln2 in two parts; x < 0 or NaN -> NaN, 0 -> -inf,
  inf -> inf. 1.15 ulp.
- range-specialised forms, when the caller knows |x| <= SMALL (`ir.loop_ranges`: e.g. erf of a
  tanh): tanh = x P(x^2) (1.22 ulp), erf = x P(x^2) (2.31 ulp), sigmoid = 1/2 + x P(x^2) in
  one fma (0.77 ulp); a short Horner chain instead of an expm1, a division and selects.
Polynomials use `llvm.fmuladd` (fused where the CPU has FMA, two instructions elsewhere).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

from llvmlite import ir

from onnxjit.codegen import target
from onnxjit.codegen.mathlib_trig import TRIG, Trig

F32 = ir.FloatType()
F64 = ir.DoubleType()
I32 = ir.IntType(32)
I1 = ir.IntType(1)

EXP_P = (0.4999999701976776, 0.1666654348373413, 0.04166720062494278, 0.008366518653929234,
         0.0013882521307095885)
ERF_H = (-1.128379225730896, -0.6366164684295654, -0.10281440615653992, 0.019321713596582413,
         -0.0002057127858279273, -0.0012517488794401288, 0.0003810014168266207,
         -4.070802606293e-05)
LOG_P = (0.3333331346511841, -0.25000008940696716, 0.2000211924314499, -0.1666799634695053,
         0.14219552278518677, -0.1240558922290802, 0.11888162046670914, -0.11675652116537094,
         0.06746640056371689)
TANH_SMALL = (1.0, -0.333333283662796, 0.13333186507225037, -0.05395236238837242,
              0.021782785654067993, -0.008592261001467705, 0.0030762897804379463,
              -0.0008402026724070311, 0.00012132976553402841)
ERF_SMALL = (1.1283791065216064, -0.3761235475540161, 0.1128041222691536, -0.026717714965343475,
             0.00492479745298624, -0.0005660183960571885)
SIGMOID_SMALL = (0.25, -0.020833317190408707, 0.0020832070149481297, -0.00021038795239292085,
                 2.064396539935842e-05, -1.5668637161070365e-06)
SMALL = 1.0  # the specialised forms are fitted on |x| <= SMALL
LN2 = 0.6931471805599453
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4
LOG2E = 1.4426950408889634
MAGIC = 12582912.0  # 1.5 * 2^23: x + MAGIC rounds x (|x| < 2^22) to an integer n; bits hold n
MAGIC_BITS = 0x4B400000
EXP_LO, EXP_HI = -104.0, 89.0  # exp is 0 / inf beyond; keeps n in [-150, 129]
EXPM1_LO = -80.0  # expm1 rounds to -1 below -17.33; keeps 2^(n-1) a normal float
TANH_ONE = 9.1  # tanh(x) rounds to 1.0f beyond 9.011
ERF_ONE = 3.92  # erf(x) rounds to 1.0f beyond 3.9192
ERF_ONE_AT = 3.919206  # (a float32) the least x whose erf rounds to 1.0f
ONE_BELOW = 0.99999994  # 1 - 2^-24, the float32 below 1

_LIBM_F64 = {"exp": "llvm.exp.f64", "log": "llvm.log.f64", "tanh": "tanh", "erf": "erf",
             "expm1": "expm1"}


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    """The function `name` of the module, declared on first use."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, list(args)), name)
    return fn


class MathLib:
    """Emits calls to the module's math functions, defining each on first use."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.trig = Trig(module)

    def call(self, b: ir.IRBuilder, name: str, x: ir.Value, bound: float = math.inf
             ) -> ir.Value:
        """`name`(x) for a float or double x: exp, expm1, log, tanh, sigmoid, erf, sin, cos,
        tan; `bound` is a bound of |x| the caller knows (non-NaN values), which may select a
        cheaper form."""
        if name in TRIG:
            return self.trig.call(b, name, x)
        if x.type == F64:
            if name == "sigmoid":  # as for f32: e**-|x| never overflows, and e / (1 + e)
                # keeps results below 2^-1022 (x < -708) that 1 / (1 + e**-x) flushes to 0
                fabs = intrinsic(self.module, "llvm.fabs.f64", F64, [F64])
                e = b.call(self._libm64("exp"), [b.fneg(b.call(fabs, [x]))])
                num = b.select(b.fcmp_ordered(">=", x, ir.Constant(F64, 0.0)),
                               ir.Constant(F64, 1.0), e)
                return b.fdiv(num, b.fadd(ir.Constant(F64, 1.0), e))
            return b.call(self._libm64(name), [x])
        if bound <= SMALL and f"{name}_small" in _BODIES:
            name = f"{name}_small"
        return b.call(self._f32(name), [x])

    def _libm64(self, name: str) -> ir.Function:
        return intrinsic(self.module, _LIBM_F64[name], F64, [F64])

    def _f32(self, name: str) -> ir.Function:
        fname = f"onnxjit.{name}.f32"
        fn = self.module.globals.get(fname)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(F32, [F32]), fname)
            fn.linkage = "internal"
            fn.attributes.add("alwaysinline")
            fn.attributes.add("nounwind")
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            b.ret(_BODIES[name](self, b, fn.args[0]))
        return fn

    # helpers ------------------------------------------------------------------------------------
    def fma(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        f = intrinsic(self.module, "llvm.fmuladd.f32", F32, [F32, F32, F32])
        return b.call(f, [x, y, z])

    def poly(self, b: ir.IRBuilder, coeffs: Sequence[float], t: ir.Value) -> ir.Value:
        """sum coeffs[i] * t^i by Horner's rule."""
        acc: ir.Value = c32(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.fma(b, acc, t, c32(c))
        return acc

    def unary(self, b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
        return b.call(intrinsic(self.module, f"llvm.{name}.f32", F32, [F32]), [x])

    def copysign(self, b: ir.IRBuilder, mag: ir.Value, sign: ir.Value) -> ir.Value:
        f = intrinsic(self.module, "llvm.copysign.f32", F32, [F32, F32])
        return b.call(f, [mag, sign])

    def pow2(self, b: ir.IRBuilder, k: ir.Value) -> ir.Value:
        """2^k as a float for an i32 k in [-126, 127] (built in the exponent field)."""
        bits = b.shl(b.add(k, ir.Constant(I32, 127)), ir.Constant(I32, 23))
        return b.bitcast(bits, F32)

    def clamp_below(self, b: ir.IRBuilder, x: ir.Value, lo: float) -> ir.Value:
        """max(x, lo) with NaN passing through (an ordered compare is false for NaN)."""
        return b.select(b.fcmp_ordered("<", x, c32(lo)), c32(lo), x)

    def clamp_above(self, b: ir.IRBuilder, x: ir.Value, hi: float) -> ir.Value:
        return b.select(b.fcmp_ordered(">", x, c32(hi)), c32(hi), x)

    def round_log2e(self, b: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(n, the bits of n + MAGIC) with n = round(x log2e) as a float, for |x log2e| < 2^22.
        n + MAGIC is exact, so its bits minus MAGIC_BITS are n as an i32, and shifted left by
        23 they are n << 23 (MAGIC's bits 0-8 are zero). Unlike fptosi, these integer ops
        stay defined (garbage, not poison) for a NaN x."""
        t = self.fma(b, x, c32(LOG2E), c32(MAGIC))
        return b.fsub(t, c32(MAGIC)), b.bitcast(t, I32)

    def ldexp(self, b: ir.IRBuilder, y: ir.Value, n: ir.Value) -> ir.Value:
        """y * 2^n for an i32 n in [-150, 129] and y in [1/2, 2], rounded once (subnormal
        results exact to rounding, overflow to inf)."""
        if has_scalef():
            f = intrinsic(self.module, "llvm.ldexp.f32.i32", F32, [F32, I32])
            return b.call(f, [y, n])  # one vscalefps (plus an int->float convert)
        n1 = b.ashr(n, ir.Constant(I32, 1))
        return b.fmul(b.fmul(y, self.pow2(b, n1)), self.pow2(b, b.sub(n, n1)))

    # the functions -------------------------------------------------------------------------------
    def exp(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self.exp_clamped(b, self.clamp_above(b, self.clamp_below(b, x, EXP_LO), EXP_HI))

    def exp_clamped(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """e^x for x in [EXP_LO, EXP_HI] or NaN."""
        n, bits = self.round_log2e(b, x)
        r = self.fma(b, n, c32(-LN2_HI), x)
        r = self.fma(b, n, c32(-LN2_LO), r)
        y = self.poly(b, (1.0, 1.0) + EXP_P, r)
        # A NaN x gives a NaN y, whatever the (defined) garbage n then is.
        return self.ldexp(b, y, b.sub(bits, ir.Constant(I32, MAGIC_BITS)))

    def expm1_neg(self, b: ir.IRBuilder, w: ir.Value) -> ir.Value:
        """e^w - 1 for w in [-87, 0] or NaN."""
        n, bits = self.round_log2e(b, w)
        r = self.fma(b, n, c32(-LN2), w)
        em1 = self.fma(b, b.fmul(r, r), self.poly(b, EXP_P, r), r)
        s = b.bitcast(b.add(b.shl(bits, ir.Constant(I32, 23)), ir.Constant(I32, 0x3F800000)),
                      F32)
        return self.fma(b, s, em1, b.fsub(s, c32(1.0)))

    def expm1(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        w = self.clamp_above(b, self.clamp_below(b, x, EXPM1_LO), EXP_HI)
        n, bits = self.round_log2e(b, w)
        r = self.fma(b, n, c32(-LN2_HI), w)
        r = self.fma(b, n, c32(-LN2_LO), r)
        em1 = self.fma(b, b.fmul(r, r), self.poly(b, EXP_P, r), r)
        # h = 2^(n-1) in the exponent field (n in [-116, 128]); e^w - 1 = 2 (h em1 + h - 1/2)
        h = b.bitcast(b.add(b.shl(bits, ir.Constant(I32, 23)), ir.Constant(I32, 0x3F000000)),
                      F32)
        y = b.fmul(self.fma(b, h, em1, b.fsub(h, c32(0.5))), c32(2.0))
        return self.copysign(b, y, x)  # expm1 has x's sign; keeps -0

    def log(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        tiny = b.fcmp_ordered("<", x, c32(1.1754943508222875e-38))
        xs = b.select(tiny, b.fmul(x, c32(8388608.0)), x)  # subnormals: scale by 2^23
        bits = b.bitcast(xs, I32)
        e = b.sub(b.and_(b.lshr(bits, ir.Constant(I32, 23)), ir.Constant(I32, 0xFF)),
                  ir.Constant(I32, 127))
        e = b.sub(e, b.select(tiny, ir.Constant(I32, 23), ir.Constant(I32, 0)))
        m_bits = b.or_(b.and_(bits, ir.Constant(I32, 0x7FFFFF)), ir.Constant(I32, 0x3F800000))
        m = b.bitcast(m_bits, F32)  # in [1, 2)
        big = b.fcmp_ordered(">", m, c32(1.4142135623730951))
        m = b.select(big, b.fmul(m, c32(0.5)), m)
        e = b.add(e, b.zext(big, I32))
        f = b.fsub(m, c32(1.0))
        f2 = b.fmul(f, f)
        y = self.fma(b, b.fmul(f2, f), self.poly(b, LOG_P, f), self.fma(b, c32(-0.5), f2, f))
        ef = b.sitofp(e, F32)
        y = self.fma(b, ef, c32(LN2_LO), y)
        y = self.fma(b, ef, c32(LN2_HI), y)
        y = b.select(b.fcmp_ordered("==", x, c32(float("inf"))), x, y)
        y = b.select(b.fcmp_ordered("==", x, c32(0.0)), c32(float("-inf")), y)
        return b.select(b.fcmp_unordered("<", x, c32(0.0)), c32(float("nan")), y)

    def tanh(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        a = self.clamp_above(b, self.unary(b, "fabs", x), TANH_ONE)
        m = self.expm1_neg(b, b.fmul(a, c32(-2.0)))
        return self.copysign(b, b.fdiv(m, b.fsub(c32(-2.0), m)), x)

    def sigmoid(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        e = self.exp_clamped(b, self.clamp_below(b, b.fneg(self.unary(b, "fabs", x)), EXP_LO))
        num = b.select(b.fcmp_ordered(">=", x, c32(0.0)), c32(1.0), e)
        return b.fdiv(num, b.fadd(c32(1.0), e))

    def erf(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        a = self.clamp_above(b, self.unary(b, "fabs", x), ERF_ONE)
        m = self.expm1_neg(b, b.fmul(a, self.poly(b, ERF_H, a)))  # -erf(a)
        m = self.clamp_below(b, m, -ONE_BELOW)  # 1 exactly where erf rounds to 1 (NaN stays)
        m = b.select(b.fcmp_ordered(">=", a, c32(ERF_ONE_AT)), c32(-1.0), m)
        return self.copysign(b, m, x)

    def odd_small(self, b: ir.IRBuilder, x: ir.Value, coeffs: Sequence[float],
                  offset: float = 0.0) -> ir.Value:
        """offset + x P(x^2): the range-specialised forms (odd functions, sigmoid shifted)."""
        q = self.poly(b, coeffs, b.fmul(x, x))
        return self.fma(b, x, q, c32(offset)) if offset else b.fmul(x, q)

    def tanh_small(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self.odd_small(b, x, TANH_SMALL)

    def erf_small(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self.odd_small(b, x, ERF_SMALL)

    def sigmoid_small(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return self.odd_small(b, x, SIGMOID_SMALL, 0.5)


@functools.lru_cache(maxsize=None)
def has_scalef() -> bool:
    """Whether the host has AVX-512 (where `llvm.ldexp` on vectors is one vscalefps; without
    it LLVM would call libm's ldexpf per lane)."""
    return "+avx512f" in target.host()[2].split(",")


def c32(v: float) -> ir.Constant:
    return ir.Constant(F32, v)


_BODIES: dict[str, Callable[[MathLib, ir.IRBuilder, ir.Value], ir.Value]] = {
    "exp": MathLib.exp, "expm1": MathLib.expm1, "log": MathLib.log, "tanh": MathLib.tanh,
    "sigmoid": MathLib.sigmoid,
    "erf": MathLib.erf, "tanh_small": MathLib.tanh_small, "erf_small": MathLib.erf_small,
    "sigmoid_small": MathLib.sigmoid_small,
}
