"""The loop-IR verifier accepts what the builder makes and names what is wrong otherwise."""

import numpy as np
import pytest

from onnxjit.errors import CompileError
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loop_verify import verify_program
from onnxjit.ir.loops import Buffer, Const, Kernel, Load, Matmul, Program, Store, Var, i64
from onnxjit.ir.types import DType

F32 = DType.FLOAT


def _program(body_fn, extra=()):
    x = Buffer("x", F32, (8,), "input", slot=0)
    y = Buffer("y", F32, (8,), "output", slot=1)
    b = Builder()
    body_fn(b, x, y)
    return Program([x, y, *extra], [Kernel("k", b.body)])


def _relu(b, x, y):
    with b.loop(0, 8) as i:
        v = b.load(x, i)
        b.store(y, i, b.op("max", v, const(0.0, F32)))


def test_accepts_a_well_formed_program():
    verify_program(_program(_relu))


def test_read_before_assignment_is_named():
    def body(b, x, y):
        ghost = Var(F32, "ghost")
        with b.loop(0, 8) as i:
            b.store(y, i, ghost)

    with pytest.raises(CompileError, match="ghost.*read before"):
        verify_program(_program(body))


def test_dtype_mismatch_in_store():
    def body(b, x, y):
        with b.loop(0, 8) as i:
            b.store(y, i, b.cast(b.load(x, i), DType.INT32))

    with pytest.raises(CompileError, match="stores a i32 into %y"):
        verify_program(_program(body))


def test_store_into_input_is_refused():
    def body(b, x, y):
        b.emit(Store(x, i64(0), Const(1.0, F32)))

    with pytest.raises(CompileError, match="read-only buffer %x"):
        verify_program(_program(body))


def test_constant_index_out_of_range():
    def body(b, x, y):
        v = Var(F32, "v")
        b.emit(Load(v, x, i64(8)))

    with pytest.raises(CompileError, match="out of range for %x"):
        verify_program(_program(body))


def test_const_buffer_needs_matching_data():
    c = Buffer("c", F32, (4,), "const", slot=0, data=np.zeros(3, np.float32))
    with pytest.raises(CompileError, match="const buffer %c"):
        verify_program(_program(_relu, extra=[c]))


def test_matmul_window_bounds():
    a = Buffer("a", F32, (4, 4), "const", slot=0, data=np.zeros((4, 4), np.float32))

    def body(b, x, y):
        b.emit(Matmul(y, i64(0), 2, a, i64(4), 4, x, i64(0), 2, m=4, n=2, k=4))

    with pytest.raises(CompileError, match="out of range for %a"):
        verify_program(_program(body, extra=[a]))


def test_matmul_rows_overlap_only_in_read_operands():
    b_ = Buffer("b", F32, (4, 2), "const", slot=0, data=np.zeros((4, 2), np.float32))

    def body(ldc):  # A: 3 rows of 4 at leading dim 2 (a 1-D conv's overlapping windows)
        return lambda b, x, y: b.emit(Matmul(y, i64(0), ldc, x, i64(0), 2, b_, i64(0), 2,
                                             m=3, n=2, k=4))

    verify_program(_program(body(2), extra=[b_]))
    with pytest.raises(CompileError, match="malformed"):
        verify_program(_program(body(1), extra=[b_]))


def test_slots_must_be_dense():
    x = Buffer("x", F32, (1,), "input", slot=1)
    with pytest.raises(CompileError, match="input buffers have slots"):
        verify_program(Program([x], []))
