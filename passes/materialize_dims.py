"""materialize-dims: symbolic sizes become loads from the program's `dims` table.

A symbolic program (`loops.Program.symbolic`) reads its sizes at run time. Code generation sees
only variables and constants, so this pass, the last on the loop IR, rewrites every symbolic
size of a kernel into a variable loaded once at the kernel's start: `SymVal` operands (loop
bounds, index strides and offsets, values stored) and `Sym` Matmul sizes and leading dims.

Algorithm: give each distinct expression a slot of one i64 buffer of kind `dims`, in order of
first use, then one slot per temp for its arena offset (`"@<temp>"`, placed by the runtime:
`Program.temps`); `Program.dims` lists the slots' expressions, which the runtime evaluates for
each concrete shape it binds (the table is passed after the constants and the pool's slots).
In each kernel, a prologue loads each slot the kernel uses into a variable, which replaces the
expression everywhere in the kernel; each variable's size hint goes into `Kernel.size_hints`
(cost estimates for parallel loops). A static program is left as it is.
"""

from __future__ import annotations

from onnxjit.ir.loops import (
    Break,
    Buffer,
    Check,
    Kernel,
    Load,
    Loop,
    Matmul,
    Op,
    Operand,
    Program,
    Stmt,
    Store,
    SymVal,
    Var,
    i64,
)
from onnxjit.ir.symbolic import hint
from onnxjit.ir.types import DType, Sym
from onnxjit.passes import PassContext, PassResult

name = "materialize-dims"
level = "loops"


class _Table:
    def __init__(self) -> None:
        self.slots: dict[Sym, int] = {}
        self.buf = Buffer("dims", DType.INT64, (0,), "dims")

    def slot(self, e: Sym) -> int:
        return self.slots.setdefault(e, len(self.slots))


class _Kernel:
    """Rewrites one kernel: symbolic sizes -> variables loaded in a prologue."""

    def __init__(self, table: _Table, kernel: Kernel):
        self.table = table
        self.kernel = kernel
        self.vars: dict[Sym, Var] = {}
        self.prologue: list[Stmt] = []

    def var(self, e: Sym) -> Var:
        v = self.vars.get(e)
        if v is None:
            text = "".join(c if c.isalnum() else "_" for c in str(e))[:24]
            v = self.vars[e] = Var(DType.INT64, f"d_{text}")
            self.prologue.append(Load(v, self.table.buf, i64(self.table.slot(e))))
            self.kernel.size_hints[v] = hint(e)
        return v

    def op(self, x: Operand) -> Operand:
        return self.var(x.expr) if isinstance(x, SymVal) else x

    def size(self, x: object) -> object:
        return self.var(x) if isinstance(x, Sym) else x

    def body(self, body: list[Stmt]) -> None:
        for s in body:
            if isinstance(s, Op):
                s.args = tuple(self.op(a) for a in s.args)
            elif isinstance(s, Load):
                s.index = self.op(s.index)
            elif isinstance(s, Store):
                s.index, s.value = self.op(s.index), self.op(s.value)
            elif isinstance(s, Loop):
                s.start, s.stop = self.op(s.start), self.op(s.stop)
                self.body(s.body)
            elif isinstance(s, (Check, Break)):
                s.cond = self.op(s.cond)
            elif isinstance(s, Matmul):
                s.c_off, s.a_off, s.b_off = (self.op(x) for x in (s.c_off, s.a_off, s.b_off))
                for t in s.rank1:
                    t.row_off, t.col_off = self.op(t.row_off), self.op(t.col_off)
                for f in ("m", "n", "k", "lda", "ldb", "ldc"):
                    setattr(s, f, self.size(getattr(s, f)))

    def run(self) -> None:
        self.body(self.kernel.body)
        self.kernel.body[:0] = self.prologue


def run(program: Program, ctx: PassContext) -> PassResult:
    if not program.symbolic:
        return PassResult(program, False)
    table = _Table()
    for k in program.kernels:
        _Kernel(table, k).run()
    for t in program.temps:
        table.slot(Sym.var("@" + t.buffer.name))
    table.buf.shape = (max(1, len(table.slots)),)
    program.buffers.append(table.buf)
    program.dims = sorted(table.slots, key=table.slots.__getitem__)
    return PassResult(program, True)
