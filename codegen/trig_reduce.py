"""Exact reduction x -> (r, q), x = r + (q + 4j) pi/2, for every finite double (Payne-Hanek).

The fast trig path (`mathlib_trig`) subtracts k pi/2 in three exact parts, which holds for
|k| < 2^20. Beyond that, `rem_pio2(module)` is the cold scalar function
`{double, double, i32} onnxjit.rem_pio2(double a)` for a finite a >= 2^20 (a = |x|), giving
r = hi + lo (a double-double, |r| <= pi/4 (1 + 2^-50)) and q = k mod 4.

Algorithm (integer arithmetic on the bits of 2/pi, no rounding until the end):
1) a = m 2^e with m the 53-bit integer significand. The bits of 2/pi of weight above
   2^(1-e) multiply m 2^e into multiples of 4, which do not change sin/cos: only 2/pi's bits
   from weight 2^(1-e) down matter. TABLE holds 2/pi's bits after 128 zero bits (so the window
   start p0 = e + 126 is never negative for e >= -32), as 64-bit words; the 192-bit window
   W = bits p0 .. p0+191 is three funnel shifts of four consecutive words.
2) a 2/pi = m W 2^-190 (mod 4), with an error below m 2^-190 < 2^-137 from the bits after the
   window. P = m W mod 2^192 takes three 64x64-bit products (the top one only its low word).
3) Round to the nearest quadrant: P' = P + 2^189, q = P' >> 190, and the fraction
   d = (P' mod 2^190) - 2^189 in [-2^189, 2^189) (units of 2^-190).
4) |d| is normalised by its leading zeros and its top 106 bits become the double-double
   t = |d| 2^-190 exactly (two 53-bit integers, each exact as a double, scaled by powers of 2).
5) r = t pi/2 in double-double arithmetic: Dekker's exact product of t_hi and pi/2's high part
   (Veltkamp splitting, so no FMA is needed), plus the cross terms, renormalised; the sign of d
   is applied.
Doubles get within 2^-61 of a multiple of pi/2 at worst; the 137 correct fraction bits leave
more than 70 bits of r, of which the 106 bits kept carry over 100 correct ones (the product
with pi/2 adds a relative error of about 2^-104).
"""

from __future__ import annotations

import functools

from llvmlite import ir

I32 = ir.IntType(32)
I64 = ir.IntType(64)
I128 = ir.IntType(128)
I192 = ir.IntType(192)
F64 = ir.DoubleType()
PTR = ir.PointerType()
NWORDS = 21  # 128 zero bits + 1216 bits of 2/pi: the window of the largest double (e = 971)
ZERO_BITS = 128
RESULT = ir.LiteralStructType([F64, F64, I32])


@functools.lru_cache(maxsize=None)
def pi_fixed(bits: int = 1600) -> int:
    """floor(pi 2^bits), from Machin's formula pi = 16 atan(1/5) - 4 atan(1/239) in integers
    (each truncated term errs by less than 1: the result is exact to a few hundred units)."""
    one = 1 << (bits + 32)

    def atan_inv(n: int) -> int:
        total, term, k = 0, one // n, 0
        while term:
            total += term // (2 * k + 1) * (-1 if k % 2 else 1)
            term //= n * n
            k += 1
        return total

    return (16 * atan_inv(5) - 4 * atan_inv(239)) >> 32


@functools.lru_cache(maxsize=None)
def table() -> tuple[int, ...]:
    """The 64-bit words of floor(2/pi 2^(64 NWORDS - ZERO_BITS)), most significant first."""
    k = 64 * NWORDS - ZERO_BITS
    t = (1 << (1600 + k + 1)) // pi_fixed()
    return tuple((t >> (64 * (NWORDS - 1 - i))) & ((1 << 64) - 1) for i in range(NWORDS))


def pio2_parts(n: int, bits: int) -> list[float]:
    """pi/2 as n doubles of `bits` significant bits each (Cody-Waite constants; with bits=53
    the usual hi/lo pair), the last one rounded to nearest from the remainder."""
    rest = pi_fixed() << 0  # pi 2^1600; pi/2 = rest 2^-1601
    scale = 1601
    parts = []
    for i in range(n):
        top = rest.bit_length()
        keep = bits if i < n - 1 else 53
        shift = top - keep
        chunk = (rest >> shift) if i < n - 1 else (rest + (1 << (shift - 1))) >> shift
        parts.append(chunk * 2.0 ** (shift - scale))
        rest -= chunk << shift
    return parts


PIO2_HI, PIO2_LO = pio2_parts(2, 53)


def _split(v: float) -> tuple[float, float]:
    """Veltkamp's split of a double into two halves of at most 26 bits (exact sum)."""
    c = 134217729.0 * v
    hi = c - (c - v)
    return hi, v - hi


