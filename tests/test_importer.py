"""The importer: protobuf -> graph IR, on models built with onnx.helper and the backend data."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.importer import load_model, model_hash
from onnxjit.ir.graph import AttrRef, Graph, TypeAttr
from onnxjit.ir.opdef import MAX_OPSET
from onnxjit.ir.types import (
    DType,
    MapType,
    OptionalType,
    SequenceType,
    SparseTensorType,
    Sym,
    TensorType,
)

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
F = TensorProto.FLOAT


def vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, opset=18, **kw):
    opsets = kw.pop("opsets", None) or [helper.make_opsetid("", opset)]
    g = helper.make_graph(nodes, "g", inputs, outputs, **kw)
    return helper.make_model(g, opset_imports=opsets)


def relu_model():
    return model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                 [vi("x", F, ["N", 3])], [vi("y", F, ["N", 3])])


# ---------------------------------------------------------------------------------- sources


def test_sources_path_bytes_object(tmp_path):
    m = relu_model()
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    for src in (str(p), p, m.SerializeToString(), bytearray(m.SerializeToString()), m):
        g = load_model(src).graph
        assert [n.op for n in g.nodes] == ["Relu"]
        assert g.inputs[0].name == "x" and g.outputs[0].name == "y"
        assert g.nodes[0].outputs[0] is g.outputs[0]
        assert g.nodes[0].inputs[0] is g.inputs[0]


def test_metadata_and_opsets():
    m = relu_model()
    m.producer_name, m.producer_version, m.model_version, m.doc_string = "p", "1.2", 7, "doc"
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    helper.set_model_props(m, {"author": "me"})
    got = load_model(m)
    assert got.opset_imports == {"": 18, "com.microsoft": 1}
    assert got.ir_version == m.ir_version
    assert (got.producer_name, got.producer_version, got.model_version, got.doc) == \
        ("p", "1.2", 7, "doc")
    assert got.metadata == {"author": "me"}
    assert got.graph.nodes[0].version == 18


def test_ai_onnx_domain_is_default_domain():
    m = model([helper.make_node("Relu", ["x"], ["y"], domain="ai.onnx")], [vi("x")], [vi("y")],
              opsets=[helper.make_opsetid("ai.onnx", 13)])
    got = load_model(m)
    assert got.opset_imports == {"": 13}
    assert got.graph.nodes[0].version == 13 and got.graph.nodes[0].domain == ""


# ---------------------------------------------------------------------------------- types


def test_value_types_symbolic_dims_and_value_info():
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])]
    m = model(nodes, [vi("x", F, ["N", 3, None])], [vi("y", F, None)],
              value_info=[vi("h", F, ["N", 3, 5])])
    g = load_model(m).graph
    assert g.inputs[0].type == TensorType(DType.FLOAT, (Sym.var("N"), 3, None))
    assert g.nodes[0].outputs[0].type == TensorType(DType.FLOAT, (Sym.var("N"), 3, 5))
    assert g.outputs[0].type == TensorType(DType.FLOAT, None)


def test_sequence_optional_map_sparse_types():
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.INT64, [2]))
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, []))
    mp = helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(F, None))
    sp = helper.make_sparse_tensor_type_proto(F, [4, 4])
    ins = [helper.make_value_info(n, t) for n, t in
           (("s", seq), ("o", opt), ("m", mp), ("p", sp))]
    m = model([helper.make_node("Identity", ["s"], ["y"])], ins,
              [helper.make_value_info("y", seq)])
    g = load_model(m).graph
    assert [v.type for v in g.inputs] == [
        SequenceType(TensorType(DType.INT64, (2,))),
        OptionalType(TensorType(DType.FLOAT, ())),
        MapType(DType.STRING, TensorType(DType.FLOAT, None)),
        SparseTensorType(DType.FLOAT, (4, 4)),
    ]


# ---------------------------------------------------------------------------------- initializers


def test_initializers_and_input_defaults():
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    b = numpy_helper.from_array(np.array([1, 2, 3], np.float32), "b")
    nodes = [helper.make_node("Add", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
    m = model(nodes, [vi("x", F, [2, 3]), vi("b", F, ["K"])], [vi("y", F, [2, 3])],
              initializer=[w, b])
    g = load_model(m).graph
    assert [v.name for v in g.inputs] == ["x", "b"]
    assert [v.name for v in g.initializers] == ["w"]
    np.testing.assert_array_equal(g.initializers[0].const, np.arange(6).reshape(2, 3))
    assert g.initializers[0].type == TensorType(DType.FLOAT, (2, 3))
    bv = g.inputs[1]
    np.testing.assert_array_equal(bv.const, [1, 2, 3])
    assert bv.type == TensorType(DType.FLOAT, (Sym.var("K"),))  # the declared input type
    assert g.nodes[0].inputs[1] is g.initializers[0] and g.nodes[1].inputs[1] is bv


def test_sparse_initializer_is_densified():
    vals = numpy_helper.from_array(np.array([5.0, 7.0], np.float32), "sp")
    idx = numpy_helper.from_array(np.array([1, 5], np.int64), "sp_idx")
    idx2 = numpy_helper.from_array(np.array([[0, 1], [1, 2]], np.int64), "i2")
    s1 = helper.make_sparse_tensor(vals, idx, [2, 3])
    vals2 = numpy_helper.from_array(np.array([1, 2], np.int64), "sp2")
    s2 = helper.make_sparse_tensor(vals2, idx2, [2, 3])
    nodes = [helper.make_node("Add", ["sp", "x"], ["y"]),
             helper.make_node("Identity", ["sp2"], ["z"])]
    m = model(nodes, [vi("x", F, [2, 3])], [vi("y"), vi("z", TensorProto.INT64)],
              sparse_initializer=[s1, s2])
    g = load_model(m).graph
    consts = {v.name: v.const for v in g.initializers}
    np.testing.assert_array_equal(consts["sp"], [[0, 5, 0], [0, 0, 7]])
    np.testing.assert_array_equal(consts["sp2"], [[0, 1, 0], [0, 0, 2]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint8, np.int16,
                                   np.uint16, np.int32, np.int64, np.uint32, np.uint64,
                                   np.bool_, np.float16, np.complex64, np.complex128])
@pytest.mark.parametrize("raw", [True, False])
def test_tensor_data_fields(dtype, raw):
    arr = (np.arange(-3, 3).reshape(2, 3) % 5).astype(dtype)
    if raw:
        t = numpy_helper.from_array(arr, "c")
    else:
        onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        t = helper.make_tensor("c", onnx_type, arr.shape, arr.flatten().tolist())
        assert not t.HasField("raw_data")
    m = model([helper.make_node("Identity", ["c"], ["y"])], [], [vi("y", t.data_type)],
              initializer=[t])
    got = load_model(m).graph.initializers[0].const
    assert got.dtype == np.dtype(dtype) and got.shape == (2, 3)
    np.testing.assert_array_equal(got, arr)


def test_string_tensor_and_scalar():
    t = helper.make_tensor("s", TensorProto.STRING, [2], [b"ab", b"\xff"])
    c = numpy_helper.from_array(np.array(2.5, np.float64), "c")
    m = model([helper.make_node("Identity", ["s"], ["y"])], [],
              [vi("y", TensorProto.STRING)], initializer=[t, c])
    inits = {v.name: v.const for v in load_model(m).graph.initializers}
    assert inits["s"].dtype == object and list(inits["s"]) == ["ab", "\udcff"]
    assert inits["c"].shape == () and inits["c"] == 2.5


def test_unsupported_element_type_names_tensor():
    t = helper.make_tensor("q", TensorProto.FLOAT6E2M3, [2], [1, 2])
    m = model([helper.make_node("Identity", ["q"], ["y"])], [], [vi("y")], initializer=[t])
    with pytest.raises(UnsupportedError, match="'q'.*FLOAT6E2M3"):
        load_model(m)


# ---------------------------------------------------------------------------------- attributes


def test_all_attribute_kinds():
    w = np.arange(4, dtype=np.int64)
    sp = helper.make_sparse_tensor(numpy_helper.from_array(np.array([3.0], np.float32), "v"),
                                   numpy_helper.from_array(np.array([2], np.int64), "i"), [4])
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "body", [],
                             [vi("b")])
    node = helper.make_node(
        "Custom", ["x"], ["y"], domain="my", name="n",
        f=0.5, i=-3, s="héllo", raw=b"\xff\xfe", t=numpy_helper.from_array(w), g=body,
        fs=[1.0, 2.5], is_=[1, 2], ss=["a", "b"], ts=[numpy_helper.from_array(w)],
        gs=[body, body], st=sp, sts=[sp], tp=helper.make_tensor_type_proto(F, ["N"]),
        tps=[helper.make_tensor_type_proto(TensorProto.INT64, [])])
    m = model([node], [vi("x")], [vi("y")],
              opsets=[helper.make_opsetid("", 18), helper.make_opsetid("my", 2)])
    n = load_model(m).graph.nodes[0]
    a = n.attrs
    assert n.version == 2 and n.domain == "my" and n.name == "n"
    assert a["f"] == 0.5 and isinstance(a["f"], float)
    assert a["i"] == -3 and a["s"] == "héllo" and a["raw"] == b"\xff\xfe"
    np.testing.assert_array_equal(a["t"], w)
    assert isinstance(a["g"], Graph) and a["g"].nodes[0].op == "Identity"
    assert a["fs"] == (1.0, 2.5) and a["is_"] == (1, 2) and a["ss"] == ("a", "b")
    assert len(a["ts"]) == 1 and len(a["gs"]) == 2 and all(isinstance(g, Graph) for g in a["gs"])
    np.testing.assert_array_equal(a["st"], [0, 0, 3, 0])
    np.testing.assert_array_equal(a["sts"][0], [0, 0, 3, 0])
    assert a["tp"] == TypeAttr(TensorType(DType.FLOAT, (Sym.var("N"),)))
    assert a["tps"] == (TypeAttr(TensorType(DType.INT64, ())),)
    # The subgraph's outer reference resolves to the outer value itself.
    g = load_model(m).graph
    assert g.nodes[0].attrs["g"].nodes[0].inputs[0] is g.inputs[0]


def test_attribute_without_type_is_an_error():
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    node.attribute.add().name = "bad"
    m = model([node], [vi("x")], [vi("y")])
    with pytest.raises(ModelError, match="'r'.*attribute 'bad'.*no type"):
        load_model(m)


def test_duplicate_attribute_is_an_error():
    node = helper.make_node("Relu", ["x"], ["y"], name="r", alpha=1)
    node.attribute.append(helper.make_attribute("alpha", 2))
    with pytest.raises(ModelError, match="'alpha' is given twice"):
        load_model(model([node], [vi("x")], [vi("y")]))


# ---------------------------------------------------------------------------------- subgraphs


def test_if_subgraphs_see_outer_values():
    then_g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"])], "then", [],
                               [vi("t")])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "w"], ["e"])], "else", [],
                               [vi("e")])
    w = numpy_helper.from_array(np.ones(3, np.float32), "w")
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    m = model(nodes, [vi("c", TensorProto.BOOL, []), vi("x", F, [3])], [vi("y", F, [3])],
              initializer=[w])
    g = load_model(m).graph
    then = g.nodes[0].attrs["then_branch"]
    assert then.nodes[0].inputs[0] is g.inputs[1]
    assert then.nodes[0].inputs[1] is g.initializers[0]
    assert then.outputs[0] is then.nodes[0].outputs[0]
    assert sorted(r.name for r in g.nodes[0].regions()) == ["else", "then"]


def test_loop_body_inputs_and_nested_scopes():
    inner = helper.make_graph([helper.make_node("Mul", ["v", "x"], ["m"])], "inner", [],
                              [vi("m")])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("If", ["cond"], ["v_out"], then_branch=inner, else_branch=inner)],
        "body", [vi("iter", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []), vi("v")],
        [vi("cond_out", TensorProto.BOOL, []), vi("v_out")])
    nodes = [helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)]
    m = model(nodes, [vi("n", TensorProto.INT64, []), vi("x")], [vi("y")])
    g = load_model(m).graph
    loop = g.nodes[0]
    assert loop.inputs[1] is None
    b = loop.attrs["body"]
    assert [v.name for v in b.inputs] == ["iter", "cond", "v"]
    mul = b.nodes[1].attrs["then_branch"].nodes[0]
    assert mul.inputs[0] is b.inputs[2] and mul.inputs[1] is g.inputs[1]


def test_subgraph_output_shadowing_outer_name_is_an_error():
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["x"])], "then", [], [vi("x")])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=then_g)]
    m = model(nodes, [vi("c", TensorProto.BOOL, []), vi("x")], [vi("y")])
    with pytest.raises(ModelError, match="shadows"):
        load_model(m)


# ---------------------------------------------------------------------------------- errors


def test_bad_bytes_empty_and_missing(tmp_path):
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        load_model(b"\xff\xff\xff\xff garbage")
    with pytest.raises(ModelError, match="empty"):
        load_model(b"")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelError, match="empty"):
        load_model(empty)
    with pytest.raises(ModelError, match="does not exist"):
        load_model(tmp_path / "nope.onnx")
    with pytest.raises(ModelError, match="folder"):
        load_model(tmp_path)
    with pytest.raises(ModelError, match="no graph"):
        load_model(helper.make_opsetid("", 1).SerializeToString() * 0 + b"\x08\x07")
    with pytest.raises(ModelError, match="expected a path"):
        load_model(12)


def test_cycle_or_wrong_order():
    nodes = [helper.make_node("Relu", ["h"], ["y"], name="first"),
             helper.make_node("Relu", ["x"], ["h"], name="second")]
    with pytest.raises(ModelError, match="'first'.*'h'.*'second'.*topological order"):
        load_model(model(nodes, [vi("x")], [vi("y")]))
    cyc = [helper.make_node("Add", ["x", "b"], ["a"], name="A"),
           helper.make_node("Relu", ["a"], ["b"], name="B")]
    with pytest.raises(ModelError, match="cycle"):
        load_model(model(cyc, [vi("x")], [vi("b")]))


def test_undefined_value():
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    with pytest.raises(ModelError, match="'add'.*'ghost'.*undefined value"):
        load_model(model(nodes, [vi("x")], [vi("y")]))
    with pytest.raises(ModelError, match="graph output 'nope'"):
        load_model(model([], [vi("x")], [vi("nope")]))


def test_duplicate_definitions():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="one"),
             helper.make_node("Neg", ["x"], ["y"], name="two")]
    with pytest.raises(ModelError, match="'y' is defined twice.*'one'.*'two'"):
        load_model(model(nodes, [vi("x")], [vi("y")]))
    nodes = [helper.make_node("Relu", ["x"], ["x"], name="over")]
    with pytest.raises(ModelError, match="'x' is defined twice.*graph input.*'over'"):
        load_model(model(nodes, [vi("x")], [vi("x")]))


def test_domain_not_imported_and_opset_too_new():
    nodes = [helper.make_node("Foo", ["x"], ["y"], domain="com.acme", name="foo")]
    with pytest.raises(ModelError, match="'foo'.*domain 'com.acme' is not imported"):
        load_model(model(nodes, [vi("x")], [vi("y")]))
    with pytest.raises(UnsupportedError, match=f"opset {MAX_OPSET + 1}"):
        load_model(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x")], [vi("y")],
                         opset=MAX_OPSET + 1))


def test_bad_tensor_length_and_dims():
    t = helper.make_tensor("w", F, [2, 3], [1.0] * 6)
    del t.float_data[5]
    m = model([helper.make_node("Identity", ["w"], ["y"])], [], [vi("y")], initializer=[t])
    with pytest.raises(ModelError, match="'w'.*5 entries.*need 6"):
        load_model(m)
    t = m.graph.initializer[0]  # the graph holds a copy
    t.ClearField("float_data")
    t.raw_data = b"\0" * 8
    with pytest.raises(ModelError, match="'w'.*8 bytes.*need 24"):
        load_model(m)
    t.ClearField("dims")
    t.dims.extend([2, -4])
    with pytest.raises(ModelError, match="'w'.*negative"):
        load_model(m)
    t.ClearField("dims")
    t.dims.extend([1 << 40, 1 << 40])
    with pytest.raises(ModelError, match="'w'.*overflows"):
        load_model(m)
    t.ClearField("dims")
    t.data_type = 0
    with pytest.raises(ModelError, match="'w'.*UNDEFINED"):
        load_model(m)
    t.data_type = 99
    with pytest.raises(ModelError, match="'w'.*unknown element type 99"):
        load_model(m)


def test_bad_sparse_indices():
    s = helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.0], np.float32), "s"),
                                  numpy_helper.from_array(np.array([9], np.int64), "i"), [2, 3])
    m = model([helper.make_node("Identity", ["s"], ["y"])], [], [vi("y")],
              sparse_initializer=[s])
    with pytest.raises(ModelError, match="'s'.*outside"):
        load_model(m)


def test_huge_sparse_tensor_is_refused_not_allocated():
    s = helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.0], np.float32), "s"),
                                  numpy_helper.from_array(np.array([0], np.int64), "i"),
                                  [1 << 30, 1 << 30])
    m = model([helper.make_node("Identity", ["s"], ["y"])], [], [vi("y")],
              sparse_initializer=[s])
    with pytest.raises(UnsupportedError, match="'s'.*GiB"):
        load_model(m)


def test_mutated_bytes_raise_only_onnxjit_errors():
    """Corrupted models (bytes flipped, cut, inserted) never crash the importer."""
    import random

    from onnxjit.errors import OnnxJitError

    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    sp = helper.make_sparse_tensor(numpy_helper.from_array(np.array([2.0], np.float32), "sp"),
                                   numpy_helper.from_array(np.array([1], np.int64), "i"), [4])
    then_g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"])], "then", [],
                               [vi("t", F, [2, 3])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=then_g,
                            name="if")
    base = model([node, helper.make_node("Identity", ["sp"], ["z"], name="id")],
                 [vi("c", TensorProto.BOOL, []), vi("x", F, ["N", 3])], [vi("y"), vi("z")],
                 initializer=[w], sparse_initializer=[sp]).SerializeToString()
    rng = random.Random(1234)
    for _ in range(1500):
        b = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(b))
            r = rng.random()
            if r < 0.6:
                b[pos] = rng.randrange(256)
            elif r < 0.8:
                del b[pos:pos + rng.randint(1, 8)]
            else:
                b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        try:
            load_model(bytes(b))
        except OnnxJitError:
            pass


# ---------------------------------------------------------------------------------- functions


def test_functions_are_imported_not_inlined():
    fbody = [helper.make_node("Constant", [], ["a"], value_float=2.0),
             helper.make_node("Mul", ["x", "a"], ["t"]),
             helper.make_node("LeakyRelu", ["t"], ["y"])]
    fbody[2].attribute.append(helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT))
    fn = helper.make_function("local", "Scale", ["x"], ["y"], fbody,
                              [helper.make_opsetid("", 17)], attributes=["alpha"])
    fn.attribute_proto.append(helper.make_attribute("beta", 3))
    nodes = [helper.make_node("Scale", ["x"], ["y"], domain="local", alpha=0.1)]
    m = helper.make_model(helper.make_graph(nodes, "g", [vi("x")], [vi("y")]),
                          opset_imports=[helper.make_opsetid("", 18),
                                         helper.make_opsetid("local", 1)], functions=[fn])
    got = load_model(m)
    assert [n.op for n in got.graph.nodes] == ["Scale"]
    (f,) = got.functions
    assert (f.name, f.domain, f.inputs, f.outputs) == ("Scale", "local", ["x"], ["y"])
    assert f.attributes == ["alpha", "beta"] and f.attribute_defaults == {"beta": 3}
    assert f.opset_imports == {"": 17}
    assert [v.name for v in f.body.inputs] == ["x"] and f.body.inputs[0].type is None
    assert [n.op for n in f.body.nodes] == ["Constant", "Mul", "LeakyRelu"]
    assert f.body.nodes[1].version == 17
    assert f.body.nodes[2].attrs["alpha"] == AttrRef("alpha", "float")
    assert f.body.outputs[0] is f.body.nodes[2].outputs[0]


# ---------------------------------------------------------------------------------- hashing


def test_model_hash(tmp_path):
    m = relu_model()
    data, digest = model_hash(m)
    assert data == m.SerializeToString() and len(digest) == 64
    p = tmp_path / "m.onnx"
    p.write_bytes(data)
    assert model_hash(p) == (data, digest)
    m.producer_name = "other"
    assert model_hash(m)[1] != digest


# ---------------------------------------------------------------------------------- real models


BACKEND_MODELS = sorted(glob.glob(str(DATA / "light" / "*.onnx"))
                        + glob.glob(str(DATA / "simple" / "*" / "model.onnx")))


def test_backend_model_data_is_present():
    # The onnx package of the test extra ships these; without them the test below would
    # silently have no cases.
    assert len(BACKEND_MODELS) >= 9, f"onnx backend test data not found under {DATA}"


@pytest.mark.parametrize("path", BACKEND_MODELS,
                         ids=lambda p: os.path.basename(os.path.dirname(p))
                         if p.endswith("model.onnx") else os.path.basename(p))
def test_backend_models_import(path):
    proto = onnx.load(path)
    got = load_model(path)
    g = got.graph
    assert len(g.nodes) == len(proto.graph.node)
    assert g.output_names == [o.name for o in proto.graph.output]
    inits = {t.name for t in proto.graph.initializer}
    legacy = proto.ir_version <= 3  # initializers listed as inputs are constants, not inputs
    assert [v.name for v in g.inputs] == [i.name for i in proto.graph.input
                                          if not (legacy and i.name in inits)]
    n_init = len(proto.graph.initializer) + len(proto.graph.sparse_initializer)
    assert len(g.initializers) + sum(v.const is not None for v in g.inputs) == n_init
    for v in g.initializers:
        assert v.const is not None
