"""How a symbolic program's work is cut for the pool (`codegen.parallel`, `codegen.split_matmul`,
`codegen.cost`): a product inside a loop over a batch usually of one is split over its rows
(the batch loop stays serial); block sizes a kernel computes from its dims count by their usual
values; a run-time row split gives its blocks equal heights. Results are the same bits on one
and two threads, and match numpy, at the usual sizes and others (batch 0 and 3)."""

from __future__ import annotations

import numpy as np
import onnx
from models import finish
from onnx import TensorProto, helper

import onnxjit
from onnxjit.codegen.cost import body_cost, derive_hints
from onnxjit.codegen.parallel import plan_kernel
from onnxjit.codegen.split_matmul import split_runtime_rows
from onnxjit.ir.loops import Buffer, Const, Kernel, Loop, Matmul, Op, Var, i64
from onnxjit.ir.types import DType

F32, I64 = DType.FLOAT, DType.INT64


def _product(m, n: int, k: int, b_packed: bool = True) -> Matmul:
    a, bb, c = (Buffer(x, F32, (1 << 20,), "temp") for x in ("a", "b", "c"))
    return Matmul(c, i64(0), n, a, i64(0), k, bb, i64(0), 64, m, n, k, b_packed=b_packed)


def test_product_in_a_batch_of_one_is_split_not_the_batch() -> None:
    # a symbolic 3-D MatMul is a parallel loop over its batch around the product; with a
    # batch of usually one that loop ran the whole product on one thread
    batch, m = Var(I64, "batch"), Var(I64, "m")
    s = _product(m, 256, 256)
    loop = Loop(Var(I64, "i0"), i64(0), batch, 1, [s], parallel=True)
    plan = plan_kernel(Kernel("head", [loop], size_hints={batch: 1, m: 80}))
    assert id(s) in plan and id(loop) not in plan
    # a batch of usually several stays the parallel loop
    plan = plan_kernel(Kernel("head", [loop], size_hints={batch: 8, m: 80}))
    assert list(plan) == [id(loop)]


def test_block_sizes_computed_from_dims_count_by_their_usual_values() -> None:
    # a symbolic conv's column block: ceil(positions / blocks) rounded to 16, then
    # max(0, min(block, positions - start)) in the loop; it counted as 64 columns
    # (`_UNKNOWN_TRIP`), so the pool ran a 4-block conv on one thread
    pos, start = Var(I64, "pos"), Var(I64, "start")
    t1, t2, t3, blk, rest, lo, n = (Var(I64, f"v{j}") for j in range(7))
    head = [Op(t1, "add", (pos, i64(1))), Op(t2, "div", (t1, i64(2))),
            Op(t3, "add", (t2, i64(15))), Op(blk, "div", (t3, i64(16))),
            Op(blk, "mul", (blk, i64(16)))]
    hints = {pos: 1919}
    derive_hints(head, hints)
    assert hints[t2] == 960 and hints[blk] == 960  # a variable assigned again: its last value
    body = [Op(rest, "sub", (pos, start)), Op(lo, "min", (t2, rest)),
            Op(n, "max", (i64(0), lo)), _product(32, n, 32, b_packed=False)]
    assert body_cost(body, hints) >= 32 * 960 * 32
    assert body_cost(body, {}) < 32 * 960 * 32  # unknown: a guess of 64 columns
    # only integer arithmetic is evaluated: a comparison of floats (IsInf's x == inf) has
    # a bool result and an infinite constant, which no int takes
    x, inf_test, twice = Var(F32, "x"), Var(DType.BOOL, "isinf"), Var(I64, "twice")
    derive_hints([Op(inf_test, "eq", (x, Const(float("inf"), F32))),
                  Op(twice, "mul", (pos, i64(2)))], hints)
    assert inf_test not in hints and hints[twice] == 3838


def _blocks(m: int, rows: int) -> list[int]:
    """Heights of the row blocks `split_runtime_rows` cuts a run-time m into, for m = rows
    (its head statements evaluated)."""
    mv = Var(I64, "m")
    loop, head, _ = split_runtime_rows(_product(mv, 256, 256, b_packed=False), None, {mv: m})
    env = {mv: rows}
    ops = {"add": int.__add__, "sub": int.__sub__, "mul": int.__mul__, "max": max, "min": min,
           "div": int.__floordiv__}
    for s in head:
        env[s.dst] = ops[s.op](*(env[a] if isinstance(a, Var) else int(a.value) for a in s.args))
    nblk = env[loop.stop]
    mb = next(env[s.args[1]] for s in loop.body if isinstance(s, Op) and s.dst.hint == "row")
    return [min(mb, rows - t * mb) for t in range(nblk)]


def test_runtime_row_blocks_have_equal_heights() -> None:
    # 80 rows were blocks of 42 and 38 (heights rounded to 6-row tiles): the caller's block
    # ran 63 us after the worker's; the kernel's run-time rows take any height
    assert _blocks(80, 80) == [40, 40]
    assert _blocks(80, 128) == [64, 64]
    assert sum(_blocks(80, 301)) == 301


def _head_model() -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((256, 256)) / 16).astype(np.float32)
    bias = rng.standard_normal(256).astype(np.float32)
    model = finish(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t"]),
         helper.make_node("Add", ["t", "b"], ["u"]), helper.make_node("Relu", ["u"], ["y"])],
        "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 256])],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(bias, "b")]))
    return model, w, bias


def test_split_batch_product_same_on_one_and_two_threads() -> None:
    model, w, bias = _head_model()
    one, two = (onnxjit.compile(model, num_threads=t, cache_dir=False, specialize="dynamic")
                for t in (1, 2))
    rng = np.random.default_rng(5)
    for batch, seq in ((1, 80), (3, 50), (0, 80), (1, 7), (2, 130)):
        x = rng.standard_normal((batch, seq, 256)).astype(np.float32)
        y1, y2 = one(x)[0], two(x)[0]
        np.testing.assert_array_equal(y1, y2)
        want = np.maximum(x.astype(np.float64) @ w + bias, 0)
        np.testing.assert_allclose(y1, want, rtol=1e-4, atol=1e-4)
    assert ".task" in two.ir("llvm")
