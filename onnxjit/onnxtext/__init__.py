"""The ONNX textual syntax (spec/003_...): parse text into the project's protobuf messages and
print them back.

    model = onnxjit.parse('''
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[N, 4] X) => (float[N, 4] Y) { Y = Relu(X) }
    ''')
    fn = onnxjit.compile(model)
    text = onnxjit.to_text(model)          # parse(text) is the same model

`parse` gives a ModelProto, `parse_graph` a GraphProto, `parse_function` a FunctionProto and
`parse_node` a NodeProto (of `onnxjit.proto.onnx_pb2`, wire-compatible with onnx). Syntax errors
are one-line `ModelError`s naming line, column, the offending token and what was expected.

Modules: `lexer` (tokens, positions, errors), `parse_types` (types, literals, tensors),
`parse_attrs` (attributes), `parse_model` (nodes, graphs, functions, models; a module named
`parse_graph` would shadow the function of that name once imported), `printer`.
"""

from __future__ import annotations

from typing import Any

from onnxjit.errors import ModelError

__all__ = ["parse", "parse_graph", "parse_function", "parse_node", "to_text"]


def _parser(text: str):  # noqa: ANN202 - GraphParser, imported lazily
    from onnxjit.onnxtext.parse_model import GraphParser

    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ModelError(f"ONNX text is not valid UTF-8: {e}") from None
    return GraphParser(text)


def parse(text: str) -> Any:
    """Parse a model (`<header> graph function*`) into an `onnxjit.proto` ModelProto."""
    return _parser(text).model()


def parse_graph(text: str) -> Any:
    """Parse a graph (`name (inputs) => (outputs) {nodes}`) into a GraphProto."""
    return _parser(text).graph()


def parse_function(text: str) -> Any:
    """Parse a function (`<header> name <attrs> (inputs) => (outputs) {nodes}`)."""
    return _parser(text).single_function()


def parse_node(text: str) -> Any:
    """Parse a single node (`outs = domain.Op <attrs> (inputs)`) into a NodeProto."""
    return _parser(text).single_node()


def to_text(proto: Any) -> str:
    """Print a ModelProto, GraphProto, FunctionProto or NodeProto in the textual syntax.

    Accepts the project's messages or any protobuf object with `SerializeToString` (e.g. an
    `onnx.ModelProto`; its bytes are re-read into the project's schema by message type name).
    """
    from onnxjit.onnxtext.printer import Printer
    from onnxjit.proto import onnx_pb2 as P

    kinds = {"ModelProto": P.ModelProto, "GraphProto": P.GraphProto,
             "FunctionProto": P.FunctionProto, "NodeProto": P.NodeProto}
    kind = type(proto).__name__
    if kind not in kinds or not hasattr(proto, "SerializeToString"):
        raise ModelError(f"to_text expects a ModelProto, GraphProto, FunctionProto or "
                         f"NodeProto, not {kind}")
    cls = kinds[kind]
    if not isinstance(proto, cls):
        msg = cls()
        try:
            msg.ParseFromString(proto.SerializeToString())
        except Exception as e:  # protobuf's DecodeError; this module does not import protobuf
            raise ModelError(f"cannot read the {kind}: {e}") from None
        proto = msg
    p = Printer()
    if kind == "ModelProto":
        p.model(proto)
    elif kind == "GraphProto":
        p.graph(proto)
    elif kind == "FunctionProto":
        p.function(proto)
    else:
        p.indent = 0
        p.node(proto)
    text = "".join(p.out)
    return text if text.endswith("\n") else text + "\n"


