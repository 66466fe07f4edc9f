"""A slow reference interpreter of loop-IR Programs, for tests.

Algorithm: give every root buffer a flat numpy array (inputs copied from the caller's arrays,
consts from `data`, outputs and temps zero-filled; a view shares its root's array), then run the
kernels in order, walking statements recursively: loops in Python (a taken `Break` raises an
internal signal that its innermost loop catches), each scalar op through
`scalar_eval.eval_op` on 0-d arrays of the variable's dtype (so wrap-around, float32 rounding and
the integer division guards are exactly codegen's semantics). A failing `Check` raises
`InputError(message)`, as the runtime does. Loads and stores are bounds-checked: an out-of-range
index is a compiler bug (CompileError), never a silent wrong read. A Matmul reading a packed B
(`Matmul.b_packed`) unpacks it to the plain k x n matrix first (`loops.unpack_panels`; an
8-bit one `quad_panels.unpack_quads`).

A symbolic program (`Sym` sizes) runs with the sizes its inputs give: each symbol of an input
buffer's shape takes the array's size there, and every size, `SymVal` and `dims` slot is
evaluated with those bindings (a temp's arena offset, `"@t"`, is 0: each temp has its own array).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnxjit.errors import CompileError, InputError
from onnxjit.ir.loops import (
    Break,
    Buffer,
    Check,
    Load,
    Loop,
    Matmul,
    Op,
    Program,
    Stmt,
    Store,
    SymVal,
    Var,
    unpack_panels,
)
from onnxjit.ir.quad_panels import is_int8_product, packed_size, unpack_quads
from onnxjit.ir.scalar_eval import eval_op, operand_value
from onnxjit.ir.types import Sym


def bind_symbols(buffers: Sequence[Buffer], arrays: Sequence[np.ndarray]) -> dict[str, int]:
    """The size of every symbol that is a whole dim of an input buffer, from its array."""
    out: dict[str, int] = {}
    for b, a in zip(buffers, arrays):
        for d, n in zip(b.shape, np.shape(a)):
            if isinstance(d, Sym) and d.op == "var":
                out.setdefault(d.args[0], int(n))
    return out


class _Break(Exception):
    """A taken Break: unwinds to its innermost enclosing loop."""


class _Machine:
    def __init__(self, program: Program, inputs: Sequence[np.ndarray]):
        self.mem: dict[int, np.ndarray] = {}
        ins = program.inputs
        if len(inputs) != len(ins):
            raise InputError(f"expected {len(ins)} inputs, got {len(inputs)}")
        self.binds = bind_symbols(ins, inputs)
        self.binds.update({"@" + t.buffer.name: 0 for t in program.temps})
        by_slot = {b.slot: k for k, b in enumerate(ins)}
        for b in program.buffers:
            if b.base is not None:
                continue
            if b.kind == "input":
                arr = np.ascontiguousarray(inputs[by_slot[b.slot]], dtype=b.dtype.numpy)
                if arr.size != self.numel(b):
                    raise InputError(f"input {b.name} has {arr.size} elements, "
                                     f"expected {self.numel(b)}")
                self.mem[id(b)] = arr.reshape(-1).copy()
            elif b.kind == "const":
                assert b.data is not None, f"const buffer {b.name} has no data"
                self.mem[id(b)] = np.ascontiguousarray(b.data, dtype=b.dtype.numpy).reshape(-1)
            elif b.kind == "dims":
                self.mem[id(b)] = np.array([self.size(d) for d in program.dims], np.int64)
            else:
                self.mem[id(b)] = np.zeros(self.numel(b), dtype=b.dtype.numpy)
        self.env: dict[Var, np.ndarray] = {}

    def size(self, d: object) -> int:
        """A size: an int, a Sym (evaluated with the bindings), or a variable's value."""
        if isinstance(d, Sym):
            return d.evaluate(self.binds)
        if isinstance(d, Var):
            return int(self.env[d])
        return int(d)  # type: ignore[call-overload]

    def numel(self, b: Buffer) -> int:
        return self.size(b.numel)

    def value(self, x: object) -> np.ndarray:
        if isinstance(x, SymVal):
            return np.asarray(self.size(x.expr), dtype=np.int64)
        return operand_value(x, self.env)  # type: ignore[arg-type]

    def array(self, buf: Buffer) -> np.ndarray:
        """The buffer's elements: its root's flat array, or the slice a view covers."""
        flat = self.mem[id(buf.root())]
        off = buf.root_offset()
        n = self.numel(buf)
        return flat[off // flat.itemsize:off // flat.itemsize + n] if off else flat[:n]

    def index(self, buf: Buffer, idx: object) -> int:
        i = int(self.value(idx))
        if not 0 <= i < self.numel(buf):
            raise CompileError(f"index {i} out of range for buffer {buf.name} "
                               f"({self.numel(buf)} elements)")
        return i

    def run(self, body: Sequence[Stmt]) -> None:
        env = self.env
        for s in body:
            if isinstance(s, Op):
                vals = [self.value(x) for x in s.args]
                env[s.dst] = np.asarray(eval_op(s.op, vals, s.dst.dtype), dtype=s.dst.dtype.numpy)
            elif isinstance(s, Load):
                env[s.dst] = np.asarray(self.array(s.buf)[self.index(s.buf, s.index)],
                                        dtype=s.dst.dtype.numpy)
            elif isinstance(s, Store):
                val = self.value(s.value)
                if val.dtype != s.buf.dtype.numpy:
                    raise CompileError(f"store of {val.dtype} into {s.buf.name} "
                                       f"({s.buf.dtype.short})")
                self.array(s.buf)[self.index(s.buf, s.index)] = val
            elif isinstance(s, Loop):
                start = int(self.value(s.start))
                stop = int(self.value(s.stop))
                for i in range(start, stop, s.step):
                    env[s.var] = np.asarray(i, dtype=np.int64)
                    try:
                        self.run(s.body)
                    except _Break:
                        break
            elif isinstance(s, Matmul):
                self.matmul(s)
            elif isinstance(s, Check):
                if not bool(self.value(s.cond)):
                    raise InputError(s.message)
            elif isinstance(s, Break):
                if bool(self.value(s.cond)):
                    raise _Break()
            else:
                raise CompileError(f"unknown statement {type(s).__name__}")


    def window(self, buf: Buffer, off: object, ld: int, rows: int, cols: int,
               overlap: bool = False) -> np.ndarray:
        """A (rows, cols) strided view of a buffer's flat array, bounds-checked; `overlap`
        allows rows that overlap (ld < cols: a read-only operand)."""
        start = int(self.value(off))
        last = start + (rows - 1) * ld + cols - 1 if rows and cols else start
        if rows and cols and not (0 <= start and last < self.numel(buf)
                                  and (cols <= ld or (overlap and ld >= 1))):
            raise CompileError(f"matmul window [{start}, {last}] (ld {ld}) out of range for "
                               f"buffer {buf.name} ({self.numel(buf)} elements)")
        flat = self.array(buf)
        return np.lib.stride_tricks.as_strided(
            flat[start:], (rows, cols), (ld * flat.itemsize, flat.itemsize), writeable=True)

    def matmul(self, s: Matmul) -> None:
        m, n, k, lda, ldb, ldc = (self.size(x) for x in (s.m, s.n, s.k, s.lda, s.ldb, s.ldc))
        a = self.window(s.a, s.a_off, lda, *((k, m) if s.a_trans else (m, k)), overlap=True)
        if is_int8_product(s):  # exact in int64, then wrapped to int32
            size = packed_size(k, n, ldb)
            b = unpack_quads(self.window(s.b, s.b_off, size, 1, size)[0], k, n, ldb)
            c = self.window(s.c, s.c_off, ldc, m, n)
            prod = a.astype(np.int64) @ b.astype(np.int64)
            for t in s.rank1:
                nr = m if t.row_step else 1
                rows = self.window(t.row, t.row_off, nr, 1, nr)[0].astype(np.int64)
                col = self.window(t.col, t.col_off, n, 1, n)[0].astype(np.int64)
                prod += np.outer(np.broadcast_to(rows, (m,)), col)
            prod = prod.astype(np.int32)
            c[...] = (c + prod) if s.accumulate else prod
            return
        if s.b_packed:
            b = unpack_panels(self.window(s.b, s.b_off, k * n, 1, k * n)[0], k, n, ldb)
        else:
            b = self.window(s.b, s.b_off, ldb, *((n, k) if s.b_trans else (k, n)), overlap=True)
        c = self.window(s.c, s.c_off, ldc, m, n)
        a = a.T if s.a_trans else a
        b = b.T if s.b_trans else b
        with np.errstate(all="ignore"):
            prod = a @ b
            if s.alpha != 1.0:
                prod = prod * np.asarray(s.alpha, dtype=prod.dtype)
            c[...] = (c + prod) if s.accumulate else prod


def run_program(program: Program, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run a Program on input arrays (in slot order); returns the outputs in slot order."""
    m = _Machine(program, inputs)
    for k in program.kernels:
        m.run(k.body)
    return [m.array(b).reshape([m.size(d) for d in b.shape]).copy() for b in program.outputs]
