"""Timing of every dispatch of the worker pool, for finding where two threads lose time.

With $ONNXJIT_POOL_TRACE set (not "" or "0") when the pool is built, `onnxjit_parallel_for`
writes one record per call into a ring of RECORDS records in the pool module:

    (n, start, caller_done, worker_done, end)

n: the loop's iterations; times in nanoseconds of CLOCK_MONOTONIC (`clock_gettime`, a vDSO
call of some 20 ns, so tracing barely perturbs what it measures): `start` on entry, `end`
before returning, `caller_done` when the dispatching thread found no chunk left to take (the
time from there to `end` is the caller waiting for the workers), `worker_done` when the last
worker finished its chunks (from there to `end` a worker idled: the caller was late); both 0
for a loop run serially (too little work, one thread, or another thread dispatching). A slot is
claimed with an atomic add on the ring's count, so concurrent serial callers never share one.
`records()` returns the records written since its previous call (at most RECORDS of them).

Algorithm of the reader: the ring is `1 + RECORDS * FIELDS` i64 words, word 0 the count of
records ever written; record i lives at 1 + (i mod RECORDS) * FIELDS. The pool's control
function returns the ring's address for argument 2 (0 in a pool built without tracing).
A traced pool is never stored in, or loaded from, a cache entry (`runtime._ensure_pool`).
This module reads records without llvmlite (a warm start never imports it); `pool_trace_ir`
emits the recording code.
"""

from __future__ import annotations

import ctypes
import os
from typing import NamedTuple

RECORDS = 4096
FIELDS = 5
ENV = "ONNXJIT_POOL_TRACE"


def enabled() -> bool:
    """True when this process builds its pool with tracing (`ENV` set)."""
    return os.environ.get(ENV, "") not in ("", "0")


class Record(NamedTuple):
    n: int
    start: int
    caller_done: int
    worker_done: int
    end: int


_seen = 0


def records(address: int) -> list[Record]:
    """The records written since the previous call (oldest first), from the ring at
    `address` (see the module docstring)."""
    global _seen
    if not address:
        return []
    ring = (ctypes.c_int64 * (1 + RECORDS * FIELDS)).from_address(address)
    count = ring[0]
    if count < _seen:  # a forked child: its pool's globals were zeroed
        _seen = 0
    first = max(_seen, count - RECORDS)
    out = []
    for i in range(first, count):
        at = 1 + (i % RECORDS) * FIELDS
        out.append(Record(*ring[at:at + FIELDS]))
    _seen = count
    return out
