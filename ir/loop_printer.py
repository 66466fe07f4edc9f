"""The text form of the loop IR: `print_program(program) -> str` (parsed by `ir.loop_parser`).

    program @main {
      buffer %x: f32[2,8] input slot=0
      buffer %w: f32[8,6] const slot=0 = blob0
      buffer %t: f32[2,6] temp offset=0
      buffer %v: f32[12] view base=%t
      kernel @fused {
        for %i0: i64 = 0 to 12 step 4 parallel {
          %0: f32 = load %x[%i0]
          %1: f32 = add %0, 0.5:f32
          store %t[%i0], %1
        }
        check %ok: bool, "index out of range"
        break if %done
        matmul %t[0, ld=6] += %x[%o, ld=8]^T * %w[0, ld=8] {m = 2, n = 6, k = 8, alpha = 1.0}
        matmul %t[0, ld=6] = %x[0, ld=8] * %wp[0, ld=64]^P {m = 2, n = 6, k = 8, alpha = 1.0}
      }
    }
    resources { blob0 = "<base64>" }

Algorithm: buffers are named once for the program, variables once per kernel (a `Namer` that
starts from the buffers' names, so no variable looks like a buffer), from their hints in print
order. A variable's first appearance in a kernel's text carries its dtype (`%acc: f32`), later
ones do not, so a reassigned accumulator reads `%acc = add %acc, %3`. Constant operands print
bare when i64 ints or bools, else `value:dtype` with the value written exactly (`text_consts`):
`0.5:f32`, `-0.0:f64`, `nan:f32`, `3:i32`. A buffer's data prints inline when small, else as a
blob in the trailing resources section. A Matmul's B window ends in `^P` when B is stored in
packed panels (`Matmul.b_packed`; ld is then the panel width). A kernel whose float products
fuse with the sums right after them (`Kernel.contract`) prints as `kernel @name contract {`;
one whose loops may use gather loads (`Kernel.gather`) as `kernel @name gather {`.

Symbolic programs: sizes print as dims do in types (`text_types.dim_text`: `S`, `(S*384)`), in
buffer shapes, Matmul sizes and leading dims; a `SymVal` operand prints as `size(S*384)`. Their
program-level facts come before the kernels, one line each: `assume S = 128, "why"`, then
`temp %t size=(S*1536) live=2 to 5` (`Program.temps`) and `dims [S, (S*384), "@t"]`
(`Program.dims`, once `materialize-dims` has run; `"@t"` is temp %t's arena offset).
"""

from __future__ import annotations

import numpy as np

from onnxjit.ir.loops import (
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
)
from onnxjit.ir.printer import const_text
from onnxjit.ir.text_consts import Blobs, format_float
from onnxjit.ir.text_lexer import Namer, name_text, quote
from onnxjit.ir.text_types import dim_text, expr_text
from onnxjit.ir.types import DType, TensorType

#: Words that follow `=` or start a statement; op names spelled like them are quoted.
STMT_WORDS = frozenset({"load", "store", "check", "break", "matmul", "for", "kernel",
                        "buffer"})


def print_program(program: Program) -> str:
    """The text of a loop-IR program; deterministic, and `parse_program` reads it back."""
    p = _Printer()
    return p.program(program)


def const_operand(c: Const) -> str:
    v, d = c.value, c.dtype
    if isinstance(v, (bool, np.bool_)):
        text = "true" if v else "false"
        return text if d == DType.BOOL else f"{text}:{d.short}"
    if isinstance(v, (int, np.integer)):
        return str(int(v)) if d == DType.INT64 else f"{int(v)}:{d.short}"
    return f"{format_float(float(v))}:{d.short}"


