"""The probe set of issue 7: every bad-input category ends in a clean, named error or a correct
result, quickly, and never in a bare Python exception or a crash.

Each error probe asserts: the right onnxjit error type; a message naming what is wrong (the
node, value or input); and no bare KeyError/IndexError/AttributeError/TypeError/ValueError/
RecursionError. (No timing: a hang would stall the run, which CI's time limit reports.)
Result probes compare with numpy. The bad models of `test_robust_models` are re-run here through
`_probe`. Probes whose failure could take the process down (huge run-time sizes: a regression
would allocate terabytes) run in a child process, which reports one JSON line.

Algorithm of `_probe`: run the thunk; anything but an OnnxJitError is a failure naming the probe
and the bare exception; then check the error's type and names.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from models import finish
from onnx import TensorProto, helper
from test_robust_models import PROBES as MODEL_PROBES
from test_robust_models import _run as run_model

import onnxjit
from onnxjit import InputError, ModelError, OnnxJitError, UnsupportedError
from onnxjit.errors import InputTypeError

F, I64 = TensorProto.FLOAT, TensorProto.INT64
vi = helper.make_tensor_value_info


def _probe(thunk, error: type, names: list[str]) -> OnnxJitError:
    try:
        thunk()
    except OnnxJitError as e:
        assert isinstance(e, error), f"expected {error.__name__}, got {e!r}"
        for n in names:
            assert n in str(e), (n, str(e))
        return e
    except Exception as e:  # noqa: BLE001 - the point of the probe
        raise AssertionError(f"bare {type(e).__name__} escaped: {e}") from e
    raise AssertionError(f"no error; expected {error.__name__} naming {names}")


# ------------------------------------------------------------------------------ bad models


@pytest.mark.parametrize("make,error,names", [p[1:] for p in MODEL_PROBES],
                         ids=[p[0] for p in MODEL_PROBES])
def test_bad_models_fail_fast(make, error, names):
    src = make()
    _probe(lambda: run_model(src), error, names)


def _good_bytes() -> bytes:
    return finish(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                                    [vi("x", F, [2])], [vi("y", F, [2])])).SerializeToString()


@pytest.mark.parametrize("kind", ["random", "truncated", "empty", "text-garbage",
                                  "text-syntax", "folder", "missing"])
def test_bad_model_files(tmp_path, kind):
    good = _good_bytes()
    path = tmp_path / ("m.onnxtxt" if kind.startswith("text") else "m.onnx")
    content = {"random": np.random.default_rng(1).bytes(500), "truncated": good[:len(good) // 3],
               "empty": b"", "text-garbage": b"\xff\xfe garbage {{{",
               "text-syntax": b"<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[2] x) => "
                              b"(float[2] y) { y = Relu(x }"}.get(kind)
    if kind == "folder":
        path = tmp_path
    elif content is not None:
        path.write_bytes(content)
    e = _probe(lambda: onnxjit.compile(path, cache_dir=False), ModelError, [])
    assert str(path) in str(e) or path.name in str(e), str(e)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    return finish(helper.make_graph(nodes, "g", inputs, outputs, list(inits)), opset)


def _relu(**kw):
    return helper.make_node("Relu", ["x"], ["y"], name="r", **kw)


def _graph_output_twice():
    m = _model([_relu()], [vi("x", F, [2])], [vi("y", F, [2])])
    m.graph.output.append(vi("y", F, [2]))
    return m


def _empty_op():
    m = _model([_relu()], [vi("x", F, [2])], [vi("y", F, [2])])
    m.graph.node[0].op_type = ""
    return m


def _same_output_twice_in_node():
    return _model([helper.make_node("Split", ["x"], ["y", "y"], name="sp", axis=0,
                                    num_outputs=2)],
                  [vi("x", F, [2])], [vi("y", F, [1])], opset=18)


def _initializer_twice():
    w = helper.make_tensor("w", F, [2], [1.0, 2.0])
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="a")],
                  [vi("x", F, [2])], [vi("y", F, [2])], [w, w])


def _unknown_domain_version():
    m = _model([_relu()], [vi("x", F, [2])], [vi("y", F, [2])])
    m.opset_import.append(helper.make_opsetid("ai.onnx.ml", 99))
    m.graph.node[0].domain = "ai.onnx.ml"
    m.graph.node[0].op_type = "Relu"
    return m


EXTRA_MODELS = [
    ("graph-output-twice", _graph_output_twice, ModelError, ["'y'"]),
    ("empty-op-type", _empty_op, ModelError, ["'r'"]),
    ("same-output-twice-in-node", _same_output_twice_in_node, ModelError, ["'y'", "sp"]),
    ("initializer-twice", _initializer_twice, ModelError, ["'w'"]),
    ("unknown-op-in-known-domain", _unknown_domain_version, UnsupportedError, ["Relu", "'r'"]),
    ("huge-rank", lambda: _model([_relu()], [vi("x", F, [1] * 5000)], [vi("y", F, [1] * 5000)]),
     OnnxJitError, ["'x'"]),
]


@pytest.mark.parametrize("make,error,names", [p[1:] for p in EXTRA_MODELS],
                         ids=[p[0] for p in EXTRA_MODELS])
def test_more_bad_models(make, error, names):
    src = make()
    _probe(lambda: onnxjit.compile(src, cache_dir=False)(np.ones(2, np.float32)), error, names)


# --------------------------------------------------------------------------------- bad calls


@pytest.fixture(scope="module")
def add():
    """y = a + b with a shared symbolic dim N: a and b are [N, 3]."""
    m = _model([helper.make_node("Add", ["a", "b"], ["y"], name="adder")],
               [vi("a", F, ["N", 3]), vi("b", F, ["N", 3])], [vi("y", F, ["N", 3])])
    return onnxjit.compile(m, cache_dir=False)


A = np.arange(6, dtype=np.float32).reshape(2, 3)


class _Raises:
    def __array__(self, dtype=None, copy=None):
        raise ZeroDivisionError("no array here")


CALLS = [
    ("none", lambda f: f(None, A), InputTypeError, ["'a'"]),
    ("string", lambda f: f("abc", A), InputTypeError, ["'a'"]),
    ("object-array", lambda f: f(np.array([[object()] * 3] * 2), A), InputTypeError, ["'a'"]),
    ("ragged-list", lambda f: f([[1, 2, 3], [1, 2]], A), InputTypeError, ["'a'"]),
    ("bool-for-float", lambda f: f(np.ones((2, 3), bool), A), InputTypeError, ["'a'", "bool"]),
    ("float64-for-float", lambda f: f(A.astype(np.float64), A), InputTypeError,
     ["'a'", "float64"]),
    ("complex", lambda f: f(A.astype(np.complex64), A), InputTypeError, ["'a'", "complex64"]),
    ("int-too-big", lambda f: f([[2**70] * 3] * 2, A), InputTypeError, ["'a'"]),
    ("generator", lambda f: f((x for x in range(3)), A), InputTypeError, ["'a'"]),
    ("dict", lambda f: f({"x": 1}, A), InputTypeError, ["'a'"]),
    ("bad-__array__", lambda f: f(_Raises(), A), InputTypeError, ["'a'"]),
    ("scalar-for-rank-2", lambda f: f(1.0, A), InputError, ["'a'", "rank 2"]),
    ("too-many-positional", lambda f: f(A, A, A), InputError, ["2 inputs", "3"]),
    ("given-twice", lambda f: f(A, a=A), InputError, ["'a'", "twice"]),
    ("unknown-name", lambda f: f(A, c=A), InputError, ["'c'"]),
    ("missing-name", lambda f: f(b=A), InputError, ["'a'"]),
    ("run-with-list", lambda f: f.run(None, [A, A]), InputTypeError, ["dict"]),
    ("run-unknown-output", lambda f: f.run(["zz"], {"a": A, "b": A}), InputError, ["'zz'"]),
    ("symbolic-dim-conflict", lambda f: f(A, np.ones((3, 3), np.float32)), InputError,
     ["'N'", "'a'", "'b'"]),
    ("fixed-dim", lambda f: f(A, np.ones((2, 4), np.float32)), InputError, ["'b'", "3", "4"]),
    ("rank", lambda f: f(A, np.ones(6, np.float32)), InputError, ["'b'", "rank"]),
]


@pytest.mark.parametrize("call,error,names", [p[1:] for p in CALLS], ids=[p[0] for p in CALLS])
def test_bad_calls(add, call, error, names):
    _probe(lambda: call(add), error, names)
    np.testing.assert_array_equal(add(A, A)[0], A + A)  # the model still works


def _misaligned(a: np.ndarray) -> np.ndarray:
    buf = bytearray(a.nbytes + 1)
    out = np.ndarray(a.shape, a.dtype, buffer=buf, offset=1)
    out[...] = a
    return out


GOOD_CALLS = [
    ("fortran", lambda: np.asfortranarray(np.arange(12, dtype=np.float32).reshape(4, 3))),
    ("strided", lambda: np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]),
    ("reversed", lambda: np.arange(12, dtype=np.float32).reshape(4, 3)[::-1]),
    ("transposed", lambda: np.arange(12, dtype=np.float32).reshape(3, 4).T),
    ("zero-rows", lambda: np.ones((0, 3), np.float32)),
    ("byte-swapped", lambda: np.arange(6, dtype=">f4").reshape(2, 3)),
    ("read-only", lambda: np.broadcast_to(np.float32(2), (2, 3))),
    ("misaligned", lambda: _misaligned(np.arange(6, dtype=np.float32).reshape(2, 3))),
    ("int-list", lambda: [[1, 2, 3], [4, 5, 6]]),
    ("memoryview", lambda: memoryview(np.arange(6, dtype=np.float32).reshape(2, 3))),
]


@pytest.mark.parametrize("make", [p[1] for p in GOOD_CALLS], ids=[p[0] for p in GOOD_CALLS])
def test_unusual_arrays_give_correct_results(add, make):
    a = make()
    want = np.asarray(a, np.float32)
    b = np.full(want.shape, 0.5, np.float32)
    for args in ((a, b), (b, a)):
        (y,) = add(*args)
        np.testing.assert_array_equal(y, want + 0.5)
        assert y.shape == want.shape and y.dtype == np.float32


def test_zero_d_tensors():
    m = _model([helper.make_node("Neg", ["s"], ["y"], name="n")], [vi("s", F, [])],
               [vi("y", F, [])])
    f = onnxjit.compile(m, cache_dir=False)
    for x in (np.float32(2), np.array(2, np.float32), 2.0, 2):
        (y,) = f(x)
        assert y.shape == () and y == -2
    for x in ([2.0], np.array([2.0], np.float32)):  # onnxruntime's leniency (issue 28)
        (y,) = f(x)
        assert y.shape == (1,) and y[0] == -2


def test_zero_size_through_a_reduction():
    m = _model([helper.make_node("ReduceSum", ["x", "ax"], ["y"], name="rs", keepdims=0)],
               [vi("x", F, ["N", 3])], [vi("y", F, [3])],
               [helper.make_tensor("ax", I64, [1], [0])], opset=18)
    (y,) = onnxjit.compile(m, cache_dir=False)(np.ones((0, 3), np.float32))
    np.testing.assert_array_equal(y, np.zeros(3, np.float32))


# ------------------------------------------------- run-time sizes too large (in a child process)

CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np, onnxjit
    from onnx import TensorProto, helper
    from models import finish
    F, I = TensorProto.FLOAT, TensorProto.INT64
    vi = helper.make_tensor_value_info
    mk = helper.make_node
    def model(nodes, inputs, outputs):
        return finish(helper.make_graph(nodes, "g", inputs, outputs))
    big = np.array([1 << 40])
    cases = {
        "expand": (model([mk("Expand", ["x", "s"], ["y"], name="ex")],
                         [vi("x", F, [1]), vi("s", I, [1])], [vi("y", F, ["n"])]),
                   [np.ones(1, np.float32), big], [np.ones(1, np.float32), np.array([3])]),
        "expand-2d": (model([mk("Expand", ["x", "s"], ["y"], name="ex")],
                            [vi("x", F, [1]), vi("s", I, [2])], [vi("y", F, ["n", "m"])]),
                      [np.ones(1, np.float32), np.array([1 << 40, 1 << 40])],
                      [np.ones(1, np.float32), np.array([2, 3])]),
        "expand-symbolic": (model([mk("Expand", ["x", "s"], ["y"], name="ex")],
                                  [vi("x", F, ["k"]), vi("s", I, [2])],
                                  [vi("y", F, ["n", "k"])]),
                            [np.ones(3, np.float32), np.array([1 << 40, 1])],
                            [np.ones(3, np.float32), np.array([2, 1])]),
        "constant-of-shape": (model([mk("ConstantOfShape", ["s"], ["y"], name="cos")],
                                    [vi("s", I, [1])], [vi("y", F, ["n"])]),
                              [big], [np.array([4])]),
        "tile": (model([mk("Tile", ["x", "s"], ["y"], name="tl")],
                       [vi("x", F, [2]), vi("s", I, [1])], [vi("y", F, ["n"])]),
                 [np.ones(2, np.float32), big], [np.ones(2, np.float32), np.array([2])]),
        "range-float": (model([mk("Range", ["a", "b", "c"], ["y"], name="rg")],
                              [vi("a", F, []), vi("b", F, []), vi("c", F, [])],
                              [vi("y", F, ["n"])]),
                        [np.float32(0), np.float32(1e15), np.float32(1)],
                        [np.float32(0), np.float32(3), np.float32(1)]),
        "range-int": (model([mk("Range", ["a", "b", "c"], ["y"], name="rg")],
                            [vi("a", I, []), vi("b", I, []), vi("c", I, [])],
                            [vi("y", I, ["n"])]),
                      [np.int64(0), np.int64(1 << 45), np.int64(1)],
                      [np.int64(0), np.int64(3), np.int64(1)]),
        "one-hot": (model([mk("OneHot", ["i", "d", "v"], ["y"], name="oh")],
                          [vi("i", I, [2]), vi("d", I, []), vi("v", F, [2])],
                          [vi("y", F, ["a", "b"])]),
                    [np.array([0, 1]), np.int64(1 << 40), np.array([0, 1], np.float32)],
                    [np.array([0, 1]), np.int64(3), np.array([0, 1], np.float32)]),
        "pad": (model([mk("Pad", ["x", "p"], ["y"], name="pd")],
                      [vi("x", F, [2]), vi("p", I, [2])], [vi("y", F, ["n"])]),
                [np.ones(2, np.float32), np.array([1 << 40, 0])],
                [np.ones(2, np.float32), np.array([1, 0])]),
        "temporaries": (model([mk("Expand", ["x", "s"], ["t"], name="ex"),
                               mk("Relu", ["t"], ["u"], name="r"),
                               mk("ReduceSum", ["u"], ["y"], name="sum", keepdims=0)],
                              [vi("x", F, [1]), vi("s", I, [1])], [vi("y", F, [])]),
                        [np.ones(1, np.float32), big], [np.ones(1, np.float32), np.array([5])]),
    }
    out = {}
    for name, (m, bad, good) in cases.items():
        fn = onnxjit.compile(m, cache_dir=False)
        try:
            fn(*bad)
            res = "no error"
        except onnxjit.OnnxJitError as e:
            res = ("InputError: " if isinstance(e, onnxjit.InputError) else
                   type(e).__name__ + ": ") + str(e)
        except BaseException as e:
            res = "BARE " + type(e).__name__ + ": " + str(e)
        try:  # the same model still runs a sane call
            fn(*good)
        except BaseException as e:
            res += " | then failed: " + type(e).__name__ + ": " + str(e)
        out[name] = res
    print(json.dumps(out))
""")


def test_huge_run_time_sizes_are_input_errors():
    proc = subprocess.run([sys.executable, "-c", CHILD, str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"child died ({proc.returncode}): {proc.stderr[-2000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    names = {"expand": "'y'", "expand-2d": "'y'", "expand-symbolic": "'y'",
             "constant-of-shape": "'y'", "tile": "'y'", "range-float": "'y'",
             "range-int": "'y'", "one-hot": "'y'", "pad": "p: i64[2]", "temporaries": "temporary"}
    for name, res in out.items():
        assert res.startswith("InputError: "), (name, res)
        assert "then failed" not in res, (name, res)
        assert names[name] in res, (name, res)
        assert "bytes" in res or "TiB" in res, (name, res)  # the size asked for


def test_size_message_names_the_call():
    from onnxjit.artifact import memory_limit, too_large
    from onnxjit.errors import format_size

    assert format_size(5 << 40) == f"5.0 TiB ({5 << 40} bytes)"
    assert format_size(100) == "100 bytes"
    e = too_large("output 'y'", memory_limit() + 1)
    assert isinstance(e, InputError) and "output 'y'" in str(e) and "memory" in str(e)
