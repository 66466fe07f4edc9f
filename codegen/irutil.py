"""Small LLVM IR building helpers shared by the translator and the Matmul emitter.

`for_range` emits a counted loop whose induction variable is a phi (the form LLVM's loop passes
expect: a header testing `i < stop`, `i + step` with `nsw` in the latch, so scalar evolution
computes the trip count and the vectorizer can widen the body). Element access is a GEP on the
element type with an i64 flat index, `inbounds` (every index the loop IR produces is inside its
buffer), aligned to the element size (numpy arrays and the arena guarantee it). `splat`
broadcasts a scalar to a vector (insertelement + shufflevector, which LLVM turns into one
broadcast).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

I64 = ir.IntType(64)


def i64c(v: int) -> ir.Constant:
    return ir.Constant(I64, int(v))


def for_range(b: ir.IRBuilder, start: ir.Value | int, stop: ir.Value | int, step: int,
              body: Callable[[ir.Value], None], name: str = "i",
              loop_md: ir.Value | None = None) -> None:
    """for (i = start; i < stop; i += step) body(i); `step` is a positive constant. The builder
    is left at the loop's exit block. `loop_md` (see `interleave_md`) goes on the back edge."""

    def carry_body(i: ir.Value, _: list[ir.Value]) -> list[ir.Value]:
        body(i)
        return []

    for_range_carry(b, start, stop, step, [], carry_body, name, loop_md)


#: Marks a loop-ID metadata node that must refer to itself (llvmlite cannot print that form);
#: `jit` rewrites `!N = !{ !"<LOOP_SELF>.k", ...}` into `!N = distinct !{ !N, ...}`.
LOOP_SELF = "onnxjit.loop.self"
_loop_ids = iter(range(1 << 62))


def loop_md(module: ir.Module, *hints: tuple[str, int | None]) -> ir.Value:
    """A fresh loop-ID metadata node with `hints`: (name, value) pairs such as
    ("llvm.loop.interleave.count", 2) (an i32 value), ("llvm.loop.vectorize.enable", 0) (an
    i1: names ending in "enable") or ("llvm.loop.unroll.disable", None) (no value)."""
    nodes = []
    for name, value in hints:
        parts: list = [ir.MetaDataString(module, name)]
        if value is not None:
            parts.append(ir.Constant(ir.IntType(1 if name.endswith("enable") else 32), value))
        nodes.append(module.add_metadata(parts))
    return module.add_metadata([ir.MetaDataString(module, f"{LOOP_SELF}.{next(_loop_ids)}"),
                                *nodes])


def interleave_md(module: ir.Module, count: int) -> ir.Value:
    """Loop metadata asking LLVM to interleave the vectorized loop `count` times: two
    independent copies of a long dependent chain (polynomial math) keep both FMA pipes busy."""
    return loop_md(module, ("llvm.loop.interleave.count", count))


def scalar_md(module: ir.Module) -> ir.Value:
    """Loop metadata keeping the loop scalar and rolled: neither vectorized nor unrolled
    (`Loop.few`: a loop of a few iterations gains nothing from either)."""
    return loop_md(module, ("llvm.loop.vectorize.enable", 0), ("llvm.loop.unroll.disable", None))


def no_unroll_md(module: ir.Module) -> ir.Value:
    """Loop metadata keeping LLVM from unrolling the loop: a fold's partial sums (`Lanes`)
    then stay one body the SLP vectorizer turns into vector adds (fully unrolled, a short
    fold became a tangle of scalar chains it left alone)."""
    return loop_md(module, ("llvm.loop.unroll.disable", None))


def for_range_carry(b: ir.IRBuilder, start: ir.Value | int, stop: ir.Value | int, step: int,
                    inits: Sequence[ir.Value],
                    body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
                    name: str = "i", loop_md: ir.Value | None = None) -> list[ir.Value]:
    """A counted loop carrying values in phis (accumulators): `body(i, values)` returns the
    next values; returns the values after the last iteration (`inits` if there is none)."""
    assert step > 0, step
    start = i64c(start) if isinstance(start, int) else start
    stop = i64c(stop) if isinstance(stop, int) else stop
    pre = b.block
    fn = pre.function
    header = fn.append_basic_block(f"{name}.head")
    loop = fn.append_basic_block(f"{name}.body")
    done = fn.append_basic_block(f"{name}.end")
    b.branch(header)
    b.position_at_end(header)
    i = b.phi(I64, name=name)
    i.add_incoming(start, pre)
    carried = []
    for v in inits:
        p = b.phi(v.type)
        p.add_incoming(v, pre)
        carried.append(p)
    b.cbranch(b.icmp_signed("<", i, stop), loop, done)
    b.position_at_end(loop)
    nxt_vals = body(i, list(carried))
    nxt = b.add(i, i64c(step), flags=["nsw"])
    latch = b.block
    i.add_incoming(nxt, latch)
    for p, v in zip(carried, nxt_vals):
        p.add_incoming(v, latch)
    back = b.branch(header)
    if loop_md is not None:
        back.set_metadata("llvm.loop", loop_md)
    b.position_at_end(done)
    return carried


