"""The text form of the graph IR: `print_model(model) -> str` (parsed back by `ir.parser`).

    model {ir_version = 10, opset_imports = {"" = 17}}
    graph @main(%input: f32[batch,784]) {
      init %"fc0.weight": f32[512,784] = blob0
      %t: f32[batch,512] = Gemm<13>(%input, %"fc0.weight", _) name="/fc0/Gemm" {transB = 1}
      %y = If<16>(%c) {then_branch = graph @then() {
        ...
      }, else_branch = graph @else() { ... }}
      return %t, %t as "copy"
    }
    function {name = "F", domain = "local"} graph @F(%x) { ... }
    resources {
      blob0 = "<base64>"
    }

Algorithm: one `Namer` per top-level graph (the main graph with all its regions, or one function
body) names values in print order from their hints (`types.Value.name`), after reserving the
interface names (the top graph's inputs and outputs), which so print exactly. Values used but
defined nowhere in the top graph (free constants) are declared first with `free`. A node prints
as `outputs = [domain::]Op<version>(inputs) [name="..."] [{attributes}]`, `_` marking an omitted
input; attribute kinds: int `1`, float `1.0` (exact, see `text_consts`), string `"s"`/`b"s"`,
tensor `f32[2] [1.0, 2.0]` or `f32[512,784] blob3`, graph `graph @g(...) {...}` (indented under
the node), type `type f32[N]`, reference `@alpha: float`, lists `[...]`. A value declaration is
`%name[: type][ sym=[dims]][ = constant]`, the constant's own type printed only when it differs
from the value's. Large constants go to the trailing resources section (`text_consts`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.ir.graph import AttrRef, Function, Graph, Model, Node, TypeAttr, Value
from onnxjit.ir.text_consts import Blobs, array_text, format_float
from onnxjit.ir.text_lexer import Namer, name_text, quote
from onnxjit.ir.text_types import shape_text, type_text
from onnxjit.ir.types import DType, TensorType

#: Words that start a line of a graph body or follow a node; op names spelled like them are
#: quoted.
KEYWORDS = frozenset({"init", "free", "return", "name", "graph", "function", "model",
                      "resources"})


def print_model(model: Model) -> str:
    """The text of a graph-IR model; deterministic, and `ir.parser.parse_model` reads it back."""
    p = _Printer()
    lines = [p.model_header(model), p.top_graph(model.graph)]
    lines += [p.function(f) for f in model.functions]
    return "\n".join(lines) + "\n" + p.blobs.section()


def op_text(node: Node) -> str:
    op = quote(node.op) if node.op in KEYWORDS or not _plain(node.op) else node.op
    domain = f"{name_text(node.domain)}::" if node.domain else ""
    return f"{domain}{op}<{node.version}>"


def _plain(name: str) -> bool:
    return name_text(name) == name


def const_text(arr: np.ndarray, declared: Any, blobs: Blobs) -> str:
    """A constant; its own type is left out when `declared` (a value type) already says it."""
    data = array_text(arr, blobs)
    own = DType.from_numpy(arr.dtype)
    if isinstance(declared, TensorType) and declared.dtype == own \
            and declared.shape == tuple(arr.shape):
        return data
    return f"{own.short}{shape_text(tuple(arr.shape))} {data}"


class _Printer:
    def __init__(self) -> None:
        self.blobs = Blobs()
        self.namer = Namer()

    # model, functions ---------------------------------------------------------------------
    def model_header(self, m: Model) -> str:
        fields = [("ir_version", m.ir_version), ("opset_imports", m.opset_imports)]
        for key, default in (("producer_name", ""), ("producer_version", ""), ("domain", ""),
                             ("model_version", 0), ("doc", ""), ("metadata", {})):
            if getattr(m, key) != default:
                fields.append((key, getattr(m, key)))
        return "model " + self.fields(fields, "")

    def function(self, f: Function) -> str:
        fields: list[tuple[str, Any]] = [("name", f.name), ("domain", f.domain)]
        if f.overload:
            fields.append(("overload", f.overload))
        if f.inputs != [v.name for v in f.body.inputs]:
            fields.append(("inputs", list(f.inputs)))
        if f.outputs != list(f.body.output_names or []):
            fields.append(("outputs", list(f.outputs)))
        if f.attributes:
            fields.append(("attributes", list(f.attributes)))
        if f.attribute_defaults:
            fields.append(("defaults", dict(f.attribute_defaults)))
        if f.opset_imports:
            fields.append(("opset_imports", f.opset_imports))
        self.namer = Namer()
        return f"function {self.fields(fields, '')} {self.top_graph(f.body)}"

    def fields(self, items: list[tuple[str, Any]], indent: str) -> str:
        return "{" + ", ".join(f"{name_text(k)} = {self.attr(v, indent)}" for k, v in items) + "}"

    # graphs -------------------------------------------------------------------------------
    def top_graph(self, g: Graph) -> str:
        """A main graph or function body: its interface names are reserved first."""
        for v in g.inputs:
            self.namer.reserve(v, v.name)
        for v, name in zip(g.outputs, g.output_names or []):
            if v.name == name:
                self.namer.reserve(v, name)
        return self.graph(g, "", _free_values(g))

    def graph(self, g: Graph, indent: str, free: list[Value] = ()) -> str:  # type: ignore[assignment]
        inner = indent + "  "
        params = ", ".join(self.decl(v, with_const=True) for v in g.inputs)
        doc = f" doc={quote(g.doc)}" if g.doc else ""
        lines = [f"graph @{name_text(g.name)}({params}){doc} {{"]
        lines += [f"{inner}free {self.decl(v, with_const=True)}" for v in free]
        lines += [f"{inner}init {self.decl(v, with_const=True)}" for v in g.initializers]
        lines += [inner + self.node(n, inner) for n in g.nodes]
        names = list(g.output_names or [])
        outs = []
        for k, v in enumerate(g.outputs):
            text = self.namer(v, v.name)
            if k < len(names) and names[k] != v.name:
                text += f" as {quote(names[k])}"
            outs.append(text)
        lines.append(f"{inner}return {', '.join(outs)}".rstrip())
        lines.append(indent + "}")
        return "\n".join(lines)

    def decl(self, v: Value, with_const: bool = False) -> str:
        text = self.namer(v, v.name)
        if v.type is not None:
            text += f": {type_text(v.type)}"
        if v.sym_value is not None:
            text += f" sym={shape_text(tuple(v.sym_value))}"
        if with_const and v.const is not None:
            text += f" = {const_text(v.const, v.type, self.blobs)}"
        return text

    def node(self, n: Node, indent: str) -> str:
        outs = ", ".join(self.decl(v) for v in n.outputs)
        ins = ", ".join("_" if v is None else self.namer(v, v.name) for v in n.inputs)
        text = f"{outs} = " if outs else ""
        text += f"{op_text(n)}({ins})"
        if n.name:
            text += f" name={quote(n.name)}"
        if n.attrs:
            text += " " + self.fields(list(n.attrs.items()), indent)
        return text

    # attributes ---------------------------------------------------------------------------
    def attr(self, a: Any, indent: str) -> str:
        if isinstance(a, bool):
            return "true" if a else "false"
        if isinstance(a, int):
            return str(a)
        if isinstance(a, float):
            return format_float(a)
        if isinstance(a, (str, bytes)):
            return quote(a)
        if isinstance(a, np.ndarray):
            return const_text(a, None, self.blobs)
        if isinstance(a, Graph):
            return self.graph(a, indent)
        if isinstance(a, TypeAttr):
            return f"type {type_text(a.type)}"
        if isinstance(a, AttrRef):
            return f"@{name_text(a.name)}: {a.kind}"
        if isinstance(a, (tuple, list)):
            return "[" + ", ".join(self.attr(x, indent) for x in a) + "]"
        if isinstance(a, dict):
            return self.fields(list(a.items()), indent)
        raise ValueError(f"cannot print attribute value {a!r}")


def _free_values(g: Graph) -> list[Value]:
    """Values a top graph uses but defines nowhere (free constants), in order of first use."""
    defined: set[Value] = set()
    free: dict[Value, None] = {}

    def walk(graph: Graph) -> None:
        defined.update(graph.inputs)
        defined.update(graph.initializers)
        for n in graph.nodes:
            for v in n.inputs:
                if v is not None and v not in defined:
                    free.setdefault(v, None)
            for sub in n.regions():
                walk(sub)
            defined.update(n.outputs)
        for v in graph.outputs:
            if v not in defined:
                free.setdefault(v, None)

    walk(g)
    return [v for v in free if v not in defined]