class _Printer:
    def __init__(self) -> None:
        self.blobs = Blobs()
        self.buffers = Namer()
        self.vars = Namer()
        self.seen: set[Var] = set()

    def program(self, p: Program) -> str:
        lines = [f"program @{name_text(p.name)} {{"]
        for b in p.buffers:
            self.buffers(b, b.name)
        lines += ["  " + self.buffer(b) for b in p.buffers]
        for a, b, why in p.assumptions:
            lines.append(f"  assume {dim_text(a)} = {dim_text(b)}, {quote(why)}")
        for t in p.temps:
            lines.append(f"  temp {self.buf(t.buffer)} size={dim_text(t.nbytes)} "
                         f"live={t.first} to {t.last}")
        if p.dims:
            lines.append(f"  dims [{', '.join(dim_text(d) for d in p.dims)}]")
        for k in p.kernels:
            lines += self.kernel(k)
        lines.append("}")
        return "\n".join(lines) + "\n" + self.blobs.section()

    def buffer(self, b: Buffer) -> str:
        shape = "[" + ",".join(dim_text(d) for d in b.shape) + "]"
        text = f"buffer {self.buffers(b, b.name)}: {b.dtype.short}{shape} {name_text(b.kind)}"
        if b.slot != -1:
            text += f" slot={b.slot}"
        if b.offset != -1:
            text += f" offset={b.offset}"
        if b.base is not None:
            text += f" base={self.buffers(b.base, b.base.name)}"
        if b.data is not None:
            declared = TensorType(b.dtype, tuple(b.shape))
            text += f" = {const_text(b.data, declared, self.blobs)}"
        return text

    def kernel(self, k: Kernel) -> list[str]:
        self.vars = self.buffers.fork()
        self.seen = set()
        flags = (" contract" if k.contract else "") + (" gather" if k.gather else "")
        lines = [f"  kernel @{name_text(k.name)}{flags} {{"]
        self.body(k.body, "    ", lines)
        lines.append("  }")
        return lines

    def body(self, body: list[Stmt], indent: str, lines: list[str]) -> None:
        for s in body:
            if isinstance(s, Loop):
                head = f"for {self.var(s.var)} = {self.operand(s.start)} to " \
                       f"{self.operand(s.stop)}"
                if s.step != 1:
                    head += f" step {s.step}"
                if s.parallel:
                    head += " parallel"
                if s.rolled:
                    head += " rolled"
                if s.few:
                    head += " few"
                if s.fold:
                    head += " fold"
                lines.append(f"{indent}{head} {{")
                self.body(s.body, indent + "  ", lines)
                lines.append(indent + "}")
            else:
                lines.append(indent + self.stmt(s))

    def stmt(self, s: Stmt) -> str:
        if isinstance(s, Op):
            op = quote(s.op) if s.op in STMT_WORDS or name_text(s.op) != s.op else s.op
            dst = self.var(s.dst)
            args = ", ".join(self.operand(a) for a in s.args)
            return f"{dst} = {op} {args}".rstrip()
        if isinstance(s, Load):
            return f"{self.var(s.dst)} = load {self.buf(s.buf)}[{self.operand(s.index)}]"
        if isinstance(s, Store):
            return f"store {self.buf(s.buf)}[{self.operand(s.index)}], {self.operand(s.value)}"
        if isinstance(s, Check):
            return f"check {self.operand(s.cond)}, {quote(s.message)}"
        if isinstance(s, Break):
            return f"break if {self.operand(s.cond)}"
        if isinstance(s, Matmul):
            c = self.window(s.c, s.c_off, s.ldc, False)
            a = self.window(s.a, s.a_off, s.lda, s.a_trans)
            b = self.window(s.b, s.b_off, s.ldb, s.b_trans) + ("^P" if s.b_packed else "")
            alpha = format_float(s.alpha) if isinstance(s.alpha, float) else str(s.alpha)
            eq = "+=" if s.accumulate else "="
            m, n, k = (self.size(x) for x in (s.m, s.n, s.k))
            terms = "".join(f", rank1 = {self.window(t.row, t.row_off, t.row_step, False)} * "
                            f"{self.window(t.col, t.col_off, 1, False)}" for t in s.rank1)
            return (f"matmul {c} {eq} {a} * {b} {{m = {m}, n = {n}, k = {k}, alpha = {alpha}"
                    f"{terms}}}")
        raise ValueError(f"cannot print loop-IR statement {s!r}")

    def window(self, buf: Buffer, off: Operand, ld: object, trans: bool) -> str:
        return f"{self.buf(buf)}[{self.operand(off)}, ld={self.size(ld)}]" + ("^T" if trans else "")

    def size(self, x: object) -> str:
        """A Matmul size or leading dim: an int, a Sym, or (materialized) a variable."""
        return self.var(x) if isinstance(x, Var) else dim_text(x)  # type: ignore[arg-type]

    def buf(self, b: Buffer) -> str:
        return self.buffers(b, b.name)

    def var(self, v: Var) -> str:
        text = self.vars(v, v.hint)
        if v in self.seen:
            return text
        self.seen.add(v)
        return f"{text}: {v.dtype.short}"

    def operand(self, o: Operand) -> str:
        if isinstance(o, Var):
            return self.var(o)
        if isinstance(o, Const):
            return const_operand(o)
        if isinstance(o, SymVal):
            return f"size({expr_text(o.expr)})"
        raise ValueError(f"cannot print operand {o!r}")
