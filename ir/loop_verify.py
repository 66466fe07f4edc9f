"""Verifier of the loop IR: the invariants code generation relies on.

`verify_program(program)` raises `CompileError` naming the kernel and statement at fault. It runs
after every loop-level pass (the driver's hook), so it is one linear walk.

Algorithm:
1) buffers: unique names, a known kind, shapes of sizes (ints >= 0, or `Sym`s in a symbolic
   program, whose view sizes cannot be compared here); inputs and outputs have
   dense, distinct slots (inputs 0..n-1, outputs n..n+m-1); consts carry an array of their dtype
   and size; views have a base, fit inside it at their byte offset and are not bases of a
   cycle; temps have an aligned offset once plan-memory has run (-1 before);
2) kernels in order, each statement in program order with the set of variables assigned so
   far (a variable assigned inside a loop stays defined after it: the loop IR has no block
   scoping, code generation gives every Var one stack slot): operands are defined Vars or
   Consts; every Op has its arity and its result dtype (`loops.result_dtype`); loads and stores
   move the buffer's dtype at an i64 index (constant indexes are bounds-checked); nothing
   stores into an input or const buffer; loop bounds are i64 with a positive step; a Check's
   or Break's condition is a bool, and a Break sits inside a loop whose innermost enclosing
   loop is serial; a Matmul's windows have consistent dtypes and, for constant offsets,
   fit inside their buffers (a packed B: k*n contiguous float elements, not transposed).
"""

from __future__ import annotations

from collections.abc import Sequence

from onnxjit.errors import CompileError
from onnxjit.ir.loops import (
    SCALAR_OPS,
    Break,
    Buffer,
    Check,
    Const,
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
    result_dtype,
)
from onnxjit.ir.quad_panels import is_int8_product, packed_size
from onnxjit.ir.types import DType, Sym

KINDS = ("input", "output", "const", "temp", "view", "dims")


def verify_program(program: Program) -> None:
    """Raise CompileError if `program` breaks the loop IR's invariants."""
    if not isinstance(program, Program):
        raise CompileError(f"expected a loop-IR Program, got {type(program).__name__}")
    known = _check_buffers(program.buffers)
    names: set[str] = set()
    for k in program.kernels:
        if k.name in names:
            raise CompileError(f"kernel @{k.name} is defined twice")
        names.add(k.name)
        _KernelChecker(k, known).body(k.body)


def _check_buffers(buffers: Sequence[Buffer]) -> set[int]:
    names: set[str] = set()
    for b in buffers:
        if b.name in names:
            raise CompileError(f"buffer %{b.name} is defined twice")
        names.add(b.name)
        if b.kind not in KINDS:
            raise CompileError(f"buffer %{b.name} has unknown kind '{b.kind}'")
        if not all(isinstance(d, Sym) or isinstance(d, int) and d >= 0 for d in b.shape):
            raise CompileError(f"buffer %{b.name} has a malformed shape {b.shape}")
        if not b.is_static and b.kind in ("const", "view") and b.offset not in (-1, 0) \
                and not isinstance(b.offset, int):
            raise CompileError(f"buffer %{b.name}: a symbolic view needs a constant offset")
        if b.kind == "const":
            if b.data is None or b.data.size != b.numel or b.data.dtype != b.dtype.numpy:
                raise CompileError(f"const buffer %{b.name} must hold a {b.dtype.short} array "
                                   f"of {b.numel} elements")
        if (b.kind == "view") != (b.base is not None):
            raise CompileError(f"buffer %{b.name}: only views have a base")
        if b.kind == "temp" and b.offset >= 0 and b.offset % 64:
            raise CompileError(f"temp buffer %{b.name} has a misaligned offset {b.offset}")
    ids = {id(b) for b in buffers}
    for b in buffers:
        if b.base is None:
            continue
        seen = {id(b)}
        r = b
        while r.base is not None:
            r = r.base
            if id(r) in seen or id(r) not in ids:
                raise CompileError(f"view %{b.name} has a base outside the program or a cycle")
            seen.add(id(r))
        off = max(b.offset, 0)
        if not (b.is_static and b.base.is_static and r.is_static):
            if off % b.dtype.itemsize:
                raise CompileError(f"view %{b.name} at byte {off} is misaligned")
            continue  # symbolic sizes do not compare; the fit follows from the shape rules
        if off % b.dtype.itemsize or off + b.nbytes > b.base.nbytes:
            raise CompileError(f"view %{b.name} ({b.nbytes} bytes at byte {off}) does not fit "
                               f"its base %{b.base.name} ({b.base.nbytes} bytes)")
        if b.nbytes > r.nbytes:
            raise CompileError(f"view %{b.name} ({b.nbytes} bytes) is larger than its root "
                               f"%{r.name} ({r.nbytes} bytes)")
    for kind, first in (("input", 0), ("output", sum(b.kind == "input" for b in buffers))):
        slots = sorted(b.slot for b in buffers if b.kind == kind)
        if slots != list(range(first, first + len(slots))):
            raise CompileError(f"{kind} buffers have slots {slots}; expected "
                               f"{list(range(first, first + len(slots)))}")
    consts = sorted(b.slot for b in buffers if b.kind == "const")
    if consts != list(range(len(consts))):
        raise CompileError(f"const buffers have slots {consts}; expected 0..{len(consts) - 1}")
    return ids


