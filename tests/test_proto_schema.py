"""The project's ONNX schema: regenerates identically, matches onnx's wire format field for field,
and round-trips real models byte-identically."""

from __future__ import annotations

import glob
import importlib.util
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import onnx_ml_pb2 as ref

from onnxjit.proto import onnx_pb2 as P

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"


def _gen_proto():
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "tools" / "gen_proto.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_regenerated_descriptor_equals_committed_module():
    assert importlib.util.find_spec("grpc_tools") is not None, (
        "grpc_tools (grpcio-tools, in the test extra) is needed to regenerate onnx_pb2.py")
    gen = _gen_proto()
    fresh = gen.serialized_descriptor(gen.generate())
    committed = gen.serialized_descriptor((ROOT / "onnxjit/proto/onnx_pb2.py").read_text())
    assert fresh == committed, "onnx_pb2.py is stale: run python tools/gen_proto.py"
    assert committed == P.DESCRIPTOR.serialized_pb


def test_committed_module_has_no_runtime_version_pin():
    text = (ROOT / "onnxjit/proto/onnx_pb2.py").read_text()
    assert "runtime_version" not in text
    assert "ValidateProtobufRuntimeVersion" not in text


def test_postprocess_strips_the_pin():
    gen = _gen_proto()
    raw = ("# -*- coding: utf-8 -*-\n"
           "from google.protobuf import descriptor as _descriptor\n"
           "from google.protobuf import runtime_version as _runtime_version\n"
           "_runtime_version.ValidateProtobufRuntimeVersion(\n"
           "    _runtime_version.Domain.PUBLIC,\n    6,\n    31,\n    1,\n    '',\n"
           "    'x.proto'\n)\n"
           "DESCRIPTOR = 1\n")
    out = gen.postprocess(raw)
    assert "runtime_version" not in out
    assert out.startswith("# -*- coding: utf-8 -*-\n")
    assert "DESCRIPTOR = 1\n" in out and "import descriptor as _descriptor" in out


def test_own_package_and_file_name():
    assert P.DESCRIPTOR.package == "onnxjit_onnx"
    assert P.DESCRIPTOR.name == "onnxjit/proto/onnx.proto"
    assert P.DESCRIPTOR.name != ref.DESCRIPTOR.name


def _shape_of(desc) -> dict:
    """A comparable summary of a message descriptor: fields, nested types, enums, oneofs."""
    fields = {}
    for f in desc.fields:
        fields[f.number] = (f.name, f.type, f.is_repeated if hasattr(f, "is_repeated")
                            else f.label == f.LABEL_REPEATED,
                            getattr(f, "is_packed", None),
                            f.message_type.name if f.message_type else None,
                            f.enum_type.name if f.enum_type else None,
                            f.containing_oneof.name if f.containing_oneof else None)
    return {
        "fields": fields,
        "nested": {n.name: _shape_of(n) for n in desc.nested_types},
        "enums": {e.name: {v.name: v.number for v in e.values} for e in desc.enum_types},
    }


def test_every_message_and_enum_matches_onnx():
    ours, theirs = P.DESCRIPTOR, ref.DESCRIPTOR
    assert set(ours.message_types_by_name) == set(theirs.message_types_by_name)
    for name, desc in theirs.message_types_by_name.items():
        assert _shape_of(ours.message_types_by_name[name]) == _shape_of(desc), name
    assert set(ours.enum_types_by_name) == set(theirs.enum_types_by_name)
    for name, e in theirs.enum_types_by_name.items():
        mine = ours.enum_types_by_name[name]
        assert {v.name: v.number for v in mine.values} == {v.name: v.number for v in e.values}


def test_data_types_cover_0_to_28():
    assert sorted(P.TensorProto.DataType.values()) == list(range(29))
    assert P.TensorProto.FLOAT6E3M2 == 28 and P.TensorProto.FLOAT8E8M0 == 24


def _rich_model() -> onnx.ModelProto:
    """A model touching most message kinds: all attribute types, sparse tensors, functions,
    training info, metadata, value_info with symbolic dims, sequence/map/optional types."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    sp = helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.5], np.float32), "sv"),
                                   numpy_helper.from_array(np.array([4], np.int64), "si"),
                                   [2, 3])
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "body", [],
                             [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    node = helper.make_node(
        "Custom", ["x", ""], ["y"], domain="my.domain", name="n0",
        f=1.5, i=3, s="text", t=w, g=body, floats=[1.0, 2.0], ints=[1, -2], strings=["a", "b"],
        tensors=[w], graphs=[body], sparse_tensor=sp, sparse_tensors=[sp],
        tp=helper.make_tensor_type_proto(TensorProto.INT64, ["N", 2]),
        tps=[helper.make_sequence_type_proto(
            helper.make_tensor_type_proto(TensorProto.FLOAT, None))])
    ref_attr = helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT)
    fn = helper.make_function("my.domain", "Custom", ["x"], ["y"],
                              [helper.make_node("Relu", ["x"], ["y"])],
                              [helper.make_opsetid("", 18)], attributes=["alpha"])
    fn.node[0].attribute.append(ref_attr)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", None])],
        initializer=[w], sparse_initializer=[sp],
        value_info=[helper.make_value_info(
            "m", helper.make_map_type_proto(TensorProto.INT64, helper.make_optional_type_proto(
                helper.make_tensor_type_proto(TensorProto.FLOAT, [1]))))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("my.domain", 1)],
                              functions=[fn], producer_name="test")
    helper.set_model_props(model, {"k": "v"})
    model.training_info.add().algorithm.CopyFrom(body)
    return model


def _roundtrip(data: bytes) -> None:
    mine = P.ModelProto()
    mine.ParseFromString(data)
    assert mine.SerializeToString() == data
    # Nothing was parsed as an unknown field: the schema covers every field used.
    mine.DiscardUnknownFields()
    assert mine.SerializeToString() == data


def test_rich_model_roundtrips_byte_identically():
    _roundtrip(_rich_model().SerializeToString())


MODELS = sorted(glob.glob(str(DATA / "light" / "*.onnx"))
                + glob.glob(str(DATA / "simple" / "*" / "model.onnx")))


def test_backend_model_data_is_present():
    assert len(MODELS) >= 9, f"onnx backend test data not found under {DATA}"


@pytest.mark.parametrize("path", MODELS, ids=lambda p: os.path.basename(os.path.dirname(p))
                         if p.endswith("model.onnx") else os.path.basename(p))
def test_backend_models_roundtrip(path):
    data = onnx.load(path).SerializeToString()
    _roundtrip(data)
