"""Attributes of the ONNX textual syntax.

Grammar (spec/003_...):

    attr              ::= id (':' attr-type)? '=' attr-value
    attr-value        ::= single-attr-value | '[' single-attr-value (',' ...)* ']'
    single-attr-value ::= tensor-constant | graph | prim-constant | type | '@' id
    tensor-constant   ::= tensor-type (id)? ('=')? '{' prim-constants '}'

Algorithm: a single value is classified by its first token, as the onnx reference parser
does: a type name starts a tensor constant when a `{`, `=` or a name follows the type, else it
is a type-proto value; `inf`/`nan` are floats; any other identifier starts a graph; `@` is a
reference to an attribute of the enclosing function; literals are ints, floats or strings. An
explicit `: type` fixes the type (an int literal then reads as a float where a float is
expected); without one, a list's type comes from its elements (ints and floats mixed read as
floats) and an empty list needs the annotation. Unlike the reference parser, lists of tensors,
graphs and types are kept (it drops them).
"""

from __future__ import annotations

from onnxjit.onnxtext.parse_types import FLOAT_WORDS, TypeParser, encode_str
from onnxjit.proto import onnx_pb2 as P

A = P.AttributeProto
ATTR_TYPES: dict[str, int] = {
    "float": A.FLOAT, "int": A.INT, "string": A.STRING, "tensor": A.TENSOR, "graph": A.GRAPH,
    "sparse_tensor": A.SPARSE_TENSOR, "type_proto": A.TYPE_PROTO, "floats": A.FLOATS,
    "ints": A.INTS, "strings": A.STRINGS, "tensors": A.TENSORS, "graphs": A.GRAPHS,
    "sparse_tensors": A.SPARSE_TENSORS, "type_protos": A.TYPE_PROTOS,
}
ATTR_NAMES: dict[int, str] = {v: k for k, v in ATTR_TYPES.items()}
LIST_OF: dict[int, int] = {A.FLOAT: A.FLOATS, A.INT: A.INTS, A.STRING: A.STRINGS,
                           A.TENSOR: A.TENSORS, A.GRAPH: A.GRAPHS,
                           A.SPARSE_TENSOR: A.SPARSE_TENSORS, A.TYPE_PROTO: A.TYPE_PROTOS}
ELEM_OF: dict[int, int] = {v: k for k, v in LIST_OF.items()}


