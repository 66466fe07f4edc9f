"""Printing models, graphs, functions and nodes in the ONNX textual syntax.

Algorithm: a recursive walk over the protobuf messages that writes the layout of the onnx
reference printer (so the text reads the same and `onnx.parser` parses it), with these
differences, all so that parsing the text gives back the same model:

- tensors stored as `raw_data` are decoded (numpy) into the typed-field form the parser
  produces; sub-byte types print their packed bytes, as their `int32_data` holds them;
- floats print as the shortest decimal that reads back to the same float32/float64 (`-nan`
  keeps a sign), names that are not identifiers, or are type words, are quoted;
- function attribute defaults and value-infos are printed (the reference printer drops them);
- what the syntax cannot express (sparse tensors, attributes without a type) raises ModelError
  rather than printing something unparseable; doc strings of graphs, nodes and value-infos
  have no place in the syntax and are dropped (they do not change what a model computes).
"""

from __future__ import annotations

import math
import re

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.onnxtext.parse_attrs import ATTR_NAMES
from onnxjit.onnxtext.parse_types import FIELDS, PRIM_NAMES, PRIM_TYPES, TYPE_KEYWORDS
from onnxjit.proto import onnx_pb2 as P

A = P.AttributeProto
T = P.TensorProto
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = set(PRIM_TYPES) | set(TYPE_KEYWORDS) | {"inf", "infinity", "nan"}

# raw_data decoding: element type -> numpy dtype of the stored bytes.
_RAW_DTYPES = {
    T.INT8: np.int8, T.UINT8: np.uint8, T.BOOL: np.uint8, T.INT16: np.int16,
    T.UINT16: np.uint16, T.FLOAT16: np.uint16, T.BFLOAT16: np.uint16, T.INT32: np.int32,
    T.UINT32: np.uint32, T.INT64: np.int64, T.UINT64: np.uint64, T.FLOAT: np.float32,
    T.DOUBLE: np.float64, T.COMPLEX64: np.float32, T.COMPLEX128: np.float64,
    T.FLOAT8E4M3FN: np.uint8, T.FLOAT8E4M3FNUZ: np.uint8, T.FLOAT8E5M2: np.uint8,
    T.FLOAT8E5M2FNUZ: np.uint8, T.FLOAT8E8M0: np.uint8, T.INT4: np.uint8, T.UINT4: np.uint8,
    T.INT2: np.uint8, T.UINT2: np.uint8, T.FLOAT4E2M1: np.uint8, T.FLOAT6E2M3: np.uint8,
    T.FLOAT6E3M2: np.uint8,
}


def quote(s: str | bytes) -> str:
    """A string literal: backslash before '\\' and '"' (the parser's only escape rule)."""
    if isinstance(s, bytes):
        s = s.decode("utf-8", "surrogateescape")
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def name(s: str) -> str:
    """A value/graph/function name: bare when it is an identifier that is not a type word."""
    return s if _IDENT.match(s) and s not in _RESERVED else quote(s)


def fmt_float(v: float, double: bool = False) -> str:
    if math.isnan(v):
        return "-nan" if math.copysign(1.0, v) < 0 else "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v) if double else str(np.float32(v))


def _floats(values, double: bool = False) -> str:  # noqa: ANN001 - a repeated or an array
    return ",".join(fmt_float(float(v), double) for v in values)


