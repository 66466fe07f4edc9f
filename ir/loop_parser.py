"""Parser of the loop IR text (`ir.loop_printer`): `parse_program(text) -> Program`.

Recursive descent over the tokens of `text_lexer`. Algorithm:
1) read the trailing `resources` section first (`text_consts.BlobRefs`), so buffer data stored
   as `blobN` resolves where it stands;
2) buffers in order, into a table from printed name to Buffer; `base=` references are resolved
   after the last buffer, since a view may be declared before its base;
3) each kernel with its own table from printed name to Var: a name followed by `: dtype` makes a
   new Var (the printer writes the dtype at a variable's first appearance), a bare name must be
   known; statements are told apart by their first words (`for`, `store`, `check`, `break if`,
   `matmul`, or `%dst = load` / `%dst = <op>`).
Every error is a `ModelError` naming the line and column and what was expected there.
"""

from __future__ import annotations

from onnxjit.errors import ModelError
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
    Rank1,
    Stmt,
    Store,
    SymVal,
    TempPlan,
    Var,
)
from onnxjit.ir.text_consts import BlobRefs, is_float_text, parse_array, parse_float
from onnxjit.ir.text_lexer import Cursor, Token, unquote
from onnxjit.ir.text_types import parse_dim, parse_dtype, parse_expr, parse_shape
from onnxjit.ir.types import DType


def parse_program(text: str) -> Program:
    """The Program a `print_program` text describes; ModelError (with line and column) if the
    text is not one."""
    return _Parser(text).program()


