"""Parallel loops on the worker pool: same results for 1 and 2 threads, checks inside parallel
loops, concurrent callers (the pool itself: `test_pool.py`).

Hand-built loop-IR programs exercise the outlining corner cases (captured variables, a start
and step, a variable that must stay serial, checks); ONNX models built with onnx.helper go
through `onnxjit.compile` (large elementwise, softmax and reduction, Gather with an index out
of range, MatMul split over its rows).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import pytest
from models import chain, finish, one_node
from onnx import TensorProto, helper

import onnxjit
from onnxjit.artifact import Artifact, pyobject_layout_ok
from onnxjit.codegen import compile_program, load_object, pool
from onnxjit.codegen.parallel import plan_kernel
from onnxjit.errors import InputError
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Kernel, Matmul, Program, i64, walk
from onnxjit.ir.types import DType

F32 = DType.FLOAT
N = 300_000


def compiled(model: onnx.ModelProto, threads: int):
    return onnxjit.compile(model, num_threads=threads, cache_dir=False)


def dispatches(fn) -> bool:
    """True when the code of `fn`'s last signature runs a loop on the pool."""
    return ".task" in fn.ir("llvm")


def artifact(p: Program, threads: int) -> Artifact:
    lib = load_object(compile_program(p))
    return Artifact(tuple((b.dtype, b.shape) for b in p.inputs),
                    [(b.shape, b.dtype.numpy) for b in p.outputs], [b.data for b in p.consts],
                    p.arena_size, p.messages(), lib, pyobject_layout_ok(16, 64),
                    num_threads=threads)


# loop IR ---------------------------------------------------------------------------------------
def _strided_program(n: int) -> Program:
    """out = 0; then for i in [8, n) step 3: out[i] = x[i] * s[0] + i, with a check x[i] < 100
    inside the parallel loop and the scale `s[0]` read before it (a captured variable);
    last[0] = x[i] of a parallel loop whose variable is read after it (stays serial)."""
    x = Buffer("x", F32, (n,), "input", slot=0)
    s = Buffer("s", F32, (1,), "input", slot=1)
    out = Buffer("out", F32, (n,), "output", slot=2)
    last = Buffer("last", F32, (1,), "output", slot=3)
    b = Builder()
    with b.loop(0, n, parallel=True) as i:
        b.store(out, i, const(0, F32))
    scale = b.load(s, i64(0))
    with b.loop(8, n, step=3, parallel=True) as i:
        v = b.load(x, i)
        b.check(b.op("lt", v, const(100, F32)), "x too large")
        b.store(out, i, b.op("add", b.op("mul", v, scale), b.cast(i, F32)))
    k1 = Kernel("strided", b.body)
    b2 = Builder()
    with b2.loop(0, n, parallel=True) as i:
        carried = b2.op("copy", b2.load(x, i))
    b2.store(last, i64(0), b2.op("add", carried, const(0, F32)))
    return Program([x, s, out, last], [k1, Kernel("carried", b2.body)])


def test_loop_ir_outlining_matches_numpy() -> None:
    n = (1 << 21) + 3
    p = _strided_program(n)
    planned = [len(plan_kernel(k)) for k in p.kernels]
    assert planned == [2, 0]  # the carried variable keeps the second kernel serial
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    s = np.array([1.5], np.float32)
    want = np.zeros(n, np.float32)
    idx = np.arange(8, n, 3)
    want[idx] = x[idx] * s[0] + idx.astype(np.float32)
    results = []
    for threads in (1, 2, 4):
        art = artifact(p, threads)
        for _ in range(3):
            out, last = art.run((x, s))
            np.testing.assert_array_equal(out, want)
            assert last[0] == x[-1]
            results.append(out)
        bad = x.copy()
        bad[5001] = 1000.0  # not visited: the loop runs over 8 + 3k
        np.testing.assert_array_equal(art.run((bad, s))[0], want)
        bad[[90001, idx[-1]]] = 1000.0  # 8 + 3 * 29997 and the last iteration
        with pytest.raises(InputError, match="x too large"):
            art.run((bad, s))
    assert pool.worker_count() >= 1


