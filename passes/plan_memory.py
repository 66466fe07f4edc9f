"""plan-memory: place every temp buffer in one arena, reusing memory by liveness.

Algorithm: a temp buffer (with the views aliasing it) is live from the first kernel that touches
it to the last. Walk the kernels in order; before kernel k, free the buffers whose last use was
before k; give each buffer first touched by kernel k the lowest 64-byte-aligned offset whose
range does not overlap a live buffer (first fit over the sorted live intervals). The arena size
is the highest end offset. Temps that no kernel touches get offset 0 and no space.
Constants whose storage starts off a cache line (numpy allocates at 16 bytes) get an aligned
copy (`align_consts`): a packed int8 weight 16 bytes off made each 64-byte load of the VNNI
microkernel span two lines (96x512x2048 DynamicQuantizeLinear + MatMulInteger 68-105 us ->
57-62 us, by where the allocator put it; LSTM, a 64x784x512 product 1.05x).

A symbolic program's temps have sizes only a call knows: the pass records each one's size
expression and live range (`Program.temps`) and the runtime runs the same first fit
(`FirstFit`, prepared once per program) for every concrete shape it binds.
"""

from __future__ import annotations

from onnxjit.ir.arena import ALIGN, FirstFit, aligned_bytes
from onnxjit.ir.loops import Buffer, Program, TempPlan
from onnxjit.passes import PassContext, PassResult

name = "plan-memory"
level = "loops"


def first_fit(temps: list[tuple[int, int, int]], n_kernels: int) -> tuple[list[int], int]:
    """Offsets for temps given as (bytes, first kernel, last kernel), and the arena size."""
    plan = FirstFit([(f, la) for _, f, la in temps], n_kernels)
    return plan.place([n for n, _, _ in temps])


def align_consts(program: Program) -> None:
    """Give every constant storage that starts off a cache line (numpy allocates at 16 bytes)
    an aligned copy: the microkernels read packed weights a vector at a time."""
    for b in program.consts:
        data = b.data
        if data is not None and data.nbytes and data.ctypes.data % ALIGN:
            copy = aligned_bytes(data.nbytes).view(data.dtype).reshape(data.shape)
            copy[...] = data
            b.data = copy


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
    align_consts(program)
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