class _KernelChecker:
    def __init__(self, kernel: Kernel, buffers: set[int]):
        self.kernel = kernel
        self.buffers = buffers
        self.defined: set[Var] = set()
        #: parallel flags of the enclosing loops, innermost last
        self.loops: list[bool] = []

    def fail(self, stmt: Stmt, message: str) -> CompileError:
        return CompileError(f"kernel @{self.kernel.name}: {type(stmt).__name__}: {message}")

    def operand(self, stmt: Stmt, x: Operand) -> DType:
        if isinstance(x, (Const, SymVal)):
            return x.dtype
        if not isinstance(x, Var):
            raise self.fail(stmt, f"operand {x!r} is neither a Var, a Const nor a SymVal")
        if x not in self.defined:
            raise self.fail(stmt, f"variable {x!r} is read before it is assigned")
        return x.dtype

    def index(self, stmt: Stmt, buf: Buffer, idx: Operand) -> None:
        if id(buf) not in self.buffers:
            raise self.fail(stmt, f"buffer %{buf.name} is not in the program")
        if self.operand(stmt, idx) != DType.INT64:
            raise self.fail(stmt, f"index into %{buf.name} must be i64")
        if isinstance(idx, Const) and buf.is_static and not 0 <= int(idx.value) < buf.numel:
            raise self.fail(stmt, f"constant index {idx.value} is out of range for "
                                  f"%{buf.name} ({buf.numel} elements)")

    def assign(self, stmt: Stmt, dst: Var, dtype: DType) -> None:
        if not isinstance(dst, Var):
            raise self.fail(stmt, f"destination {dst!r} is not a Var")
        if dst.dtype != dtype:
            raise self.fail(stmt, f"{dst!r} is {dst.dtype.short} but gets a {dtype.short}")
        self.defined.add(dst)

    def body(self, body: Sequence[Stmt]) -> None:
        for s in body:
            self.stmt(s)

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Op):
            if s.op not in SCALAR_OPS:
                raise self.fail(s, f"unknown scalar op '{s.op}'")
            arity = SCALAR_OPS[s.op][0]
            if len(s.args) != arity:
                raise self.fail(s, f"'{s.op}' takes {arity} operands, got {len(s.args)}")
            dts = [self.operand(s, a) for a in s.args]
            if s.op == "select":
                if dts[0] != DType.BOOL or dts[1] != dts[2]:
                    raise self.fail(s, f"select needs (bool, T, T), got {dts}")
            elif arity == 2 and dts[0] != dts[1] and s.op != "pow":
                raise self.fail(s, f"'{s.op}' operands differ in dtype: {dts}")
            self.assign(s, s.dst, result_dtype(s.op, s.args, s.dst.dtype))
        elif isinstance(s, Load):
            self.index(s, s.buf, s.index)
            self.assign(s, s.dst, s.buf.dtype)
        elif isinstance(s, Store):
            self.index(s, s.buf, s.index)
            if s.buf.root().kind in ("input", "const"):
                raise self.fail(s, f"store into read-only buffer %{s.buf.name}")
            if self.operand(s, s.value) != s.buf.dtype:
                raise self.fail(s, f"stores a {s.value.dtype.short} into %{s.buf.name} "
                                   f"({s.buf.dtype.short})")
        elif isinstance(s, Loop):
            for x in (s.start, s.stop):
                if self.operand(s, x) != DType.INT64:
                    raise self.fail(s, "loop bounds must be i64")
            if not isinstance(s.step, int) or s.step <= 0:
                raise self.fail(s, f"loop step must be a positive int, got {s.step!r}")
            self.assign(s, s.var, DType.INT64)
            self.loops.append(s.parallel)
            self.body(s.body)
            self.loops.pop()
        elif isinstance(s, Check):
            if self.operand(s, s.cond) != DType.BOOL:
                raise self.fail(s, "condition must be a bool")
        elif isinstance(s, Break):
            if self.operand(s, s.cond) != DType.BOOL:
                raise self.fail(s, "condition must be a bool")
            if not self.loops or self.loops[-1]:
                raise self.fail(s, "a break must be inside a loop, and its innermost "
                                   "enclosing loop must be serial")
        elif isinstance(s, Matmul):
            self.matmul(s)
        else:
            raise self.fail(s, "unknown statement")

    def matmul(self, s: Matmul) -> None:
        for buf, off in ((s.a, s.a_off), (s.b, s.b_off), (s.c, s.c_off)):
            if id(buf) not in self.buffers:
                raise self.fail(s, f"buffer %{buf.name} is not in the program")
            if self.operand(s, off) != DType.INT64:
                raise self.fail(s, f"offset into %{buf.name} must be i64")
        for size in (s.m, s.n, s.k, s.lda, s.ldb, s.ldc):
            if isinstance(size, Var) and self.operand(s, size) != DType.INT64:
                raise self.fail(s, "a run-time size must be an i64 variable")
        quads = is_int8_product(s)
        if quads and not (s.b_packed and not s.a_trans and not s.b_trans and s.alpha == 1):
            raise self.fail(s, "an 8-bit product needs B packed in quads, no ^T and alpha 1")
        if s.rank1 and not quads:
            raise self.fail(s, "rank-1 terms on a product that is not an 8-bit one")
        for t in s.rank1:
            for buf, off in ((t.row, t.row_off), (t.col, t.col_off)):
                if id(buf) not in self.buffers or buf.dtype != DType.INT32:
                    raise self.fail(s, f"rank-1 term buffer %{buf.name} must be an i32 buffer "
                                       "of the program")
                if self.operand(s, off) != DType.INT64:
                    raise self.fail(s, f"offset into %{buf.name} must be i64")
            if t.row_step not in (0, 1):
                raise self.fail(s, "a rank-1 term's row step must be 0 or 1")
        if not quads and not (s.a.dtype == s.b.dtype == s.c.dtype):
            raise self.fail(s, f"operands differ in dtype: {s.a.dtype.short}, "
                               f"{s.b.dtype.short}, {s.c.dtype.short}")
        if s.c.root().kind in ("input", "const"):
            raise self.fail(s, f"writes read-only buffer %{s.c.name}")
        if not all(isinstance(x, int) for x in (s.m, s.n, s.k, s.lda, s.ldb, s.ldc)):
            return  # symbolic sizes: the window checks below need numbers
        a_rows, a_cols = (s.k, s.m) if s.a_trans else (s.m, s.k)
        b_rows, b_cols = (s.n, s.k) if s.b_trans else (s.k, s.n)
        b_window = (s.b, s.b_off, s.ldb, b_rows, b_cols)
        if quads:
            b_window = (s.b, s.b_off, 1, 1, packed_size(s.k, s.n, s.ldb))
        elif s.b_packed:
            if s.b_trans or s.ldb < 1 or not s.b.dtype.is_float:
                raise self.fail(s, "packed B needs a float dtype, no ^T and a panel width >= 1")
            b_window = (s.b, s.b_off, s.k * s.n, 1, s.k * s.n)  # k*n contiguous elements
        # A and B are read only: their rows may overlap (ld < cols; `conv.strided_windows`
        # reads a 1-D conv's windows of X in place); C's rows may not
        for j, (buf, off, ld, rows, cols) in enumerate((
                (s.a, s.a_off, s.lda, a_rows, a_cols), b_window,
                (s.c, s.c_off, s.ldc, s.m, s.n))):
            least = cols if j == 2 else min(cols, 1)
            if min(rows, cols) < 0 or (rows and cols and ld < least):
                raise self.fail(s, f"window {rows}x{cols} with leading dim {ld} in "
                                   f"%{buf.name} is malformed")
            if isinstance(off, Const) and rows and cols and buf.is_static:
                last = int(off.value) + (rows - 1) * ld + cols - 1
                if int(off.value) < 0 or last >= buf.numel:
                    raise self.fail(s, f"window [{off.value}, {last}] is out of range for "
                                       f"%{buf.name} ({buf.numel} elements)")

