"""The pool module's dispatch records (`pool_trace`): the ring, the clock, the stores.

Algorithm: two internal globals of the pool (zeroed with its others after a fork): the ring
(a count word, then RECORDS records of FIELDS words) and the last worker's finishing time;
`now` calls clock_gettime(CLOCK_MONOTONIC) into a struct timespec allocated once per
function; `record` claims a slot with an atomic add on the count and stores the record's
words; workers publish their finishing time with an atomic max.
"""

from __future__ import annotations

from llvmlite import ir

from onnxjit.codegen.pool_trace import FIELDS, RECORDS

CLOCK_MONOTONIC = 1
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
_RING = ir.ArrayType(I64, 1 + RECORDS * FIELDS)


class Tracer:
    """Emits the ring, its clock readings and its records into the pool module."""

    def __init__(self, module: ir.Module, declare):
        """`declare(name, type, align)`: the pool module's internal zeroed global."""
        self.ring = declare("trace", _RING, 64)
        self.wdone = declare("trace_wdone", I64, 8)
        self.clock = ir.Function(module, ir.FunctionType(I32, [I32, PTR]), "clock_gettime")
        self.timespecs: dict[int, ir.Value] = {}  # id(function) -> its struct timespec

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
