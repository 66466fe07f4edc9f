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
"""

from __future__ import annotations

import ctypes
import os
from typing import NamedTuple

from llvmlite import ir

RECORDS = 4096
FIELDS = 5
ENV = "ONNXJIT_POOL_TRACE"
CLOCK_MONOTONIC = 1

I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
_RING = ir.ArrayType(I64, 1 + RECORDS * FIELDS)


def enabled() -> bool:
    """True when this process builds its pool with tracing (`ENV` set)."""
    return os.environ.get(ENV, "") not in ("", "0")


class Record(NamedTuple):
    n: int
    start: int
    caller_done: int
    worker_done: int
    end: int


class Tracer:
    """Emits the ring, its clock readings and its records into the pool module."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.ring = self._global("onnxjit_pool_trace", _RING)
        self.wdone = self._global("onnxjit_pool_trace_wdone", I64)
        self.clock = ir.Function(module, ir.FunctionType(I32, [I32, PTR]), "clock_gettime")
        self.timespecs: dict[int, ir.Value] = {}  # id(function) -> its struct timespec

    def _global(self, name: str, ty: ir.Type) -> ir.GlobalVariable:
        gv = ir.GlobalVariable(self.module, ty, name)
        gv.initializer = ir.Constant(ty, None)
        gv.linkage, gv.align = "internal", 64
        gv.type = PTR  # opaque pointers (LLVM 22)
        return gv

    def now(self, b: ir.IRBuilder) -> ir.Value:
        """CLOCK_MONOTONIC in nanoseconds."""
        ts = self._entry_alloca(b)
        b.call(self.clock, [ir.Constant(I32, CLOCK_MONOTONIC), ts])
        sec = b.load(ts, typ=I64)
        nsec = b.load(b.gep(ts, [ir.Constant(I64, 1)], source_etype=I64), typ=I64)
        return b.add(b.mul(sec, ir.Constant(I64, 1_000_000_000)), nsec)

    def _entry_alloca(self, b: ir.IRBuilder) -> ir.Value:
        """A struct timespec in the function's entry block (one a function)."""
        fn = b.block.function
        if id(fn) not in self.timespecs:
            if b.block is fn.entry_basic_block:
                ts = b.alloca(ir.ArrayType(I64, 2))
            else:
                entry = ir.IRBuilder(fn.entry_basic_block)
                entry.position_at_start(fn.entry_basic_block)
                ts = entry.alloca(ir.ArrayType(I64, 2))
            ts.type = PTR  # opaque pointers (LLVM 22)
            self.timespecs[id(fn)] = ts
        return self.timespecs[id(fn)]

    def reset_worker_done(self, b: ir.IRBuilder) -> None:
        b.atomic_rmw("xchg", self.wdone, ir.Constant(I64, 0), "seq_cst")

    def worker_done(self, b: ir.IRBuilder) -> None:
        """A worker finished its chunks: the latest such time wins."""
        b.atomic_rmw("max", self.wdone, self.now(b), "seq_cst")

    def record(self, b: ir.IRBuilder, n: ir.Value, start: ir.Value, caller_done: ir.Value,
               worker_done: ir.Value) -> None:
        """Append (n, start, caller_done, worker_done, now) to the ring."""
        end = self.now(b)
        zero = ir.Constant(I64, 0)
        count = b.gep(self.ring, [zero, zero], source_etype=_RING)
        i = b.atomic_rmw("add", count, ir.Constant(I64, 1), "seq_cst")
        slot = b.add(ir.Constant(I64, 1), b.mul(b.urem(i, ir.Constant(I64, RECORDS)),
                                                ir.Constant(I64, FIELDS)))
        for k, v in enumerate((n, start, caller_done, worker_done, end)):
            b.store(v, b.gep(self.ring, [zero, b.add(slot, ir.Constant(I64, k))],
                             source_etype=_RING))

    def address(self, b: ir.IRBuilder) -> ir.Value:
        return b.ptrtoint(self.ring, I64)


_seen = 0


def records(address: int) -> list[Record]:
    """The records written since the previous call (oldest first), from the ring at
    `address` (see the module docstring)."""
    global _seen
    if not address:
        return []
    ring = (ctypes.c_int64 * (1 + RECORDS * FIELDS)).from_address(address)
    count = ring[0]
    first = max(_seen, count - RECORDS)
    out = []
    for i in range(first, count):
        at = 1 + (i % RECORDS) * FIELDS
        out.append(Record(*ring[at:at + FIELDS]))
    _seen = count
    return out
