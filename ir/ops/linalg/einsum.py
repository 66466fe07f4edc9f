"""Einsum: parse the equation, infer the shape, lower to Matmul or a loop nest.

Parsing: each operand's term is a list of letters where "..." stands for the operand's extra
leading-or-inner dims (numbered broadcast labels, right-aligned like numpy broadcasting). With
"->" the output term is given; without it the output is the broadcast labels followed by the
letters used exactly once, in alphabetical order. A label's size is the one non-1 size among its
uses (1 broadcasts); a repeated letter within one term takes a diagonal (its strides add up).

Lowering:
1) Two operands whose labels split cleanly into batch (both inputs and output), M (A and output),
   N (B and output) and K (both inputs, summed), each label used once per term and no
   broadcasting: each operand is copied (transposed) into a scratch panel laid out
   (batch, M, K) / (batch, K, N) (skipped when it already is), one `loops.Matmul` per batch
   element writes (batch, M, N), and a last transpose copies that to the output order
   (skipped when it already is).
2) Everything else: a nest over the output labels (outer loop parallel) and, inside, a nest over
   the summed labels accumulating the product of one element per operand.
float16/bfloat16 operands are multiplied and summed in f32 and rounded once (the reference's
rule; numpy's einsum has no bfloat16 loops, so folding widens them too).
"""

from __future__ import annotations

import math
import string

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const, row_major_strides
from onnxjit.ir.loops import Buffer, Matmul, Operand
from onnxjit.ir.narrow import is_narrow_array, widen
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, INTS, Types, accept_same
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import require_attr, tensor_input
from onnxjit.ir.types import NARROW_FLOATS, Dim, DType

_TYPES: Types = ((12, FLOATS | BF16 | INTS),)
_ELL = "..."


def _parse_term(node: Node, term: str) -> list[str]:
    """Letters of a term, with "..." kept as one token."""
    out: list[str] = []
    rest = term.strip()
    if rest.count(_ELL) > 1:
        raise ModelError(f"Einsum term '{term}' has more than one ellipsis", where=node)
    i = 0
    while i < len(rest):
        if rest.startswith(_ELL, i):
            out.append(_ELL)
            i += 3
        elif rest[i] in string.ascii_letters:
            out.append(rest[i])
            i += 1
        elif rest[i] == " ":
            i += 1
        else:
            raise ModelError(f"Einsum equation has an invalid character {rest[i]!r}", where=node)
    return out


