"""Index arithmetic: the integer ops whose results only address memory, emitted with `nsw`.

The loop IR's i64 `add`, `sub` and `mul` wrap (an int64 tensor's Add must), so the code
generator emits them without flags, and LLVM must then assume an element index such as
`row + 2 * i` may wrap: it cannot prove that `x[row + 2*i]` advances by two elements per
iteration when the trip count is a run-time value (a symbolic program's sizes), so a strided
loop is not vectorized with interleaved loads but with one scalar load per lane. An index
never wraps: every element index the loop IR produces is inside its buffer (the GEPs are
`inbounds`), and the intermediate sums are offsets of the same magnitude. Algorithm
(`index_vars`): the candidates are the variables defined once, by an i64 `add`/`sub`/`mul` of
i64 operands; a candidate stays while each of its uses is a Load's or Store's index or an
operand of a candidate that stays (fixed point, removing candidates with any other use: a
stored value, a loop bound, a comparison, a Matmul offset...). Those are emitted `nsw`.
"""

from __future__ import annotations

from collections import defaultdict

from onnxjit.ir.loops import Load, Loop, Matmul, Op, Stmt, Store, Var, walk
from onnxjit.ir.types import DType

#: The ops given `nsw` when they compute an index.
INDEX_OPS = frozenset({"add", "sub", "mul"})


def _operands(s: Stmt) -> list[object]:
    """The operands of `s` that are not a Load's or Store's index."""
    if isinstance(s, Op):
        return list(s.args)
    if isinstance(s, Store):
        return [s.value]
    if isinstance(s, Loop):
        return [s.start, s.stop]
    if isinstance(s, Matmul):
        return [s.c_off, s.a_off, s.b_off, s.ldc, s.lda, s.ldb, s.m, s.n, s.k]
    if isinstance(s, Load):
        return []
    return [getattr(s, "cond", None)]


def index_vars(body: list[Stmt]) -> set[Var]:
    """The variables of `body` whose defining op may carry `nsw` (see the module docstring)."""
    defs: dict[Var, int] = defaultdict(int)
    cand: set[Var] = set()
    consumers: dict[Var, set[Var | None]] = defaultdict(set)  # None: a use that is no index
    for s in walk(body):
        if isinstance(s, (Op, Load)):
            defs[s.dst] += 1
        if isinstance(s, Op) and s.op in INDEX_OPS and s.dst.dtype == DType.INT64 and all(
                a.dtype == DType.INT64 for a in s.args):
            cand.add(s.dst)
        for a in _operands(s):
            if isinstance(a, Var):
                consumers[a].add(s.dst if isinstance(s, Op) else None)
    keep = {v for v in cand if defs[v] == 1}
    changed = True
    while changed:
        drop = {v for v in keep if any(c is None or c not in keep for c in consumers[v])}
        keep -= drop
        changed = bool(drop)
    return keep
