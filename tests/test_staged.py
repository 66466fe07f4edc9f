"""The run-time shape phase: graphs whose shapes depend on input values run in stages."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import onnxjit
from onnxjit.runtime import CompiledModel


def _model(nodes, inputs, outputs, opset=18):
    g = oh.make_graph(nodes, "g", inputs, outputs)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)


def _reduce_with_runtime_axes():
    # Sum over runtime axes, then an elementwise op on the result: the axes' values decide the
    # shape of everything after the reduction.
    return _model(
        [oh.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1),
         oh.make_node("Exp", ["s"], ["y"])],
        [oh.make_tensor_value_info("x", TP.FLOAT, [3, 4, 5]),
         oh.make_tensor_value_info("axes", TP.INT64, [None])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [None, None, None])])


def test_runtime_axes_bind_into_a_specialised_stage(tmp_path):
    fn = onnxjit.compile(_reduce_with_runtime_axes(), cache_dir=tmp_path)
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32) * 0.3
    for axes in ([1], [2], [-1], [1]):
        (y,) = fn(x, np.array(axes, np.int64))
        np.testing.assert_allclose(y, np.exp(x.sum(axis=tuple(axes), keepdims=True)), rtol=1e-5)
    # Three distinct axes values -> three children of the root stage, reused on repeat; each
    # child is the whole graph compiled natively with its axes as a constant.
    staged = next(iter(fn._fast.values()))
    assert staged.source == "staged"
    assert len(staged.root.children) == 3
    for child in staged.root.children.values():
        assert child.host is None and len(child.prefix) >= 1 and not child.rest
    (y,) = fn(x, np.array([0, 2], np.int64))  # another signature (axes of length 2)
    np.testing.assert_allclose(y, np.exp(x.sum(axis=(0, 2), keepdims=True)), rtol=1e-5)


def test_staged_signature_from_disk_cache_in_a_new_model(tmp_path):
    model = _reduce_with_runtime_axes()
    x = np.ones((3, 4, 5), np.float32)
    a = np.array([0], np.int64)
    (y1,) = onnxjit.compile(model, cache_dir=tmp_path)(x, a)
    before = CompiledModel.cache_info()
    (y2,) = onnxjit.compile(model, cache_dir=tmp_path)(x, a)
    after = CompiledModel.cache_info()
    np.testing.assert_array_equal(y1, y2)
    assert after["misses"] == before["misses"]  # nothing recompiled


def test_reshape_to_a_computed_shape():
    # The target shape is computed from a runtime tensor's values (not its shape).
    model = _model(
        [oh.make_node("Mul", ["dims", "two"], ["target"]),
         oh.make_node("Reshape", ["x", "target"], ["r"]),
         oh.make_node("Neg", ["r"], ["y"])],
        [oh.make_tensor_value_info("x", TP.FLOAT, [6, 4]),
         oh.make_tensor_value_info("dims", TP.INT64, [2])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [None, None])])
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(2, np.int64), "two"))
    fn = onnxjit.compile(model, cache_dir=False)
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    (y,) = fn(x, np.array([1, 6], np.int64))
    np.testing.assert_array_equal(y, -x.reshape(2, 12))
    (y,) = fn(x, np.array([6, 1], np.int64))
    np.testing.assert_array_equal(y, -x.reshape(12, 2))


def test_float_range_is_evaluated_on_the_host():
    # Range over float scalars: not bindable by value (not integer), so the Range node runs on
    # the host and the rest is compiled for the length it produced.
    model = _model(
        [oh.make_node("Range", ["start", "limit", "delta"], ["r"]),
         oh.make_node("Mul", ["r", "r"], ["y"])],
        [oh.make_tensor_value_info(n, TP.FLOAT, []) for n in ("start", "limit", "delta")],
        [oh.make_tensor_value_info("y", TP.FLOAT, [None])])
    fn = onnxjit.compile(model, cache_dir=False)
    for start, limit, delta in ((0.0, 5.0, 1.0), (1.0, 2.0, 0.25), (3.0, 0.0, -0.5)):
        args = [np.array(v, np.float32) for v in (start, limit, delta)]
        (y,) = fn(*args)
        r = np.arange(start, limit, delta, dtype=np.float32)
        np.testing.assert_allclose(y, r * r)


def test_input_errors_still_raised_inside_stages():
    fn = onnxjit.compile(_reduce_with_runtime_axes(), cache_dir=False)
    x = np.ones((3, 4, 5), np.float32)
    with pytest.raises(onnxjit.OnnxJitError, match="axis|axes|range"):
        fn(x, np.array([7], np.int64))


def test_host_ops_ending_the_graph_run_in_the_native_stage():
    # A classifier's ZipMap after native code: evaluated right after the native prefix, for
    # every batch size, without a child stage per shape.
    w = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    model = oh.make_model(oh.make_graph(
        [oh.make_node("MatMul", ["x", "w"], ["s"]), oh.make_node("Softmax", ["s"], ["p"]),
         oh.make_node("ZipMap", ["p"], ["maps"], domain="ai.onnx.ml",
                      classlabels_int64s=[10, 20, 30])],
        "g", [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 4])],
        [oh.make_tensor_value_info("p", TP.FLOAT, ["n", 3]),
         oh.make_value_info("maps", oh.make_sequence_type_proto(oh.make_map_type_proto(
             TP.INT64, oh.make_tensor_type_proto(TP.FLOAT, []))))],
        [onnx.numpy_helper.from_array(w, "w")]),
        opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("ai.onnx.ml", 3)], ir_version=9)
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is the reference")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = onnxjit.compile(model, cache_dir=False, specialize="shape")
    for n in (1, 5, 1, 300):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        want, got = sess.run(None, {"x": x}), fn.run(None, {"x": x})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        assert type(got[1]) is list and len(got[1]) == n
        for g, e in zip(got[1], want[1]):
            assert list(g) == list(e)
            np.testing.assert_allclose(list(g.values()), list(e.values()), rtol=1e-6)
    for staged in fn._fast.values():
        assert staged.source == "staged"
        assert [n.op for n in staged.root.tail] == ["ZipMap"] and not staged.root.children
    # repeated calls take the native prefix's builtin from the second on; an array it does
    # not take as is (strided) goes the checked way
    base = np.random.default_rng(7).standard_normal((3, 8)).astype(np.float32)
    for x in [base[:, :4].copy()] * 3 + [base[:, ::2], base[:, 4:].copy()]:
        want, got = sess.run(None, {"x": np.ascontiguousarray(x)}), fn.run(None, {"x": x})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        np.testing.assert_allclose([list(m.values()) for m in got[1]],
                                   [list(m.values()) for m in want[1]], rtol=1e-6)


def _zipmap_classifier():
    w = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    return oh.make_model(oh.make_graph(
        [oh.make_node("MatMul", ["x", "w"], ["s"]), oh.make_node("Softmax", ["s"], ["p"]),
         oh.make_node("ZipMap", ["p"], ["maps"], domain="ai.onnx.ml",
                      classlabels_strings=["a", "b", "c"])],
        "g", [oh.make_tensor_value_info("x", TP.FLOAT, [1, 4])],
        [oh.make_value_info("maps", oh.make_sequence_type_proto(oh.make_map_type_proto(
            TP.STRING, oh.make_tensor_type_proto(TP.FLOAT, [])))),
         oh.make_tensor_value_info("p", TP.FLOAT, [1, 3])],
        [onnx.numpy_helper.from_array(w, "w")]),
        opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("ai.onnx.ml", 3)], ir_version=9)


def test_native_prefix_and_host_tail_take_the_fast_call(monkeypatch):
    # From the second call, a one-row classifier's prefix builtin and its ZipMap are one fast
    # call (`staged_fast`): no stage walk, fresh results, the prefix's checks and messages.
    from onnxjit.staged import Stage

    fn = onnxjit.compile(_zipmap_classifier(), cache_dir=False)
    x = np.random.default_rng(2).standard_normal((1, 4)).astype(np.float32)
    first = fn(x)
    fn(x)
    assert fn._fastcall[2].source == "staged"

    def no_stage_walk(self, arrays):
        raise AssertionError("the fast call walked the stages")
    monkeypatch.setattr(Stage, "run", no_stage_walk)
    for _ in range(3):
        maps, p = fn(x)
        assert maps == first[0] and p.tolist() == first[1].tolist()
        assert list(maps[0]) == ["a", "b", "c"]
        maps[0]["a"] = -1.0  # the caller owns what it got
        p[...] = 0
    monkeypatch.undo()
    with pytest.raises(onnxjit.InputError, match="'x'"):
        fn(np.zeros((1, 5), np.float32))
    assert fn(x)[0] == first[0]


def test_host_tail_failing_in_the_fast_call_takes_the_checked_path(monkeypatch):
    # An error in the tail's fast step is not reported from there: the checked path runs the
    # call again (here with the host table's function, which works) and answers.
    from onnxjit.ir import host_eval

    fn = onnxjit.compile(_zipmap_classifier(), cache_dir=False)
    x = np.random.default_rng(3).standard_normal((1, 4)).astype(np.float32)
    want = fn(x)[0]

    def failing(node):
        def step(ins):
            raise RuntimeError("step failed")
        return step
    monkeypatch.setitem(host_eval.PREPARE, ("ai.onnx.ml", "ZipMap"), failing)
    for _ in range(3):
        assert fn(x)[0] == want
    assert fn._fastcall[2].source == "staged"


def test_host_tail_reading_a_constant_takes_the_fast_call():
    # A classifier with string labels ends in Gather(constant labels, class index) beside its
    # ZipMap: the tail reads a constant and still composes into the fast call; the caller owns
    # the labels it gets (the table is never handed out).
    w = np.random.default_rng(4).standard_normal((4, 3)).astype(np.float32)
    labels = np.array(["cat", "dog", "eel"], dtype=object)
    model = oh.make_model(oh.make_graph(
        [oh.make_node("MatMul", ["x", "w"], ["s"]), oh.make_node("Softmax", ["s"], ["p"]),
         oh.make_node("ArgMax", ["p"], ["k"], axis=1, keepdims=0),
         oh.make_node("Gather", ["names", "k"], ["label"]),
         oh.make_node("ZipMap", ["p"], ["maps"], domain="ai.onnx.ml",
                      classlabels_strings=list(labels))],
        "g", [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 4])],
        [oh.make_tensor_value_info("label", TP.STRING, ["n"]),
         oh.make_value_info("maps", oh.make_sequence_type_proto(oh.make_map_type_proto(
             TP.STRING, oh.make_tensor_type_proto(TP.FLOAT, []))))],
        [onnx.numpy_helper.from_array(w, "w"), onnx.helper.make_tensor(
            "names", TP.STRING, [3], [s.encode() for s in labels])]),
        opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("ai.onnx.ml", 3)], ir_version=9)
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is the reference")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = onnxjit.compile(model, cache_dir=False)
    x = np.random.default_rng(5).standard_normal((6, 4)).astype(np.float32)
    want = sess.run(None, {"x": x})
    for _ in range(3):
        label, maps = fn(x)
        assert label.tolist() == want[0].tolist() and [list(m) for m in maps] == [
            list(m) for m in want[1]]
        label[...] = "overwritten"
    assert fn._fastcall[2].source == "staged"
    assert fn(x)[0].tolist() == want[0].tolist()