def test_small_loops_stay_serial() -> None:
    """A parallel loop with little work is not outlined at all (tiny models pay nothing)."""
    x = Buffer("x", F32, (1000,), "input", slot=0)
    y = Buffer("y", F32, (1000,), "output", slot=1)
    b = Builder()
    with b.loop(0, 1000, parallel=True) as i:
        b.store(y, i, b.op("add", b.load(x, i), const(1, F32)))
    p = Program([x, y], [Kernel("small", b.body)])
    assert plan_kernel(p.kernels[0]) == {}
    # 600K ops (200K elements, 3 ops each) is worth two chunks: dispatched
    big = Buffer("big", F32, (200_000,), "input", slot=0)
    b2 = Builder()
    with b2.loop(0, 200_000, parallel=True) as i:
        b2.store(big, i, b2.op("add", b2.load(big, i), const(1, F32)))
    assert len(plan_kernel(Kernel("medium", b2.body))) == 1
    text: dict[str, str] = {}
    compile_program(p, dump=text.__setitem__)
    assert ".task" not in text["llvm.ll"]
    v = np.arange(1000, dtype=np.float32)
    np.testing.assert_array_equal(artifact(p, 2).run((v,))[0], v + 1)


def _recurrence_program(steps: int, width: int = 1 << 15) -> Program:
    """y[t, i] = 0.5 * y[t-1, i] + x[i] + t (y[-1] = 0), a serial loop over t holding a
    parallel loop over blocks of i that reads the outer variable and a value computed before it
    (both captured per step), with a check inside."""
    x = Buffer("x", F32, (width,), "input", slot=0)
    y = Buffer("y", F32, (steps, width), "output", slot=1)
    blk = 1024
    b = Builder()
    with b.loop(0, steps, hint="t") as t:
        tf = b.cast(t, F32)
        prev = b.imul(b.op("sub", t, i64(1)), width)
        with b.loop(0, width // blk, parallel=True, hint="blk") as k:
            with b.loop(0, blk, hint="i") as i:
                at = b.iadd(b.imul(k, blk), i)
                old = b.load(y, b.op("max", b.iadd(prev, at), i64(0)))
                old = b.op("select", b.op("gt", t, i64(0)), old, const(0, F32))
                v = b.op("add", b.op("add", b.op("mul", old, const(0.5, F32)), b.load(x, at)),
                         tf)
                b.check(b.op("lt", v, const(1e6, F32)), "recurrence too large")
                b.store(y, b.iadd(b.imul(t, width), at), v)
    return Program([x, y], [Kernel("steps", b.body)])


def test_parallel_loop_inside_serial_loop_dispatches_per_step() -> None:
    """A recurrence's steps: the parallel loop directly inside a serial top-level loop is
    outlined (one dispatch per step) once the serial loop has enough steps."""
    p = _recurrence_program(12)
    (outer,) = p.kernels[0].body
    assert list(plan_kernel(p.kernels[0])) == [id(outer.body[-1])]
    # too few steps to pay (each step's loop: 418K ops, more than NESTED_OPS)
    assert plan_kernel(_recurrence_program(3, 24576).kernels[0]) == {}
    text: dict[str, str] = {}
    compile_program(p, dump=text.__setitem__)
    assert ".task" in text["llvm.ll"]
    x = np.random.default_rng(2).standard_normal(1 << 15).astype(np.float32)
    want = np.zeros((12, x.size), np.float32)
    for t in range(12):
        want[t] = (want[t - 1] * np.float32(0.5) if t else 0) + x + np.float32(t)
    for threads in (1, 2):
        art = artifact(p, threads)
        for _ in range(3):
            np.testing.assert_allclose(art.run((x,))[0], want, rtol=1e-6)
        bad = x.copy()
        bad[20000] = 1e7
        with pytest.raises(InputError, match="recurrence too large"):
            art.run((bad,))


@pytest.mark.parametrize("seq, batch, inp, hid", [(64, 8, 128, 256), (128, 16, 64, 64)])
def test_recurrent_op_steps_run_on_the_pool(seq: int, batch: int, inp: int, hid: int) -> None:
    """An LSTM big enough: its step loop's blocks of hidden units are a nested dispatch, in
    chunks small enough for two threads (hidden 64: 4 blocks of 91K ops a step)."""
    from onnxjit.bench.builder import GraphBuilder
    from onnxjit.codegen.parallel import grain_of, trip_count
    from onnxjit.driver import import_model, lower_signature
    from onnxjit.options import CompileOptions

    g = GraphBuilder()
    w, r = g.weight((1, 4 * hid, inp), inp), g.weight((1, 4 * hid, hid), hid)
    y, _ = g.op("LSTM", ["x", w, r], n_out=2, hidden_size=hid)
    onnx_model = g.model("lstm", [("x", TensorProto.FLOAT, [seq, batch, inp])], y)
    opts = CompileOptions(verify=False)
    model = import_model(onnx_model.SerializeToString(), opts)
    _, prog = lower_signature(model, ((F32, (seq, batch, inp)),), opts)
    (steps,) = [k for k in prog.kernels if k.name.endswith("steps")]
    (outer,) = steps.body
    blocks = [s for s in outer.body if getattr(s, "parallel", False)]
    assert [id(s) for s in blocks] == list(plan_kernel(steps))
    assert all(trip_count(s) >= 2 * grain_of(steps, s) for s in blocks)


# ONNX models -----------------------------------------------------------------------------------
def test_elementwise_same_for_1_and_2_threads() -> None:
    x = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    m = chain(1 << 20)
    y1, = compiled(m, 1)(x)
    y2, = compiled(m, 2)(x)
    np.testing.assert_array_equal(y1, y2)
    t = np.tanh(x * np.float32(0.5) + np.float32(0.1))
    from scipy_free_erf import erf

    want = x / (1 + np.exp(-erf(t.astype(np.float64))))
    np.testing.assert_allclose(y2, want, rtol=2e-6, atol=1e-6)
    assert pool.worker_count() >= 1


def test_softmax_and_reduction_same_for_1_and_2_threads() -> None:
    f = TensorProto.FLOAT
    x = np.random.default_rng(2).standard_normal((512, 999)).astype(np.float32)
    soft = one_node("Softmax", [("x", f, [512, 999])], [("y", f, [512, 999])], opset=13,
                    axis=-1)
    red = one_node("ReduceSum", [("x", f, [512, 999]), ("axes", TensorProto.INT64, [1])],
                   [("y", f, [999])], opset=13, keepdims=0)
    for model, args, ref in (
            (soft, (x,), lambda: np.exp(x - x.max(1, keepdims=True))
             / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)),
            (red, (x, np.array([0])), lambda: x.sum(0))):
        y1, = compiled(model, 1)(*args)
        fn = compiled(model, 2)
        y2, = fn(*args)
        assert dispatches(fn)
        np.testing.assert_array_equal(y1, y2)
        np.testing.assert_allclose(y2, ref(), rtol=1e-4, atol=1e-5)


