"""`onnxjit.InferenceSession` against onnxruntime's own session on the same models (issue 28).

Code written for onnxruntime must run unchanged: the interface (`get_inputs`, `get_outputs`,
`get_overridable_initializers` as NodeArgs with onnxruntime's type text and shapes of ints,
dim names and None), `get_modelmeta`, providers, and `run` returning a list.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxjit

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
META = ("producer_name", "graph_name", "domain", "description", "graph_description",
        "version", "custom_metadata_map")


def _ort(model: onnx.ModelProto | str) -> ort.InferenceSession:
    src = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"])


def _args(args: list) -> list:
    return [(a.name, a.type, list(a.shape)) for a in args]


def _assert_same_interface(ours: onnxjit.InferenceSession, theirs: ort.InferenceSession
                           ) -> None:
    for method in ("get_inputs", "get_outputs", "get_overridable_initializers"):
        assert _args(getattr(ours, method)()) == _args(getattr(theirs, method)()), method
    mine, want = ours.get_modelmeta(), theirs.get_modelmeta()
    for field in META:
        assert getattr(mine, field) == getattr(want, field), field


def _mixed_model() -> onnx.ModelProto:
    """Named, unnamed and -1 dims, an overridable initializer, metadata, two outputs whose
    shapes inference finds (one declared without a shape), several dtypes."""
    nodes = [helper.make_node("Add", ["x", "w"], ["t"]),
             helper.make_node("Concat", ["t", "t"], ["y"], axis=0),
             helper.make_node("Shape", ["y"], ["s"]),
             helper.make_node("Cast", ["ids"], ["c"], to=T.DOUBLE)]
    g = helper.make_graph(
        nodes, "mixed",
        [helper.make_tensor_value_info("x", T.FLOAT, ["N", -1, None]),
         helper.make_tensor_value_info("w", T.FLOAT, [3]),
         helper.make_tensor_value_info("ids", T.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", T.FLOAT, None),
         helper.make_tensor_value_info("s", T.INT64, [3]),
         helper.make_tensor_value_info("c", T.DOUBLE, ["batch", "seq"])],
        [numpy_helper.from_array(np.ones(3, np.float32), "w")], doc_string="graph doc")
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="me",
                          producer_version="1.0", doc_string="model doc", model_version=7,
                          domain="org.example")
    helper.set_model_props(m, {"author": "someone", "license": "MIT"})
    m.ir_version = 8
    return m


def test_interface_and_metadata_match_onnxruntime() -> None:
    m = _mixed_model()
    _assert_same_interface(onnxjit.InferenceSession(m, cache_dir=False), _ort(m))


def test_ir3_model_interface_matches_onnxruntime() -> None:
    """SqueezeNet as the model zoo shipped it (IR 3: its 52 weights listed as inputs): one
    input, data_0, as onnxruntime shows it."""
    path = os.path.join(LIGHT, "light_squeezenet.onnx")
    assert os.path.exists(path), "the onnx wheel ships its backend test data"
    ours = onnxjit.InferenceSession(path, cache_dir=False)
    _assert_same_interface(ours, _ort(path))
    assert [a.name for a in ours.get_inputs()] == ["data_0"]


def test_code_written_for_onnxruntime_runs_unchanged() -> None:
    m = _mixed_model()
    x = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    ids = np.arange(6, dtype=np.int64).reshape(2, 3)
    for sess in (onnxjit.InferenceSession(m.SerializeToString(), cache_dir=False), _ort(m)):
        feeds = {sess.get_inputs()[0].name: x, sess.get_inputs()[1].name: ids}
        outs = sess.run(None, feeds)
        assert isinstance(outs, list) and len(outs) == len(sess.get_outputs())
        s_only = sess.run([sess.get_outputs()[1].name], feeds)
        overridden = sess.run(["y"], {**feeds, "w": np.zeros(3, np.float32)})
        if isinstance(sess, onnxjit.InferenceSession):
            mine = (outs, s_only, overridden)
        else:
            want = (outs, s_only, overridden)
    for got_list, want_list in zip(mine, want):
        for got, ref in zip(got_list, want_list):
            assert got.dtype == ref.dtype and got.shape == ref.shape
            np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_compiled_model_exposes_the_same_interface() -> None:
    m = _mixed_model()
    fn = onnxjit.compile(m, cache_dir=False)
    theirs = _ort(m)
    assert _args(fn.inputs) == _args(theirs.get_inputs())
    assert _args(fn.outputs) == _args(theirs.get_outputs())
    assert _args(fn.overridable_inputs) == _args(theirs.get_overridable_initializers())
    assert fn.input_names == ["x", "ids"]


def test_providers_options_and_unsupported_parts() -> None:
    m = _mixed_model()
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = onnxjit.InferenceSession(m, so, providers=["CPUExecutionProvider"], cache_dir=False)
    assert sess.compiled.options.num_threads == 1
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert sess.get_provider_options() == {"CPUExecutionProvider": {}}
    assert onnxjit.get_available_providers() == ["CPUExecutionProvider"]
    with pytest.warns(RuntimeWarning, match="CUDAExecutionProvider"):
        gpu = onnxjit.InferenceSession(m, providers=["CUDAExecutionProvider",
                                                     "CPUExecutionProvider"], cache_dir=False)
    assert gpu.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(onnxjit.UnsupportedError, match="io_binding"):
        sess.io_binding()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = sess.run(None, {"x": np.ones((1, 2, 3), np.float32),
                              "ids": np.ones((1, 1), np.int64)}, onnxjit.RunOptions())
    assert out[0].shape == (2, 2, 3)


def test_unknown_feed_and_output_names_name_the_mistake() -> None:
    sess = onnxjit.InferenceSession(_mixed_model(), cache_dir=False)
    feeds = {"x": np.ones((1, 2, 3), np.float32), "ids": np.ones((1, 1), np.int64)}
    with pytest.raises(onnxjit.InputError, match="'z'"):
        sess.run(None, {**feeds, "z": np.ones(1, np.float32)})
    with pytest.raises(onnxjit.InputError, match="nope"):
        sess.run(["nope"], feeds)
    with pytest.raises(onnxjit.InputError, match="missing input 'ids'"):
        sess.run(None, {"x": feeds["x"]})


def test_run_async_reports_through_the_callback_as_onnxruntime_does() -> None:
    import threading

    m = _mixed_model()
    feeds = {"x": np.ones((1, 2, 3), np.float32), "ids": np.ones((1, 1), np.int64)}
    results = {}
    for name, sess in (("ours", onnxjit.InferenceSession(m, cache_dir=False)), ("ort", _ort(m))):
        sess.disable_fallback()
        done = [threading.Event(), threading.Event()]

        def callback(out, user_data, err, name=name, done=done):
            results[(name, user_data)] = (out, err)
            done[user_data].set()

        sess.run_async(None, feeds, callback, 0)
        # a bad value reaches the callback (a run-time error); a missing input raises at once
        sess.run_async(None, {**feeds, "x": np.ones((1, 2, 4), np.float32)}, callback, 1)
        with pytest.raises((onnxjit.InputError, ValueError), match="ids"):
            sess.run_async(None, {"x": feeds["x"]}, callback, 1)
        assert all(d.wait(30) for d in done)
    (ours, err), (theirs, their_err) = results[("ours", 0)], results[("ort", 0)]
    assert err == their_err == ""
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b)
    assert results[("ours", 1)][0] is None and "x" in results[("ours", 1)][1]
    assert results[("ort", 1)][1]  # onnxruntime reports an error there too
