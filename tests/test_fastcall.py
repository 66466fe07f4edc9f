"""The fast call path (a CPython builtin in front of the generated entry) and its fallbacks.

Every call first tries the builtin of the last signature; anything it does not accept exactly
(another shape or dtype, a list, a strided or byte-swapped array, a busy arena) must fall back
to the checked path with the same results and errors.
"""

import threading

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import onnxjit
from onnxjit import fastcall


def _model(nodes, inputs, outputs, inits=()):
    g = oh.make_graph(nodes, "g", inputs, outputs, list(inits))
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)], ir_version=10)


def _add(dtype=TP.FLOAT, shape=("n",)):
    return _model([oh.make_node("Add", ["a", "b"], ["y"])],
                  [oh.make_tensor_value_info("a", dtype, shape),
                   oh.make_tensor_value_info("b", dtype, shape)],
                  [oh.make_tensor_value_info("y", dtype, shape)])


def test_layout_is_recognised_here():
    # CI runs on CPython 64-bit with numpy 2: the fast path must be available there.
    assert fastcall.layout_ok()


@pytest.mark.parametrize("dtype,np_dtype", [(TP.FLOAT, np.float32), (TP.DOUBLE, np.float64),
                                            (TP.INT32, np.int32), (TP.INT64, np.int64)])
def test_repeated_calls_match_numpy(dtype, np_dtype):
    fn = onnxjit.compile(_add(dtype), cache_dir=False)
    rng = np.random.default_rng(0)
    for n in (4, 4, 7, 0, 4):
        a = (rng.standard_normal(n) * 100).astype(np_dtype)
        b = (rng.standard_normal(n) * 100).astype(np_dtype)
        for _ in range(3):
            (y,) = fn(a, b)
            np.testing.assert_array_equal(y, a + b)
            assert y.dtype == np_dtype and y.flags.c_contiguous and y.flags.writeable


def test_zero_dim_and_bool():
    m = _model([oh.make_node("And", ["a", "b"], ["y"])],
               [oh.make_tensor_value_info("a", TP.BOOL, []),
                oh.make_tensor_value_info("b", TP.BOOL, [])],
               [oh.make_tensor_value_info("y", TP.BOOL, [])])
    fn = onnxjit.compile(m, cache_dir=False)
    for x, z in ((True, True), (True, False), (False, True), (True, True)):
        (y,) = fn(np.array(x), np.array(z))
        assert y.shape == () and bool(y) == (x and z)


def test_fallbacks_give_the_same_answers_and_errors():
    fn = onnxjit.compile(_add(), cache_dir=False)
    a = np.arange(8, dtype=np.float32)
    b = np.ones(8, np.float32)
    fn(a, b)  # the builtin now serves f32[8]
    np.testing.assert_array_equal(fn(a[::2], b[:4])[0], a[::2] + 1)  # strided
    np.testing.assert_array_equal(fn(a.astype(">f4"), b)[0], a + 1)  # byte-swapped
    np.testing.assert_array_equal(fn(list(range(8)), b)[0], a + 1)  # a list
    np.testing.assert_array_equal(fn(a=a, b=b)[0], a + 1)  # by name
    with pytest.raises(onnxjit.InputTypeError, match="'a'.*float32"):
        fn(a.astype(np.float64), b)
    with pytest.raises(onnxjit.InputError, match="takes 2 inputs"):
        fn(a, b, b)
    with pytest.raises(onnxjit.InputError, match="symbolic dim 'n'"):
        fn(a, b[:3])
    np.testing.assert_array_equal(fn(a, b)[0], a + 1)


