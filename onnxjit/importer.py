"""The importer: ONNX protobuf (path, bytes or ModelProto) -> graph IR `Model`.

Algorithm: 1) read the bytes (a path, bytes, or any object with `SerializeToString`) and parse
them with the project's own schema (`onnxjit.proto`); 2) resolve the opset imports ("" and
"ai.onnx" are one domain); 3) import the main graph with a chain of lexical scopes
(`_Scope`): initializers, then inputs, then nodes in file order, each input name looked up
through the scope chain (inner to outer) so a subgraph sees its enclosing graphs' values as the
very same `Value` objects; subgraph attributes are imported when their node is reached, which
is when the ONNX IR spec says the outer names they use must already be defined; 4) import
model-local functions (not inlined here) and metadata.

SSA and order are checked on the way: a name used before the node defining it (or in a cycle),
a name never defined, and a name defined twice (also: a subgraph node output shadowing an outer
name, which the IR spec forbids) are ModelErrors naming the node and value. Types come from
ValueInfoProto (inputs, outputs, value_info). Tensor decoding is in `onnxjit.tensors`, external
data in `onnxjit.external_data`. Only these modules and `onnxjit.proto` touch protobuf.
"""

from __future__ import annotations

import os
from typing import Any

from google.protobuf.message import DecodeError

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.external_data import ExternalReader
from onnxjit.importer_graph import GraphImporter, import_type
from onnxjit.ir.graph import Function, Model
from onnxjit.model_source import is_model_text, model_hash, read_model_bytes
from onnxjit.proto import onnx_pb2 as P
from onnxjit.tensors import sparse_to_numpy, to_numpy

__all__ = ["load_model", "model_hash", "read_model_bytes", "parse_model", "import_type"]


def parse_model(data: bytes, name: str = "the model") -> P.ModelProto:
    """Parse serialized bytes as a ModelProto; ModelError if they are not one."""
    if not data:
        raise ModelError(f"{name} is empty (0 bytes)")
    proto = P.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelError(f"{name} is not a valid ONNX model (protobuf decoding failed: "
                         f"{e})") from None
    if not proto.HasField("graph"):
        raise ModelError(f"{name} is not a valid ONNX model: it has no graph")
    return proto


def load_model(src: Any, base_dir: str | os.PathLike | None = None) -> Model:
    """Import an ONNX model into the graph IR.

    `src` is a path (`.onnx`, or `.onnxtxt` for the textual syntax), bytes, an object with
    `SerializeToString()` (e.g. `onnx.ModelProto`, or what `onnxjit.parse` returns), or a str
    holding ONNX model text.
    External data is read relative to `base_dir`, which defaults to the model file's folder;
    models given as bytes/objects may use external data only when `base_dir` is given.
    """
    data, folder = read_model_bytes(src, base_dir)
    name = f"model file '{src}'" if isinstance(src, (str, os.PathLike)) else "the model"
    if isinstance(src, str) and is_model_text(src):
        name = "the model text"
    return import_proto(parse_model(data, name), folder)


def import_proto(proto: P.ModelProto, base_dir: str | os.PathLike | None = None) -> Model:
    """Import a parsed ModelProto (of `onnxjit.proto`); see `load_model`."""
    opsets = _opset_imports(proto.opset_import, proto.ir_version, "the model")
    if "com.microsoft" not in opsets and any(n.domain == "com.microsoft"
                                             for n in proto.graph.node):
        # onnxruntime runs its contrib ops unimported, and its optimizer writes models so.
        opsets["com.microsoft"] = 1
    local_domains = {f.domain for f in proto.functions}
    reader = ExternalReader(base_dir)
    gi = GraphImporter(opsets, reader, local_domains, legacy_inputs=0 < proto.ir_version <= 3)
    graph = gi.import_graph(proto.graph, None)
    functions = [_import_function(f, opsets, reader, local_domains) for f in proto.functions]
    seen: set[tuple[str, str, str]] = set()
    for f in functions:
        key = (f.domain, f.name, f.overload)
        if key in seen:
            raise ModelError(f"function '{f.domain}.{f.name}' is defined twice")
        seen.add(key)
    return Model(
        graph=graph, opset_imports=opsets, ir_version=proto.ir_version,
        producer_name=proto.producer_name, producer_version=proto.producer_version,
        domain=proto.domain, model_version=proto.model_version, doc=proto.doc_string,
        metadata={e.key: e.value for e in proto.metadata_props}, functions=functions)


def input_defaults(data: bytes, base_dir: str | os.PathLike | None = None
                   ) -> dict[str, Any]:
    """The default values of the main graph's inputs (initializers, dense or sparse, named like
    an input) straight from the serialized model, without importing the graph: a warm start
    from the disk cache needs only these. `data` is a model that imported successfully."""
    proto = parse_model(data)
    if 0 < proto.ir_version <= 3:  # initializers are constants, not inputs (`import_proto`)
        return {}
    names = {v.name for v in proto.graph.input}
    reader = ExternalReader(base_dir)
    out: dict[str, Any] = {t.name: to_numpy(t, reader) for t in proto.graph.initializer
                           if t.name in names}
    for s in proto.graph.sparse_initializer:
        if s.values.name in names:
            out[s.values.name] = sparse_to_numpy(s, reader)
    return out


def _opset_imports(entries: Any, ir_version: int, owner: str) -> dict[str, int]:
    from onnxjit.ir.opdef import MAX_OPSET

    out: dict[str, int] = {}
    for e in entries:
        domain = "" if e.domain == "ai.onnx" else e.domain
        if domain in out and out[domain] != e.version:
            raise ModelError(f"{owner} imports domain '{e.domain or 'ai.onnx'}' twice, at "
                             f"versions {out[domain]} and {e.version}")
        out[domain] = int(e.version)
    if not out and ir_version < 3:
        out[""] = 1  # before IR version 3 the default opset was implied (version 1)
    if out.get("", 0) > MAX_OPSET:
        raise UnsupportedError(f"{owner} imports ai.onnx opset {out['']}; onnxjit supports "
                               f"opsets up to {MAX_OPSET}")
    return out


def _import_function(f: P.FunctionProto, model_opsets: dict[str, int], reader: ExternalReader,
                     local_domains: set[str]) -> Function:
    owner = f"function '{f.domain}.{f.name}'" if f.domain else f"function '{f.name}'"
    own = _opset_imports(f.opset_import, 10, owner) if f.opset_import else {}
    # Domains the function does not import itself fall back to the model's imports.
    opsets = {**model_opsets, **own}
    gi = GraphImporter(opsets, reader, local_domains)
    body = gi.import_function_body(f, owner)
    defaults = {a.name: gi.attribute(a, owner) for a in f.attribute_proto}
    return Function(
        name=f.name, domain=f.domain, inputs=list(f.input), outputs=list(f.output),
        attributes=list(f.attribute) + [a.name for a in f.attribute_proto],
        attribute_defaults=defaults, body=body, opset_imports=own, overload=f.overload)
