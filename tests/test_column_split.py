"""Products of few rows over a large constant B split over the pool by column panels (a GEMV
streams B: `codegen.split_matmul.split_columns`), same results for 1 and 2 threads, also when
layers share a kernel whose depth is a run-time parameter."""

from __future__ import annotations

import numpy as np
import onnx
from models import finish, mlp, mlp_reference
from onnx import TensorProto, helper
from test_threads import F32, compiled, dispatches

import onnxjit
from onnxjit.ir.loops import Buffer, Matmul, i64, walk


def test_gemv_split_over_column_panels() -> None:
    # a product of few rows over a large constant B is bound by streaming B: its whole panels
    # of columns are split over threads (the edge panel after them one more iteration); each
    # column's sum is the same computation, so one and two threads give the same bits
    from onnxjit.codegen.parallel import split_columns
    k, n = 512, 300  # 4 panels of 64 columns and an edge of 44: 614 KB of B
    a, bb, c = (Buffer(x, F32, shape, "temp") for x, shape in
                (("a", (1, k)), ("b", (k * n,)), ("c", (1, n))))
    loop, tail = split_columns(Matmul(c, i64(0), n, a, i64(0), k, bb, i64(0), 64, 1, n, k,
                                      b_packed=True))
    products = [s.n for s in walk(loop.body) if isinstance(s, Matmul)]
    assert int(loop.stop.value) == 5 and products == [64, 44] and tail == []
    assert split_columns(Matmul(c, i64(0), n, a, i64(0), k, bb, i64(0), 64, 1, n, k)) is None
    rng = np.random.default_rng(11)
    w = rng.standard_normal((k, n)).astype(np.float32)
    for rows in (1, 3):
        model = finish(helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])], "gemv",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])],
            [onnx.numpy_helper.from_array(w, "w")]))
        x = rng.standard_normal((rows, k)).astype(np.float32)
        one, two = (compiled(model, threads) for threads in (1, 2))
        y1, y2 = one(x)[0], two(x)[0]
        assert dispatches(two)
        np.testing.assert_array_equal(y1, y2)
        np.testing.assert_allclose(y1, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


def test_a_decoder_steps_256_square_gemv_is_split() -> None:
    # 256 x 256 floats (256 KB, COLUMN_SPLIT_BYTES): a GPT-style decoder's projections at one
    # token a step, whose weights fit the two threads' L2s only when each streams its share
    from onnxjit.codegen.parallel import split_columns
    k = n = 256
    a, bb, c = (Buffer(x, F32, shape, "temp") for x, shape in
                (("a", (1, k)), ("b", (k * n,)), ("c", (1, n))))
    split = split_columns(Matmul(c, i64(0), n, a, i64(0), k, bb, i64(0), 64, 1, n, k,
                                 b_packed=True))
    assert split is not None and int(split[0].stop.value) == 4 and split[1] == []
    assert split_columns(Matmul(c, i64(0), n, a, i64(0), 128, bb, i64(0), 64, 1, n, 128,
                                b_packed=True)) is None  # 128 KB: one thread


def test_gemv_split_when_layers_share_a_kernel_of_runtime_depth() -> None:
    # two layers of one width and other depths (784 and 512) share one kernel function whose
    # depth is a parameter (`passes.parametrize_kernels`); the column split takes that depth by
    # its hint, so a batch of one still streams B on both threads (it ran on one: MLP batch 1
    # at 0.29x onnxruntime on an Intel guest whose L2 holds half of the 2.6 MB of weights)
    model = mlp((784, 512, 512, 10), seed=5, batch=1)
    x = np.random.default_rng(5).standard_normal((1, 784)).astype(np.float32)
    one, two = (compiled(model, threads) for threads in (1, 2))
    y1, y2 = one(x)[0], two(x)[0]
    assert "k = %kp" in two.ir("loops")  # the depth is a run-time parameter
    assert dispatches(two)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_allclose(y1, mlp_reference(model, x.astype(np.float64)), rtol=1e-4,
                               atol=1e-4)


def test_few_rows_over_a_large_b_split_by_columns() -> None:
    # 20 rows over 8 MB (or 1 MB) of packed B: row blocks would each stream all of B, so the
    # plan splits its column panels (`split_matmul.streams_b`); 20 rows over 256 KB (a share
    # of L2) and 96 rows over 8 MB keep the row split
    from onnxjit.codegen.parallel import plan_kernel
    from onnxjit.ir.loops import Kernel

    def planned(k: int, n: int, m: int = 20) -> str:
        a, bb, c = (Buffer(x, F32, shape, "temp") for x, shape in
                    (("a", (m, k)), ("b", (k * n,)), ("c", (m, n))))
        s = Matmul(c, i64(0), n, a, i64(0), k, bb, i64(0), 64, m, n, k, b_packed=True)
        (loop, *_), = plan_kernel(Kernel("gemm", [s])).values()
        return loop.var.hint

    assert planned(1024, 2048) == "cblk"
    assert planned(512, 512) == "cblk"
    assert planned(256, 256) != "cblk"
    assert planned(1024, 2048, m=96) != "cblk"


def test_runtime_rows_column_case_runs_its_epilogue_on_the_pool() -> None:
    # a symbolic program's product decides at run time between row blocks and column blocks
    # (`split_matmul._or_columns`); in the column case the bias nest after it runs over the
    # rows on the pool too (it ran on one thread: 25-70 us of the OCR recognizer's 6625-class
    # classifier), the same bits on one and two threads, in both cases
    import re

    rng = np.random.default_rng(3)
    k, n = 256, 2048  # 2 MB of packed B: a few rows are split by columns
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    model = finish(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"],
                                                                         ["y"])], "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", n])],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(bias, "b")]))
    one, two = (onnxjit.compile(model, num_threads=t, cache_dir=False, specialize="dynamic")
                for t in (1, 2))
    for rows in (100, 4, 24, 1):
        x = rng.standard_normal((rows, k)).astype(np.float32)
        y1, y2 = one(x)[0], two(x)[0]
        np.testing.assert_array_equal(y1, y2)
        np.testing.assert_allclose(y1, x.astype(np.float64) @ w + bias, rtol=1e-4, atol=1e-4)
    tasks = re.findall(r"define internal void @\S+\.par\d+\.task", two.ir("llvm"))
    assert len(tasks) == 2, tasks  # the product's blocks, the column case's epilogue rows
