"""plan-memory: place every temp buffer in one arena, reusing memory by liveness.

Algorithm: a temp buffer (with the views aliasing it) is live from the first kernel that touches
it to the last. Walk the kernels in order; before kernel k, free the buffers whose last use was
before k; give each buffer first touched by kernel k the lowest 64-byte-aligned offset whose
range does not overlap a live buffer (first fit over the sorted live intervals). The arena size
is the highest end offset. Temps that no kernel touches get offset 0 and no space.
"""

from __future__ import annotations

from onnxjit.ir.loops import Buffer, Program
from onnxjit.passes import PassContext, PassResult

name = "plan-memory"
level = "loops"

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def run(program: Program, ctx: PassContext) -> PassResult:
    first: dict[Buffer, int] = {}
    last: dict[Buffer, int] = {}
    for k, kernel in enumerate(program.kernels):
        for b in kernel.buffers():
            r = b.root()
            if r.kind == "temp":
                first.setdefault(r, k)
                last[r] = k
    live: list[tuple[int, int, Buffer]] = []  # (offset, end, buffer)
    for k in range(len(program.kernels)):
        live = [x for x in live if last[x[2]] >= k]
        for b in (b for b, f in first.items() if f == k):
            size = _align(max(b.nbytes, 1))
            offset = 0
            for start, end, _ in sorted(live, key=lambda x: x[0]):
                if offset + size <= start:
                    break
                offset = max(offset, _align(end))
            b.offset = offset
            live.append((offset, offset + size, b))
    for b in program.buffers:
        if b.kind == "temp" and b.offset < 0:
            b.offset = 0
    return PassResult(program, True)
