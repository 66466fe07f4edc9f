"""The loop IR: buffers, loop nests and scalar statements.

A `Program` is what one input signature compiles to: a list of `Buffer`s (every shape concrete)
and a list of `Kernel`s run in order. A kernel body is a list of statements:

- `Loop(var, start, stop, step, body, parallel, rolled, few, fold)`: a counted loop over an i64
  variable;
  `rolled` asks code generation to keep it a loop (no unrolling by LLVM: glue code such as a
  copy or an epilogue, whose fully unrolled forms cost compile time and no speed); `few` says
  that it runs a few iterations at most, at bounds known only at run time (the edge columns
  of a conv): code generation keeps it scalar (vectorized, it is a vector body, a remainder
  and their run-time checks that compile for nothing); `fold` says that the float
  accumulations it carries (an `Op` whose `dst` is among its args: `acc = add acc, v`, or the
  ordered maximum `c = gt acc, v; acc = select c, acc, v`) may be reassociated, so code
  generation may keep vector partial accumulators (`codegen.folds`; the interpreter folds in
  order);
- `Op(dst, op, args)`: a scalar operation writing the variable `dst` (see `SCALAR_OPS`);
- `Load(dst, buf, index)` / `Store(buf, index, value)`: flat element index into a buffer;
- `Check(cond, message)`: if the bool `cond` is false, the whole call stops and the runtime raises
  `InputError(message)` (data-dependent errors such as an index out of range: never a crash);
- `Break(cond)`: if the bool `cond` is true, leave the innermost enclosing (serial) loop (a
  Loop op whose condition ends it early: see `ir.ops.control.native_loop`);
- `Matmul(...)`: `C = alpha * op(A) @ op(B)` (or `C += ...`) on 2-D row-major windows of buffers,
  a first-class statement so that code generation can emit a register-blocked microkernel for it
  (the loop nest a scalar lowering would give is far from the machine's peak).

Variables (`Var`) are typed scalar registers, identified by object identity; unlike SSA values a
variable may be assigned more than once (a reduction's accumulator is assigned in the loop body),
so code generation gives each one a stack slot and lets LLVM's mem2reg promote it. Operands are a
`Var`, a typed `Const`, or a `SymVal`: the i64 value of a symbolic size (`types.Sym`, e.g.
`S*384`) that is fixed for a call and known at its entry.

Symbolic programs (compiled once for every size of some dims, `ir.symbolic`): buffer shapes,
loop bounds, index strides and Matmul sizes may be `Sym` expressions of the input dims. The
`materialize-dims` pass then turns every symbolic size into a load from the program's `dims`
buffer (an i64 table the runtime fills for each concrete shape: `Program.dims`), and gives temps
run-time arena offsets (`Program.temps`: each one's size and live range, placed per shape).

All buffers are dense, row-major and contiguous, so a flat index is enough; a view (`base` set)
shares the storage of its base buffer, starting `offset` bytes into it (0 when unset: a reshape's
whole base; a slice of a Concat's output written in place).

Storage: `input` and `output` buffers are the caller's arrays (slot = position in the entry's
argument list), `const` buffers hold arrays passed by pointer (slot = position in the static
pointer table, `data` the array: never embedded in code), `temp` buffers live in one arena at
byte `offset` (assigned by the plan-memory pass).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Union

import numpy as np

from onnxjit.ir.types import DType, Sym, sym_mul

#: Scalar operations: name -> (arity, result rule). Result rule "same" = dtype of the first
#: non-condition argument; "bool" = a comparison; "cast" = dst's declared dtype.
SCALAR_OPS: dict[str, tuple[int, str]] = {
    # arithmetic (ints and floats); integer div/rem truncate toward zero like C
    "add": (2, "same"), "sub": (2, "same"), "mul": (2, "same"), "div": (2, "same"),
    "rem": (2, "same"), "min": (2, "same"), "max": (2, "same"), "pow": (2, "same"),
    "neg": (1, "same"), "abs": (1, "same"),
    # floating-point math (vectorizable polynomials in codegen for f32)
    "exp": (1, "same"), "log": (1, "same"), "sqrt": (1, "same"), "tanh": (1, "same"),
    "erf": (1, "same"), "sigmoid": (1, "same"), "floor": (1, "same"), "ceil": (1, "same"),
    "expm1": (1, "same"), "sin": (1, "same"), "cos": (1, "same"), "tan": (1, "same"),
    # logic and bitwise on bool (and ints)
    "and": (2, "same"), "or": (2, "same"), "xor": (2, "same"), "not": (1, "same"),
    # comparisons -> bool; ordered (false when a NaN is involved) except "ne"
    "eq": (2, "bool"), "ne": (2, "bool"), "lt": (2, "bool"), "le": (2, "bool"),
    "gt": (2, "bool"), "ge": (2, "bool"), "isnan": (1, "bool"),
    # select(cond, a, b); cast(x) to dst.dtype; copy(x)
    "select": (3, "same"), "cast": (1, "cast"), "copy": (1, "same"),
}


class Var:
    """A typed scalar variable; compared by identity. `hint` only helps the printer."""

    __slots__ = ("dtype", "hint")

    def __init__(self, dtype: DType, hint: str = ""):
        self.dtype = dtype
        self.hint = hint

    def __repr__(self) -> str:
        return f"<Var {self.hint or '?'}: {self.dtype.short}>"


@dataclass(frozen=True)
class Const:
    value: Union[int, float, bool]
    dtype: DType

    def __repr__(self) -> str:
        return f"Const({self.value!r}, {self.dtype.short})"


@dataclass(frozen=True)
class SymVal:
    """The run-time value of a symbolic size: an i64 operand fixed for the whole call."""

    expr: Sym

    @property
    def dtype(self) -> DType:
        return DType.INT64

    def __repr__(self) -> str:
        return f"SymVal({self.expr})"


Operand = Union[Var, Const, SymVal]
#: A size: a compile-time int, or a symbolic expression of the input dims.
Size = Union[int, Sym]


def i64(v: int) -> Const:
    return Const(int(v), DType.INT64)


def size_operand(v: Size) -> Operand:
    """An i64 operand holding the size `v` (a `Const` when it is a plain int)."""
    return i64(v) if isinstance(v, int) else SymVal(v)


@dataclass(eq=False)
class Buffer:
    name: str
    dtype: DType
    shape: tuple[Size, ...]
    kind: str  # "input" | "output" | "const" | "temp" | "view" | "dims"
    slot: int = -1
    offset: int = -1
    base: Buffer | None = None
    data: np.ndarray | None = field(default=None, repr=False)

    @property
    def numel(self) -> Size:
        n: Size = 1
        for d in self.shape:
            n = n * d if isinstance(n, int) and isinstance(d, int) else sym_mul(n, d)
        return n

    @property
    def nbytes(self) -> Size:
        n = self.numel
        return n * self.dtype.itemsize if isinstance(n, int) else sym_mul(n, self.dtype.itemsize)

    @property
    def is_static(self) -> bool:
        """Every dim is a compile-time int."""
        return all(isinstance(d, int) for d in self.shape)

    def root(self) -> Buffer:
        """The buffer that owns the storage (follows views)."""
        b = self
        while b.base is not None:
            b = b.base
        return b

    def root_offset(self) -> int:
        """Bytes from the root's start to this buffer's (a view's offsets summed; 0 for a root,
        whose own `offset` is its place in the arena)."""
        total, b = 0, self
        while b.base is not None:
            total += max(b.offset, 0)
            b = b.base
        return total

    def __repr__(self) -> str:
        return f"<Buffer {self.name} {self.kind} {self.dtype.short}{list(self.shape)}>"


@dataclass(eq=False)
class Loop:
    var: Var
    start: Operand
    stop: Operand
    step: int
    body: list[Stmt]
    parallel: bool = False
    rolled: bool = False
    few: bool = False
    fold: bool = False


@dataclass(eq=False)
class Op:
    dst: Var
    op: str
    args: tuple[Operand, ...]


@dataclass(eq=False)
class Load:
    dst: Var
    buf: Buffer
    index: Operand


@dataclass(eq=False)
class Store:
    buf: Buffer
    index: Operand
    value: Operand


@dataclass(eq=False)
class Check:
    cond: Operand
    message: str


@dataclass(eq=False)
class Break:
    """Leave the innermost enclosing Loop (never a parallel one) when the bool `cond` is true."""

    cond: Operand


@dataclass(eq=False)
class Matmul:
    """`C[i, j] (+)= alpha * sum_k A'[i, k] * B'[k, j]` for i < m, j < n, k < k.

    Each operand is a 2-D row-major window of a buffer: element (r, c) of the window is
    `buf[off + r * ld + c]`. `a_trans` means the window holds A transposed (a k x m window, so
    A'[i, k] = window[k, i]); `b_trans` likewise (an n x k window). Offsets are operands so a
    batched matmul is a loop around this statement; sizes and leading dims are sizes (ints, or
    in a symbolic program `Sym`s; `materialize-dims` makes those run-time `Var`s for codegen).
    With `accumulate` the product is added to C's old contents, else it overwrites them.
    Element types: all three buffers share one float dtype, or A and B are one int dtype and C
    has it too (wrap-around arithmetic), or A is u8, B is i8 and C is i32: the widening 8-bit
    product (sums exact in int32, wrapping), with B packed in quads (`ir.quad_panels`, panels
    of `ldb` columns; no ^T, alpha 1), the layout of the VNNI kernel (`codegen.int8_gemm`),
    and `rank1` terms added to C after the product (`Rank1`: zero-point corrections).

    `b_packed`: B' (k x n) is stored in column panels, the layout the tiled kernel reads (a
    constant weight packed at compile time by the prepack-weights pass): panel p holds columns
    [p*ldb, min(n, (p+1)*ldb)) as a k x width row-major block starting at `b_off + p*ldb*k`,
    so the window is k*n contiguous elements; `b_trans` is then False.
    """

    c: Buffer
    c_off: Operand
    ldc: Size | Var
    a: Buffer
    a_off: Operand
    lda: Size | Var
    b: Buffer
    b_off: Operand
    ldb: Size | Var
    m: Size | Var
    n: Size | Var
    k: Size | Var
    a_trans: bool = False
    b_trans: bool = False
    alpha: float = 1.0
    accumulate: bool = False
    b_packed: bool = False
    rank1: tuple[Rank1, ...] = ()

    def buffers(self) -> tuple[Buffer, ...]:
        return (self.c, self.a, self.b, *(b for t in self.rank1 for b in (t.row, t.col)))

    def offsets(self) -> tuple[Operand, ...]:
        return (self.c_off, self.a_off, self.b_off,
                *(o for t in self.rank1 for o in (t.row_off, t.col_off)))


@dataclass(eq=False)
class Rank1:
    """`C[i, j] += row[row_off + i * row_step] * col[col_off + j]` for the window of an
    8-bit `Matmul` (i32 buffers, wrapping), after its product: row_step 0 adds one row
    vector to every row."""

    row: Buffer
    row_off: Operand
    row_step: int
    col: Buffer
    col_off: Operand


Stmt = Union[Loop, Op, Load, Store, Check, Break, Matmul]


def pack_panels(b: np.ndarray, width: int) -> np.ndarray:
    """The flat packed form of the k x n matrix `b` (`Matmul.b_packed`): column panels of
    `width` columns (the last one narrower), each a k x panel-width row-major block."""
    k, n = b.shape
    return np.concatenate([np.ascontiguousarray(b[:, j:j + width]).reshape(-1)
                           for j in range(0, n, width)] or [b.reshape(-1)])


def unpack_panels(flat: np.ndarray, k: int, n: int, width: int) -> np.ndarray:
    """The k x n matrix from its packed form `flat` (inverse of `pack_panels`)."""
    out = np.empty((k, n), dtype=flat.dtype)
    for j in range(0, n, width):
        w = min(width, n - j)
        out[:, j:j + w] = flat[j * k:(j + w) * k].reshape(k, w)
    return out


@dataclass(eq=False)
class Kernel:
    """A function of the program. `contract`: an f32/f64 `add` whose operand is the product
    the statement right before it computed is one fused multiply-add (one rounding instead of
    two; `llvm.fmuladd`, as the Matmul statement's products are), the same in every loop shape
    code generation gives it; the loop-IR interpreter still rounds twice. Lowerings set it for
    sums of products (a depthwise conv's taps), never where a mul or add stands alone in the
    semantics."""

    name: str
    body: list[Stmt]
    contract: bool = False
    #: Symbolic programs: a size hint (`ir.symbolic.hint`) for each variable `materialize-dims`
    #: loaded a symbolic size into, for code generation's cost estimates (not printed).
    size_hints: dict[Var, int] = field(default_factory=dict)
    #: the vectorizers may use gather loads here (`codegen.target.TUNING` forbids them
    #: elsewhere): a loop of independent table lookups (a tree walk's lanes). Prints as
    #: `kernel @name gather {`.
    gather: bool = False
    #: Set by `passes.parametrize_kernels` (the last loop pass): kernels of equal keys have
    #: equal canonical texts (`ir.loop_canon.kernel_key`), so code generation need not print
    #: them again; None: not known (then `codegen.modules.KernelPlan` prints). Not printed.
    share_key: str | None = None

    def buffers(self) -> list[Buffer]:
        """Buffers this kernel touches, in order of first use."""
        seen: dict[int, Buffer] = {}
        for s in walk(self.body):
            if isinstance(s, (Load, Store)):
                seen.setdefault(id(s.buf), s.buf)
            elif isinstance(s, Matmul):
                for b in s.buffers():
                    seen.setdefault(id(b), b)
        return list(seen.values())


@dataclass(eq=False)
class TempPlan:
    """A temp of a symbolic program: its size in bytes and the kernels it is live across
    (first and last index); the runtime places it in the arena for each concrete shape."""

    buffer: Buffer
    nbytes: Size
    first: int
    last: int


@dataclass(eq=False)
class Program:
    buffers: list[Buffer]
    kernels: list[Kernel]
    name: str = "main"
    #: Symbolic programs: the value of each slot of the `dims` buffer (a Sym of the input dims,
    #: or `Sym.var("@<temp>")`, a temp's arena offset), filled by `materialize-dims`.
    dims: list[Sym] = field(default_factory=list)
    #: Symbolic programs: every temp's size and live range (plan-memory), placed per shape.
    temps: list[TempPlan] = field(default_factory=list)
    #: Relations between sizes the code assumes, each (a, b, why): a == b for every call
    #: (checked when a concrete shape is bound; a violation compiles that shape on its own).
    assumptions: list[tuple[Size, Size, str]] = field(default_factory=list)

    def messages(self) -> list[str]:
        """Messages of every Check, in order; a failing Check makes the entry return
        1 + its position in this list (0 means success)."""
        out: list[str] = []
        for k in self.kernels:
            out.extend(s.message for s in walk(k.body) if isinstance(s, Check))
        return out

    @property
    def inputs(self) -> list[Buffer]:
        return sorted((b for b in self.buffers if b.kind == "input"), key=lambda b: b.slot)

    @property
    def outputs(self) -> list[Buffer]:
        return sorted((b for b in self.buffers if b.kind == "output"), key=lambda b: b.slot)

    @property
    def consts(self) -> list[Buffer]:
        return sorted((b for b in self.buffers if b.kind == "const"), key=lambda b: b.slot)

    @property
    def arena_size(self) -> int:
        """Bytes of the temps' arena (a static program; a symbolic one's depends on the call)."""
        if self.temps:
            return 0
        return max((b.offset + b.nbytes for b in self.buffers if b.kind == "temp"), default=0)

    @property
    def symbolic(self) -> bool:
        """Some size is only known when the program is called (see `dims`)."""
        return any(not b.is_static for b in self.buffers)


def walk(body: list[Stmt]) -> Iterator[Stmt]:
    """Every statement of a body, loops before their bodies. One generator with a stack of
    iterators (nested generators passed each statement up through every enclosing loop's
    frame: the compiler walks kernels a million times for a DenseNet)."""
    stack = [iter(body)]
    while stack:
        for s in stack[-1]:
            yield s
            if isinstance(s, Loop):
                stack.append(iter(s.body))
                break
        else:
            stack.pop()


def result_dtype(op: str, args: tuple[Operand, ...], declared: DType | None = None) -> DType:
    """The dtype an op produces from its operands (what the verifier checks `dst` against)."""
    rule = SCALAR_OPS[op][1]
    if rule == "bool":
        return DType.BOOL
    if rule == "cast":
        assert declared is not None
        return declared
    first = args[1] if op == "select" else args[0]
    return first.dtype
