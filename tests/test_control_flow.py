"""Control flow, model-local functions, sequences and optionals, end to end against onnxruntime.

Covers: If (per-step streaming, branches of different shapes, a branch invalid for the shapes
not taken), Loop (a recurrent model, carried shapes that change per iteration, zero
iterations, condition-driven exit), Scan (directions and axes), model-local functions
(attribute parameters, `@ref` references, defaults, nested calls, their own opset imports),
sequence and optional ops on tensor inputs, maps passing through as dicts, and the scoping
errors of nested graphs (also inside a Loop body).
"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from models import against_ort, control_model, value_info
from onnx import TensorProto as TP
from onnx import helper as oh

import onnxjit
from onnxjit.errors import InputError, ModelError
from onnxjit.ir.graph import Graph, Model, Node, Value
from onnxjit.ir.types import DType, TensorType
from onnxjit.ir.verify import verify_model

RNG = np.random.default_rng(0)


_vi, _model, _against_ort = value_info, control_model, against_ort


# ------------------------------------------------------------------------------------- If


def _streaming_vad():
    """One step of a voice-activity detector: the frame's energy decides, with If, whether the
    state is updated from the frame (speech) or decays (silence)."""
    speech = oh.make_graph(
        [oh.make_node("MatMul", ["frame", "w"], ["proj"]),
         oh.make_node("Add", ["proj", "state"], ["pre"]),
         oh.make_node("Tanh", ["pre"], ["s_new"])],
        "speech", [], [_vi("s_new", shape=[1, 8])])
    silence = oh.make_graph(
        [oh.make_node("Mul", ["state", "decay"], ["s_dec"])],
        "silence", [], [_vi("s_dec", shape=[1, 8])])
    nodes = [
        oh.make_node("Mul", ["frame", "frame"], ["sq"]),
        oh.make_node("ReduceMean", ["sq"], ["energy"], keepdims=0),
        oh.make_node("Greater", ["energy", "threshold"], ["is_speech"]),
        oh.make_node("If", ["is_speech"], ["state_out"], then_branch=speech,
                     else_branch=silence),
        oh.make_node("Sigmoid", ["state_out"], ["prob"]),
    ]
    inits = [oh.make_tensor("w", TP.FLOAT, [16, 8], RNG.standard_normal(128) * 0.3),
             oh.make_tensor("threshold", TP.FLOAT, [], [0.5]),
             oh.make_tensor("decay", TP.FLOAT, [], [0.9])]
    return _model(nodes, [_vi("frame", shape=[1, 16]), _vi("state", shape=[1, 8])],
                  [_vi("prob", shape=[1, 8]), _vi("state_out", shape=[1, 8])], inits)


def test_if_per_step_streaming_model_matches_onnxruntime():
    m = _streaming_vad()
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = onnxjit.compile(m, cache_dir=False)
    state = ref_state = np.zeros((1, 8), np.float32)
    for step in range(12):
        scale = 2.0 if step % 3 else 0.1  # speech and silence frames alternate
        frame = (RNG.standard_normal((1, 16)) * scale).astype(np.float32)
        prob, state = fn(frame, state)
        ref_prob, ref_state = sess.run(None, {"frame": frame, "state": ref_state})
        np.testing.assert_allclose(prob, ref_prob, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(state, ref_state, rtol=1e-5, atol=1e-6)
    # The If is not interpreted: each branch was spliced into a natively compiled stage.
    keys = _stage_keys(next(iter(fn._fast.values())).root)
    assert "then_branch" in keys and "else_branch" in keys


def _stage_keys(stage):
    """What the stages chose for their leading control-flow node: branch names, ("unroll", n),
    ("native", n), "host"."""
    out = set()
    for key, child in stage.children.items():
        out.update(k for k in key if isinstance(k, str)
                   or (isinstance(k, tuple) and k[:1] in (("unroll",), ("native",))))
        out |= _stage_keys(child)
    return out


def test_if_branches_of_different_shapes():
    then = oh.make_graph([oh.make_node("Concat", ["x", "x"], ["t"], axis=0)], "twice", [],
                         [_vi("t")])
    other = oh.make_graph([oh.make_node("Neg", ["x"], ["e"])], "once", [], [_vi("e")])
    m = _model([oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
               [_vi("x", shape=[2, 3]), _vi("c", TP.BOOL, [])], [_vi("y", shape=[None, 3])])
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    fn = onnxjit.compile(m, cache_dir=False)
    (a,) = fn(x, np.array(True))
    (b,) = fn(x, np.array(False))
    np.testing.assert_array_equal(a, np.concatenate([x, x]))
    np.testing.assert_array_equal(b, -x)


def test_if_reads_outer_values_and_nests():
    inner = oh.make_graph([oh.make_node("Sub", ["h", "x"], ["q"])], "inner_then", [],
                          [_vi("q")])
    inner_else = oh.make_graph([oh.make_node("Add", ["h", "x"], ["r"])], "inner_else", [],
                               [_vi("r")])
    then = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["h"]),
         oh.make_node("If", ["c2"], ["o"], then_branch=inner, else_branch=inner_else)],
        "outer_then", [], [_vi("o")])
    other = oh.make_graph([oh.make_node("Exp", ["x"], ["e"])], "outer_else", [], [_vi("e")])
    m = _model([oh.make_node("Abs", ["x0"], ["x"]),
                oh.make_node("If", ["c1"], ["y"], then_branch=then, else_branch=other),
                oh.make_node("Mul", ["y", "x"], ["z"])],
               [_vi("x0", shape=[4]), _vi("c1", TP.BOOL, []), _vi("c2", TP.BOOL, [])],
               [_vi("z", shape=[4])])
    x = RNG.standard_normal(4).astype(np.float32)
    _against_ort(m, [{"x0": x, "c1": np.array(a), "c2": np.array(b)}
                     for a in (True, False) for b in (True, False)])


# ----------------------------------------------------------------------------------- Loop


def _loop_rnn():
    """A character-level recurrence written as Loop: h = tanh(x_t W + h U + b), one scan
    output per step, the trip count from the sequence length."""
    body = oh.make_graph(
        [oh.make_node("Gather", ["xs", "i"], ["x_t"], axis=0),
         oh.make_node("MatMul", ["x_t", "W"], ["xw"]),
         oh.make_node("MatMul", ["h", "U"], ["hu"]),
         oh.make_node("Add", ["xw", "hu"], ["s"]),
         oh.make_node("Add", ["s", "b"], ["pre"]),
         oh.make_node("Tanh", ["pre"], ["h_new"]),
         oh.make_node("Identity", ["cond"], ["cond_out"]),
         oh.make_node("Identity", ["h_new"], ["h_scan"])],
        "rnn_body",
        [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("h", shape=[1, 6])],
        [_vi("cond_out", TP.BOOL, []), _vi("h_new", shape=[1, 6]), _vi("h_scan", shape=[1, 6])])
    nodes = [oh.make_node("Shape", ["xs"], ["shape"], end=1),
             oh.make_node("Squeeze", ["shape"], ["T"]),
             oh.make_node("Loop", ["T", "", "h0"], ["h_last", "hs"], body=body)]
    inits = [oh.make_tensor("W", TP.FLOAT, [5, 6], RNG.standard_normal(30) * 0.5),
             oh.make_tensor("U", TP.FLOAT, [6, 6], RNG.standard_normal(36) * 0.5),
             oh.make_tensor("b", TP.FLOAT, [6], RNG.standard_normal(6) * 0.1)]
    return _model(nodes, [_vi("xs", shape=["T", 1, 5]), _vi("h0", shape=[1, 6])],
                  [_vi("h_last", shape=[1, 6]), _vi("hs", shape=["T", 1, 6])], inits)


def test_loop_recurrent_model_matches_onnxruntime():
    m = _loop_rnn()
    feeds = [{"xs": RNG.standard_normal((t, 1, 5)).astype(np.float32),
              "h0": RNG.standard_normal((1, 6)).astype(np.float32)} for t in (7, 3, 7, 1, 70)]
    fn = _against_ort(m, feeds)
    # The carried shape is fixed: every length compiles to one native loop, no staged phase.
    assert len(fn._fast) == 4
    assert all(not hasattr(art, "root") for art in fn._fast.values())
    assert "for %iter" in fn.ir("loops")


def test_loop_reads_a_value_computed_before_it_and_runs_zero_times():
    # The body reads `scaled`, computed natively before the Loop (an implicit input of the
    # host stage), and emits a scan output whose element shape comes from the body's type.
    body = oh.make_graph(
        [oh.make_node("Add", ["acc", "scaled"], ["acc_new"]),
         oh.make_node("Identity", ["cond"], ["c"]),
         oh.make_node("Identity", ["acc_new"], ["trace"])],
        "acc_body", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("acc", shape=[3])],
        [_vi("c", TP.BOOL, []), _vi("acc_new", shape=[3]), _vi("trace", shape=[3])])
    m = _model([oh.make_node("Mul", ["x", "x"], ["scaled"]),
                oh.make_node("Loop", ["n", "", "x"], ["acc", "traces"], body=body)],
               [_vi("n", TP.INT64, []), _vi("x", shape=[3])],
               [_vi("acc", shape=[3]), _vi("traces", shape=[None, 3])])
    x = RNG.standard_normal(3).astype(np.float32)
    _against_ort(m, [{"n": np.array(k, np.int64), "x": x} for k in (4, 0)])


def test_scan_opset8_batch_axis():
    body = oh.make_graph(
        [oh.make_node("Add", ["acc", "x_t"], ["acc_new"]),
         oh.make_node("Identity", ["acc_new"], ["y_t"])],
        "cumsum8", [_vi("acc", shape=[2]), _vi("x_t", shape=[2])],
        [_vi("acc_new", shape=[2]), _vi("y_t", shape=[2])])
    m = _model([oh.make_node("Scan", ["", "init", "xs"], ["final", "ys"], body=body,
                             num_scan_inputs=1, directions=[1])],
               [_vi("init", shape=[3, 2]), _vi("xs", shape=[3, 4, 2])],
               [_vi("final", shape=[3, 2]), _vi("ys", shape=[3, 4, 2])], opset=8)
    _against_ort(m, [{"init": np.zeros((3, 2), np.float32),
                      "xs": RNG.standard_normal((3, 4, 2)).astype(np.float32)}])


def test_loop_carried_shape_grows_and_zero_iterations():
    body = oh.make_graph(
        [oh.make_node("Concat", ["acc", "one"], ["acc_new"], axis=0),
         oh.make_node("Identity", ["cond"], ["cond_out"])],
        "grow", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("acc")],
        [_vi("cond_out", TP.BOOL, []), _vi("acc_new")])
    m = _model([oh.make_node("Loop", ["n", "", "start"], ["out"], body=body)],
               [_vi("n", TP.INT64, []), _vi("start", shape=[2])], [_vi("out", shape=[None])],
               [oh.make_tensor("one", TP.FLOAT, [1], [1.0])])
    start = np.array([5.0, 6.0], np.float32)
    _against_ort(m, [{"n": np.array(k, np.int64), "start": start} for k in (3, 0, 1)])


def test_loop_condition_exit_and_scan_output():
    # while (sum < limit): sum += i; emits i each iteration (a trip count as a safety bound)
    body = oh.make_graph(
        [oh.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT),
         oh.make_node("Add", ["s", "fi"], ["s_new"]),
         oh.make_node("Less", ["s_new", "limit"], ["go"]),
         oh.make_node("Identity", ["fi"], ["emitted"])],
        "sum_body", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("s", shape=[])],
        [_vi("go", TP.BOOL, []), _vi("s_new", shape=[]), _vi("emitted", shape=[])])
    m = _model([oh.make_node("Loop", ["max", "c0", "s0"], ["s", "seen"], body=body)],
               [_vi("max", TP.INT64, []), _vi("c0", TP.BOOL, []), _vi("s0", shape=[]),
                _vi("limit", shape=[])],
               [_vi("s", shape=[]), _vi("seen", shape=[None])])
    _against_ort(m, [{"max": np.array(100, np.int64), "c0": np.array(True),
                      "s0": np.array(0.0, np.float32), "limit": np.array(lim, np.float32)}
                     for lim in (10.0, 1.0, 50.0)])


# ----------------------------------------------------------------------------------- Scan


@pytest.mark.parametrize("in_dir,in_axis,out_dir,out_axis", [
    (0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 1, 1), (1, 1, 0, -1)])
def test_scan_cumulative_sum_directions_and_axes(in_dir, in_axis, out_dir, out_axis):
    body = oh.make_graph(
        [oh.make_node("Add", ["acc", "x_t"], ["acc_new"]),
         oh.make_node("Identity", ["acc_new"], ["y_t"])],
        "cumsum", [_vi("acc", shape=[3]), _vi("x_t", shape=[3])],
        [_vi("acc_new", shape=[3]), _vi("y_t", shape=[3])])
    m = _model([oh.make_node("Scan", ["init", "xs"], ["final", "ys"], body=body,
                             num_scan_inputs=1, scan_input_directions=[in_dir],
                             scan_input_axes=[in_axis], scan_output_directions=[out_dir],
                             scan_output_axes=[out_axis])],
               [_vi("init", shape=[3]), _vi("xs", shape=[4, 3] if in_axis == 0 else [3, 4])],
               [_vi("final", shape=[3]), _vi("ys", shape=[None, None])], opset=16)
    xs = RNG.standard_normal((4, 3) if in_axis == 0 else (3, 4)).astype(np.float32)
    _against_ort(m, [{"init": np.zeros(3, np.float32), "xs": xs}])


# ----------------------------------------------------------------------------- functions


def _ref(node, name, attr, kind):
    a = node.attribute.add()
    a.name, a.ref_attr_name, a.type = name, attr, kind


def _local_functions():
    # Inner(x; alpha, scale=2.0) = LeakyRelu(x, alpha=@alpha) * @scale, in its own opset 17
    inner = oh.make_function(
        "local", "Inner", ["x"], ["y"],
        [oh.make_node("Constant", [], ["s"]), oh.make_node("LeakyRelu", ["x"], ["l"]),
         oh.make_node("Mul", ["l", "s"], ["y"])],
        opset_imports=[oh.make_opsetid("", 17)], attributes=["alpha"])
    _ref(inner.node[0], "value_float", "scale", onnx.AttributeProto.FLOAT)
    _ref(inner.node[1], "alpha", "alpha", onnx.AttributeProto.FLOAT)
    inner.attribute_proto.extend([oh.make_attribute("scale", 2.0)])
    # Outer(x, b) = (Inner(x; alpha=0.5) + b, Inner(x; alpha=0.5)): a nested call
    outer = oh.make_function(
        "local", "Outer", ["x", "b"], ["y", "t"],
        [oh.make_node("Inner", ["x"], ["t"], domain="local", alpha=0.5),
         oh.make_node("Add", ["t", "b"], ["y"])],
        opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("local", 1)])
    return _model(
        [oh.make_node("Outer", ["x", "b"], ["y", "t"], domain="local"),
         oh.make_node("Inner", ["y"], ["z"], domain="local", alpha=0.1, scale=3.0)],
        [_vi("x", shape=[3, 4]), _vi("b", shape=[4])],
        [_vi("z", shape=[3, 4]), _vi("t", shape=[3, 4])],
        functions=[inner, outer], extra_opsets=[oh.make_opsetid("local", 1)])


def test_model_local_functions_are_inlined():
    m = _local_functions()
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    fn = _against_ort(m, [{"x": x, "b": b}])
    graph = fn._graph()
    assert graph.functions == []
    assert {n.op for n in graph.graph.walk()} <= {"Constant", "LeakyRelu", "Mul", "Add"}


def test_function_called_inside_a_loop_body():
    double = oh.make_function("local", "Double", ["x"], ["y"],
                              [oh.make_node("Add", ["x", "x"], ["y"])],
                              opset_imports=[oh.make_opsetid("", 18)])
    body = oh.make_graph(
        [oh.make_node("Double", ["v"], ["v2"], domain="local"),
         oh.make_node("Identity", ["cond"], ["c"])],
        "body", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("v", shape=[2])],
        [_vi("c", TP.BOOL, []), _vi("v2", shape=[2])])
    m = _model([oh.make_node("Loop", ["n", "", "v0"], ["v"], body=body)],
               [_vi("n", TP.INT64, []), _vi("v0", shape=[2])], [_vi("v", shape=[2])],
               functions=[double], extra_opsets=[oh.make_opsetid("local", 1)])
    _against_ort(m, [{"n": np.array(4, np.int64), "v0": np.array([1, -2], np.float32)}])


# ------------------------------------------------------------------- sequences, optionals


def test_sequence_ops_on_tensor_inputs():
    nodes = [
        oh.make_node("SplitToSequence", ["x"], ["parts"], axis=1, keepdims=0),
        oh.make_node("SequenceLength", ["parts"], ["n"]),
        oh.make_node("SequenceAt", ["parts", "k"], ["picked"]),
        oh.make_node("SequenceErase", ["parts", "k"], ["rest"]),
        oh.make_node("SequenceInsert", ["rest", "extra"], ["more"]),
        oh.make_node("ConcatFromSequence", ["more"], ["stacked"], axis=0, new_axis=1),
    ]
    m = _model(nodes, [_vi("x", shape=[2, 4]), _vi("k", TP.INT64, []), _vi("extra", shape=[2])],
               [_vi("n", TP.INT64, []), _vi("picked", shape=[2]),
                _vi("stacked", shape=[None, 2])])
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    _against_ort(m, [{"x": x, "k": np.array(k, np.int64), "extra": np.ones(2, np.float32)}
                     for k in (0, -1, 2)])


def test_sequence_and_optional_outputs_are_python_lists_and_none():
    nodes = [oh.make_node("SequenceConstruct", ["a", "b"], ["seq"]),
             oh.make_node("Optional", ["a"], ["opt"]),
             oh.make_node("OptionalHasElement", ["opt"], ["has"]),
             oh.make_node("Optional", [], ["empty"], type=oh.make_tensor_type_proto(TP.FLOAT,
                                                                                    [2])),
             oh.make_node("OptionalHasElement", ["empty"], ["has_empty"])]
    seq_t = oh.make_tensor_sequence_value_info("seq", TP.FLOAT, None)
    m = _model(nodes, [_vi("a", shape=[2]), _vi("b", shape=[3])],
               [seq_t, _vi("has", TP.BOOL, []), _vi("has_empty", TP.BOOL, [])])
    a, b = np.ones(2, np.float32), np.arange(3, dtype=np.float32)
    seq, has, has_empty = onnxjit.compile(m, cache_dir=False)(a, b)
    assert isinstance(seq, list) and len(seq) == 2
    np.testing.assert_array_equal(seq[1], b)
    assert bool(has) and not bool(has_empty)


# --------------------------------------------------------------------------- scoping errors


def _if_model(then_nodes, then_outs, n_outs=1):
    then = oh.make_graph(then_nodes, "then_g", [], [_vi(o) for o in then_outs])
    other = oh.make_graph([oh.make_node("Neg", ["x"], ["e"])], "else_g", [], [_vi("e")])
    g = oh.make_graph([oh.make_node("If", ["c"], [f"y{i}" for i in range(n_outs)],
                                    then_branch=then, else_branch=other, name="the_if")],
                      "main", [_vi("x", shape=[2]), _vi("c", TP.BOOL, [])],
                      [_vi("y0", shape=[2])])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)], ir_version=10)


def _call(m):
    onnxjit.compile(m, cache_dir=False)(np.ones(2, np.float32), np.array(True))


def test_branch_with_wrong_number_of_outputs_names_subgraph_and_node():
    m = _if_model([oh.make_node("Neg", ["x"], ["t"]), oh.make_node("Abs", ["x"], ["u"])],
                  ["t", "u"])
    with pytest.raises(ModelError, match=r"the_if.*then_g.*2 outputs"):
        _call(m)


def test_undefined_outer_name_names_subgraph_and_node():
    m = _if_model([oh.make_node("Neg", ["nope"], ["t"], name="user")], ["t"])
    with pytest.raises(ModelError, match=r"user.*nope.*then_g"):
        _call(m)


def test_shadowing_an_outer_name_is_refused():
    m = _if_model([oh.make_node("Neg", ["x"], ["x"], name="shadower")], ["x"])
    with pytest.raises(ModelError, match=r"shadower.*'x'"):
        _call(m)


def test_verifier_names_subgraph_when_a_region_redefines_an_outer_value():
    x = Value(TensorType(DType.FLOAT, (2,)), "x")
    c = Value(TensorType(DType.BOOL, ()), "c")
    inner_out = x  # the branch's node "defines" the outer value again
    bad = Node("Neg", [x], [Value(None, "t")], {}, "", 18, "ok")
    redefine = Node("Abs", [x], [], {}, "", 18, "redefiner")
    redefine.outputs = [inner_out]
    then = Graph([bad, redefine], [], [inner_out], name="then_g")
    other = Graph([], [], [x], name="else_g")
    y = Value(None, "y")
    node = Node("If", [c], [y], {"then_branch": then, "else_branch": other}, "", 18, "the_if")
    model = Model(Graph([node], [x, c], [y], name="main"), {"": 18})
    with pytest.raises(ModelError, match=r"subgraph 'then_g'.*enclosing graph 'main'"):
        verify_model(model)


def test_loop_body_with_wrong_inputs_names_subgraph_and_node():
    body = oh.make_graph([oh.make_node("Identity", ["cond"], ["c"])], "short_body",
                         [_vi("cond", TP.BOOL, [])], [_vi("c", TP.BOOL, [])])
    g = oh.make_graph([oh.make_node("Loop", ["n", ""], [], body=body, name="the_loop")], "main",
                      [_vi("n", TP.INT64, [])], [_vi("n", TP.INT64, [])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)], ir_version=10)
    with pytest.raises(ModelError, match=r"the_loop.*short_body.*1 inputs"):
        onnxjit.compile(m, cache_dir=False)(np.array(1, np.int64))


def _loop_with_body(nodes, outs):
    body = oh.make_graph(nodes, "loop_body",
                         [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("h", shape=[2])],
                         [_vi("cond_out", TP.BOOL, [])] + [_vi(o, shape=[2]) for o in outs])
    g = oh.make_graph([oh.make_node("Loop", ["n", "", "x"], ["y"], body=body, name="the_loop")],
                      "main", [_vi("n", TP.INT64, []), _vi("x", shape=[2])],
                      [_vi("y", shape=[2])])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)], ir_version=10)


def _branches(then_nodes, then_outs):
    return {"then_branch": oh.make_graph(then_nodes, "then_g", [],
                                         [_vi(o, shape=[2]) for o in then_outs]),
            "else_branch": oh.make_graph([oh.make_node("Neg", ["h"], ["e"])], "else_g", [],
                                         [_vi("e", shape=[2])])}


@pytest.mark.parametrize("nodes,pattern", [
    ([oh.make_node("Add", ["h", "nope"], ["h2"], name="adder")],
     r"'adder'.*'nope'.*subgraph 'loop_body'.*'the_loop'"),
    ([oh.make_node("Neg", ["h"], ["x"], name="shadower")],
     r"'shadower'.*'x'.*subgraph 'loop_body'.*'the_loop'"),
    ([oh.make_node("If", ["cond"], ["h2"], name="inner_if",
                   **_branches([oh.make_node("Neg", ["ghost"], ["t"], name="ghost_user")],
                               ["t"]))],
     r"'ghost_user'.*'ghost'.*subgraph 'then_g'.*'inner_if'.*subgraph 'loop_body'.*'the_loop'"),
    ([oh.make_node("If", ["cond"], ["h2"], name="inner_if",
                   **_branches([oh.make_node("Neg", ["h"], ["t"]),
                                oh.make_node("Abs", ["h"], ["u"])], ["t", "u"]))],
     r"'inner_if'.*'then_g'.*2 outputs.*subgraph 'loop_body'.*'the_loop'"),
])
def test_scoping_errors_inside_a_loop_body_name_subgraphs_and_nodes(nodes, pattern):
    nodes = [oh.make_node("Identity", ["cond"], ["cond_out"]), *nodes]
    out = nodes[-1].output[0]
    with pytest.raises(ModelError, match=pattern):
        fn = onnxjit.compile(_loop_with_body(nodes, [out]), cache_dir=False)
        fn(np.array(2, np.int64), np.ones(2, np.float32))


# ----------------------------------------------------------------------------------- maps


def _map_model():
    """Maps pass through a graph (no ai.onnx op takes one) next to tensor computations."""
    ints = oh.make_value_info("ints", oh.make_map_type_proto(
        TP.INT64, oh.make_tensor_type_proto(TP.FLOAT, [2])))
    names = oh.make_value_info("names", oh.make_map_type_proto(
        TP.STRING, oh.make_tensor_type_proto(TP.INT64, [])))
    g = oh.make_graph([oh.make_node("Neg", ["x"], ["y"])], "main",
                      [ints, _vi("x", shape=[2]), names], [names, _vi("y", shape=[2]), ints])
    return _model(g.node, g.input, g.output)


def test_map_inputs_and_outputs_are_dicts():
    fn = onnxjit.compile(_map_model(), cache_dir=False)
    names = {"a": 1, "b": np.int64(2)}
    got_names, y, got_ints = fn({3: np.array([1.0, 2.0], np.float32), 7: [0.5, -1.0]},
                                np.ones(2, np.float32), names)
    assert set(got_ints) == {3, 7} and set(got_names) == {"a", "b"}
    np.testing.assert_array_equal(got_ints[7], np.array([0.5, -1.0], np.float32))
    assert got_ints[7].dtype == np.float32 and got_names["b"].dtype == np.int64
    np.testing.assert_array_equal(y, -np.ones(2, np.float32))
    # other contents reuse the signature: a map's contents never shape the compiled code
    got_names, y, got_ints = fn({1: np.zeros(2, np.float32)}, np.ones(2, np.float32), {})
    assert list(got_ints) == [1] and got_names == {}
    assert len(fn.signatures) == 1


@pytest.mark.parametrize("bad_ints,bad_names", [
    ([np.zeros(2, np.float32)], {"a": 1}),          # a list for a map
    ({1: np.zeros(2, np.float32)}, np.array([1])),  # an array for a map
    ({"k": np.zeros(2, np.float32)}, {"a": 1}),     # a str key for an int64 key
    ({1: np.zeros(2, np.float32)}, {2: 1}),         # an int key for a str key
])
def test_a_map_input_given_something_else_is_an_input_error(bad_ints, bad_names):
    fn = onnxjit.compile(_map_model(), cache_dir=False)
    with pytest.raises(InputError):
        fn(bad_ints, np.ones(2, np.float32), bad_names)