class _Parser:
    def __init__(self, text: str):
        self.cur = Cursor(text)
        self.blobs = BlobRefs(self.cur)
        self.buffers: dict[str, Buffer] = {}
        self.vars: dict[str, Var] = {}

    def program(self) -> Program:
        cur = self.cur
        cur.expect("program")
        _, name = cur.ref("@", "a program name (@name)")
        cur.expect("{")
        buffers: list[Buffer] = []
        bases: list[tuple[Buffer, Token]] = []
        while cur.accept("buffer"):
            buffers.append(self.buffer(bases))
        for b, tok in bases:
            base = self.buffers.get(tok.text)
            if base is None:
                raise cur.error(f"a declared buffer as the base of {b.name or 'a view'}", tok)
            b.base = base
        assumptions, temps, dims = [], [], []
        while cur.accept("assume"):
            a = self.size_expr()
            cur.expect("=")
            b2 = self.size_expr()
            cur.expect(",")
            assumptions.append((a, b2, str(unquote(cur.expect_kind("string", "a reason")))))
        while cur.accept("temp"):
            buf = self.buf()
            cur.expect("size")
            cur.expect("=")
            size = self.size_expr()
            cur.expect("live")
            cur.expect("=")
            first = cur.integer("a kernel index")
            cur.expect("to")
            temps.append(TempPlan(buf, size, first, cur.integer("a kernel index")))
        if cur.accept("dims"):
            cur.expect("[")
            while not cur.accept("]"):
                dims.append(self.size_expr())
                cur.accept(",")
        kernels: list[Kernel] = []
        while cur.accept("kernel"):
            _, kname = cur.ref("@", "a kernel name (@name)")
            contract = cur.accept("contract")
            gather = cur.accept("gather")
            self.vars = {}
            kernels.append(Kernel(kname, self.block(), contract, gather=gather))
        cur.expect("}")
        cur.finish()
        return Program(buffers, kernels, name, dims, temps, assumptions)  # type: ignore[arg-type]

    def buffer(self, bases: list[tuple[Buffer, Token]]) -> Buffer:
        cur = self.cur
        tok = cur.tok
        key, hint = cur.ref("%", "a buffer name (%name)")
        if key in self.buffers:
            raise cur.error(f"a new buffer name ({key} is already declared)", tok)
        cur.expect(":")
        dtype = parse_dtype(cur)
        shape_tok = cur.tok
        shape = parse_shape(cur)
        if shape is None or any(d is None for d in shape):
            raise cur.error("a buffer shape of sizes (no '?')", shape_tok)
        kind = cur.name("a buffer kind (input, output, const, temp, view)")
        b = self.buffers[key] = Buffer(hint, dtype, tuple(shape), kind)  # type: ignore[arg-type]
        while True:
            if cur.accept("slot"):
                cur.expect("=")
                b.slot = cur.integer("a slot number")
            elif cur.accept("offset"):
                cur.expect("=")
                b.offset = cur.integer("a byte offset")
            elif cur.accept("base"):
                cur.expect("=")
                bases.append((b, cur.tok))
                cur.ref("%", "a buffer name (%name)")
            else:
                break
        if cur.accept("="):
            b.data = self.data(b)
        return b

    def data(self, b: Buffer):  # -> np.ndarray
        cur = self.cur
        dtype, shape = b.dtype, b.shape
        if cur.tok.kind == "ident" and cur.peek().text == "[":
            dtype = parse_dtype(cur)
            tok = cur.tok
            s = parse_shape(cur)
            if s is None or not all(isinstance(d, int) for d in s):
                raise cur.error("a concrete shape", tok)
            shape = tuple(s)  # type: ignore[arg-type]
        try:
            np_dtype = dtype.numpy
        except KeyError:
            raise cur.error(f"an element type numpy can hold, not {dtype.short}") from None
        return parse_array(cur, np_dtype, shape, self.blobs)

    # statements ---------------------------------------------------------------------------
    def block(self) -> list[Stmt]:
        cur = self.cur
        cur.expect("{")
        body: list[Stmt] = []
        while not cur.accept("}"):
            body.append(self.stmt())
        return body

    def stmt(self) -> Stmt:
        cur = self.cur
        if cur.accept("for"):
            var = self.var()
            cur.expect("=")
            start = self.operand()
            cur.expect("to")
            stop = self.operand()
            step = cur.integer("a loop step") if cur.accept("step") else 1
            parallel = cur.accept("parallel")
            rolled = cur.accept("rolled")
            few = cur.accept("few")
            fold = cur.accept("fold")
            return Loop(var, start, stop, step, self.block(), parallel, rolled, few, fold)
        if cur.accept("store"):
            buf = self.buf()
            cur.expect("[")
            index = self.operand()
            cur.expect("]")
            cur.expect(",")
            return Store(buf, index, self.operand())
        if cur.accept("check"):
            cond = self.operand()
            cur.expect(",")
            return Check(cond, str(unquote(cur.expect_kind("string", "a message in quotes"))))
        if cur.accept("break"):
            cur.expect("if")
            return Break(self.operand())
        if cur.accept("matmul"):
            return self.matmul()
        if cur.tok.kind != "ref":
            raise cur.error("a statement (for, store, check, break, matmul, or %var = ...)")
        dst = self.var()
        cur.expect("=")
        if cur.accept("load"):
            buf = self.buf()
            cur.expect("[")
            index = self.operand()
            cur.expect("]")
            return Load(dst, buf, index)
        op = cur.name("a scalar op name or 'load'")
        args: list[Operand] = []
        if self._operand_ahead():
            args.append(self.operand())
            while cur.accept(","):
                args.append(self.operand())
        return Op(dst, op, tuple(args))

    def _operand_ahead(self) -> bool:
        t = self.cur.tok
        if t.kind == "ref":
            return t.text.startswith("%")
        return t.kind == "number" or t.text in ("true", "false", "size") and t.kind == "ident"

    def matmul(self) -> Matmul:
        cur = self.cur
        c, c_off, ldc, c_mark = self.window()
        if c_mark:
            raise cur.error("an output window without ^T or ^P")
        accumulate = cur.accept("+=")
        if not accumulate:
            cur.expect("=")
        a, a_off, lda, a_mark = self.window()
        if a_mark == "P":
            raise cur.error("^T (only B may be packed: ^P)")
        cur.expect("*")
        b, b_off, ldb, b_mark = self.window()
        cur.expect("{")
        sizes = []
        for key in ("m", "n", "k"):
            cur.expect(key)
            cur.expect("=")
            sizes.append(self.size())
            cur.expect(",")
        cur.expect("alpha")
        cur.expect("=")
        tok = cur.expect_kind("number", "a number for alpha")
        alpha = parse_float(tok.text) if is_float_text(tok.text) else int(tok.text)
        terms = []
        while cur.accept(","):  # `rank1 = %row[off, ld=step] * %col[off, ld=1]`
            cur.expect("rank1")
            cur.expect("=")
            row, row_off, step, _ = self.window()
            cur.expect("*")
            col, col_off, _, _ = self.window()
            terms.append(Rank1(row, row_off, step, col, col_off))
        cur.expect("}")
        m, n, k = sizes
        return Matmul(c, c_off, ldc, a, a_off, lda, b, b_off, ldb, m, n, k, a_mark == "T",
                      b_mark == "T", alpha, accumulate, b_mark == "P",  # type: ignore[arg-type]
                      tuple(terms))

    def window(self) -> tuple[Buffer, Operand, int, str]:
        """`%buf[off, ld=N]` then an optional mark: `^T` (transposed) or `^P` (packed panels);
        returns the mark's letter or ""."""
        cur = self.cur
        buf = self.buf()
        cur.expect("[")
        off = self.operand()
        cur.expect(",")
        cur.expect("ld")
        cur.expect("=")
        ld = self.size()
        cur.expect("]")
        mark = ""
        if cur.accept("^"):
            mark = "P" if cur.accept("P") else "T"
            if mark == "T":
                cur.expect("T")
        return buf, off, ld, mark

    # names and operands -------------------------------------------------------------------
    def buf(self) -> Buffer:
        tok = self.cur.tok
        key, _ = self.cur.ref("%", "a buffer name (%name)")
        b = self.buffers.get(key)
        if b is None:
            raise self.cur.error("a declared buffer", tok)
        return b

    def var(self) -> Var:
        """A variable: `%name: dtype` declares it, `%name` refers to a declared one."""
        cur = self.cur
        tok = cur.tok
        key, hint = cur.ref("%", "a variable (%name)")
        if cur.accept(":"):
            if key in self.vars:
                raise cur.error(f"{key} without a type (it is already declared)", tok)
            v = self.vars[key] = Var(parse_dtype(cur), hint)
            return v
        v = self.vars.get(key)
        if v is None:
            raise ModelError(f"line {tok.line}, column {tok.col}: variable {key} is used before "
                             "it is declared (expected `name: dtype` at its first use)")
        return v

    def size_expr(self):  # -> int | Sym
        """A size in the dim syntax of types (`3`, `S`, `(S*384)`, `"@t"`: a temp's offset)."""
        tok = self.cur.tok
        d = parse_dim(self.cur)
        if d is None:
            raise self.cur.error("a size, not '?'", tok)
        return d

    def size(self):  # -> int | Sym | Var
        """A Matmul size or leading dim: a size, or a variable once materialized."""
        return self.var() if self.cur.tok.kind == "ref" else self.size_expr()

    def operand(self) -> Operand:
        cur = self.cur
        tok = cur.tok
        if tok.kind == "ref":
            return self.var()
        if tok.kind == "ident" and tok.text == "size" and cur.peek().text == "(":
            cur.next()
            cur.expect("(")
            expr = parse_expr(cur)
            cur.expect(")")
            return SymVal(expr)  # type: ignore[arg-type]
        if tok.kind == "ident" and tok.text in ("true", "false"):
            cur.next()
            value: bool | int | float = tok.text == "true"
            default = DType.BOOL
        elif tok.kind == "number" and not tok.text.lstrip("-").startswith("0x"):
            cur.next()
            value = parse_float(tok.text) if is_float_text(tok.text) else int(tok.text)
            default = DType.INT64
        else:
            raise cur.error("an operand (a %variable or a constant)")
        if cur.accept(":"):
            return Const(value, parse_dtype(cur))
        if isinstance(value, float):
            raise cur.error("':dtype' after a float constant")
        return Const(value, default)
