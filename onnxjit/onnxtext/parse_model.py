"""Nodes, graphs, functions and models of the ONNX textual syntax.

Grammar (spec/003_...), with the onnx reference parser's extensions (node names `[name]`,
`op:overload`, initializers and value-infos in a `< ... >` list after a graph's outputs, typed
function inputs/outputs, function attribute defaults `<a, b: int = 1>`):

    node      ::= ('[' name ']')? id-list? '=' qualified-id attr-list? '(' id-list? ')'
                | ('[' name ']')? id-list? '=' qualified-id '(' id-list? ')' attr-list
    graph     ::= name value-info-list '=>' value-info-list ('<' (value-info | init) ... '>')?
                  '{' node* '}'
    function  ::= other-data-list? name ('<' param (',' param)* '>')? '(' names ')' '=>'
                  '(' names ')' ('<' value-infos '>')? '{' node* '}'
    model     ::= other-data-list? graph function*

Algorithm: recursive descent over the token list (`lexer.Cursor`), building the project's own
protobuf messages directly. An id-list follows the reference parser: a name is an identifier or
a quoted string, and an empty name (an omitted optional input) is `""` or nothing before a
comma. Names are checked while parsing so errors point at the offending token: a graph or
function defines each name once (inputs, initializers, node outputs; an input may have a
default value, i.e. an initializer of the same name), node attributes, header keys and
functions are unique. Undefined names are left to the importer, which knows the outer scopes.
"""

from __future__ import annotations

from onnxjit.onnxtext.parse_attrs import AttrParser
from onnxjit.proto import onnx_pb2 as P

MODEL_KEYS = ("ir_version", "opset_import", "producer_name", "producer_version", "domain",
              "model_version", "doc_string", "metadata_props")
FUNCTION_KEYS = ("domain", "opset_import", "doc_string", "overload")