def rem_pio2(module: ir.Module) -> ir.Function:
    """The module's `onnxjit.rem_pio2` (see the module docstring), defined on first use."""
    fn = module.globals.get("onnxjit.rem_pio2")
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(RESULT, [F64]), "onnxjit.rem_pio2")
    fn.linkage = "internal"
    for attr in ("nounwind", "cold"):
        fn.attributes.add(attr)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    bits = b.bitcast(fn.args[0], I64)
    m = b.or_(b.and_(bits, _c64((1 << 52) - 1)), _c64(1 << 52))
    p0 = b.sub(b.lshr(bits, _c64(52)), _c64(1075 - (ZERO_BITS - 2)))  # e + 126
    w, s = b.lshr(p0, _c64(6)), b.and_(p0, _c64(63))
    words = [b.load(b.gep(_table(module), [b.add(w, _c64(i))], source_etype=I64), typ=I64)
             for i in range(4)]
    fshl = _intrinsic(module, "llvm.fshl.i64", I64, [I64, I64, I64])
    w0, w1, w2 = (b.call(fshl, [words[i], words[i + 1], s]) for i in range(3))
    m128 = b.zext(m, I128)
    prod2, prod1 = b.mul(m128, b.zext(w2, I128)), b.mul(m128, b.zext(w1, I128))
    p = b.add(b.zext(prod2, I192), b.shl(b.zext(prod1, I192), _c192(64)))
    p = b.add(p, b.shl(b.zext(b.mul(m, w0), I192), _c192(128)))  # mod 2^192
    p = b.add(p, _c192(1 << 189))
    q = b.trunc(b.lshr(p, _c192(190)), I32)
    d = b.sub(b.and_(p, _c192((1 << 190) - 1)), _c192(1 << 189))
    neg = b.icmp_signed("<", d, _c192(0))
    mag = b.select(neg, b.sub(_c192(0), d), d)
    ctlz = _intrinsic(module, "llvm.ctlz.i192", I192, [I192, ir.IntType(1)])
    lz = b.call(ctlz, [mag, ir.Constant(ir.IntType(1), 0)])
    lz = b.select(b.icmp_unsigned(">", lz, _c192(191)), _c192(191), lz)  # mag == 0: r = 0
    top = b.shl(mag, lz)
    hi64 = b.trunc(b.lshr(top, _c192(128)), I64)
    mid64 = b.trunc(b.lshr(top, _c192(64)), I64)
    c1 = b.lshr(hi64, _c64(11))
    c2 = b.or_(b.shl(b.and_(hi64, _c64(0x7FF)), _c64(42)), b.lshr(mid64, _c64(22)))
    lz64 = b.trunc(lz, I64)
    t_hi = b.fmul(b.uitofp(c1, F64), _pow2(b, b.sub(_c64(-51), lz64)))
    t_lo = b.fmul(b.uitofp(c2, F64), _pow2(b, b.sub(_c64(-104), lz64)))
    r_hi, r_lo = _times_pio2(b, t_hi, t_lo)
    r_hi = b.select(neg, b.fneg(r_hi), r_hi)
    r_lo = b.select(neg, b.fneg(r_lo), r_lo)
    out = ir.Constant(RESULT, ir.Undefined)
    for i, v in enumerate((r_hi, r_lo, q)):
        out = b.insert_value(out, v, i)
    b.ret(out)
    return fn


def _times_pio2(b: ir.IRBuilder, t_hi: ir.Value, t_lo: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(t_hi + t_lo) pi/2 as a renormalised double-double (Dekker's product, no FMA)."""
    ph, pl = _split(PIO2_HI)
    p = b.fmul(t_hi, _f(PIO2_HI))
    c = b.fmul(t_hi, _f(134217729.0))
    th = b.fsub(c, b.fsub(c, t_hi))
    tl = b.fsub(t_hi, th)
    err = b.fsub(b.fmul(th, _f(ph)), p)
    err = b.fadd(err, b.fmul(th, _f(pl)))
    err = b.fadd(err, b.fmul(tl, _f(ph)))
    err = b.fadd(err, b.fmul(tl, _f(pl)))  # t_hi * PIO2_HI = p + err exactly
    lo = b.fadd(err, b.fadd(b.fmul(t_hi, _f(PIO2_LO)), b.fmul(t_lo, _f(PIO2_HI))))
    hi = b.fadd(p, lo)
    return hi, b.fsub(lo, b.fsub(hi, p))


def _table(module: ir.Module) -> ir.GlobalVariable:
    g = module.globals.get("onnxjit.two_over_pi")
    if g is None:
        ty = ir.ArrayType(I64, NWORDS)
        g = ir.GlobalVariable(module, ty, "onnxjit.two_over_pi")
        g.linkage = "internal"
        g.global_constant = True
        g.initializer = ir.Constant(ty, [w - (1 << 64) if w >> 63 else w for w in table()])
        g.type = PTR  # llvmlite would print a typed pointer; LLVM 22 IR is opaque `ptr`
    return g


def _pow2(b: ir.IRBuilder, k: ir.Value) -> ir.Value:
    """2^k for an i64 k in the normal range."""
    return b.bitcast(b.shl(b.add(k, _c64(1023)), _c64(52)), F64)


def _intrinsic(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


def _c64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _c192(v: int) -> ir.Constant:
    return ir.Constant(I192, v)


def _f(v: float) -> ir.Constant:
    return ir.Constant(F64, v)