def elem_ptr(b: ir.IRBuilder, base: ir.Value, index: ir.Value, ty: ir.Type) -> ir.Value:
    return b.gep(base, [index], inbounds=True, source_etype=ty)


def load_elem(b: ir.IRBuilder, base: ir.Value, index: ir.Value, ty: ir.Type, align: int
              ) -> ir.Value:
    return b.load(elem_ptr(b, base, index, ty), typ=ty, align=align)


def store_elem(b: ir.IRBuilder, value: ir.Value, base: ir.Value, index: ir.Value, ty: ir.Type,
               align: int) -> None:
    b.store(value, elem_ptr(b, base, index, ty), align=align)


def imin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


class Callee:
    """An indirect callee for llvmlite's `call`: a `ptr` value plus the function type to call
    it with (llvmlite only calls values whose type names a function type)."""

    def __init__(self, value: ir.Value, fnty: ir.FunctionType):
        self.value, self.function_type, self.type = value, fnty, ir.PointerType()

    def get_reference(self) -> str:
        return self.value.get_reference()


def splat(b: ir.IRBuilder, x: ir.Value, lanes: int) -> ir.Value:
    """x in every lane of a vector of `lanes` lanes."""
    ty = ir.VectorType(x.type, lanes)
    if isinstance(x, ir.Constant) and isinstance(x.constant, (int, float)):
        # a constant vector, which `scalar` recognises as one
        return ir.Constant(ty, [x.constant] * lanes)
    v = b.insert_element(ir.Constant(ty, ir.Undefined), x, i64c(0))
    return b.shuffle_vector(v, ir.Constant(ty, ir.Undefined),
                            ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def float_constant(v: ir.Value) -> float | None:
    """The value of a float constant, or of a vector constant whose lanes are all equal."""
    if not isinstance(v, ir.Constant):
        return None
    c = v.constant
    if isinstance(c, list):  # a vector: its lanes must agree
        c = [e.constant if isinstance(e, ir.Constant) else e for e in c]
        c = c[0] if len({repr(e) for e in c}) == 1 else None
    return c if isinstance(c, float) else None


def fp_to_int_sat(b: ir.IRBuilder, x: ir.Value, ty: ir.IntType, signed: bool) -> ir.Value:
    """x (f32/f64, scalar or vector) converted to `ty` toward zero, saturating, NaN -> 0 (the
    semantics of `llvm.fpto[su]i.sat`) as fptosi/fptoui and selects: the intrinsic on vectors
    was scalarized into a branch per lane (DynamicQuantizeLinear's store: 2x slower), this
    form vectorizes (the conversion of an out-of-range lane is poison, never selected)."""
    w = ty.width
    lo, hi = (-(2.0 ** (w - 1)), 2.0 ** (w - 1)) if signed else (0.0, 2.0 ** w)
    tmin, tmax = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if signed else (0, (1 << w) - 1)
    vec = isinstance(x.type, ir.VectorType)
    fty = x.type.element if vec else x.type
    ity = ir.VectorType(ty, x.type.count) if vec else ty

    def c(t: ir.Type, v: float | int) -> ir.Constant:
        return ir.Constant(ir.VectorType(t, x.type.count), [v] * x.type.count) if vec \
            else ir.Constant(t, v)

    conv = b.fptosi(x, ity) if signed else b.fptoui(x, ity)
    out = b.select(b.fcmp_ordered(">=", x, c(fty, hi)), c(ty, tmax), conv)
    out = b.select(b.fcmp_ordered("<" if signed else "<=", x, c(fty, lo)), c(ty, tmin), out)
    return b.select(b.fcmp_unordered("uno", x, x), c(ty, 0), out)