def parse(node: Node, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """Labels of every input and of the output; ellipsis dims become labels '0', '1', ..."""
    eq = require_attr(node, "equation")
    eq = eq.decode() if isinstance(eq, bytes) else str(eq)
    lhs, arrow, rhs = eq.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ModelError(f"Einsum equation '{eq}' has {len(terms)} operands but the node has "
                         f"{len(ranks)} inputs", where=node)
    n_ell = 0
    ins: list[list[str]] = []
    for term, rank in zip(terms, ranks):
        toks = _parse_term(node, term)
        letters = len([t for t in toks if t != _ELL])
        if (_ELL not in toks and letters != rank) or letters > rank:
            raise ModelError(f"Einsum term '{term}' does not match an input of rank {rank}",
                             where=node)
        if _ELL in toks:
            k = rank - letters
            n_ell = max(n_ell, k)
            at = toks.index(_ELL)
            # Broadcast labels are right-aligned: the last ellipsis dim is label n_ell-1.
            toks[at:at + 1] = [f"#{j}" for j in range(-k, 0)]
        ins.append(toks)
    ell = [f"#{j}" for j in range(-n_ell, 0)]
    if arrow:
        out = _parse_term(node, rhs)
        if _ELL in out:
            at = out.index(_ELL)
            out[at:at + 1] = ell
    else:
        counts: dict[str, int] = {}
        for term in ins:
            for t in term:
                if not t.startswith("#"):
                    counts[t] = counts.get(t, 0) + 1
        out = ell + sorted(t for t, c in counts.items() if c == 1)
    used = {t for term in ins for t in term}
    for t in out:
        if t not in used:
            raise ModelError(f"Einsum output label '{t}' appears in no input", where=node)
        if out.count(t) > 1:
            raise ModelError(f"Einsum output label '{t}' appears twice", where=node)
    return ins, out


def label_sizes(node: Node, ins: list[list[str]], shapes: list[tuple]) -> dict[str, Dim]:
    sizes: dict[str, Dim] = {}
    for term, shape in zip(ins, shapes):
        for t, d in zip(term, shape):
            old = sizes.get(t, 1)
            if old == 1 or old is None and d != 1:
                sizes[t] = d
            elif d != 1 and d != old and isinstance(d, int) and isinstance(old, int):
                raise ModelError(f"Einsum label '{t}' has sizes {old} and {d}", where=node)
    return sizes


def _infer(node: Node) -> list:
    if not node.inputs:
        raise ModelError("Einsum needs at least one input", where=node)
    dt = accept_same(node, list(range(len(node.inputs))), _TYPES)
    shapes = [tensor_input(node, i).shape for i in range(len(node.inputs))]
    if any(s is None for s in shapes):
        require_attr(node, "equation")
        return tensor(dt, None)
    ins, out = parse(node, [len(s) for s in shapes])
    sizes = label_sizes(node, ins, shapes)
    return tensor(dt, tuple(sizes[t] for t in out))


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    eq = node.attr("equation")
    eq = eq.decode() if isinstance(eq, bytes) else str(eq)
    dt = inputs[0].dtype
    if is_narrow_array(inputs[0]):  # numpy's einsum has no loops for bfloat16: sum in f32
        inputs = [widen(np.asarray(a)) for a in inputs]
    eq = eq.replace(" ", "")
    with np.errstate(all="ignore"):
        try:  # onnx.reference's call: products through BLAS where numpy can (their FMAs
            # keep 1.8e308 * 1.37 - inf at -inf; numpy's own loops round the product to inf
            # first: NaN, fuzz seed 10072964, tier 0)
            y = np.einsum(eq, *inputs, optimize=True)
        except TypeError:
            y = np.einsum(eq, *inputs)
        return [np.asarray(y, dtype=dt)]


def _strides(term: list[str], shape: tuple, labels: list[str]) -> list[int]:
    """Stride of each of `labels` in an operand (0 when absent or broadcast; repeated labels
    add up: a diagonal)."""
    own = row_major_strides(shape)
    st = dict.fromkeys(labels, 0)
    for t, d, s in zip(term, shape, own):
        if d != 1 and t in st:
            st[t] += s
    return [st[t] for t in labels]


def _copy_permuted(b: Builder, dst: Buffer, src: Buffer, src_strides: list[int],
                   shape: list[int]) -> None:
    """dst (row-major over `shape`) = src read with `src_strides`."""
    with b.nest(shape, parallel_outer=True) as idx:
        b.store(dst, b.linear(idx, row_major_strides(shape)),
                b.load(src, b.linear(idx, src_strides)))


def _matmul_plan(ins: list[list[str]], out: list[str], shapes: list[tuple]):
    """(batch, M, N, K) label lists when the two-operand fast path applies, else None."""
    if len(ins) != 2:
        return None
    a, bt = ins
    if any(len(set(t)) != len(t) for t in (a, bt)):
        return None
    sizes: dict[str, int] = {}
    for term, shape in zip(ins, shapes):
        for t, d in zip(term, shape):
            if sizes.setdefault(t, d) != d:
                return None  # broadcasting: leave it to the general nest
    batch = [t for t in out if t in a and t in bt]
    m = [t for t in out if t in a and t not in bt]
    n = [t for t in out if t in bt and t not in a]
    k = [t for t in a if t in bt and t not in out]
    if any(t not in out and t not in k for t in a + bt):
        return None  # a label summed within one operand only
    return batch, m, n, k, sizes


def _lower(ctx: LowerContext, node: Node) -> None:
    bufs = [ctx.buf(v) for v in node.inputs]
    y = ctx.buf(node.outputs[0])
    shapes = [x.shape for x in bufs]
    ins, out = parse(node, [len(s) for s in shapes])
    if y.numel == 0:
        return
    b = Builder()
    plan = _matmul_plan(ins, out, shapes) if y.dtype.is_float else None
    if plan is not None and any(plan[1:4]) and all(x.numel for x in bufs):
        _lower_matmul(ctx, b, bufs, y, ins, out, plan)
        ctx.kernel("einsum", b.body)
        return
    sizes = label_sizes(node, ins, shapes)
    red = sorted({t for term in ins for t in term} - set(out))
    out_st = [_strides(ins_t, s, out) for ins_t, s in zip(ins, shapes)]
    red_st = [_strides(ins_t, s, red) for ins_t, s in zip(ins, shapes)]
    out_shape = [int(sizes[t]) for t in out]  # type: ignore[arg-type]
    red_shape = [int(sizes[t]) for t in red]  # type: ignore[arg-type]
    # float16/bfloat16 multiply and sum in f32 and round once, as the reference does
    dt = DType.FLOAT if y.dtype in NARROW_FLOATS else y.dtype
    with b.nest(out_shape, parallel_outer=True) as oi:
        bases = [b.linear(oi, st) for st in out_st]
        acc = b.var(const(0, dt), hint="acc")
        with b.nest(red_shape) as ri:
            prod: Operand | None = None
            for x, base, st in zip(bufs, bases, red_st):
                v = b.cast(b.load(x, b.iadd(base, b.linear(ri, st))), dt)
                prod = v if prod is None else b.op("mul", prod, v)
            assert prod is not None
            b.assign(acc, "add", acc, prod)
        b.store(y, b.linear(oi, row_major_strides(out_shape)), b.cast(acc, y.dtype))
    ctx.kernel("einsum", b.body)


def _lower_matmul(ctx: LowerContext, b: Builder, bufs: list[Buffer], y: Buffer,
                  ins: list[list[str]], out: list[str], plan: tuple) -> None:
    batch, ml, nl, kl, sizes = plan
    nb, m, n, k = (math.prod(sizes[t] for t in g) for g in (batch, ml, nl, kl))

    def panel(i: int, order: list[str]) -> Buffer:
        x, term = bufs[i], ins[i]
        if term == order:
            return x
        tmp = ctx.scratch("einsum_in", x.dtype, tuple(sizes[t] for t in order))
        _copy_permuted(b, tmp, x, _strides(term, x.shape, order), [sizes[t] for t in order])
        return tmp

    pa = panel(0, batch + ml + kl)
    pb = panel(1, batch + kl + nl)
    direct = out == batch + ml + nl
    c = y if direct else ctx.scratch("einsum_out", y.dtype, (nb, m, n))
    if k == 0:
        with b.loop(0, nb * m * n, parallel=True) as i:
            b.store(c, i, const(0, c.dtype))
    else:
        with b.loop(0, nb, parallel=nb > 1, hint="b") as bi:
            b.emit(Matmul(c, b.imul(bi, m * n), n, pa, b.imul(bi, m * k), k,
                          pb, b.imul(bi, k * n), n, m, n, k))
    if not direct:
        mid = batch + ml + nl
        mid_shape = tuple(sizes[t] for t in mid)
        _copy_permuted(b, y, c, _strides(mid, mid_shape, out), [sizes[t] for t in out])


op("Einsum", (12, 28), infer=_infer, evaluate=_evaluate, lower=_lower,
   doc="Einstein summation over the equation's labels")
