"""First-fit placement of temps in one arena, by live ranges (plan-memory's algorithm).

Temps are placed in order of their first kernel (ties: as given); each takes the lowest
`ALIGN`-aligned offset where it fits between the temps placed before it that are still live at
its first kernel (its conflicts). The arena's size is the highest end. The plan-memory pass runs
it once for a program's concrete sizes; a symbolic program runs it at every new shape it binds
(`onnxjit.dynamic`), which is why what does not depend on sizes is computed once, here, and why
this module imports nothing (the runtime's warm path loads it). `aligned_bytes` is storage that
starts at an ALIGN boundary as the arena's offsets do (constants, disk-cache reads).
"""

from __future__ import annotations

from typing import Any

ALIGN = 64


class FirstFit:
    """First fit for temps with fixed live ranges and sizes given later (a symbolic program's:
    `place` runs at every new shape, so what does not depend on sizes is computed here once).

    Temps are placed in order of their first kernel (ties: as given); each takes the lowest
    aligned offset where it fits between its `conflicts`, the temps placed before it and still
    live at its first kernel. Temps first touched at or after `n_kernels` get no space."""

    def __init__(self, ranges: list[tuple[int, int]], n_kernels: int) -> None:
        order = [t for t in sorted(range(len(ranges)), key=lambda t: ranges[t][0])
                 if ranges[t][0] < n_kernels]
        self.n = len(ranges)
        self.steps: list[tuple[int, tuple[int, ...]]] = []
        for k, t in enumerate(order):
            first = ranges[t][0]
            self.steps.append((t, tuple(u for u in order[:k] if ranges[u][1] >= first)))

    def place(self, sizes: list[int]) -> tuple[list[int], int]:
        """(offset of each temp, arena size) for the temps' byte sizes."""
        offsets, ends = [0] * self.n, [0] * self.n
        arena = 0
        for t, conflicts in self.steps:
            size = (max(sizes[t], 1) + ALIGN - 1) // ALIGN * ALIGN
            offset = 0
            if conflicts:
                for start, end in sorted([(offsets[u], ends[u]) for u in conflicts]):
                    if offset + size <= start:
                        break
                    if end > offset:
                        offset = (end + ALIGN - 1) // ALIGN * ALIGN
            offsets[t], ends[t] = offset, offset + size
            if offset + size > arena:
                arena = offset + size
        return offsets, arena


def aligned_bytes(size: int) -> Any:
    """A writeable uint8 numpy buffer of `size` bytes whose start is a multiple of ALIGN."""
    import numpy as np  # here: the module imports nothing

    raw = np.empty(size + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + size]
