"""A slow reference interpreter of loop-IR Programs, for tests.

Algorithm: give every root buffer a flat numpy array (inputs copied from the caller's arrays,
consts from `data`, outputs and temps zero-filled; a view shares its root's array), then run the
kernels in order, walking statements recursively: loops in Python (a taken `Break` raises an
internal signal that its innermost loop catches), each scalar op through
`scalar_eval.eval_op` on 0-d arrays of the variable's dtype (so wrap-around, float32 rounding and
the integer division guards are exactly codegen's semantics). A failing `Check` raises
`InputError(message)`, as the runtime does. Loads and stores are bounds-checked: an out-of-range
index is a compiler bug (CompileError), never a silent wrong read. A Matmul reading a packed B
(`Matmul.b_packed`) unpacks it to the plain k x n matrix first (`loops.unpack_panels`).
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
    Var,
    unpack_panels,
)
from onnxjit.ir.scalar_eval import eval_op, operand_value


class _Break(Exception):
    """A taken Break: unwinds to its innermost enclosing loop."""


class _Machine:
    def __init__(self, program: Program, inputs: Sequence[np.ndarray]):
        self.mem: dict[int, np.ndarray] = {}
        ins = program.inputs
        if len(inputs) != len(ins):
            raise InputError(f"expected {len(ins)} inputs, got {len(inputs)}")
        by_slot = {b.slot: k for k, b in enumerate(ins)}
        for b in program.buffers:
            if b.base is not None:
                continue
            if b.kind == "input":
                arr = np.ascontiguousarray(inputs[by_slot[b.slot]], dtype=b.dtype.numpy)
                if arr.size != b.numel:
                    raise InputError(f"input {b.name} has {arr.size} elements, "
                                     f"expected {b.numel}")
                self.mem[id(b)] = arr.reshape(-1).copy()
            elif b.kind == "const":
                assert b.data is not None, f"const buffer {b.name} has no data"
                self.mem[id(b)] = np.ascontiguousarray(b.data, dtype=b.dtype.numpy).reshape(-1)
            else:
                self.mem[id(b)] = np.zeros(b.numel, dtype=b.dtype.numpy)
        self.env: dict[Var, np.ndarray] = {}

    def array(self, buf: Buffer) -> np.ndarray:
        """The buffer's elements: its root's flat array, or the slice a view covers."""
        flat = self.mem[id(buf.root())]
        off = buf.root_offset()
        return flat[off // flat.itemsize:off // flat.itemsize + buf.numel] if off else flat

    def index(self, buf: Buffer, idx: object) -> int:
        i = int(operand_value(idx, self.env))  # type: ignore[arg-type]
        if not 0 <= i < buf.numel:
            raise CompileError(f"index {i} out of range for buffer {buf.name} "
                               f"({buf.numel} elements)")
        return i

    def run(self, body: Sequence[Stmt]) -> None:
        env = self.env
        for s in body:
            if isinstance(s, Op):
                vals = [operand_value(x, env) for x in s.args]
                env[s.dst] = np.asarray(eval_op(s.op, vals, s.dst.dtype), dtype=s.dst.dtype.numpy)
            elif isinstance(s, Load):
                env[s.dst] = np.asarray(self.array(s.buf)[self.index(s.buf, s.index)],
                                        dtype=s.dst.dtype.numpy)
            elif isinstance(s, Store):
                val = operand_value(s.value, env)
                if val.dtype != s.buf.dtype.numpy:
                    raise CompileError(f"store of {val.dtype} into {s.buf.name} "
                                       f"({s.buf.dtype.short})")
                self.array(s.buf)[self.index(s.buf, s.index)] = val
            elif isinstance(s, Loop):
                start = int(operand_value(s.start, env))
                stop = int(operand_value(s.stop, env))
                for i in range(start, stop, s.step):
                    env[s.var] = np.asarray(i, dtype=np.int64)
                    try:
                        self.run(s.body)
                    except _Break:
                        break
            elif isinstance(s, Matmul):
                self.matmul(s)
            elif isinstance(s, Check):
                if not bool(operand_value(s.cond, env)):
                    raise InputError(s.message)
            elif isinstance(s, Break):
                if bool(operand_value(s.cond, env)):
                    raise _Break()
            else:
                raise CompileError(f"unknown statement {type(s).__name__}")


    def window(self, buf: Buffer, off: object, ld: int, rows: int, cols: int) -> np.ndarray:
        """A (rows, cols) strided view of a buffer's flat array, bounds-checked."""
        start = int(operand_value(off, self.env))  # type: ignore[arg-type]
        last = start + (rows - 1) * ld + cols - 1 if rows and cols else start
        if rows and cols and not (0 <= start and last < buf.numel and cols <= ld):
            raise CompileError(f"matmul window [{start}, {last}] (ld {ld}) out of range for "
                               f"buffer {buf.name} ({buf.numel} elements)")
        flat = self.array(buf)
        return np.lib.stride_tricks.as_strided(
            flat[start:], (rows, cols), (ld * flat.itemsize, flat.itemsize), writeable=True)

    def matmul(self, s: Matmul) -> None:
        a = self.window(s.a, s.a_off, s.lda, *((s.k, s.m) if s.a_trans else (s.m, s.k)))
        if s.b_packed:
            b = unpack_panels(self.window(s.b, s.b_off, s.k * s.n, 1, s.k * s.n)[0],
                              s.k, s.n, s.ldb)
        else:
            b = self.window(s.b, s.b_off, s.ldb, *((s.n, s.k) if s.b_trans else (s.k, s.n)))
        c = self.window(s.c, s.c_off, s.ldc, s.m, s.n)
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
    return [m.array(b).reshape(b.shape).copy() for b in program.outputs]