class GraphParser(AttrParser):
    """Entry points: `model`, `graph`, `function`, `node` (each checks the input is used up)."""

    # -- entry points ------------------------------------------------------------------------
    def model(self) -> P.ModelProto:
        m = P.ModelProto()
        if self.accept("<"):
            self._header(m, MODEL_KEYS, "model")
        m.graph.CopyFrom(self.parse_graph_body())
        seen: dict[tuple[str, str, str], int] = {}
        while not self.at_end():
            f = self.function()
            key = (f.domain, f.name, f.overload)
            if key in seen:
                self.error_here(f"function '{f.name}' (domain '{f.domain}') is defined twice",
                                at=self._fn_name_at)
            seen[key] = self._fn_name_at
            m.functions.append(f)
        return m

    def graph(self) -> P.GraphProto:
        g = self.parse_graph_body()
        self._end()
        return g

    def single_function(self) -> P.FunctionProto:
        f = self.function()
        self._end()
        return f

    def single_node(self) -> P.NodeProto:
        n = P.NodeProto()
        self._node(n, set())
        self._end()
        return n

    def _end(self) -> None:
        if not self.at_end():
            self.error("the end of the input")

    # -- headers -----------------------------------------------------------------------------
    def _header(self, msg, keys: tuple[str, ...], owner: str) -> None:  # noqa: ANN001
        seen: set[str] = set()
        while True:
            key_at = self.i
            key = self.ident(f"a {owner} property ({', '.join(keys)})")
            if key not in keys:
                self.error(f"a {owner} property ({', '.join(keys)})", at=key_at)
            if key in seen:
                self.error_here(f"duplicate {owner} property '{key}'", at=key_at)
            seen.add(key)
            self.expect(":", f"after '{key}'")
            if key in ("ir_version", "model_version"):
                setattr(msg, key, self._int64())
            elif key == "opset_import":
                self._opsets(msg.opset_import)
            elif key == "metadata_props":
                self.expect("[", "starting the metadata list")
                if not self.accept("]"):
                    self.string_pairs(msg.metadata_props)
                    self.expect("]", "closing the metadata list (or ',' between entries)")
            else:
                setattr(msg, key, self.string(f"a quoted string for '{key}'"))
            if not self.accept(","):
                break
        self.expect(">", f"closing the {owner} properties (or ',' between them)")

    def _int64(self) -> int:
        v = self.integer("an integer")
        if not -2**63 <= v < 2**63:
            self.error_here(f"integer {v} is out of the range of int64", at=self.i - 1)
        return v

    def _opsets(self, opsets) -> None:  # noqa: ANN001 - repeated OperatorSetIdProto
        self.expect("[", "starting the opset list")
        if self.accept("]"):
            return
        seen: set[str] = set()
        while True:
            dom_at = self.i
            domain = self.string('a quoted domain (e.g. "" or "com.microsoft")')
            if domain in seen:
                self.error_here(f"domain '{domain}' is imported twice", at=dom_at)
            seen.add(domain)
            self.expect(":", "between the domain and its version")
            opsets.add(domain=domain, version=self._int64())
            if not self.accept(","):
                break
        self.expect("]", "closing the opset list (or ',' between entries)")

    # -- graphs ------------------------------------------------------------------------------
    def parse_graph_body(self) -> P.GraphProto:
        g = P.GraphProto()
        g.name = self.quotable_ident("a graph name")
        defined: set[str] = set()
        inputs: set[str] = set()
        inits: set[str] = set()
        self.expect("(", "starting the graph inputs")
        if not self.accept(")"):
            while True:
                vi, at = self._value_info(g.input)
                self._define(vi.name, defined, at, "graph input")
                inputs.add(vi.name)
                if self.accept("="):  # an input with a default value
                    self._initializer(g, vi, at)
                    inits.add(vi.name)
                if not self.accept(","):
                    break
            self.expect(")", "closing the graph inputs (or ',' between them)")
        self.expect("=>", "between the graph inputs and outputs")
        self.expect("(", "starting the graph outputs")
        if not self.accept(")"):
            while True:
                self._value_info(g.output)
                if not self.accept(","):
                    break
            self.expect(")", "closing the graph outputs (or ',' between them)")
        if self.accept("<") and not self.accept(">"):
            while True:
                vi = P.ValueInfoProto()
                at = self._value_info_into(vi)
                if self.accept("="):
                    if vi.name in inits:
                        self.error_here(f"duplicate initializer '{vi.name}'", at=at)
                    if vi.name not in inputs:
                        self._define(vi.name, defined, at, "initializer")
                    inits.add(vi.name)
                    self._initializer(g, vi, at)
                else:
                    g.value_info.append(vi)
                if not self.accept(","):
                    break
            self.expect(">", "closing the initializer/value-info list (or ',' between items)")
        self._nodes(g.node, defined)
        return g

    def _initializer(self, g: P.GraphProto, vi: P.ValueInfoProto, at: int) -> None:
        t = g.initializer.add()
        t.name = vi.name
        self.tensor_body(t, vi.type, at)

    def _value_info(self, out) -> tuple[P.ValueInfoProto, int]:  # noqa: ANN001 - repeated
        vi = out.add()
        return vi, self._value_info_into(vi)

    def _value_info_into(self, vi: P.ValueInfoProto) -> int:
        """[type] name into `vi`; returns the name's token index. A type word followed by
        neither a name nor its '[' / '(' is itself a name (of a value-info without a type)."""
        nk, nv = self.kinds[self.i + 1], self.vals[self.i + 1]
        if self.kinds[self.i] == "id" and (nk in ("id", "str") or (nk == "p" and nv in "[(")):
            if not self.is_type_start():  # 'TYPE name' with a TYPE that is not one
                self.error("a type (float, int64, bool, string, ..., seq, map, optional, "
                           "sparse_tensor)")
            vi.type.CopyFrom(self.parse_type())
        at = self.i
        vi.name = self.quotable_ident("a value name (after an optional type)")
        return at

    def _define(self, name: str, defined: set[str], at: int, what: str) -> None:
        if name == "":
            return
        if name in defined:
            self.error_here(f"duplicate name '{name}': the {what} redefines a value", at=at)
        defined.add(name)

    # -- nodes -------------------------------------------------------------------------------
    def _nodes(self, nodes, defined: set[str]) -> None:  # noqa: ANN001 - repeated NodeProto
        self.expect("{", "starting the node list")
        while not self.accept("}"):
            if self.at_end():
                self.error("'}' closing the node list")
            self._node(nodes.add(), defined)

    def _node(self, n: P.NodeProto, defined: set[str]) -> None:
        if self.accept("["):
            if self.kinds[self.i] in ("id", "str"):
                n.name = self.vals[self.i]  # type: ignore[assignment]
                self.i += 1
            else:
                n.name = ""
            self.expect("]", "closing the node name")
        starts = self._id_list(n.output)
        for j, name in zip(starts, n.output):
            self._define(name, defined, j, "node output")
        self.expect("=", "after the node outputs ('outputs = Op(inputs)')")
        parts = [self.ident("an operator name")]
        while self.accept("."):
            parts.append(self.ident("an operator name after '.'"))
        n.op_type = parts[-1]
        n.domain = ".".join(parts[:-1])
        if self.accept(":"):
            n.overload = self.ident("an overload name after ':'")
        if self.accept("<"):
            self.attr_list(n.attribute)
        if not self.accept("("):
            self.error(f"'(' starting the inputs of '{'.'.join(parts)}'")
        self._id_list(n.input)
        self.expect(")", f"closing the inputs of '{'.'.join(parts)}' (or ',' between them)")
        if not n.attribute and self.accept("<"):
            self.attr_list(n.attribute)

    def _id_list(self, out) -> list[int]:  # noqa: ANN001 - repeated string
        """Names separated by commas, "" or nothing before a comma for an empty name; returns
        the token index of each name (for error positions)."""
        starts: list[int] = []

        def item() -> bool:
            k = self.kinds[self.i]
            if k in ("id", "str"):
                starts.append(self.i)
                out.append(self.vals[self.i])
                self.i += 1
                return True
            if k == "p" and self.vals[self.i] == ",":
                starts.append(self.i)
                out.append("")
                return True
            return False

        if item():
            while self.accept(","):
                if not item():
                    break
        return starts

    # -- functions ---------------------------------------------------------------------------
    def function(self) -> P.FunctionProto:
        f = P.FunctionProto()
        if self.accept("<"):
            self._header(f, FUNCTION_KEYS, "function")
        self._fn_name_at = self.i
        f.name = self.quotable_ident("a function name")
        if self.accept("<"):
            seen: set[str] = set()
            while True:
                at = self.i
                name = self.quotable_ident("an attribute parameter name")
                if name in seen:
                    self.error_here(f"duplicate attribute parameter '{name}'", at=at)
                seen.add(name)
                if self.at(":") or self.at("="):
                    self.attr_after_name(f.attribute_proto.add(), name)
                else:
                    f.attribute.append(name)
                if not self.accept(","):
                    break
            self.expect(">", "closing the attribute parameters (or ',' between them)")
        defined: set[str] = set()
        self._fn_io(f.input, f.value_info, defined, "function input")
        self.expect("=>", "between the function inputs and outputs")
        self._fn_io(f.output, f.value_info, None, "")
        if self.accept("<") and not self.accept(">"):
            while True:
                self._value_info(f.value_info)
                if not self.accept(","):
                    break
            self.expect(">", "closing the value-info list (or ',' between items)")
        self._nodes(f.node, defined)
        return f

    def _fn_io(self, names, vis, defined: set[str] | None, what: str) -> None:  # noqa: ANN001
        self.expect("(", "starting the function's names")
        if self.accept(")"):
            return
        while True:
            vi = P.ValueInfoProto()
            at = self._value_info_into(vi)
            if vi.HasField("type"):
                vis.append(vi)
            names.append(vi.name)
            if defined is not None:
                self._define(vi.name, defined, at, what)
            if not self.accept(","):
                break
        self.expect(")", "closing the function's names (or ',' between them)")
