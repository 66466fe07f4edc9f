"""A model's interface in onnxruntime's terms: `NodeArg` and `ModelMetadata`.

Algorithm: a value's type prints as onnxruntime prints it ("tensor(float)", "seq(tensor(int64))",
"optional(tensor(float))", "map(string,tensor(float))", "sparse_tensor(float)": the element
type's ONNX name in lower case); its shape is a list with an int for a fixed dim, the name
for a named symbolic dim, and None for any other dim (unknown, or an expression of symbols
that shape inference found). A tensor of unknown rank, and any non-tensor, has the shape [] (as
onnxruntime reports it). Inputs come from the model's declarations, outputs from the types the
graph pipeline inferred (onnxruntime also reports inferred output shapes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onnxjit.errors import InputError, InputTypeError
from onnxjit.ir.types import (
    DType,
    MapType,
    OptionalType,
    SequenceType,
    SparseTensorType,
    Sym,
    TensorType,
)

__all__ = ["Interface", "ModelMetadata", "NodeArg", "declared_arg", "model_metadata",
           "value_arg"]


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output: `name`, `type` ("tensor(float)") and `shape` (ints, dim
    names and None), like onnxruntime's NodeArg."""

    name: str
    type: str
    shape: list = field(default_factory=list)

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


@dataclass(frozen=True)
class ModelMetadata:
    """The model's metadata, with onnxruntime's `ModelMetadata` attribute names."""

    producer_name: str = ""
    graph_name: str = ""
    domain: str = ""
    description: str = ""
    graph_description: str = ""
    version: int = 0
    custom_metadata_map: dict = field(default_factory=dict)


def type_text(t: Any) -> str:
    """onnxruntime's text of a type (DType, or an IR ValueType)."""
    if isinstance(t, DType):
        return f"tensor({t.name.lower()})"
    if isinstance(t, SparseTensorType):
        return f"sparse_tensor({t.dtype.name.lower()})"
    if isinstance(t, TensorType):
        return type_text(t.dtype)
    if isinstance(t, SequenceType):
        return f"seq({type_text(t.elem)})" if t.elem is not None else "seq"
    if isinstance(t, OptionalType):
        return f"optional({type_text(t.elem)})" if t.elem is not None else "optional"
    if isinstance(t, MapType):
        return f"map({t.key.name.lower()},{type_text(t.value)})"
    return "unknown"


def _dim(d: Any) -> int | str | None:
    if isinstance(d, int):
        return d
    if isinstance(d, Sym):
        return d.args[0] if d.op == "var" else None
    return d if isinstance(d, str) else None


def declared_arg(name: str, kind: Any, dims: Any) -> NodeArg:
    """The NodeArg of a declared input ((name, kind, dims) as `onnxjit.signature` has it)."""
    return NodeArg(name, type_text(kind), [] if dims is None else [_dim(d) for d in dims])


def value_arg(name: str, t: Any) -> NodeArg:
    """The NodeArg of a value of IR type `t` (None: unknown)."""
    shape = getattr(t, "shape", None) if isinstance(t, TensorType) else None
    return NodeArg(name, type_text(t), [] if shape is None else [_dim(d) for d in shape])


def model_metadata(model: Any) -> ModelMetadata:
    """ModelMetadata of an imported `Model`."""
    return ModelMetadata(
        producer_name=model.producer_name, graph_name=model.graph.name, domain=model.domain,
        description=model.doc, graph_description=getattr(model.graph, "doc", "") or "",
        version=int(model.model_version), custom_metadata_map=dict(model.metadata))


class Interface:
    """The NodeArgs of a `CompiledModel` (its base class) and onnxruntime's `run`: the host
    provides `_declared` (every graph input's declaration), `_positions` (the required
    inputs' indices in it), `_graph()` (the imported model), `input_names`, `output_names`
    and its call."""

    _declared: list
    _positions: list[int]
    input_names: list[str]
    output_names: list[str]

    def _graph(self) -> Any:
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> tuple:
        raise NotImplementedError

    def run(self, output_names: Sequence[str] | None, feeds: Mapping[str, Any]) -> list:
        """onnxruntime-style: `run(None, {"x": x})` -> list of outputs (all, or those named)."""
        if not isinstance(feeds, Mapping):
            raise InputTypeError(f"run() takes its inputs as a dict of name -> array, got "
                                 f"{type(feeds).__name__}; inputs are {self.input_names}")
        outs = self(**dict(feeds))
        if output_names is None:
            return list(outs)
        pos = {n: i for i, n in enumerate(self.output_names)}
        missing = [n for n in output_names if n not in pos]
        if missing:
            raise InputError(f"unknown output name(s) {missing}; outputs are "
                             f"{self.output_names}")
        return [outs[pos[n]] for n in output_names]

    @property
    def inputs(self) -> list[NodeArg]:
        """The required inputs as onnxruntime's NodeArgs (name, type, shape), positional
        order."""
        return [declared_arg(*self._declared[i]) for i in self._positions]

    @property
    def overridable_inputs(self) -> list[NodeArg]:
        """NodeArgs of the inputs with an initializer (given by name only, or defaulted)."""
        required = set(self._positions)
        return [declared_arg(*d) for i, d in enumerate(self._declared) if i not in required]

    @property
    def outputs(self) -> list[NodeArg]:
        """The outputs as NodeArgs, with the shapes shape inference found."""
        g = self._graph().graph
        return [value_arg(n, v.type) for n, v in zip(g.output_names, g.outputs)]
