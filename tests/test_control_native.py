"""Native Loop and Scan (`ir.ops.control.native_loop`): one serial loop over the iterations,
compiled with the nodes around it, against onnxruntime; and the loop IR's `Break` statement
(printer, parser, verifier, reference interpreter).

Covers: a 500-step recurrence (one loop in the loop IR, no staged phase), a condition that
ends the loop early (a `break`), a while loop without a trip count, zero iterations, carried
values swapped or passed through, nested loops, scan outputs with a constant and a run-time
trip count (bound by the staged phase), and Scan directions and axes.
"""

import functools

import numpy as np
import pytest
from models import against_ort, control_model, value_info
from onnx import TensorProto as TP
from onnx import helper as oh

import onnxjit
from onnxjit.errors import CompileError
from onnxjit.ir.loop_eval import run_program
from onnxjit.ir.loop_parser import parse_program
from onnxjit.ir.loop_printer import print_program
from onnxjit.ir.loop_verify import verify_program
from onnxjit.ir.loops import Break, Buffer, Const, Kernel, Loop, Program, Store, Var, i64
from onnxjit.ir.types import DType

RNG = np.random.default_rng(1)


_vi, _model = value_info, control_model
_against_ort = functools.partial(against_ort, atol=1e-5)


def _native(fn) -> bool:
    """Every signature compiled so far is one native artifact (no staged phase)."""
    return all(not hasattr(art, "root") for art in fn._fast.values())


def _iteration_loops(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.lstrip().startswith("for %iter"))


# ----------------------------------------------------------------------------------- Loop


def _recurrence(hidden: int):
    """h = tanh(h @ W + x_t) for t < T, the trip count an input."""
    body = oh.make_graph(
        [oh.make_node("Gather", ["xs", "i"], ["x_t"], axis=0),
         oh.make_node("MatMul", ["h", "W"], ["hw"]),
         oh.make_node("Add", ["hw", "x_t"], ["pre"]),
         oh.make_node("Tanh", ["pre"], ["h_new"]),
         oh.make_node("Identity", ["cond"], ["cond_out"])],
        "step", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("h", shape=[1, hidden])],
        [_vi("cond_out", TP.BOOL, []), _vi("h_new", shape=[1, hidden])])
    w = RNG.standard_normal(hidden * hidden) / np.sqrt(hidden)
    return _model([oh.make_node("Loop", ["T", "", "h0"], ["h_last"], body=body)],
                  [_vi("T", TP.INT64, []), _vi("xs", shape=["T", 1, hidden]),
                   _vi("h0", shape=[1, hidden])], [_vi("h_last", shape=[1, hidden])],
                  [oh.make_tensor("W", TP.FLOAT, [hidden, hidden], w)])


def test_500_step_recurrence_is_one_native_loop():
    m = _recurrence(16)
    feeds = [{"T": np.array(t, np.int64), "xs": RNG.standard_normal((t, 1, 16)).astype(np.float32),
              "h0": RNG.standard_normal((1, 16)).astype(np.float32)} for t in (500, 3)]
    fn = _against_ort(m, feeds)
    assert _native(fn)
    text = fn.ir("loops")
    assert _iteration_loops(text) == 1
    assert "%trip: i64 = load %T[0]" in text  # the trip count is read at run time
    assert "break" not in text  # the condition cannot end it: no exit test per step


def _sum_until(with_trip: bool):
    """while s < limit: s += i (+ a carried counter); the trip count, if any, a safety bound."""
    body = oh.make_graph(
        [oh.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT),
         oh.make_node("Add", ["s", "fi"], ["s_new"]),
         oh.make_node("Add", ["n", "one"], ["n_new"]),
         oh.make_node("Less", ["s_new", "limit"], ["go"])],
        "sum_body", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("s", shape=[]),
                     _vi("n", TP.INT64, [2])],
        [_vi("go", TP.BOOL, []), _vi("s_new", shape=[]), _vi("n_new", TP.INT64, [2])])
    inputs = [_vi("c0", TP.BOOL, []), _vi("s0", shape=[]), _vi("limit", shape=[])]
    if with_trip:
        inputs.insert(0, _vi("max", TP.INT64, []))
    loop = oh.make_node("Loop", ["max" if with_trip else "", "c0", "s0", "n0"], ["s", "n"],
                        body=body)
    return _model([loop], inputs, [_vi("s", shape=[]), _vi("n", TP.INT64, [2])],
                  [oh.make_tensor("one", TP.INT64, [], [1]),
                   oh.make_tensor("n0", TP.INT64, [2], [0, 10])])


