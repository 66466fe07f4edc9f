"""Focused tests of the shape and data-movement op tables (tensor.shape, tensor.movement,
tensor.slice, tensor.generate): symbolic shape inference through Shape-driven subgraphs, per-version
attribute vs input forms, zero-size and 0-d tensors, runtime index checks, and error messages.

Models run down to the loop IR and through the reference interpreter
(`loop_harness.run_via_loop_ir`), so no native code is needed.
"""

from __future__ import annotations

import numpy as np
import pytest
from loop_harness import run_via_loop_ir
from onnx import TensorProto, helper, numpy_helper

import onnxjit

# importing registers the op tables under test
import onnxjit.ir.ops.tensor.generate  # noqa: F401
import onnxjit.ir.ops.tensor.movement  # noqa: F401
import onnxjit.ir.ops.tensor.shape  # noqa: F401
import onnxjit.ir.ops.tensor.slice  # noqa: F401
from onnxjit.driver import import_model, lower_signature
from onnxjit.errors import InputError, ModelError, UnsupportedError
from onnxjit.ir.types import DType, Sym
from onnxjit.options import CompileOptions

F, I64 = TensorProto.FLOAT, TensorProto.INT64
OPTS = CompileOptions(verify=True, cache_dir=False)


def make(nodes, inputs, outputs=(("y", F, 2),), inits=None, opset=17):
    """A model: inputs are (name, elem type, shape) triples, outputs (name, elem type, rank);
    output dims are left unknown so that the test sees what inference gives."""
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, [None] * r) for n, t, r in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def run(model, *arrays):
    return run_via_loop_ir(model, list(arrays), OPTS)


def graph_types(model):
    """Output types after the graph pipeline (symbolic shapes, before any binding)."""
    g = import_model(model.SerializeToString(), OPTS).graph
    return [v.type for v in g.outputs], g


# --------------------------------------------------------------------------- symbolic shapes


def test_shape_gather_unsqueeze_concat_reshape_stays_symbolic():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Concat", ["b1", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    m = make(nodes, [("x", F, ["batch", 28, 28])],
             inits={"zero": np.array(0, np.int64), "ax0": np.array([0], np.int64),
                    "rest": np.array([-1], np.int64)})
    (t,), g = graph_types(m)
    assert t.dtype == DType.FLOAT and t.shape == (Sym.var("batch"), 784)
    assert [n.op for n in g.nodes] == ["Shape", "Gather", "Unsqueeze", "Concat", "Reshape"]
    x = np.arange(3 * 784, dtype=np.float32).reshape(3, 28, 28)
    np.testing.assert_array_equal(run(m, x)[0], x.reshape(3, 784))


def test_reshape_minus_one_cancels_symbolic_factors():
    # x[b, s, 8] -> Reshape(x, Concat(Shape(x)[0:1], [-1])) = [b, s*8]: b cancels out.
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "st", "en"], ["b"]),
             helper.make_node("Concat", ["b", "m1"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"])]
    m = make(nodes, [("x", F, ["b", "s", 8])],
             inits={"st": np.array([0], np.int64), "en": np.array([1], np.int64),
                    "m1": np.array([-1], np.int64)})
    (t,), _ = graph_types(m)
    assert t.shape == (Sym.var("b"), Sym.var("s") * 8)
    assert run(m, np.zeros((2, 3, 8), np.float32))[0].shape == (2, 24)


def test_shape_start_end_and_size_sym_values():
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=-1),
             helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("ConstantOfShape", ["s"], ["y"],
                              value=numpy_helper.from_array(np.array([2.5], np.float32)))]
    m = make(nodes, [("x", F, ["a", "b", 4])], outputs=(("y", F, 1), ("n", I64, 0)))
    (ty, tn), _ = graph_types(m)
    assert ty.shape == (Sym.var("b"),)
    assert tn.shape == ()
    y, n = run(m, np.zeros((2, 3, 4), np.float32))
    np.testing.assert_array_equal(y, np.full(3, 2.5, np.float32))
    assert n == 24 and n.dtype == np.int64


