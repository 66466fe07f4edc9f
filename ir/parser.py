"""Parser of the graph IR text (`ir.printer`): `parse_model(text) -> Model`.

Recursive descent over the tokens of `text_lexer`, one method per construct of the printer's
grammar (see `ir.printer`). Algorithm:
1) the model header's fields, then graphs and functions in order;
2) each top-level graph (the main graph or a function body) has one table from printed name
   (`%x#1`) to Value, shared by its nested regions: the printer gives every value of a top
   graph a distinct name, so the nested scopes need no separate tables. A name used before its
   definition (a graph whose nodes are out of order) gets its Value at the use, bound by the
   later definition; one never defined is an error at its first use;
3) the trailing `resources` section is read first, so constants stored as `blobN` resolve
   where they stand.
Every error is a `ModelError` naming the line and column and what was expected there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import AttrRef, Function, Graph, Model, Node, TypeAttr, Value
from onnxjit.ir.text_consts import BlobRefs, is_float_text, parse_array, parse_float
from onnxjit.ir.text_lexer import Cursor, Token, unquote
from onnxjit.ir.text_types import is_dtype_name, parse_dtype, parse_shape, parse_type
from onnxjit.ir.types import TensorType

_MODEL_FIELDS = {"ir_version": int, "opset_imports": dict, "producer_name": str,
                 "producer_version": str, "domain": str, "model_version": int, "doc": str,
                 "metadata": dict}
_FUNCTION_FIELDS = {"name": str, "domain": str, "overload": str, "inputs": tuple,
                    "outputs": tuple, "attributes": tuple, "defaults": dict,
                    "opset_imports": dict}


def parse_model(text: str) -> Model:
    """The Model a `print_model` text describes; ModelError (with line and column) if the text
    is not one."""
    return _Parser(text).model()


class _Parser:
    def __init__(self, text: str):
        self.cur = Cursor(text)
        self.blobs = BlobRefs(self.cur)
        self.values: dict[str, Value] = {}
        self.forward: dict[str, Token] = {}  # names used before their definition
        self.defined: set[str] = set()

    # model, functions ---------------------------------------------------------------------
    def model(self) -> Model:
        cur = self.cur
        cur.expect("model")
        fields = self.fields(_MODEL_FIELDS, "model")
        cur.expect("graph")
        graph = self.top_graph()
        functions = []
        while cur.accept("function"):
            functions.append(self.function())
        cur.finish()
        if "opset_imports" not in fields:
            raise ModelError("the model header has no opset_imports")
        m = Model(graph, self._opsets(fields["opset_imports"]))
        for key, value in fields.items():
            if key != "opset_imports":
                setattr(m, key, value)
        m.functions = functions
        return m

    def function(self) -> Function:
        start = self.cur.tok
        fields = self.fields(_FUNCTION_FIELDS, "function")
        if "name" not in fields or "domain" not in fields:
            raise self.cur.error("a function header with a name and a domain", start)
        self.cur.expect("graph")
        body = self.top_graph()
        return Function(
            name=fields["name"], domain=fields["domain"],
            inputs=list(fields.get("inputs", [v.name for v in body.inputs])),
            outputs=list(fields.get("outputs", body.output_names or [])),
            attributes=list(fields.get("attributes", ())),
            attribute_defaults=fields.get("defaults", {}), body=body,
            opset_imports=self._opsets(fields.get("opset_imports", {})),
            overload=fields.get("overload", ""))

    @staticmethod
    def _opsets(d: dict) -> dict[str, int]:
        bad = [k for k, v in d.items() if type(v) is not int]
        if bad:
            raise ModelError(f"opset_imports: the version of domain '{bad[0]}' is not an int")
        return d

    def fields(self, allowed: dict[str, type], owner: str) -> dict[str, Any]:
        """A `{key = value, ...}` header, each key one of `allowed` with a value of its type."""
        out: dict[str, Any] = {}
        for tok, key, value in self.dict_items():
            want = allowed.get(key)
            if want is None:
                raise self.cur.error(f"a {owner} field ({', '.join(allowed)})", tok)
            if type(value) is not want:
                raise self.cur.error(f"a {want.__name__} for '{key}'", tok)
            if want is tuple and not all(isinstance(x, str) for x in value):
                raise self.cur.error(f"a list of strings for '{key}'", tok)
            out[key] = list(value) if want is tuple else value
        return out

    def dict_items(self) -> list[tuple[Token, str, Any]]:
        cur = self.cur
        cur.expect("{")
        items: list[tuple[Token, str, Any]] = []
        if cur.accept("}"):
            return items
        while True:
            tok = cur.tok
            key = cur.name("a field or attribute name")
            if any(k == key for _, k, _ in items):
                raise cur.error(f"a name other than '{key}' (given twice)", tok)
            cur.expect("=")
            items.append((tok, key, self.attr()))
            if cur.accept("}"):
                return items
            cur.expect(",")

    # graphs -------------------------------------------------------------------------------
    def top_graph(self) -> Graph:
        self.values, self.forward, self.defined = {}, {}, set()
        g = self.graph()
        if self.forward:
            name, tok = next(iter(self.forward.items()))
            raise ModelError(f"line {tok.line}, column {tok.col}: value {name} is never defined")
        return g

    def graph(self) -> Graph:
        """After the `graph` keyword: `@name(params) [doc="..."] { body }`."""
        cur = self.cur
        _, name = cur.ref("@", "a graph name (@name)")
        cur.expect("(")
        inputs: list[Value] = []
        if not cur.accept(")"):
            inputs.append(self.decl(const=True))
            while cur.accept(","):
                inputs.append(self.decl(const=True))
            cur.expect(")")
        doc = ""
        if cur.accept("doc"):
            cur.expect("=")
            doc = str(unquote(cur.expect_kind("string", "a doc string")))
        cur.expect("{")
        inits: list[Value] = []
        nodes: list[Node] = []
        while True:
            if cur.accept("free"):
                self.decl(const=True)
            elif cur.accept("init"):
                inits.append(self.decl(const=True))
            elif cur.accept("return"):
                break
            else:
                nodes.append(self.node())
        outputs: list[Value] = []
        names: list[str] = []
        if cur.tok.kind == "ref":
            while True:
                v = self.use()
                outputs.append(v)
                names.append(str(unquote(cur.expect_kind("string", "an output name")))
                             if cur.accept("as") else v.name)
                if not cur.accept(","):
                    break
        cur.expect("}")
        return Graph(nodes, inputs, outputs, inits, name, names, doc)

    def decl(self, const: bool = False) -> Value:
        """`%name[: type][ sym=[dims]][ = constant]`: defines a value."""
        cur = self.cur
        tok = cur.tok
        key, hint = cur.ref("%", "a value name (%name)")
        if key in self.defined:
            raise cur.error(f"a new value name ({key} is already defined)", tok)
        self.defined.add(key)
        v = self.values.get(key)
        if v is None:
            v = self.values[key] = Value(None, hint)
        self.forward.pop(key, None)
        if cur.accept(":"):
            v.type = parse_type(cur)
        if cur.at("sym") and cur.peek().text == "=":
            cur.next()
            cur.next()
            v.sym_value = parse_shape(cur)
        if const and cur.accept("="):
            v.const = self.constant(v.type)
        return v

    def use(self) -> Value:
        tok = self.cur.tok
        key, hint = self.cur.ref("%", "a value name (%name)")
        v = self.values.get(key)
        if v is None:
            v = self.values[key] = Value(None, hint)
            self.forward[key] = tok
        return v

    def constant(self, declared: Any) -> np.ndarray:
        """A constant: `[dtype[shape]] data`; the type defaults to the value's."""
        cur = self.cur
        if cur.tok.kind == "ident" and is_dtype_name(cur.tok.text) and cur.peek().text == "[":
            dtype = parse_dtype(cur)
            shape = parse_shape(cur)
            if shape is None or not all(isinstance(d, int) for d in shape):
                raise cur.error("a constant with a concrete shape")
        elif isinstance(declared, TensorType) and declared.is_static:
            dtype, shape = declared.dtype, declared.shape
        else:
            raise cur.error("a constant's type (the value's type is not a concrete tensor "
                            "type)")
        try:
            np_dtype = dtype.numpy
        except KeyError:
            raise cur.error(f"an element type numpy can hold, not {dtype.short}") from None
        return parse_array(cur, np_dtype, tuple(shape), self.blobs)  # type: ignore[arg-type]

    # nodes --------------------------------------------------------------------------------
    def node(self) -> Node:
        cur = self.cur
        outputs: list[Value] = []
        if cur.tok.kind == "ref":
            outputs.append(self.decl())
            while cur.accept(","):
                outputs.append(self.decl())
            cur.expect("=")
        first = cur.name("a node (an op name) or 'return'")
        domain, op = ("", first)
        if cur.accept("::"):
            domain, op = first, cur.name("an op name")
        cur.expect("<")
        version = cur.integer("an opset version")
        cur.expect(">")
        cur.expect("(")
        inputs: list[Value | None] = []
        if not cur.accept(")"):
            while True:
                inputs.append(None if cur.accept("_") else self.use())
                if cur.accept(")"):
                    break
                cur.expect(",")
        name = ""
        if cur.accept("name"):
            cur.expect("=")
            name = str(unquote(cur.expect_kind("string", "a node name in quotes")))
        attrs: dict[str, Any] = {}
        if cur.at("{"):
            attrs = {k: v for _, k, v in self.dict_items()}
        for v in outputs:
            if v.producer is not None:
                raise ModelError(f"value '{v.name}' is an output of two nodes")
        return Node(op, inputs, outputs, attrs, domain, version, name)

    # attributes ---------------------------------------------------------------------------
    def attr(self) -> Any:
        cur = self.cur
        tok = cur.tok
        if tok.kind == "number":
            cur.next()
            return parse_float(tok.text) if is_float_text(tok.text) else int(tok.text)
        if tok.kind in ("string", "bytes"):
            cur.next()
            return unquote(tok)
        if cur.accept("true"):
            return True
        if cur.accept("false"):
            return False
        if cur.accept("graph"):
            return self.graph()
        if cur.accept("type"):
            t = parse_type(cur)
            if t is None:
                raise cur.error("a type", tok)
            return TypeAttr(t)
        if tok.kind == "ref" and tok.text[0] == "@":
            _, name = cur.ref("@", "an attribute reference")
            cur.expect(":")
            return AttrRef(name, cur.expect_kind("ident", "an attribute kind").text)
        if cur.at("["):
            cur.next()
            items = []
            if not cur.accept("]"):
                items.append(self.attr())
                while cur.accept(","):
                    items.append(self.attr())
                cur.expect("]")
            return tuple(items)
        if cur.at("{"):
            return {k: v for _, k, v in self.dict_items()}
        if tok.kind == "ident" and is_dtype_name(tok.text) and cur.peek().text == "[":
            return self.constant(None)
        raise cur.error("an attribute value")