@pytest.mark.parametrize("with_trip", [True, False])
def test_condition_ends_the_native_loop(with_trip):
    m = _sum_until(with_trip)
    feeds = []
    for lim, go in ((10.0, True), (1.0, True), (50.0, True), (50.0, False), (1e4, True)):
        f = {"c0": np.array(go), "s0": np.array(0.0, np.float32),
             "limit": np.array(lim, np.float32)}
        if with_trip:
            f["max"] = np.array(100, np.int64)
        feeds.append(f)
    if with_trip:
        feeds.append({**feeds[0], "max": np.array(0, np.int64)})
    fn = _against_ort(m, feeds)
    assert _native(fn)
    text = fn.ir("loops")
    assert _iteration_loops(text) == 1 and "break if" in text


def test_swapped_and_passed_through_carried_values_with_scan_outputs():
    # (a, b, c) -> (b, a + b, c): b's new value is the old a's storage; c passes through; the
    # scan outputs read the old a and b while the new state is written.
    body = oh.make_graph(
        [oh.make_node("Add", ["a", "b"], ["ab"]),
         oh.make_node("Identity", ["b"], ["a_new"]),
         oh.make_node("Identity", ["a"], ["old_a"]),
         oh.make_node("Mul", ["b", "c"], ["bc"]),
         oh.make_node("Identity", ["cond"], ["cond_out"])],
        "fib", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("a", shape=[2]),
                _vi("b", shape=[2]), _vi("c", shape=[2])],
        [_vi("cond_out", TP.BOOL, []), _vi("a_new", shape=[2]), _vi("ab", shape=[2]),
         _vi("c", shape=[2]), _vi("old_a", shape=[2]), _vi("bc", shape=[2])])
    m = _model([oh.make_node("Loop", ["M", "", "a0", "b0", "c0"],
                             ["a", "b", "c", "as", "bcs"], body=body)],
               [_vi("a0", shape=[2]), _vi("b0", shape=[2]), _vi("c0", shape=[2])],
               [_vi("a", shape=[2]), _vi("b", shape=[2]), _vi("c", shape=[2]),
                _vi("as", shape=[6, 2]), _vi("bcs", shape=[6, 2])],
               [oh.make_tensor("M", TP.INT64, [], [6])])
    feeds = {"a0": np.array([0.0, 1.0], np.float32), "b0": np.array([1.0, -1.0], np.float32),
             "c0": np.array([2.0, 3.0], np.float32)}
    fn = _against_ort(m, [feeds])
    assert _native(fn) and _iteration_loops(fn.ir("loops")) == 1


def test_nested_loops_are_native():
    inner = oh.make_graph(
        [oh.make_node("Cast", ["j"], ["fj"], to=TP.FLOAT),
         oh.make_node("Mul", ["fj", "x"], ["jx"]),
         oh.make_node("Add", ["acc", "jx"], ["acc_new"]),
         oh.make_node("Identity", ["c"], ["c_out"])],
        "inner", [_vi("j", TP.INT64, []), _vi("c", TP.BOOL, []), _vi("acc", shape=[3])],
        [_vi("c_out", TP.BOOL, []), _vi("acc_new", shape=[3])])
    outer = oh.make_graph(
        [oh.make_node("Loop", ["four", "", "acc"], ["acc_in"], body=inner),
         oh.make_node("Sin", ["acc_in"], ["acc_new"]),
         oh.make_node("Identity", ["acc_new"], ["trace"]),
         oh.make_node("Identity", ["c"], ["c_out"])],
        "outer", [_vi("i", TP.INT64, []), _vi("c", TP.BOOL, []), _vi("acc", shape=[3])],
        [_vi("c_out", TP.BOOL, []), _vi("acc_new", shape=[3]), _vi("trace", shape=[3])])
    m = _model([oh.make_node("Loop", ["three", "", "x"], ["y", "ys"], body=outer)],
               [_vi("x", shape=[3])], [_vi("y", shape=[3]), _vi("ys", shape=[3, 3])],
               [oh.make_tensor("three", TP.INT64, [], [3]),
                oh.make_tensor("four", TP.INT64, [], [4])])
    fn = _against_ort(m, [{"x": RNG.standard_normal(3).astype(np.float32)}])
    assert _native(fn) and _iteration_loops(fn.ir("loops")) == 2