class Printer:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.indent = 3

    def w(self, s: str) -> None:
        self.out.append(s)

    # -- types -------------------------------------------------------------------------------
    def type(self, tp: P.TypeProto) -> str:
        which = tp.WhichOneof("value")
        if which == "tensor_type" or which == "sparse_tensor_type":
            tt = getattr(tp, which)
            s = PRIM_NAMES.get(tt.elem_type)
            if s is None:
                raise ModelError(f"element type {tt.elem_type} has no name in the text syntax")
            if not tt.HasField("shape"):
                s += "[]"
            elif tt.shape.dim:
                s += "[" + ",".join(self.dim(d) for d in tt.shape.dim) + "]"
            return s if which == "tensor_type" else f"sparse_tensor({s})"
        if which == "sequence_type":
            return f"seq({self.type(tp.sequence_type.elem_type)})"
        if which == "optional_type":
            return f"optional({self.type(tp.optional_type.elem_type)})"
        if which == "map_type":
            key = PRIM_NAMES.get(tp.map_type.key_type, "undefined")
            return f"map({key}, {self.type(tp.map_type.value_type)})"
        if which == "opaque_type":
            o = tp.opaque_type
            inner = f"{o.domain},{o.name}" if o.domain else o.name
            return f"opaque({inner})"
        return ""

    @staticmethod
    def dim(d: P.TensorShapeProto.Dimension) -> str:
        which = d.WhichOneof("value")
        if which == "dim_value":
            return str(d.dim_value)
        if which == "dim_param":
            return d.dim_param if _IDENT.match(d.dim_param) else quote(d.dim_param)
        return "?"

    def value_info(self, vi: P.ValueInfoProto) -> str:
        t = self.type(vi.type) if vi.HasField("type") else ""
        return f"{t} {name(vi.name)}" if t else name(vi.name)

    # -- tensors -----------------------------------------------------------------------------
    def tensor(self, t: P.TensorProto, initializer: bool = False) -> str:
        s = PRIM_NAMES.get(t.data_type)
        if s is None:
            raise ModelError(f"tensor '{t.name}' has element type {t.data_type}, which the "
                             "text syntax cannot name")
        if t.dims:
            s += "[" + ",".join(str(d) for d in t.dims) + "]"
        if t.name:
            s += " " + name(t.name)
        if initializer:
            s += " ="
        if t.data_location == T.EXTERNAL:
            return s + " [" + ", ".join(f"{quote(e.key)}: {quote(e.value)}"
                                        for e in t.external_data) + "]"
        return s + " {" + self.tensor_values(t) + "}"

    def tensor_values(self, t: P.TensorProto) -> str:
        spec = FIELDS.get(t.data_type)
        if spec is None:
            raise ModelError(f"tensor '{t.name}' cannot be written as a literal")
        field = spec[0]
        if t.HasField("raw_data"):
            dtype = _RAW_DTYPES[t.data_type]
            if t.data_type == T.STRING:
                raise ModelError(f"string tensor '{t.name}' has raw_data")
            arr = np.frombuffer(t.raw_data, dtype=np.dtype(dtype).newbyteorder("<"))
            if field in ("float_data", "double_data"):
                return _floats(arr.tolist(), field == "double_data")
            return ",".join(str(int(v)) for v in arr.tolist())
        values = getattr(t, field)
        if field == "string_data":
            return ", ".join(quote(v) for v in values)
        if field in ("float_data", "double_data"):
            return _floats(values, field == "double_data")
        return ",".join(str(v) for v in values)

    # -- attributes and nodes ----------------------------------------------------------------
    def attribute(self, a: P.AttributeProto) -> str:
        tname = ATTR_NAMES.get(a.type)
        if tname is None:
            raise ModelError(f"attribute '{a.name}' has no type")
        head = f"{a.name}: {tname} = "
        if a.ref_attr_name:
            return head + "@" + name(a.ref_attr_name)
        t = a.type
        if t == A.INT:
            return head + str(a.i)
        if t == A.FLOAT:
            return head + fmt_float(a.f)
        if t == A.STRING:
            return head + quote(a.s)
        if t == A.INTS:
            return head + "[" + ", ".join(str(v) for v in a.ints) + "]"
        if t == A.FLOATS:
            return head + "[" + ", ".join(fmt_float(v) for v in a.floats) + "]"
        if t == A.STRINGS:
            return head + "[" + ", ".join(quote(v) for v in a.strings) + "]"
        if t == A.TENSOR:
            return head + self.tensor(a.t)
        if t == A.TENSORS:
            return head + "[" + ", ".join(self.tensor(v) for v in a.tensors) + "]"
        if t == A.TYPE_PROTO:
            return head + self.type(a.tp)
        if t == A.TYPE_PROTOS:
            return head + "[" + ", ".join(self.type(v) for v in a.type_protos) + "]"
        if t in (A.GRAPH, A.GRAPHS):
            self.indent += 3
            try:
                if t == A.GRAPH:
                    return head + self.graph_text(a.g)
                return head + "[" + ", ".join(self.graph_text(g) for g in a.graphs) + "]"
            finally:
                self.indent -= 3
        raise ModelError(f"attribute '{a.name}' of type {tname} has no text form")

    def node(self, n: P.NodeProto) -> None:
        s = " " * self.indent
        if n.HasField("name"):
            s += f"[{name(n.name) if n.name else quote('')}] "
        s += ", ".join(name(o) if o else '""' for o in n.output)
        s += " = " + (n.domain + "." if n.domain else "") + n.op_type
        if n.overload:
            s += ":" + n.overload
        attrs = ""
        if n.attribute:
            attrs = " <" + ", ".join(self.attribute(a) for a in n.attribute) + ">"
        # Graph-valued attributes read better after the inputs, as the reference printer does.
        subgraph = any(a.HasField("g") or a.graphs for a in n.attribute)
        inputs = " (" + ", ".join(name(i) if i else '""' for i in n.input) + ")"
        s += inputs + attrs if subgraph else attrs + inputs
        self.w(s + "\n")

    def nodes(self, nodes) -> None:  # noqa: ANN001 - repeated NodeProto
        self.w("{\n")
        for n in nodes:
            self.node(n)
        self.w(" " * (self.indent - 3) + "}")

    # -- graphs, functions, models -----------------------------------------------------------
    def graph_text(self, g: P.GraphProto) -> str:
        sub = Printer()
        sub.indent = self.indent
        sub.graph(g)
        return "".join(sub.out)

    def graph(self, g: P.GraphProto) -> None:
        if g.sparse_initializer:
            raise ModelError(f"graph '{g.name}' has sparse initializers, which the text syntax "
                             "cannot express")
        self.w(f"{name(g.name)} (" + ", ".join(self.value_info(v) for v in g.input) + ") => ("
               + ", ".join(self.value_info(v) for v in g.output) + ") ")
        items = [self.tensor(t, True) for t in g.initializer]
        items += [self.value_info(v) for v in g.value_info]
        if items:
            self.w("\n" + " " * self.indent + "<" + ", ".join(items) + ">\n")
        self.nodes(g.node)

    def function(self, f: P.FunctionProto) -> None:
        head = [f"domain: {quote(f.domain)}"]
        if f.overload:
            head.append(f"overload: {quote(f.overload)}")
        head.append("opset_import: [" + ", ".join(f"{quote(o.domain)} : {o.version}"
                                                  for o in f.opset_import) + "]")
        if f.doc_string:
            head.append(f"doc_string: {quote(f.doc_string)}")
        self.w("<\n  " + ",\n  ".join(head) + "\n>\n" + name(f.name) + " ")
        params = [name(a) for a in f.attribute] + [self.attribute(a) for a in f.attribute_proto]
        if params:
            self.w("<" + ", ".join(params) + ">")
        self.w("(" + ", ".join(name(i) for i in f.input) + ") => ("
               + ", ".join(name(o) for o in f.output) + ")")
        if f.value_info:
            self.w(" <" + ", ".join(self.value_info(v) for v in f.value_info) + ">")
        self.w("\n")
        self.nodes(f.node)

    def model(self, m: P.ModelProto) -> None:
        head = [f"ir_version: {m.ir_version}",
                "opset_import: [" + ", ".join(f"{quote(o.domain)} : {o.version}"
                                              for o in m.opset_import) + "]"]
        for key in ("producer_name", "producer_version", "domain"):
            if m.HasField(key):
                head.append(f"{key}: {quote(getattr(m, key))}")
        if m.HasField("model_version"):
            head.append(f"model_version: {m.model_version}")
        if m.HasField("doc_string"):
            head.append(f"doc_string: {quote(m.doc_string)}")
        if m.metadata_props:
            head.append("metadata_props: [" + ", ".join(
                f"{quote(e.key)}: {quote(e.value)}" for e in m.metadata_props) + "]")
        self.w("<\n   " + ",\n   ".join(head) + "\n>\n")
        self.graph(m.graph)
        for f in m.functions:
            self.w("\n")
            self.function(f)