def test_matmul_split_over_rows() -> None:
    f = TensorProto.FLOAT
    rng = np.random.default_rng(3)
    a = rng.standard_normal((301, 256)).astype(np.float32)
    bm = rng.standard_normal((256, 200)).astype(np.float32)
    mm = one_node("MatMul", [("a", f, [301, 256]), ("b", f, [256, 200])], [("y", f, [301, 200])])
    y1, = compiled(mm, 1)(a, bm)
    fn = compiled(mm, 2)
    y2, = fn(a, bm)
    assert dispatches(fn)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_allclose(y2, a @ bm, rtol=1e-4, atol=1e-3)
    bt = np.ascontiguousarray(bm.T)
    gemm = one_node("Gemm", [("a", f, [301, 256]), ("b", f, [200, 256])], [("y", f, [301, 200])],
                    transB=1)
    y3, = compiled(gemm, 2)(a, bt)
    np.testing.assert_allclose(y3, a @ bm, rtol=1e-4, atol=1e-3)
    at = np.ascontiguousarray(a.T)
    gemm_ta = one_node("Gemm", [("a", f, [256, 301]), ("b", f, [256, 200]), ("c", f, [200])],
                       [("y", f, [301, 200])], transA=1, alpha=0.5, beta=2.0)
    c = rng.standard_normal(200).astype(np.float32)
    y4, = compiled(gemm_ta, 2)(at, bm, c)
    np.testing.assert_allclose(y4, 0.5 * (a @ bm) + 2 * c, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(y4, compiled(gemm_ta, 1)(at, bm, c)[0])


def test_matmul_split_keeps_blocks_of_many_rows() -> None:
    # each block of a split Matmul packs B again: a 128x512x128 product is split in two
    # 64-row blocks, not eight 16-row ones; a large product keeps ~32 blocks
    from onnxjit.codegen.parallel import split_matmul
    def blocks(m: int, n: int, k: int, packed: bool = False) -> tuple[int, int, int]:
        a, b, c = (Buffer(x, F32, shape, "temp") for x, shape in
                   (("a", (m, k)), ("b", (k, n)), ("c", (m, n))))
        loop, tail = split_matmul(Matmul(c, i64(0), n, a, i64(0), k, b, i64(0),
                                         64 if packed else n, m, n, k, b_packed=packed))
        heights = sorted({s.m for s in walk(loop.body) if isinstance(s, Matmul)})
        return int(loop.stop.value), heights, sum(s.m for s in tail if isinstance(s, Matmul))

    assert blocks(128, 512, 128) == (2, [64], 0)
    assert blocks(128, 128, 512) == (2, [64], 0)
    assert blocks(100, 512, 128) == (2, [50], 0)  # 2 x 48 and 4 left: 2 x 50
    assert blocks(2048, 512, 512) == (32, [64], 0)
    # an even number of blocks (two threads, one block each): 200 rows are not 3 blocks of
    # 64 and 8 rows left; with B packed per block, fewer blocks, with B prepacked, more
    assert blocks(200, 512, 128) == (2, [100], 0)
    assert blocks(200, 512, 128, packed=True) == (4, [50], 0)
    # the rows left go one each to the first blocks: 197 = 50 + 3 x 49, 31 = 16 + 15 (not
    # 2 x 12 and a product of 7 rows on one thread)
    assert blocks(197, 512, 128, packed=True) == (4, [49, 50], 0)
    assert blocks(31, 784, 300, packed=True) == (2, [15, 16], 0)
    # a small product (512K-1M multiply-adds) in two blocks, one a thread
    assert blocks(32, 200, 100) == (2, [16], 0)


def _product_with_epilogue(m: int, n: int = 256, k: int = 128) -> Program:
    """c = erf(a @ w + bias): a Matmul, then its epilogue nest over c's rows (as the fused
    MatMul lowering writes it; erf has no vector form, so the nest stays a pass of its own)."""
    a = Buffer("a", F32, (m, k), "input", slot=0)
    w = Buffer("w", F32, (k, n), "input", slot=1)
    bias = Buffer("bias", F32, (n,), "input", slot=2)
    c = Buffer("c", F32, (m, n), "output", slot=3)
    b = Builder()
    b.emit(Matmul(c, i64(0), n, a, i64(0), k, w, i64(0), n, m, n, k))
    with b.loop(0, m, hint="er") as r:
        base = b.imul(r, n)
        with b.loop(0, n, hint="ec") as col:
            at = b.iadd(base, col)
            b.store(c, at, b.op("erf", b.op("add", b.load(c, at), b.load(bias, col))))
    return Program([a, w, bias, c], [Kernel("epi", b.body)])


def test_split_matmul_runs_its_epilogue_in_its_blocks() -> None:
    # a product split over its rows takes the nest after it into each block (row + r): the
    # nest no longer runs on one thread after the product; blocks of two heights (31 = 16 +
    # 15) run it after either product; a product too small to split keeps its nest
    from math import erf

    from onnxjit.codegen.parallel import ABSORBED

    rng = np.random.default_rng(7)
    for m, absorbed in ((128, True), (100, True), (200, True), (8, False), (31, True)):
        p = _product_with_epilogue(m)
        kernel = p.kernels[0]
        plan = plan_kernel(kernel)
        assert (plan.get(id(kernel.body[1])) is ABSORBED) == absorbed
        a, w, bias = (rng.standard_normal(shape).astype(np.float32) * 0.1
                      for shape in ((m, 128), (128, 256), (256,)))
        want = np.vectorize(erf)(a.astype(np.float64) @ w + bias)
        outs = [artifact(p, threads).run((a, w, bias))[0] for threads in (1, 2)]
        np.testing.assert_allclose(outs[0], want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(outs[0], outs[1])


def _gather_model(rows: int, n: int) -> onnx.ModelProto:
    f, i64t = TensorProto.FLOAT, TensorProto.INT64
    node = helper.make_node("Gather", ["data", "idx"], ["y"], axis=0)
    g = helper.make_graph([node], "gather",
                          [helper.make_tensor_value_info("data", f, [rows, 4]),
                           helper.make_tensor_value_info("idx", i64t, [n])],
                          [helper.make_tensor_value_info("y", f, [n, 4])])
    return finish(g)


def test_check_inside_parallel_loop_raises() -> None:
    rows, n = 1000, 200_000
    data = np.random.default_rng(4).standard_normal((rows, 4)).astype(np.float32)
    idx = np.random.default_rng(5).integers(-rows, rows, n)
    for threads in (1, 2):
        fn = compiled(_gather_model(rows, n), threads)
        np.testing.assert_array_equal(fn(data, idx)[0], data[idx])
        assert dispatches(fn)
        for bad_at in ([n - 1], [7, 150_000], [100_000]):
            bad = idx.copy()
            bad[bad_at] = rows + 3
            with pytest.raises(InputError, match="index out of range"):
                fn(data, bad)
        np.testing.assert_array_equal(fn(data, idx)[0], data[idx])  # still usable


def test_concurrent_callers_with_different_shapes() -> None:
    fn = compiled(chain("n"), 2)
    ref = compiled(chain("n"), 1)
    sizes = [N + 1001 * k for k in range(8)]
    inputs = [np.random.default_rng(k).standard_normal(s).astype(np.float32)
              for k, s in enumerate(sizes)]
    wants = [ref(x)[0] for x in inputs]
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(k: int) -> None:
        try:
            start.wait()
            for _ in range(6):
                y, = fn(inputs[k])
                np.testing.assert_array_equal(y, wants[k])
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_new_signatures_compile_while_others_run() -> None:
    """8 threads on one CompiledModel: 4 keep calling compiled shapes (big ones, on the pool)
    while 4 compile new shapes, a data-dependent (staged) model runs alongside, and bad
    calls get their InputError; every result is checked."""
    fn = compiled(chain("n"), 2)
    ref = compiled(chain("n"), 1)
    old = [N + 7 * k for k in range(4)]
    new = [[1000 + 31 * k + 5 * j for j in range(2)] for k in range(4)]
    xs = {n: np.random.default_rng(n).standard_normal(n).astype(np.float32)
          for n in old + [m for ms in new for m in ms]}
    wants = {n: ref(x)[0] for n, x in xs.items()}
    for n in old:
        fn(xs[n])  # compiled before the race starts
    staged = compiled(helper.make_model(helper.make_graph(
        [helper.make_node("Expand", ["x", "s"], ["t"]), helper.make_node("Neg", ["t"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
              helper.make_tensor_value_info("s", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m"])]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8), 2)
    for k in range(4):  # its stages compiled before the race too: the runners only run
        staged(np.ones(1, np.float32), np.array([k + 1]))
    stop = threading.Event()
    errors: list[BaseException] = []
    counts = [0] * 8
    start = threading.Barrier(8)

    def runner(k: int) -> None:
        n = old[k]
        while not stop.is_set():
            np.testing.assert_array_equal(fn(xs[n])[0], wants[n])
            np.testing.assert_array_equal(staged(np.ones(1, np.float32),
                                                 np.array([k + 1]))[0], -np.ones(k + 1))
            with pytest.raises(InputError, match="rank"):
                fn(xs[n].reshape(1, -1))
            counts[k] += 1

    def compiler(k: int) -> None:
        for n in new[k]:
            for _ in range(3):
                np.testing.assert_array_equal(fn(xs[n])[0], wants[n])
            counts[4 + k] += 1
        # Compiles can end before a loaded machine runs a runner's first iteration: the race
        # lasts until every runner has run once (a runner blocked by compiles never does).
        deadline = time.monotonic() + 120
        while not all(counts[:4]) and not stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)

    def guard(work, k: int) -> None:
        try:
            start.wait()
            work(k)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=guard, args=(runner, k)) for k in range(4)]
    threads += [threading.Thread(target=guard, args=(compiler, k)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads[4:]:
        t.join()
    stop.set()
    for t in threads[:4]:
        t.join()
    assert not errors, errors[0]
    assert counts[4:] == [2] * 4 and all(c > 0 for c in counts[:4]), counts
    assert len(fn.signatures) == 4 + 8