def test_data_dependent_target_gives_unknown_dims_not_an_error():
    nodes = [helper.make_node("Reshape", ["x", "t"], ["y"]),
             helper.make_node("Expand", ["x", "t"], ["z"])]
    m = make(nodes, [("x", F, ["n", 4]), ("t", I64, [2])], outputs=(("y", F, 2), ("z", F, 2)))
    (ty, tz), _ = graph_types(m)
    assert ty.shape == (None, None)
    # z's last dim can only be 4, but it stays unknown so that the run-time shape phase checks
    # t's values (a static 4 would skip Expand's check that t broadcasts against x)
    assert tz.shape == (None, None)
    fn, x = onnxjit.compile(m, cache_dir=False), np.ones((2, 4), np.float32)
    assert fn(x, np.array([2, 4], np.int64))[1].shape == (2, 4)
    with pytest.raises(InputError, match="Expand"):
        fn(x, np.array([1, 8], np.int64))


def test_squeeze_without_axes_on_symbolic_dims_has_unknown_rank():
    m = make([helper.make_node("Squeeze", ["x"], ["y"])], [("x", F, ["n", 1, 3])])
    (t,), _ = graph_types(m)
    assert t.shape == (None, None)  # the declared rank; no dim is guessed
    np.testing.assert_array_equal(run(m, np.ones((2, 1, 3), np.float32))[0].shape, (2, 3))


# --------------------------------------------------------------------------- versions


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_axes_attribute_and_input(opset):
    if opset < 13:
        nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[-1, 0]),
                 helper.make_node("Squeeze", ["u"], ["y"], axes=[0])]
        inits = {}
    else:
        nodes = [helper.make_node("Unsqueeze", ["x", "a"], ["u"]),
                 helper.make_node("Squeeze", ["u", "b"], ["y"])]
        inits = {"a": np.array([-1, 0], np.int64), "b": np.array([0], np.int64)}
    m = make(nodes, [("x", F, [2, 3])], outputs=[("y", F, 3)], inits=inits, opset=opset)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run(m, x)[0], x.reshape(2, 3, 1))


def test_slice_opset1_attributes_and_reshape_opset1_shape_attribute():
    nodes = [helper.make_node("Slice", ["x"], ["s"], starts=[1, -100], ends=[1000, 2]),
             helper.make_node("Reshape", ["s"], ["y"], shape=[-1])]
    m = make(nodes, [("x", F, [3, 4])], outputs=[("y", F, 1)], opset=1)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(run(m, x)[0], x[1:, :2].reshape(-1))


def test_reshape_allowzero():
    m = make([helper.make_node("Reshape", ["x", "t"], ["y"], allowzero=1)],
             [("x", F, [0, 3])], inits={"t": np.array([3, 0], np.int64)}, opset=14)
    assert run(m, np.zeros((0, 3), np.float32))[0].shape == (3, 0)
    m = make([helper.make_node("Reshape", ["x", "t"], ["y"])],
             [("x", F, [2, 3])], inits={"t": np.array([0, 3], np.int64)}, opset=14)
    assert run(m, np.zeros((2, 3), np.float32))[0].shape == (2, 3)


@pytest.mark.parametrize("opset, kwargs, inputs, sizes", [
    (2, {"split": [1, 3]}, [], [1, 3]),
    (13, {}, ["sp"], [2, 2]),
    (18, {"num_outputs": 3}, [], [2, 2, 0]),
    (11, {}, [], [2, 2]),
])
def test_split_forms(opset, kwargs, inputs, sizes):
    outs = [f"y{k}" for k in range(len(sizes))]
    m = make([helper.make_node("Split", ["x"] + inputs, outs, axis=1, **kwargs)],
             [("x", F, [2, 4])], outputs=[(o, F, 2) for o in outs],
             inits={"sp": np.array([2, 2], np.int64)} if inputs else None, opset=opset)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    got = run(m, x)
    assert [g.shape[1] for g in got] == sizes
    np.testing.assert_array_equal(np.concatenate(got, axis=1), x)


