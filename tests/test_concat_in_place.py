"""Concats whose producers write their inputs in place (`passes/concat_in_place`): the same
results as onnxruntime, no copy kernel where every input was placed, copies where one cannot be
(graph inputs and outputs, a value placed twice, batches > 1), and the loop IR's offset views
through the text form and the verifier."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.codegen.modules import plan_kernels
from onnxjit.driver import import_model, lower_signature
from onnxjit.errors import CompileError
from onnxjit.ir.loop_canon import kernel_args, kernel_key
from onnxjit.ir.loop_parser import parse_program
from onnxjit.ir.loop_printer import print_program
from onnxjit.ir.loop_verify import verify_program
from onnxjit.ir.loops import Buffer, Kernel, Program
from onnxjit.ir.types import DType
from onnxjit.options import CompileOptions

RNG = np.random.default_rng(0)


def _conv(name: str, x: str, cin: int, cout: int, inits: list) -> helper.NodeProto:
    w = (RNG.standard_normal((cout, cin, 3, 3)) * 0.3).astype(np.float32)
    inits.append(numpy_helper.from_array(w, f"{name}_w"))
    return helper.make_node("Conv", [x, f"{name}_w"], [name], kernel_shape=[3, 3], pads=[1] * 4)


def _inception(batch: int) -> tuple:
    """Two identical-shape conv branches (kernels that would share code, at different offsets),
    a nested concat (DenseNet-style), a graph input and a value used twice in one concat, a
    concat input that is also a graph output."""
    inits: list = []
    nodes = [_conv("a", "x", 4, 3, inits), _conv("b", "x", 4, 3, inits),
             helper.make_node("Relu", ["a"], ["ra"]), helper.make_node("Relu", ["b"], ["rb"]),
             helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Concat", ["ra", "rb", "s"], ["c1"], axis=1),
             helper.make_node("Neg", ["s"], ["ns"]),
             helper.make_node("Concat", ["c1", "ns", "x"], ["c2"], axis=-3),
             helper.make_node("Exp", ["rb"], ["e"]),
             helper.make_node("Concat", ["e", "e", "ra"], ["c3"], axis=1),
             _conv("d", "c2", 18, 5, inits),
             helper.make_node("Concat", ["d", "c3"], ["y"], axis=1)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 6, 7])
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 14, 6, 7]),
            helper.make_tensor_value_info("ra", TensorProto.FLOAT, [batch, 3, 6, 7])]
    g = helper.make_graph(nodes, "g", [x], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m, RNG.standard_normal((batch, 4, 6, 7)).astype(np.float32)


def _summed(nodes: list, inits: list):
    """x [1, 4, 6, 7] -> nodes -> y = ReduceSum(c2 or c), a scalar (no output aliasing)."""
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 4, 6, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _check(m) -> None:
    x = RNG.standard_normal((1, 4, 6, 7)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(onnxjit.compile(m, cache_dir=False)(x)[0], want, rtol=1e-5)


def _program(m, shape: tuple) -> Program:
    opts = CompileOptions.from_user({"cache_dir": False})
    return lower_signature(import_model(m.SerializeToString(), opts),
                           ((DType.FLOAT, shape),), opts)[1]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batch", [1, 2])
def test_concats_match_onnxruntime(batch: int, threads: int) -> None:
    m, x = _inception(batch)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = onnxjit.compile(m, num_threads=threads, cache_dir=False)(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_which_inputs_are_placed() -> None:
    """Batch 1: rb, s (into c1), c1 nested in c2, ns (into c2) and e (into c3) are written in
    place; ra (a graph output) and x (a graph input), c3's second e, and y's inputs (y is a
    graph output) are copied: one copy kernel per Concat."""
    prog = _program(_inception(1)[0], (1, 4, 6, 7))
    views = {b.name: b for b in prog.buffers if b.kind == "view"}
    assert {"rb", "s", "c1", "ns", "e"} <= set(views)
    assert views["c1"].base is views["c1"].root() and views["rb"].base is views["c1"]
    assert views["rb"].offset == 3 * 42 * 4 and views["ns"].offset == 10 * 42 * 4
    assert views["rb"].root_offset() == 3 * 42 * 4
    assert "ra" not in views and "x" not in views
    concats = [k for k in prog.kernels if k.name.startswith("concat")]
    assert len(concats) == 4
    verify_program(prog)


def test_fully_placed_concat_has_no_kernel() -> None:
    """Without the graph-output and graph-input cases every Concat of the chain is free."""
    inits: list = []
    nodes = [_conv("a", "x", 4, 3, inits), _conv("b", "x", 4, 5, inits),
             helper.make_node("Concat", ["a", "b"], ["c1"], axis=1),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Concat", ["c1", "r"], ["c2"], axis=1),
             helper.make_node("ReduceSum", ["c2"], ["y"], keepdims=0)]
    m = _summed(nodes, inits)
    prog = _program(m, (1, 4, 6, 7))
    assert not any(k.name.startswith("concat") for k in prog.kernels)
    # each slice is its kernel's own argument: the function does not depend on the offset
    args = {k.name: kernel_args(k)[0] for k in prog.kernels}
    assert any(off > 0 for a in args.values() for _, off in a)
    _check(m)


def test_slices_share_code() -> None:
    """Two identical convs writing into different slices of a Concat compile to one function
    (their kernels' canonical texts are equal), and the result is still right."""
    inits: list = []
    nodes = [_conv("a", "x", 4, 3, inits), _conv("b", "x", 4, 3, inits),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("ReduceSum", ["c"], ["y"], keepdims=0)]
    m = _summed(nodes, inits)
    prog = _program(m, (1, 4, 6, 7))
    convs = [k for k in prog.kernels if k.name.startswith("conv")]
    assert len(convs) == 2 and kernel_key(convs[0]) == kernel_key(convs[1])
    assert [off for _, off in kernel_args(convs[1])[0] if off] == [3 * 42 * 4]
    plan = plan_kernels(prog)  # the second conv calls the first one's function
    a, b = (prog.kernels.index(k) for k in convs)
    assert plan.origin[b] == a and b not in plan.unique
    assert len(plan.unique) == len(prog.kernels) - 1
    _check(m)


def test_batches_copy() -> None:
    prog = _program(_inception(2)[0], (2, 4, 6, 7))
    assert not any(b.kind == "view" and b.offset > 0 for b in prog.buffers)


def test_offset_views_text_and_verifier() -> None:
    base = Buffer("t", DType.FLOAT, (4, 6), "temp")
    v = Buffer("v", DType.FLOAT, (2, 6), "view", base=base, offset=48)
    prog = Program([base, v], [Kernel("k", [])])
    text = print_program(prog)
    assert "base=%t" in text and "offset=48" in text
    back = parse_program(text)
    assert [b.offset for b in back.buffers if b.kind == "view"] == [48]
    verify_program(prog)
    for bad in (52, 50):  # past the base's end; not a whole element
        v.offset = bad
        with pytest.raises(CompileError, match="does not fit its base"):
            verify_program(prog)