class AttrParser(TypeParser):
    """Attribute lists; `parse_graph_body` is supplied by `GraphParser`."""

    def parse_graph_body(self) -> P.GraphProto:  # pragma: no cover - overridden
        raise NotImplementedError

    def attr_list(self, attrs, close: str = ">") -> None:  # noqa: ANN001 - repeated field
        """'<' attr (',' attr)* '>' with the '<' already consumed."""
        seen: set[str] = set()
        while True:
            name_at = self.i
            name = self.ident("an attribute name")
            if name in seen:
                self.error_here(f"duplicate attribute '{name}'", at=name_at)
            seen.add(name)
            self.attr_after_name(attrs.add(), name)
            if not self.accept(","):
                break
        self.expect(close, "closing the attribute list (or ',' between attributes)")

    def attr_after_name(self, attr: P.AttributeProto, name: str) -> None:
        """[':' type] '=' value, for an attribute whose name was just read."""
        attr.name = name
        declared = A.UNDEFINED
        if self.accept(":"):
            tname = self.ident("an attribute type (int, float, string, tensor, graph, ints, "
                               "floats, strings, tensors, graphs, type_proto, ...)")
            if tname not in ATTR_TYPES:
                self.error("an attribute type (int, float, string, tensor, graph, ints, "
                           "floats, strings, tensors, graphs, type_proto, ...)", at=self.i - 1)
            declared = ATTR_TYPES[tname]
        self.expect("=", f"after attribute '{name}'")
        if self.at("["):
            self._list_value(attr, declared)
            return
        value_at = self.i
        if declared in ELEM_OF:
            self.error_here(f"attribute '{name}' is declared {ATTR_NAMES[declared]}: its value "
                            "must be a list '[...]'")
        self._single(attr, declared)
        if declared != A.UNDEFINED and attr.type != declared and not attr.ref_attr_name:
            self.error_here(f"attribute '{name}' is declared {ATTR_NAMES[declared]} but its "
                            f"value is a {ATTR_NAMES.get(attr.type, 'value')}", at=value_at)
        if attr.ref_attr_name:
            attr.type = declared

    def _single(self, attr: P.AttributeProto, expected: int) -> None:
        k = self.kinds[self.i]
        v = self.vals[self.i]
        if k == "id":
            if self.is_type_start():
                type_at = self.i
                tp = self.parse_type()
                nk = self.kinds[self.i]
                if (nk == "p" and self.vals[self.i] in ("{", "=")) or nk in ("id", "str"):
                    attr.type = A.TENSOR
                    t = attr.t
                    # Always set, even to "", as the reference parser does (same bytes).
                    t.name = self.quotable_ident() if nk in ("id", "str") else ""
                    self.accept("=")
                    if not self.at("{") and not self.at("["):
                        self.error("'{' starting the tensor's values")
                    self.tensor_body(t, tp, type_at)
                else:
                    attr.type = A.TYPE_PROTO
                    attr.tp.CopyFrom(tp)
            elif str(v).lower() in FLOAT_WORDS:
                attr.type = A.FLOAT
                attr.f = self._f32(float(str(v)))
                self.i += 1
            else:
                attr.type = A.GRAPH
                attr.g.CopyFrom(self.parse_graph_body())
        elif k == "p" and v == "@":
            self.i += 1
            attr.ref_attr_name = self.quotable_ident("the name of the referenced attribute")
        else:
            kind, value = self.literal("an attribute value (a number, a string, a tensor, a "
                                       "graph, a type, '@name' or a list '[...]')")
            if kind == "int" and expected == A.FLOAT:
                kind, value = "float", float(value)  # type: ignore[arg-type]
            if kind == "int":
                if not -2**63 <= value < 2**63:  # type: ignore[operator]
                    self.error_here(f"integer {value} is out of the range of int64", self.i - 1)
                attr.type = A.INT
                attr.i = value  # type: ignore[assignment]
            elif kind == "float":
                attr.type = A.FLOAT
                attr.f = self._f32(value, self.i - 1)  # type: ignore[arg-type]
            else:
                attr.type = A.STRING
                attr.s = encode_str(value)  # type: ignore[arg-type]

    def _f32(self, v: float, at: int | None = None) -> float:
        if at is not None:
            save, self.i = self.i, at
            self.check_float32(v)
            self.i = save
        return v

    def _list_value(self, attr: P.AttributeProto, declared: int) -> None:
        open_at = self.i
        self.i += 1  # '['
        if declared != A.UNDEFINED and declared not in ELEM_OF:
            self.error_here(f"attribute '{attr.name}' is declared {ATTR_NAMES[declared]}, a "
                            "single value, but the value is a list", at=open_at)
        expected = ELEM_OF.get(declared, A.UNDEFINED)
        items: list[P.AttributeProto] = []
        if not self.at("]"):
            while True:
                item = P.AttributeProto()
                item_at = self.i
                self._single(item, expected)
                if item.ref_attr_name:
                    self.error_here("an attribute reference '@name' cannot be a list element",
                                    at=item_at)
                if expected != A.UNDEFINED and item.type != expected:
                    self.error_here(f"attribute '{attr.name}' is declared "
                                    f"{ATTR_NAMES[declared]} but this element is a "
                                    f"{ATTR_NAMES.get(item.type, 'value')}", at=item_at)
                items.append(item)
                if not self.accept(","):
                    break
        elif declared == A.UNDEFINED:
            self.error_here(f"the empty list of attribute '{attr.name}' needs a type, e.g. "
                            f"'{attr.name}: ints = []'", at=open_at)
        self.expect("]", "closing the attribute's list (or ',' between values)")
        types = {it.type for it in items}
        if types == {A.INT, A.FLOAT}:  # mixed numbers without a declared type: all floats
            for it in items:
                if it.type == A.INT:
                    it.type, it.f = A.FLOAT, float(it.i)
            types = {A.FLOAT}
        if len(types) > 1:
            names = ", ".join(sorted(ATTR_NAMES[t] for t in types))
            self.error_here(f"attribute '{attr.name}' mixes values of types {names}",
                            at=open_at)
        elem = types.pop() if types else ELEM_OF[declared]
        attr.type = LIST_OF[elem]
        if elem == A.INT:
            attr.ints.extend(it.i for it in items)
        elif elem == A.FLOAT:
            attr.floats.extend(it.f for it in items)
        elif elem == A.STRING:
            attr.strings.extend(it.s for it in items)
        elif elem == A.TENSOR:
            attr.tensors.extend(it.t for it in items)
        elif elem == A.GRAPH:
            attr.graphs.extend(it.g for it in items)
        elif elem == A.TYPE_PROTO:
            attr.type_protos.extend(it.tp for it in items)