def test_dropout_versions_mask_dtype_and_training_mode():
    m = make([helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.3)],
             [("x", F, [3])], outputs=(("y", F, 1), ("mask", F, 1)), opset=7)
    y, mask = run(m, np.array([1, 2, 3], np.float32))
    np.testing.assert_array_equal(y, [1, 2, 3])
    assert mask.dtype == np.float32 and (mask == 1).all()
    m = make([helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])],
             [("x", F, [3]), ("t", TensorProto.BOOL, [])],
             outputs=(("y", F, 1), ("mask", TensorProto.BOOL, 1)),
             inits={"r": np.array(0.5, np.float32)}, opset=13)
    x = np.array([1, 2, 3], np.float32)
    y, mask = run(m, x, np.array(False))
    assert mask.dtype == bool and mask.all()
    # training mode (tests/test_ops_dropout.py has the details): kept entries scaled by 2
    y, mask = onnxjit.compile(m, cache_dir=False)(x, np.array(True))
    assert mask.dtype == bool
    np.testing.assert_array_equal(y, np.where(mask, 2 * x, 0))


@pytest.mark.parametrize("attr, val, etype, expected", [
    ("value_ints", [1, 2], I64, np.array([1, 2])),
    ("value_float", 1.5, F, np.float32(1.5)),
    ("value_int", 7, I64, np.int64(7)),
    ("value_floats", [0.5], F, np.array([0.5], np.float32)),
    ("value", numpy_helper.from_array(np.eye(2, dtype=np.int32)), TensorProto.INT32,
     np.eye(2, dtype=np.int32)),
])
def test_constant_attribute_forms_fold(attr, val, etype, expected):
    m = make([helper.make_node("Constant", [], ["c"], **{attr: val}),
              helper.make_node("Identity", ["c"], ["y"])], [],
             outputs=[("y", etype, np.ndim(expected))])
    _, g = graph_types(m)
    assert g.nodes == []  # the Constant node folds (it has no inputs)
    got = run(m)[0]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


# --------------------------------------------------------------------------- zero-size, 0-d


def test_zero_size_and_scalar_tensors():
    nodes = [helper.make_node("Concat", ["a", "b"], ["c"], axis=0),
             helper.make_node("Transpose", ["c"], ["y"]),
             helper.make_node("Gather", ["b", "i"], ["g"], axis=1),
             helper.make_node("Reshape", ["s", "one"], ["r"]),
             helper.make_node("Expand", ["s", "sh"], ["e"])]
    m = make(nodes, [("a", F, [0, 3]), ("b", F, [2, 3]), ("s", F, []), ("i", I64, [0])],
             outputs=(("y", F, 2), ("g", F, 2), ("r", F, 1), ("e", F, 2)),
             inits={"one": np.array([1], np.int64), "sh": np.array([2, 2], np.int64)})
    b = np.arange(6, dtype=np.float32).reshape(2, 3)
    y, g, r, e = run(m, np.zeros((0, 3), np.float32), b, np.array(4, np.float32),
                     np.zeros(0, np.int64))
    np.testing.assert_array_equal(y, b.T)
    assert g.shape == (2, 0)
    np.testing.assert_array_equal(r, [4])
    np.testing.assert_array_equal(e, np.full((2, 2), 4, np.float32))


def test_slice_to_empty_and_negative_steps():
    m = make([helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])],
             [("x", F, [4, 5])], inits={"s": np.array([-1, 10], np.int64),
                                        "e": np.array([-10, 3], np.int64),
                                        "a": np.array([0, 1], np.int64),
                                        "st": np.array([-2, 1], np.int64)})
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    assert run(m, x)[0].shape == (2, 0)


# --------------------------------------------------------------------------- runtime checks


def test_gather_runtime_index_checks_and_negative_wrap():
    m = make([helper.make_node("Gather", ["x", "i"], ["y"], axis=1, name="emb")],
             [("x", F, [2, 3]), ("i", TensorProto.INT32, [2])])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run(m, x, np.array([-1, 0], np.int32))[0], x[:, [2, 0]])
    with pytest.raises(InputError, match=r"emb.*\[-3, 3\)"):
        run(m, x, np.array([3, 0], np.int32))


