"""Graph inputs that also have an initializer (issue 26, item 1).

From IR version 4 such an initializer is only the input's default: a call that passes the
input must compute with the caller's value, a call that omits it with the default. The graph
pipeline used to fold the default like a constant, so a passed value was ignored. Checked
against onnxruntime (which also lets callers override such inputs), for the ops the
differential tests caught, in both call orders, across processes sharing a disk cache, and
with a symbolic input. IR <= 3 models (every initializer also listed as an input) keep
treating them as constants.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.driver import import_model
from onnxjit.options import CompileOptions

RNG = np.random.default_rng(26)
F = TensorProto.FLOAT


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _model(op: str, defaults: dict, out: tuple, attrs: dict | None = None,
           declared: dict | None = None, ir_version: int = 10) -> onnx.ModelProto:
    """One `op` node whose inputs are all graph inputs with an initializer (their default).
    `out` is (elem type, dims); `declared` overrides an input's declared dims."""
    declared = declared or {}
    ins = [helper.make_tensor_value_info(
        n, helper.np_dtype_to_tensor_dtype(a.dtype), declared.get(n, a.shape))
        for n, a in defaults.items()]
    g = helper.make_graph([helper.make_node(op, list(defaults), ["y"], **(attrs or {}))], "g",
                          ins, [helper.make_tensor_value_info("y", *out)],
                          [numpy_helper.from_array(a, n) for n, a in defaults.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = ir_version
    return m


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


# op -> (defaults, values a caller passes instead, output type, attributes)
CASES = {
    "Erf": ({"x": _f(2, 3)}, {"x": _f(2, 3)}, (F, [2, 3]), {}),
    "Tile": ({"x": _f(2, 3), "r": np.array([1, 2], np.int64)},
             {"x": _f(2, 3), "r": np.array([2, 1], np.int64)}, (F, [None, None]), {}),
    "BatchNormalization": (
        {"x": _f(2, 3, 4), "s": _f(3), "b": _f(3), "m": _f(3), "v": np.ones(3, np.float32)},
        {"x": _f(2, 3, 4), "s": _f(3), "b": _f(3), "m": _f(3),
         "v": np.full(3, 4.0, np.float32)}, (F, [2, 3, 4]), {}),
    "Gemm": ({"a": _f(2, 3), "b": _f(3, 4), "c": _f(4)},
             {"a": _f(2, 3), "b": _f(3, 4), "c": _f(4)}, (F, [2, 4]), {"alpha": 0.5}),
    "Less": ({"a": _f(2, 3), "b": _f(3)}, {"a": _f(2, 3), "b": _f(3)},
             (TensorProto.BOOL, [2, 3]), {}),
    "MatMul": ({"a": _f(2, 3), "b": _f(3, 4)}, {"a": _f(2, 3), "b": _f(3, 4)}, (F, [2, 4]),
               {}),
}


def _assert_same(got: tuple | list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", sorted(CASES))
@pytest.mark.parametrize("passed_first", [True, False], ids=["passed-first", "omitted-first"])
def test_passed_value_overrides_the_default(op: str, passed_first: bool) -> None:
    defaults, values, out, attrs = CASES[op]
    m = _model(op, defaults, out, attrs)
    fn = onnxjit.compile(m, cache_dir=False)
    calls = [values, {}] if passed_first else [{}, values]
    for feeds in calls:
        _assert_same(fn(**feeds), _ort(m, feeds))
    # Only some inputs passed: each omitted one takes its default.
    first = next(iter(values))
    _assert_same(fn(**{first: values[first]}), _ort(m, {first: values[first]}))


def test_graph_pipeline_keeps_the_input_for_ir4_and_folds_ir3() -> None:
    """From IR 4 the node reading an input with a default survives the graph pipeline (and the
    input keeps its default, for calls that omit it); an IR-3 model still folds it."""
    defaults, _, out, _ = CASES["Erf"]
    options = CompileOptions.from_user({"cache_dir": False})
    modern = import_model(_model("Erf", defaults, out).SerializeToString(), options)
    assert [n.op for n in modern.graph.nodes] == ["Erf"]
    np.testing.assert_array_equal(modern.graph.inputs[0].const, defaults["x"])
    legacy = import_model(_model("Erf", defaults, out, ir_version=3).SerializeToString(),
                          options)
    assert legacy.graph.nodes == []
    fn = onnxjit.compile(_model("Erf", defaults, out, ir_version=3), cache_dir=False)
    want = _ort(_model("Erf", defaults, out), {})
    _assert_same(fn(), want)


def test_symbolic_input_with_a_default_takes_other_shapes() -> None:
    defaults = {"x": _f(2, 3)}
    m = _model("Erf", defaults, (F, ["n", 3]), declared={"x": ["n", 3]})
    for specialize in ("auto", "dynamic", "shape"):
        fn = onnxjit.compile(m, cache_dir=False, specialize=specialize)
        for x in (None, _f(5, 3), _f(1, 3), None, _f(4, 3)):
            feeds = {} if x is None else {"x": x}
            _assert_same(fn(**feeds), _ort(m, feeds))


_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, onnxjit
    fn = onnxjit.compile(sys.argv[1], cache_dir=sys.argv[2])
    feeds = {} if sys.argv[3] == "omit" else {"x": np.full((2, 3), 0.25, np.float32)}
    y, = fn(**feeds)
    print(json.dumps({"y": y.tolist(), "info": fn.cache_info()}))
""")


@pytest.mark.parametrize("order", [("omit", "pass"), ("pass", "omit")])
def test_disk_cache_never_serves_the_default_to_a_passed_value(tmp_path, order) -> None:
    """Two fresh processes share one disk cache: whichever call compiled the program, the
    other gets its own answer (and the second process compiles nothing: one program serves
    both, the default is fed at run time)."""
    defaults, _, out, _ = CASES["Erf"]
    m = _model("Erf", defaults, out)
    path = tmp_path / "erf.onnx"
    path.write_bytes(m.SerializeToString())
    runs = {}
    for mode in order:
        done = subprocess.run([sys.executable, "-c", _SCRIPT, str(path), str(tmp_path / "c"),
                               mode], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        runs[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    want = {"omit": _ort(m, {})[0],
            "pass": _ort(m, {"x": np.full((2, 3), 0.25, np.float32)})[0]}
    for mode, r in runs.items():
        np.testing.assert_allclose(np.array(r["y"], np.float32), want[mode], rtol=1e-6)
    assert runs[order[1]]["info"]["misses"] == 0
