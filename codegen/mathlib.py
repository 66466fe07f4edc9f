"""Transcendental functions as plain LLVM IR that the loop vectorizer can widen.

`llvm.exp`/`llvm.tanh` and friends on vectors become one libm call per lane, so for float32 each
function is emitted once per module as an internal `alwaysinline` function built only from
arithmetic, bit casts and selects; after inlining, a scalar loop calling it vectorizes to the
host's full width. float64 calls libm (correctly rounded enough, but scalar).

Algorithms (coefficients fitted by `tools/fit_math.py`, which also reports their float32 error;
the worst measured errors are in the comments):
- exp: n = floor(x*log2(e) + 1/2), r = x - n*ln2 (ln2 split in a high and a low part so n*ln2_hi
  is exact), e^r = 1 + r + r^2 P(r), then scale by 2^n in two steps of 2^(n/2) so results in the
  subnormal range round once and overflow gives inf. x is clamped to [-104, 89] first (beyond that
  the result is 0 or inf anyway) so the integer conversion cannot overflow. 1.25 ulp.
- log: x = m * 2^e with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^23 first), f = m - 1,
  log(1+f) = f - f^2/2 + f^3 P(f), plus e*ln2 in two parts; x < 0 or NaN -> NaN, 0 -> -inf,
  inf -> inf. 1.1 ulp.
- tanh: x + x^3 P(x^2) for |x| < 0.625, else sign(x) * (1 - 2/(e^(2|x|) + 1)). ~2 ulp.
- sigmoid: with e = e^-|x| and r = 1 / (1 + e): r for x >= 0, e * r for x < 0 (so results in
  the subnormal range for x < -87 are not flushed to 0 by e^-x overflowing).
- erf: x P(x^2) for |x| <= 1; else sign(x) * (1 - e^(-x^2) R(1/|x|)) (R fits erfc(x) e^(x^2)),
  and exactly 1 beyond 3.92, where erf rounds to 1 in float32. 2.5 ulp, 1.5e-7 absolute.
Polynomials use `llvm.fmuladd` (fused where the CPU has FMA, two instructions elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

F32 = ir.FloatType()
F64 = ir.DoubleType()
I32 = ir.IntType(32)
I1 = ir.IntType(1)

EXP_P = (0.5, 0.1666666567325592, 0.04166625440120697, 0.008333434350788593,
         0.0013947149273008108, 0.00019826136121992022)
LOG_P = (0.3333331048488617, -0.25000014901161194, 0.20002204179763794, -0.16667643189430237,
         0.14217890799045563, -0.12411268800497055, 0.1190471202135086, -0.11646434664726257,
         0.06675271689891815)
TANH_P = (-0.3333333134651184, 0.13333211839199066, -0.053947463631629944,
          0.021704038605093956, -0.008184744045138359, 0.002149052917957306)
ERF_SMALL_P = (1.128379225730896, -0.3761262893676758, 0.11283612251281738,
               -0.026854807510972023, 0.0051900530233979225, -0.000802435155492276,
               7.898201874922961e-05)
ERFC_P = (2.596134800114669e-05, 0.5637192130088806, 0.0030154581181705, -0.2851863205432892,
          -0.06926850974559784, 0.8994859457015991, -1.524053931236267, 1.4240049123764038,
          -0.8106041550636292, 0.26466262340545654, -0.03821760416030884)
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4
LOG2E = 1.4426950408889634
ERF_ONE = 3.92

_LIBM_F64 = {"exp": "llvm.exp.f64", "log": "llvm.log.f64", "tanh": "tanh", "erf": "erf"}


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

    def call(self, b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
        """`name`(x) for a float or double x: exp, log, tanh, sigmoid, erf."""
        if x.type == F64:
            if name == "sigmoid":
                e = b.call(self._libm64("exp"), [b.fneg(x)])
                return b.fdiv(ir.Constant(F64, 1.0), b.fadd(ir.Constant(F64, 1.0), e))
            return b.call(self._libm64(name), [x])
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

    # the functions -------------------------------------------------------------------------------
    def exp(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        # NaN compares false, so it passes both clamps and propagates through r.
        xc = b.select(b.fcmp_ordered(">", x, c32(89.0)), c32(89.0), x)
        xc = b.select(b.fcmp_ordered("<", xc, c32(-104.0)), c32(-104.0), xc)
        n = self.unary(b, "floor", self.fma(b, xc, c32(LOG2E), c32(0.5)))
        r = self.fma(b, b.fneg(n), c32(LN2_HI), xc)
        r = self.fma(b, b.fneg(n), c32(LN2_LO), r)
        p = self.poly(b, EXP_P, r)
        y = b.fadd(self.fma(b, b.fmul(r, r), p, r), c32(1.0))
        # n is in [-150, 129] or NaN; a plain fptosi of a NaN-free n is defined and vectorizes
        # (llvm.fptosi.sat is scalarized on x86). A NaN x still gives NaN through y.
        n_ok = b.select(b.fcmp_ordered("==", n, n), n, c32(0.0))
        ni = b.fptosi(n_ok, I32)
        n1 = b.ashr(ni, ir.Constant(I32, 1))
        n2 = b.sub(ni, n1)
        return b.fmul(b.fmul(y, self.pow2(b, n1)), self.pow2(b, n2))

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
        a = self.unary(b, "fabs", x)
        x2 = b.fmul(x, x)
        small = self.fma(b, b.fmul(x2, x), self.poly(b, TANH_P, x2), x)
        t = self.exp(b, b.fmul(a, c32(2.0)))
        big = b.fsub(c32(1.0), b.fdiv(c32(2.0), b.fadd(t, c32(1.0))))
        big = self.copysign(b, big, x)
        return b.select(b.fcmp_ordered("<", a, c32(0.625)), small, big)

    def sigmoid(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        e = self.exp(b, b.fneg(self.unary(b, "fabs", x)))
        r = b.fdiv(c32(1.0), b.fadd(c32(1.0), e))
        return b.select(b.fcmp_ordered(">=", x, c32(0.0)), r, b.fmul(e, r))

    def erf(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        a = self.unary(b, "fabs", x)
        small = b.fmul(x, self.poly(b, ERF_SMALL_P, b.fmul(x, x)))
        u = b.fdiv(c32(1.0), a)
        e = self.exp(b, b.fneg(b.fmul(a, a)))
        big = b.fsub(c32(1.0), b.fmul(e, self.poly(b, ERFC_P, u)))
        big = b.select(b.fcmp_ordered(">", a, c32(ERF_ONE)), c32(1.0), big)
        big = self.copysign(b, big, x)
        return b.select(b.fcmp_ordered("<=", a, c32(1.0)), small, big)


def c32(v: float) -> ir.Constant:
    return ir.Constant(F32, v)


_BODIES: dict[str, Callable[[MathLib, ir.IRBuilder, ir.Value], ir.Value]] = {
    "exp": MathLib.exp, "log": MathLib.log, "tanh": MathLib.tanh, "sigmoid": MathLib.sigmoid,
    "erf": MathLib.erf,
}