def test_gather_elements_runtime_index_check():
    m = make([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0, name="ge")],
             [("x", F, [2, 2]), ("i", I64, [1, 2])])
    x = np.array([[1, 2], [3, 4]], np.float32)
    np.testing.assert_array_equal(run(m, x, np.array([[1, -2]]))[0], [[3, 2]])
    with pytest.raises(InputError, match="ge"):
        run(m, x, np.array([[2, 0]]))


def test_dynamic_slice_parameters_checked_against_output_shape():
    node = helper.make_node("Slice", ["x", "s", "e"], ["y"], name="dyn")
    g = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("x", F, [5]), helper.make_tensor_value_info("s", I64, [1]),
        helper.make_tensor_value_info("e", I64, [1])],
        [helper.make_tensor_value_info("y", F, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(run(m, x, np.array([1]), np.array([3]))[0], [1, 2])
    np.testing.assert_array_equal(run(m, x, np.array([-2]), np.array([99]))[0], [3, 4])
    with pytest.raises(InputError, match="dyn"):
        run(m, x, np.array([0]), np.array([4]))


def test_reshape_lowers_to_a_view():
    nodes = [helper.make_node("Reshape", ["x", "t"], ["r"]),
             helper.make_node("Transpose", ["r"], ["y"])]
    m = make(nodes, [("x", F, [2, 3])], inits={"t": np.array([3, 2], np.int64)})
    gm = import_model(m.SerializeToString(), OPTS)
    _, prog = lower_signature(gm, ((DType.FLOAT, (2, 3)),), OPTS)
    assert [b.kind for b in prog.buffers].count("view") == 1
    assert [k.name for k in prog.kernels] == ["transpose"]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("node, shape, match", [
    (helper.make_node("Transpose", ["x"], ["y"], perm=[0, 0]), [2, 3], "not a permutation"),
    (helper.make_node("Squeeze", ["x"], ["y"], axes=[1]), [2, 3], "cannot squeeze axis 1"),
    (helper.make_node("Unsqueeze", ["x"], ["y"], axes=[0, -3]), [2], "repeats axis 0"),
    (helper.make_node("Flatten", ["x"], ["y"], axis=3), [2, 3], "out of range"),
    (helper.make_node("Concat", ["x", "x"], ["y"], axis=2), [2, 3], "out of range"),
    (helper.make_node("Split", ["x"], ["y", "z"], axis=1, split=[1, 1]), [2, 3],
     "does not sum"),
])
def test_bad_attributes_raise_model_error(node, shape, match):
    m = make([node], [("x", F, shape)], outputs=[(o, F, 2) for o in node.output], opset=11)
    with pytest.raises(ModelError, match=match):
        run(m, np.zeros(shape, np.float32))


@pytest.mark.parametrize("target, match", [([-1, -1], "more than one -1"),
                                           ([4, 2], "cannot reshape")])
def test_bad_reshape_targets(target, match):
    m = make([helper.make_node("Reshape", ["x", "t"], ["y"], name="rs")], [("x", F, [2, 3])],
             inits={"t": np.array(target, np.int64)})
    with pytest.raises(ModelError, match=f"rs.*{match}"):
        run(m, np.zeros((2, 3), np.float32))


def test_constant_index_out_of_range_is_a_model_error():
    m = make([helper.make_node("Gather", ["x", "i"], ["y"])], [("x", F, [2])],
             outputs=[("y", F, 1)], inits={"i": np.array([5], np.int64)})
    with pytest.raises(ModelError, match=r"index 5 is out of range \[-2, 2\)"):
        run(m, np.zeros(2, np.float32))


def test_float16_data_moves_exactly():
    m = make([helper.make_node("Transpose", ["x"], ["y"], name="tp")],
             [("x", TensorProto.FLOAT16, [2, 3])], outputs=[("y", TensorProto.FLOAT16, 2)])
    x = np.arange(6, dtype=np.float16).reshape(2, 3) / np.float16(7)
    np.testing.assert_array_equal(run(m, x)[0], x.T)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, np.float64, np.uint8])