def _rnn_with_scan_output():
    body = oh.make_graph(
        [oh.make_node("Gather", ["xs", "i"], ["x_t"], axis=0),
         oh.make_node("Add", ["h", "x_t"], ["pre"]),
         oh.make_node("Tanh", ["pre"], ["h_new"]),
         oh.make_node("Identity", ["h_new"], ["h_scan"]),
         oh.make_node("Identity", ["cond"], ["cond_out"])],
        "rnn", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("h", shape=[4])],
        [_vi("cond_out", TP.BOOL, []), _vi("h_new", shape=[4]), _vi("h_scan", shape=[4])])
    return _model([oh.make_node("Loop", ["T", "", "h0"], ["h", "hs"], body=body)],
                  [_vi("T", TP.INT64, []), _vi("xs", shape=[None, 4]), _vi("h0", shape=[4])],
                  [_vi("h", shape=[4]), _vi("hs", shape=[None, 4])])


def test_run_time_trip_count_with_scan_outputs_binds_it_then_runs_natively():
    from test_control_flow import _stage_keys

    xs = RNG.standard_normal((200, 4)).astype(np.float32)
    h0 = RNG.standard_normal(4).astype(np.float32)
    feeds = [{"T": np.array(t, np.int64), "xs": xs, "h0": h0} for t in (150, 5, 0)]
    fn = _against_ort(_rnn_with_scan_output(), feeds)
    chosen = _stage_keys(next(iter(fn._fast.values())).root)
    assert {("native", 150), ("native", 5)} <= chosen


# ----------------------------------------------------------------------------------- Scan


@pytest.mark.parametrize("in_dir,in_axis,out_dir,out_axis", [
    (0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 1, 1), (1, 1, 0, -1), (0, 2, 1, 0)])
def test_scan_directions_and_axes_are_native(in_dir, in_axis, out_dir, out_axis):
    shape = [3, 4, 5]
    length = shape[in_axis]
    elem = shape[:in_axis] + shape[in_axis + 1:]
    a = out_axis % 3
    ys = elem[:a] + [length] + elem[a:]
    body = oh.make_graph(
        [oh.make_node("Add", ["acc", "x_t"], ["acc_new"]),
         oh.make_node("Mul", ["acc_new", "w"], ["y_t"])],
        "cumsum", [_vi("acc", shape=elem), _vi("x_t", shape=elem)],
        [_vi("acc_new", shape=elem), _vi("y_t", shape=elem)])
    m = _model([oh.make_node("Scan", ["init", "xs"], ["final", "ys"], body=body,
                             num_scan_inputs=1, scan_input_directions=[in_dir],
                             scan_input_axes=[in_axis], scan_output_directions=[out_dir],
                             scan_output_axes=[out_axis])],
               [_vi("init", shape=elem), _vi("xs", shape=shape)],
               [_vi("final", shape=elem), _vi("ys", shape=ys)],
               [oh.make_tensor("w", TP.FLOAT, [], [0.5])])
    feeds = {"init": RNG.standard_normal(elem).astype(np.float32),
             "xs": RNG.standard_normal(shape).astype(np.float32)}
    fn = _against_ort(m, [feeds])
    assert _native(fn)
    assert f"for %iter: i64 = 0 to {length}" in fn.ir("loops")


# ------------------------------------------------------------------------------ loop IR


def test_break_round_trips_and_the_interpreter_agrees_with_native_code():
    m = _sum_until(True)
    fn = onnxjit.compile(m, cache_dir=False)
    feeds = {"max": np.array(100, np.int64), "c0": np.array(True),
             "s0": np.array(0.0, np.float32), "limit": np.array(20.0, np.float32)}
    native = fn.run(None, feeds)
    text = fn.ir("loops")
    program = parse_program(text)
    verify_program(program)
    assert print_program(program) == text
    interpreted = run_program(program, [feeds[k] for k in ("max", "c0", "s0", "limit")])
    for a, b in zip(native, interpreted):
        np.testing.assert_array_equal(a, b)
    assert float(native[0]) == 21.0 and list(native[1]) == [7, 17]