def test_inputs_by_name_take_the_fast_path_in_graph_order(monkeypatch):
    # Every input by name is reordered to graph-input order and served by the builtin (a
    # subtraction tells the order); names it does not know still get the checked path's error.
    m = _model([oh.make_node("Sub", ["a", "b"], ["y"])],
               [oh.make_tensor_value_info("a", TP.FLOAT, ["n"]),
                oh.make_tensor_value_info("b", TP.FLOAT, ["n"])],
               [oh.make_tensor_value_info("y", TP.FLOAT, ["n"])])
    fn = onnxjit.compile(m, cache_dir=False)
    a, b = np.arange(6, dtype=np.float32), np.full(6, 2, np.float32)
    np.testing.assert_array_equal(fn(a, b)[0], a - b)  # the builtin now serves f32[6]
    with monkeypatch.context() as mp:  # ... and by name too: never the slow reordering
        mp.setattr(fn, "_order", None)
        for _ in range(3):
            np.testing.assert_array_equal(fn(b=b, a=a)[0], a - b)
    np.testing.assert_array_equal(fn(b=b[:4], a=a[:4])[0], a[:4] - b[:4])  # another shape
    np.testing.assert_array_equal(fn.run(None, {"b": b, "a": a})[0], a - b)
    with pytest.raises(onnxjit.InputError, match="unknown input name 'c'"):
        fn(a=a, c=b)
    with pytest.raises(onnxjit.InputError, match="symbolic dim 'n'"):
        fn(a=a, b=b[:3])


def test_builtin_keeps_what_it_points_to_alive():
    # CPython reads a builtin's PyMethodDef when the builtin is freed or traversed by the
    # collector, which can happen after the FastCall object that made it is gone: the builtin
    # itself must keep that memory (and the context its trampoline reads) alive
    import gc
    import weakref

    fn = onnxjit.compile(_add(), cache_dir=False)
    a = np.arange(4, dtype=np.float32)
    fn(a, a)
    art = fn._last
    builtin = art.fast.fn
    method_def, ctx = weakref.ref(art.fast._def), weakref.ref(art.fast._ctx)
    art.fast = None  # the FastCall object goes
    gc.collect()
    assert method_def() is not None and ctx() is not None
    np.testing.assert_array_equal(fn(a, a)[0], a + a)  # the builtin still serves the calls
    fn._fastcall = None
    del builtin
    gc.collect()
    assert method_def() is None and ctx() is None  # and frees them with itself


def test_failed_check_raises_on_every_call():
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    m = _model([oh.make_node("Gather", ["data", "idx"], ["y"], axis=0)],
               [oh.make_tensor_value_info("idx", TP.INT64, [2])],
               [oh.make_tensor_value_info("y", TP.FLOAT, [2, 3])],
               [oh.make_tensor(
                   "data", TP.FLOAT, data.shape, data.ravel().tolist())])
    fn = onnxjit.compile(m, cache_dir=False)
    np.testing.assert_array_equal(fn(np.array([3, -4]))[0], data[[3, 0]])
    for _ in range(3):
        with pytest.raises(onnxjit.InputError, match="out of range|index"):
            fn(np.array([1, 4]))
    np.testing.assert_array_equal(fn(np.array([1, 2]))[0], data[[1, 2]])


def test_outputs_are_fresh_and_owned():
    fn = onnxjit.compile(_add(), cache_dir=False)
    a = np.ones(5, np.float32)
    y1, = fn(a, a)
    y2, = fn(a, a)
    assert y1 is not y2 and not np.shares_memory(y1, y2)
    y1[:] = 0
    np.testing.assert_array_equal(fn(a, a)[0], 2 * a)


def test_many_threads_share_one_model():
    # A model with an arena (temps): concurrent calls contend for the builtin's arena and fall
    # back to per-thread arenas; every result must be right.
    m = _model([oh.make_node("MatMul", ["x", "w"], ["h"]),
                oh.make_node("Relu", ["h"], ["r"]),
                oh.make_node("MatMul", ["r", "w2"], ["y"])],
               [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 64])],
               [oh.make_tensor_value_info("y", TP.FLOAT, ["n", 8])],
               [oh.make_tensor("w", TP.FLOAT, [64, 32], np.linspace(-1, 1, 64 * 32).tolist()),
                oh.make_tensor("w2", TP.FLOAT, [32, 8], np.linspace(1, -1, 32 * 8).tolist())])
    fn = onnxjit.compile(m, cache_dir=False)
    w = np.linspace(-1, 1, 64 * 32, dtype=np.float32).reshape(64, 32)
    w2 = np.linspace(1, -1, 32 * 8, dtype=np.float32).reshape(32, 8)
    errors: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for k in range(200):
            x = rng.standard_normal((1 + (seed + k) % 3, 64)).astype(np.float32)
            (y,) = fn(x)
            ref = np.maximum(x @ w, 0) @ w2
            if not np.allclose(y, ref, rtol=1e-4, atol=1e-4):
                errors.append(f"thread {seed} call {k}")

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