def test_movement_ops_on_every_dtype(dtype):
    nodes = [helper.make_node("Concat", ["x", "x"], ["c"], axis=1),
             helper.make_node("Tile", ["c", "r"], ["t"]),
             helper.make_node("Trilu", ["t"], ["y"], upper=0)]
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    m = make(nodes, [("x", et, [2, 2])], outputs=[("y", et, 2)],
             inits={"r": np.array([2, 1], np.int64)})
    x = (np.arange(4).reshape(2, 2) % 2).astype(dtype)
    expect = np.tril(np.tile(np.concatenate([x, x], axis=1), (2, 1)))
    np.testing.assert_array_equal(run(m, x)[0], expect)


def test_data_dependent_intermediate_shape_is_unsupported_not_a_crash():
    # The graph output's shape is declared, but Range's own length depends on input values.
    g = helper.make_graph(
        [helper.make_node("Range", ["a", "b", "c"], ["r"], name="rg"),
         helper.make_node("Transpose", ["r"], ["y"])], "g",
        [helper.make_tensor_value_info(n, I64, []) for n in "abc"],
        [helper.make_tensor_value_info("y", I64, [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(UnsupportedError, match="depends on"):
        run(m, np.int64(0), np.int64(5), np.int64(2))


def test_range_length_from_declared_type_is_checked_at_run_time():
    g = helper.make_graph(
        [helper.make_node("Range", ["a", "b", "c"], ["y"], name="rg")], "g",
        [helper.make_tensor_value_info(n, I64, []) for n in "abc"],
        [helper.make_tensor_value_info("y", I64, [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    np.testing.assert_array_equal(run(m, np.int64(0), np.int64(5), np.int64(2))[0], [0, 2, 4])
    np.testing.assert_array_equal(run(m, np.int64(5), np.int64(-1), np.int64(-2))[0], [5, 3, 1])
    with pytest.raises(InputError, match="rg"):
        run(m, np.int64(0), np.int64(7), np.int64(2))


def test_normally_folded_ops_still_lower():
    # Shape, Size and ConstantOfShape fold per signature; their lowering must work regardless.
    from onnxjit.ir.graph import Graph, Model, Node, Value
    from onnxjit.ir.loop_eval import run_program
    from onnxjit.ir.types import TensorType
    from onnxjit.passes.lower_to_loops import Lowering

    x = Value(TensorType(DType.FLOAT, (2, 3)), "x")
    s, n = Value(TensorType(DType.INT64, (2,)), "s"), Value(TensorType(DType.INT64, ()), "n")
    c = Value(TensorType(DType.INT32, (2, 3)), "c")
    nodes = [Node("Shape", [x], [s], version=17), Node("Size", [x], [n], version=17),
             Node("ConstantOfShape", [s], [c], {"value": np.array([7], np.int32)}, version=17)]
    prog = Lowering(Model(Graph(nodes, [x], [s, n, c]), {"": 17})).run()
    got = run_program(prog, [np.zeros((2, 3), np.float32)])
    np.testing.assert_array_equal(got[0], [2, 3])
    assert got[1] == 6
    np.testing.assert_array_equal(got[2], np.full((2, 3), 7, np.int32))


def test_expand_and_gather_follow_symbolic_shapes():
    nodes = [helper.make_node("Shape", ["y"], ["s"]),
             helper.make_node("Gather", ["s", "idx"], ["t"]),
             helper.make_node("Expand", ["x", "t"], ["z"])]
    m = make(nodes, [("x", F, [1, 1]), ("y", F, ["a", 5, "b"])], outputs=[("z", F, 2)],
             inits={"idx": np.array([2, 0], np.int64)})
    (t,), _ = graph_types(m)
    assert t.shape == (Sym.var("b"), Sym.var("a"))
    z = run(m, np.full((1, 1), 3, np.float32), np.zeros((4, 5, 6), np.float32))[0]
    np.testing.assert_array_equal(z, np.full((6, 4), 3, np.float32))
