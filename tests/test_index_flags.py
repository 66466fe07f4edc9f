"""`codegen.index_flags`: which integer ops of a kernel are index arithmetic (emitted `nsw`)."""

from onnxjit.codegen.index_flags import index_vars
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Buffer, i64
from onnxjit.ir.types import DType


def test_only_ops_feeding_indices_are_index_arithmetic():
    x = Buffer("x", DType.INT64, (64,), "input", slot=0)
    y = Buffer("y", DType.INT64, (32,), "output", slot=1)
    b = Builder()
    with b.loop(0, 16) as i:
        two_i = b.op("mul", i, i64(2))
        at = b.op("add", two_i, i64(1))          # only an index: nsw
        v = b.load(x, at)
        data = b.op("add", v, i64(7))            # a stored value: int64 data wraps
        b.store(y, i, data)
        bound = b.op("add", i, i64(1))           # a loop bound: not only an index
        with b.loop(0, bound) as j:
            mixed = b.op("add", j, i64(3))       # an index, and a stored value
            b.store(y, mixed, mixed)
    acc = b.var(i64(0))
    b.assign(acc, "add", acc, i64(1))            # defined twice: never flagged
    b.store(y, acc, v)
    assert index_vars(b.body) == {two_i, at}
