"""Bad models (issue 7): every kind of invalid model ends in the right onnxjit error, and the
message names the node or value that is wrong.

Each probe builds a small model, compiles and calls it, and checks the error type and that the
message contains the names it must. Probes that could crash the process (huge or overflowing
dims, deep nesting) run in a child process, so a crash fails the test instead of killing pytest.
A SIGALRM guard turns a hang into a failure naming the probe.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from models import finish, mlp
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit import InputError, ModelError, OnnxJitError, UnsupportedError

F = TensorProto.FLOAT


def _vi(name, shape=(2,), t=F):
    return helper.make_tensor_value_info(name, t, list(shape))


def _graph(nodes, inputs=("x",), outputs=("y",), inits=(), opset=17, shape=(2,)):
    return finish(helper.make_graph(nodes, "g", [_vi(n, shape) for n in inputs],
                                    [_vi(n, shape) for n in outputs], list(inits)), opset)


def _node(op, ins, outs, name, **attrs):
    return helper.make_node(op, ins, outs, name=name, **attrs)


def _init(name, **fields):
    return TensorProto(name=name, **fields)


def _run(src):
    fn = onnxjit.compile(src, cache_dir=False)
    return fn(*[np.ones(2, np.float32) for _ in fn.input_names])


@pytest.fixture(autouse=True)
def _hang_guard(request):
    def boom(*_):
        raise AssertionError(f"probe {request.node.name} hangs")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


_GOOD = mlp(sizes=(4, 3)).SerializeToString()
_ACME = helper.make_opsetid("com.acme", 1)


def _with_opset(m, *extra):
    m.opset_import.extend(extra)
    return m


def _input_dtype(m, elem):
    m.graph.input[0].type.tensor_type.elem_type = elem
    return m


# (probe id, model factory, error type, names the message must contain)
PROBES = [
    ("random-bytes", lambda: np.random.default_rng(0).bytes(300), ModelError, ["not a valid"]),
    ("truncated", lambda: _GOOD[: len(_GOOD) // 2], ModelError, ["not a valid"]),
    ("truncated-by-one", lambda: _GOOD[:-1], ModelError, ["not a valid"]),
    ("empty-bytes", lambda: b"", ModelError, ["empty"]),
    ("cycle", lambda: _graph([_node("Relu", ["b"], ["a"], "n1"), _node("Relu", ["a"], ["b"], "n2"),
                              _node("Add", ["x", "b"], ["y"], "n3")]),
     ModelError, ["n1", "'b'", "n2"]),
    ("not-topological", lambda: _graph([_node("Relu", ["a"], ["y"], "late"),
                                        _node("Relu", ["x"], ["a"], "early")]),
     ModelError, ["late", "'a'", "early", "topological"]),
    ("duplicate-output", lambda: _graph([_node("Relu", ["x"], ["y"], "first"),
                                         _node("Neg", ["x"], ["y"], "second")]),
     ModelError, ["'y'", "first", "second"]),
    ("output-redefines-input", lambda: _graph([_node("Relu", ["x"], ["x"], "n1"),
                                               _node("Neg", ["x"], ["y"], "n2")]),
     ModelError, ["'x'", "n1"]),
    ("duplicate-graph-input", lambda: _graph([_node("Add", ["x", "x"], ["y"], "a")],
                                             inputs=("x", "x")), ModelError, ["'x'"]),
    ("undefined-input", lambda: _graph([_node("Add", ["x", "ghost"], ["y"], "adder")]),
     ModelError, ["adder", "ghost"]),
    ("undefined-graph-output", lambda: _graph([_node("Relu", ["x"], ["z"], "r")]),
     ModelError, ["'y'"]),
    ("undefined-in-subgraph", lambda: _graph(
        [_node("If", ["c"], ["y"], "branchy",
               then_branch=helper.make_graph([_node("Relu", ["nope"], ["o"], "inner")], "b", [],
                                             [_vi("o")]),
               else_branch=helper.make_graph([_node("Relu", ["x"], ["o2"], "inner2")], "e", [],
                                             [_vi("o2")]))],
        inits=[numpy_helper.from_array(np.array(True), "c")]), ModelError, ["inner", "nope"]),
    ("unknown-op", lambda: _graph([_node("FrobnicateX", ["x"], ["y"], "frob")]),
     UnsupportedError, ["FrobnicateX", "frob"]),
    ("unknown-domain", lambda: _with_opset(_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.acme")]), _ACME),
     UnsupportedError, ["com.acme", "'r'"]),
    ("unimported-domain", lambda: _graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.acme")]),
     ModelError, ["com.acme", "'r'"]),
    ("opset-too-new", lambda: _graph([_node("Relu", ["x"], ["y"], "r")], opset=99),
     UnsupportedError, ["opset 99"]),
    ("opset-negative", lambda: _graph([_node("Relu", ["x"], ["y"], "r")], opset=-3),
     ModelError, ["-3"]),
    ("missing-required-attr", lambda: _graph([_node("Cast", ["x"], ["y"], "caster")]),
     ModelError, ["caster", "'to'"]),
    ("missing-required-attr-concat", lambda: _graph([_node("Concat", ["x", "x"], ["y"], "cc")]),
     ModelError, ["cc", "'axis'"]),
    ("float-attr-for-int", lambda: _graph([_node("Concat", ["x", "x"], ["y"], "cc", axis=1.5)]),
     ModelError, ["cc", "'axis'", "int"]),
    ("string-attr-for-int", lambda: _graph([_node("Softmax", ["x"], ["y"], "sm", axis="zero")]),
     ModelError, ["sm", "'axis'"]),
    ("ints-attr-for-int", lambda: _graph([_node("Softmax", ["x"], ["y"], "sm", axis=[0, 1])]),
     ModelError, ["sm", "'axis'"]),
    ("int-attr-for-ints", lambda: _graph([_node("Transpose", ["x"], ["y"], "tr", perm=0)]),
     ModelError, ["tr", "'perm'"]),
    ("bad-enum-attr", lambda: _graph([_node("Cast", ["x"], ["y"], "caster", to=999)]),
     ModelError, ["caster", "'to'", "999"]),
    ("float-data-length", lambda: _graph(
        [_node("Add", ["x", "w"], ["y"], "a")],
        inits=[_init("w", data_type=F, dims=[3], float_data=[1.0, 2.0])]),
     ModelError, ["'w'", "3"]),
    ("raw-data-length", lambda: _graph(
        [_node("Add", ["x", "w"], ["y"], "a")],
        inits=[_init("w", data_type=F, dims=[2], raw_data=b"\0" * 7)]),
     ModelError, ["'w'", "7 bytes"]),
    ("dims-product-overflows", lambda: _graph(
        [_node("Add", ["x", "w"], ["y"], "a")],
        inits=[_init("w", data_type=F, dims=[2**40, 2**40], raw_data=b"\0" * 8)]),
     ModelError, ["'w'", "overflow"]),
    ("negative-tensor-dim", lambda: _graph(
        [_node("Add", ["x", "w"], ["y"], "a")],
        inits=[_init("w", data_type=F, dims=[-2], float_data=[1, 2])]),
     ModelError, ["'w'", "-2"]),
    ("unknown-elem-type", lambda: _input_dtype(_graph([_node("Relu", ["x"], ["y"], "r")]), 77),
     ModelError, ["'x'", "77"]),
    ("unknown-tensor-elem-type", lambda: _graph(
        [_node("Add", ["x", "w"], ["y"], "a")],
        inits=[_init("w", data_type=99, dims=[2], raw_data=b"\0" * 8)]),
     ModelError, ["'w'", "99"]),
    ("empty-input-name", lambda: _graph([_node("Relu", ["x"], ["y"], "r")], inputs=("", "x")),
     ModelError, ["input 0", "no name"]),
    ("empty-initializer-name", lambda: _graph(
        [_node("Relu", ["x"], ["y"], "r")], inits=[numpy_helper.from_array(np.ones(2, np.float32),
                                                                         "")]),
     ModelError, ["initializer", "no name"]),
    ("empty-output-name", lambda: _graph([_node("Relu", ["x"], [""], "r")], outputs=("",)),
     ModelError, ["output ''"]),
    ("too-few-inputs", lambda: _graph([_node("Add", ["x"], ["y"], "adder")]),
     ModelError, ["adder", "2 inputs"]),
    ("too-many-inputs", lambda: _graph([_node("Relu", ["x", "x"], ["y"], "r")]),
     ModelError, ["'r'", "1 inputs"]),
    ("too-many-outputs", lambda: _graph([_node("Relu", ["x"], ["y", "z"], "r")]),
     ModelError, ["'r'", "'z'"]),
    ("broadcast-mismatch", lambda: _graph(
        [_node("Add", ["x", "w"], ["y"], "adder")],
        inits=[numpy_helper.from_array(np.ones(3, np.float32), "w")]),
     ModelError, ["adder", "2", "3"]),
    ("reshape-mismatch", lambda: _graph(
        [_node("Reshape", ["x", "s"], ["y"], "rs")],
        inits=[numpy_helper.from_array(np.array([3], np.int64), "s")]),
     ModelError, ["rs", "[3]"]),
    ("reshape-huge", lambda: _graph(
        [_node("Reshape", ["x", "s"], ["y"], "rs")],
        inits=[numpy_helper.from_array(np.array([2**62, 2**62], np.int64), "s")]),
     ModelError, ["rs"]),
    ("constant-of-shape-negative", lambda: _graph(
        [_node("ConstantOfShape", ["s"], ["c"], "cos"), _node("Add", ["x", "c"], ["y"], "a")],
        inits=[numpy_helper.from_array(np.array([-5], np.int64), "s")]),
     ModelError, ["cos", "-5"]),
    ("gather-index-out-of-range", lambda: _graph(
        [_node("Gather", ["x", "i"], ["y"], "ga")],
        inits=[numpy_helper.from_array(np.array([5], np.int64), "i")]),
     ModelError, ["ga", "5"]),
    ("transpose-bad-perm", lambda: _graph([_node("Transpose", ["x"], ["y"], "tr", perm=[3])]),
     ModelError, ["tr", "perm"]),
    ("softmax-axis-out-of-range", lambda: _graph([_node("Softmax", ["x"], ["y"], "sm", axis=5)]),
     ModelError, ["sm", "axis 5"]),
    ("duplicate-attribute", lambda: _graph([helper.make_node(
        "Softmax", ["x"], ["y"], name="sm", axis=0)]), None, []),
    ("no-graph", lambda: b"\x08\x08", ModelError, ["no graph"]),
]


def _nested_if(inner_nodes, inner_outs=("o",)):
    """If 'outer' whose then_branch 'ob' holds If 'inner' whose then_branch 'ib' holds
    `inner_nodes` (its outputs `inner_outs`)."""
    c = numpy_helper.from_array(np.array(True), "c")
    inner = _node("If", ["c"], ["io"], "inner",
                  then_branch=helper.make_graph(inner_nodes, "ib", [],
                                                [_vi(o) for o in inner_outs]),
                  else_branch=helper.make_graph([_node("Relu", ["x"], ["e2"], "ie")], "ie", [],
                                                [_vi("e2")]))
    outer = _node("If", ["c"], ["y"], "outer",
                  then_branch=helper.make_graph([inner], "ob", [], [_vi("io")]),
                  else_branch=helper.make_graph([_node("Neg", ["x"], ["e1"], "oe")], "oe", [],
                                                [_vi("e1")]))
    return _graph([outer], inits=[c])


_CHAIN = ["subgraph 'ib'", "'then_branch'", "'inner'", "subgraph 'ob'", "'outer'"]
PROBES += [
    ("nested-undefined-outer-name", lambda: _nested_if([_node("Relu", ["ghost"], ["o"], "deep")]),
     ModelError, ["'deep'", "'ghost'", *_CHAIN]),
    ("nested-undefined-if-condition", lambda: _nested_if([_node(
        "If", ["ghost"], ["o"], "deepif",
        then_branch=helper.make_graph([_node("Relu", ["x"], ["t"], "t")], "t", [], [_vi("t")]),
        else_branch=helper.make_graph([_node("Relu", ["x"], ["u"], "u")], "u", [], [_vi("u")]))]),
     ModelError, ["'deepif'", "'ghost'", *_CHAIN]),
    ("nested-shadows-outer-name", lambda: _nested_if([_node("Relu", ["x"], ["x"], "shadower"),
                                                      _node("Relu", ["x"], ["o"], "deep")]),
     ModelError, ["'shadower'", "'x'", "shadows", *_CHAIN]),
    ("nested-shadows-initializer", lambda: _nested_if([_node("Relu", ["x"], ["c"], "shadower"),
                                                       _node("Relu", ["x"], ["o"], "deep")]),
     ModelError, ["'shadower'", "'c'", "initializer", *_CHAIN]),
    ("nested-undefined-graph-output", lambda: _nested_if([_node("Relu", ["x"], ["o"], "deep")],
                                                         inner_outs=("zzz",)),
     ModelError, ["'zzz'", *_CHAIN]),
    ("nested-branch-output-count", lambda: _nested_if(
        [_node("Relu", ["x"], ["o"], "deep"), _node("Neg", ["x"], ["o3"], "deep2")],
        inner_outs=("o", "o3")),
     ModelError, ["'inner'", "subgraph 'ib'", "then_branch", "2 outputs", "subgraph 'ob'",
                  "'outer'"]),
    ("nested-used-before-outer-definition", lambda: _graph(
        [_node("If", ["c"], ["y"], "early",
               then_branch=helper.make_graph([_node("Relu", ["late"], ["o"], "reader")], "b", [],
                                             [_vi("o")]),
               else_branch=helper.make_graph([_node("Relu", ["x"], ["o2"], "r2")], "e", [],
                                             [_vi("o2")])),
         _node("Relu", ["x"], ["late"], "definer")],
        inits=[numpy_helper.from_array(np.array(True), "c")]),
     ModelError, ["'reader'", "'late'", "'definer'", "graph 'g'", "subgraph 'b'", "'early'"]),
]


def _duplicate_attr_model():
    m = _graph([_node("Softmax", ["x"], ["y"], "sm", axis=0)])
    m.graph.node[0].attribute.append(helper.make_attribute("axis", 0))
    return m


PROBES = [p if p[0] != "duplicate-attribute" else
          ("duplicate-attribute", _duplicate_attr_model, ModelError, ["sm", "'axis'", "twice"])
          for p in PROBES]


@pytest.mark.parametrize("make,error,names", [p[1:] for p in PROBES], ids=[p[0] for p in PROBES])
def test_bad_model_names_what_is_wrong(make, error, names):
    with pytest.raises(OnnxJitError) as e:
        _run(make())
    assert type(e.value) is error or isinstance(e.value, error), repr(e.value)
    for n in names:
        assert n in str(e.value), (n, str(e.value))


def test_missing_and_folder_paths(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        _run(tmp_path / "nope.onnx")
    with pytest.raises(ModelError, match="folder"):
        _run(tmp_path)
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(ModelError, match="empty"):
        _run(tmp_path / "empty.onnx")


def test_bad_object_is_model_error():
    with pytest.raises(ModelError, match="int"):
        onnxjit.compile(12345, cache_dir=False)


def test_weird_names_are_accepted_and_print():
    # ONNX's "C90 identifier" rule is broken by nearly every exporter ("/fc0/Gemm_output_0",
    # "onnx::Add_3", dim params like "past + 1"): such names must work, not crash a printer.
    name, dim = "x y'\"{}", "past + 1"
    m = finish(helper.make_graph([_node("Relu", [name], ["o:p/q"], "n \"1\"")], "g",
                                 [_vi(name, [dim])], [_vi("o:p/q", [dim])]))
    fn = onnxjit.compile(m, cache_dir=False)
    (y,) = fn(np.array([-1, 2], np.float32))
    np.testing.assert_array_equal(y, [0, 2])
    assert "Relu" in fn.ir("graph")


def test_inconsistent_weird_symbolic_dim():
    m = finish(helper.make_graph([_node("Add", ["x", "z"], ["y"], "n")], "g",
                                 [_vi("x", ["a-b"]), _vi("z", ["a-b"])], [_vi("y", ["a-b"])]))
    fn = onnxjit.compile(m, cache_dir=False)
    with pytest.raises(InputError, match="'a-b'.*'x'.*'z'"):
        fn(np.ones(3, np.float32), np.ones(4, np.float32))


# ------------------------------------------------------------ crash-prone probes in a child

CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np, onnxjit
    from onnx import TensorProto, helper, numpy_helper
    from models import finish
    F = TensorProto.FLOAT
    def vi(n, s): return helper.make_tensor_value_info(n, F, list(s))
    def graph(nodes, inits=(), shape=(2,)):
        return finish(helper.make_graph(nodes, "g", [vi("x", shape)], [vi("y", shape)],
                                        list(inits)))
    def big(name, dims):
        return numpy_helper.from_array(np.array(dims, np.int64), name)
    def nested(depth):
        c = numpy_helper.from_array(np.array(True), "c")
        inner = helper.make_graph([helper.make_node("Identity", ["x"], ["o0"])], "b0", [],
                                  [vi("o0", (2,))])
        for k in range(1, depth):
            other = helper.make_graph([helper.make_node("Identity", ["x"], [f"e{k}"])],
                                      f"e{k}", [], [vi(f"e{k}", (2,))])
            inner = helper.make_graph([helper.make_node("If", ["c"], [f"o{k}"],
                                       then_branch=inner, else_branch=other)], f"b{k}", [],
                                      [vi(f"o{k}", (2,))])
        return graph([helper.make_node("If", ["c"], ["y"], name="top", then_branch=inner,
                                       else_branch=inner)], [c])
    mk = helper.make_node
    probes = {
        "expand-huge": graph([mk("Expand", ["x", "s"], ["y"], name="ex")],
                             [big("s", [2**40, 2**40])]),
        "constant-of-shape-huge": graph(
            [mk("ConstantOfShape", ["s"], ["c"], name="cos"), mk("Add", ["x", "c"], ["y"])],
            [big("s", [2**40, 2**40])]),
        "tile-huge": graph([mk("Tile", ["x", "s"], ["y"], name="tl")], [big("s", [2**62])]),
        "huge-declared-dims": graph([mk("Relu", ["x"], ["y"], name="r")],
                                    shape=(2**62, 2**62)),
        "overflow-init-2^62": graph([mk("Add", ["x", "w"], ["y"], name="a")], [TensorProto(
            name="w", data_type=F, dims=[2**31, 2**31, 4])]),
        "nested-subgraphs": nested(25),
    }
    out = {}
    for name, m in probes.items():
        try:
            fn = onnxjit.compile(m, cache_dir=False)
            fn(np.ones(2, np.float32))
            out[name] = "ok"
        except onnxjit.OnnxJitError as e:  # labelled by the public type it is
            kinds = (onnxjit.InputError, onnxjit.ModelError, onnxjit.UnsupportedError)
            label = next((k.__name__ for k in kinds if isinstance(e, k)), type(e).__name__)
            out[name] = label + ": " + str(e)
        except Exception as e:
            out[name] = "BARE " + type(e).__name__ + ": " + str(e)
    print(json.dumps(out))
""")


def test_crash_prone_probes_in_a_child():
    here = str(Path(__file__).parent)
    proc = subprocess.run([sys.executable, "-c", CHILD, here], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"child crashed ({proc.returncode}): {proc.stderr[-2000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, result in out.items():
        assert not result.startswith("BARE"), (name, result)
    assert out["expand-huge"].startswith("ModelError") and "ex" in out["expand-huge"]
    assert out["constant-of-shape-huge"].startswith("ModelError")
    assert out["overflow-init-2^62"].startswith("ModelError") and "'w'" in out[
        "overflow-init-2^62"]
    # shapes no process can address: refused at compile time, naming the node and value
    assert out["huge-declared-dims"].startswith("ModelError"), out["huge-declared-dims"]
    assert "'r'" in out["huge-declared-dims"] and "'y'" in out["huge-declared-dims"]
    assert out["tile-huge"].startswith("ModelError") and "tl" in out["tile-huge"]
    assert out["nested-subgraphs"] == "ok", out["nested-subgraphs"]