def _break_program(parallel: bool, inside: bool) -> Program:
    out = Buffer("out", DType.INT64, (4,), "output", slot=0)
    i = Var(DType.INT64, "i")
    brk = Break(Const(True, DType.BOOL))
    body = [Store(out, i, i), brk]
    stmts = [Loop(i, i64(0), i64(4), 1, body, parallel)] if inside else body[1:]
    return Program([out], [Kernel("k", stmts)])


def test_verifier_refuses_a_break_outside_a_serial_loop():
    verify_program(_break_program(parallel=False, inside=True))
    with pytest.raises(CompileError, match="break"):
        verify_program(_break_program(parallel=True, inside=True))
    with pytest.raises(CompileError, match="break"):
        verify_program(_break_program(parallel=False, inside=False))


def test_interpreter_break_leaves_only_the_innermost_loop():
    out = Buffer("out", DType.INT64, (3,), "output", slot=0)
    i, j, k = Var(DType.INT64, "i"), Var(DType.INT64, "j"), Var(DType.INT64, "k")
    from onnxjit.ir.loops import Load, Op

    stop = Var(DType.BOOL, "stop")
    inner = [Op(stop, "ge", (j, i)), Break(stop), Load(k, out, i),
             Op(k, "add", (k, i64(1))), Store(out, i, k)]
    program = Program([out], [Kernel("k", [Loop(i, i64(0), i64(3), 1,
                                                [Loop(j, i64(0), i64(10), 1, inner)])])])
    verify_program(program)
    assert list(run_program(program, [])[0]) == [0, 1, 2]


def test_constant_nodes_in_a_body_keep_its_shapes_static():
    # Reshape targets from Constant nodes inside the body: constant folding does not enter
    # regions, so region inference turns them into body initializers.
    body = oh.make_graph(
        [oh.make_node("Constant", [], ["flat_shape"],
                      value=oh.make_tensor("s", TP.INT64, [1], [4])),
         oh.make_node("Reshape", ["h", "flat_shape"], ["flat"]),
         oh.make_node("Sin", ["flat"], ["s"]),
         oh.make_node("Constant", [], ["square"],
                      value=oh.make_tensor("q", TP.INT64, [2], [2, 2])),
         oh.make_node("Reshape", ["s", "square"], ["h_new"]),
         oh.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("h", shape=[2, 2])],
        [_vi("cond_out", TP.BOOL, []), _vi("h_new", shape=[2, 2])])
    m = _model([oh.make_node("Loop", ["T", "", "h0"], ["h_last"], body=body)],
               [_vi("T", TP.INT64, []), _vi("h0", shape=[2, 2])], [_vi("h_last", shape=[2, 2])])
    fn = _against_ort(m, [{"T": np.array(t, np.int64),
                           "h0": RNG.standard_normal((2, 2)).astype(np.float32)}
                          for t in (5, 0)])
    assert _native(fn)


def test_a_loop_whose_carried_shape_changes_is_not_native():
    from onnxjit.ir.graph import Graph, Node, Value
    from onnxjit.ir.ops.control.native_loop import loop_native
    from onnxjit.ir.types import TensorType

    f32 = DType.FLOAT
    i, c, acc = (Value(TensorType(DType.INT64, ()), "i"), Value(TensorType(DType.BOOL, ()), "c"),
                 Value(TensorType(f32, (2,)), "acc"))
    grown = Value(TensorType(f32, (3,)), "grown")
    one = Value(TensorType(f32, (1,)), "one", None, np.ones(1, np.float32))
    body = Graph([Node("Concat", [acc, one], [grown], {"axis": 0}, "", 18)], [i, c, acc],
                 [c, grown], [one], name="grow")
    start = Value(TensorType(f32, (2,)), "start")
    n = Value(TensorType(DType.INT64, ()), "n")
    out = Value(TensorType(f32, (2,)), "out")
    node = Node("Loop", [n, None, start], [out], {"body": body}, "", 18)
    assert not loop_native(node)
    grown.type = TensorType(f32, (2,))  # with a fixed carried shape, the same loop qualifies
    assert loop_native(node)
