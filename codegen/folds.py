"""Fold loops (`Loop.fold`): one accumulator that LLVM's loop vectorizer splits into lanes.

A fold such as a softmax's row sum, `for j: acc = add acc, x[j]`, is one serial chain of
float adds unless they may be reassociated. `reductions.lowering.Lanes` marks such loops
`fold`; in one, `fold_steps` finds the accumulations and the emitter gives them the forms the
vectorizer recognises as reductions:

- `acc = add acc, v` (float): `fadd reassoc nsz`;
- the ordered maximum `c = gt acc, v; acc = select c, acc, v` (float): `llvm.maxnum` with
  `nnan nsz` (one `maxps`; its NaN behaviour is the select's, a NaN dropped or kept by
  position: the folds using it have NaN results anyway when a NaN is present, `Lanes`).

The vectorizer then keeps VF x interleave partial accumulators, combined after the loop, and
vectorizes the rest of the body (loads, casts, math) as any loop; `fold_md` makes it do so
whatever its cost model says, its tail by masked iterations on AVX-512 hosts and by a
remainder loop on the others. Other ops of the body take the usual path.

Why not scalar lanes: `Lanes` used to write L partial accumulators out in the loop IR for
the SLP vectorizer, which joined them into 2-wide pieces, inserts and permutes (an AVX-512
softmax's max and sum passes ran as `vmaxps xmm` and `vinsertps` chains, each a quarter of
the kernel's time).
"""

from __future__ import annotations

from llvmlite import ir

from onnxjit.codegen import target
from onnxjit.codegen.irutil import loop_md
from onnxjit.codegen.mathlib import intrinsic
from onnxjit.ir.loops import Op, Stmt

_FAST = ("nnan", "nsz")
#: vectors a fold loop's iteration handles. LLVM's own choice (4 on AVX-512: 64 floats) with
#: a remainder loop left rows of 100 or 118 (a MiniLM's attention) mostly to the remainder,
#: with its scalar exp: softmax 1.25x slower than the scalar lanes. Measured (Intel AVX-512
#: guest, 2 threads, softmax over (B, 12, S, S), us, fold / lanes): with 2 and masked tails,
#: S=20 8.9/14.1, 100 324/348, 118 299/429, 128 428/455; MiniLM stream 1.12x (1 vector: 1.11x)
FOLD_INTERLEAVE = 2
#: The tail by masked iterations (`predicate.enable`) on hosts whose vectors are this wide or
#: wider: AVX-512's masks cost nothing, but with AVX2 the vectorizer masks every iteration's
#: loads and stores (`vmaskmovps`, microcoded on Zen 3), and a remainder loop is far cheaper.
#: Measured on a Zen 3 host (AVX2), one thread, softmax rows, predicated against a remainder
#: loop: 320 x 6625 6.5-7.3 -> 2.9 ms, 8 x 12 x 114 x 114 2.1 -> 1.2-1.3 ms, 12 x 20 x 20
#: 12 -> 12-16 us.
PREDICATE_MIN_VECTOR_BYTES = 64


def fold_steps(body: list[Stmt]) -> dict[int, str]:
    """The accumulations of a fold loop's body: id(Op) -> "add" or "max" (the select of an
    ordered maximum; its compare is left to dead-code elimination)."""
    steps: dict[int, str] = {}
    defs: dict[int, Op] = {}
    for s in body:
        if not isinstance(s, Op):
            continue
        defs[id(s.dst)] = s
        if not s.dst.dtype.is_float or s.dst not in s.args:
            continue
        if s.op == "add" and len(s.args) == 2:
            steps[id(s)] = "add"
        elif s.op == "select":
            cond, x, y = s.args
            c = defs.get(id(cond))
            if x is s.dst and c is not None and c.op == "gt" and c.args == (x, y):
                steps[id(s)] = "max"
    return steps


def emit_step(b: ir.IRBuilder, kind: str | None, vals: list[ir.Value]) -> ir.Value | None:
    """The accumulation `kind` ("add", "max": `fold_steps`; None: not one) of the values of
    its op's args in its reduction form (see the module docstring); None when not a float
    accumulation (a narrow float's is computed in f32, and takes the usual path)."""
    if kind is None or not isinstance(vals[-1].type, (ir.FloatType, ir.DoubleType)):
        return None
    acc, v = vals[-2], vals[-1]
    if kind == "add":
        return b.fadd(acc, v, flags=("reassoc", "nsz"))
    suffix = "f32" if acc.type == ir.FloatType() else "f64"
    fn = intrinsic(b.module, f"llvm.maxnum.{suffix}", acc.type, [acc.type, acc.type])
    return b.call(fn, [acc, v], fastmath=_FAST)


def fold_md(module: ir.Module) -> ir.Value:
    """Loop metadata of a fold loop: vectorize it whatever the cost model says (legal: its
    accumulations are reductions), FOLD_INTERLEAVE vectors an iteration, the tail by masked
    iterations (`predicate.enable`) where masks are cheap (`PREDICATE_MIN_VECTOR_BYTES`), by
    a remainder loop elsewhere."""
    md = [("llvm.loop.vectorize.enable", 1), ("llvm.loop.interleave.count", FOLD_INTERLEAVE)]
    if target.vector_bytes() >= PREDICATE_MIN_VECTOR_BYTES:
        md.append(("llvm.loop.vectorize.predicate.enable", 1))
    return loop_md(module, *md)
