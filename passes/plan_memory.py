"""plan-memory: place every temp buffer in one arena, reusing memory by liveness.

Algorithm: a temp buffer (with the views aliasing it) is live from the first kernel that touches
it to the last. Walk the kernels in order; before kernel k, free the buffers whose last use was
before k; give each buffer first touched by kernel k the lowest 64-byte-aligned offset whose
range does not overlap a live buffer (first fit over the sorted live intervals). The arena size
is the highest end offset. Temps that no kernel touches get offset 0 and no space.

A symbolic program's temps have sizes only a call knows: the pass records each one's size
expression and live range (`Program.temps`) and the runtime runs the same first fit
(`first_fit`) for every concrete shape it binds.
"""

from __future__ import annotations

from onnxjit.ir.loops import Buffer, Program, TempPlan
from onnxjit.passes import PassContext, PassResult

name = "plan-memory"
level = "loops"

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def first_fit(temps: list[tuple[int, int, int]], n_kernels: int) -> tuple[list[int], int]:
    """Offsets for temps given as (bytes, first kernel, last kernel), and the arena size."""
    offsets = [0] * len(temps)
    live: list[tuple[int, int, int]] = []  # (offset, end, temp index)
    arena = 0
    order = sorted(range(len(temps)), key=lambda t: temps[t][1])
    nxt = 0
    for k in range(n_kernels):
        live = [x for x in live if temps[x[2]][2] >= k]
        while nxt < len(order) and temps[order[nxt]][1] == k:
            t = order[nxt]
            nxt += 1
            size = _align(max(temps[t][0], 1))
            offset = 0
            for start, end, _ in sorted(live):
                if offset + size <= start:
                    break
                offset = max(offset, _align(end))
            offsets[t] = offset
            live.append((offset, offset + size, t))
            arena = max(arena, offset + size)
    return offsets, arena


def run(program: Program, ctx: PassContext) -> PassResult:
    first: dict[Buffer, int] = {}
    last: dict[Buffer, int] = {}
    for k, kernel in enumerate(program.kernels):
        for b in kernel.buffers():
            r = b.root()
            if r.kind == "temp":
                first.setdefault(r, k)
                last[r] = k
    roots = list(first)
    if program.symbolic:
        program.temps = [TempPlan(b, b.nbytes, first[b], last[b]) for b in roots]
        return PassResult(program, True)
    offsets, _ = first_fit([(b.nbytes, first[b], last[b]) for b in roots],  # type: ignore
                           len(program.kernels))
    for b, off in zip(roots, offsets):
        b.offset = off
    for b in program.buffers:
        if b.kind == "temp" and b.offset < 0:
            b.offset = 0
    return PassResult(program, True)
