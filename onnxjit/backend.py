"""The standard ONNX backend API, so `onnx.backend.test.BackendTest(onnxjit.backend)` runs.

`prepare(model)` compiles (any ModelProto-like object, bytes or path) and returns a `BackendRep`
whose `run(inputs)` takes inputs by name (a dict) or as a list in the order of the graph
inputs that have no initializer (a graph input that is also an initializer — the IR < 4 form —
keeps its initializer as default, as onnxruntime and the backend test runner expect), and
returns the outputs as a list. `run_node` builds a one-node model around a NodeProto using
onnxjit's own protobuf schema (the `onnx` package is not needed at run time). Only the CPU
device exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from onnxjit.errors import InputError, UnsupportedError

_COMPILE_OPTIONS = {"cache_dir", "dump_ir", "num_threads", "specialize", "opt_level",
                    "base_dir", "verify", "fast_algorithms"}


class BackendRep:
    """A prepared model (onnx.backend.base.BackendRep protocol)."""

    def __init__(self, compiled: Any):
        self.compiled = compiled

    def run(self, inputs: Any, **kwargs: Any) -> list[np.ndarray]:
        if isinstance(inputs, Mapping):
            return list(self.compiled(**inputs))
        if isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence):
            inputs = [inputs]
        names = self.compiled._all_names  # every graph input, overridable ones too
        if len(inputs) == len(names) and len(names) > len(self.compiled.input_names):
            return list(self.compiled(**dict(zip(names, inputs))))
        return list(self.compiled(*inputs))


def supports_device(device: str) -> bool:
    return str(device).upper().split(":")[0] == "CPU"


def is_compatible(model: Any, device: str = "CPU", **kwargs: Any) -> bool:
    return supports_device(device)


def _check_device(device: str) -> None:
    if not supports_device(device):
        raise UnsupportedError(f"device '{device}' is not supported; onnxjit targets the CPU")


def prepare(model: Any, device: str = "CPU", **kwargs: Any) -> BackendRep:
    """Compile a model for `device` ("CPU"); compile options may be passed as keywords."""
    import onnxjit

    _check_device(device)
    options = {k: v for k, v in kwargs.items() if k in _COMPILE_OPTIONS}
    return BackendRep(onnxjit.compile(model, **options))


def run_model(model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> list[np.ndarray]:
    return prepare(model, device, **kwargs).run(inputs)


def run_node(node: Any, inputs: Any, device: str = "CPU",
             outputs_info: Sequence[tuple[Any, tuple]] | None = None, **kwargs: Any
             ) -> list[np.ndarray]:
    """Run one NodeProto on `inputs` (arrays in the node's input order, or a dict by name)."""
    from onnxjit.proto import onnx_pb2 as pb

    _check_device(device)
    n = pb.NodeProto()
    n.ParseFromString(node.SerializeToString() if hasattr(node, "SerializeToString")
                      else bytes(node))
    if isinstance(inputs, Mapping):
        feeds = dict(inputs)
    else:
        names = [x for x in n.input if x]
        if len(names) != len(inputs):
            raise InputError(f"node has {len(names)} inputs, got {len(inputs)} arrays")
        feeds = dict(zip(names, inputs))
    m = pb.ModelProto(ir_version=10)
    opset = kwargs.get("opset_version")
    imp = m.opset_import.add()
    imp.domain = n.domain
    imp.version = int(opset) if opset else 25 if n.domain in ("", "ai.onnx") else 1
    g = m.graph
    g.name = "run_node"
    g.node.append(n)
    from onnxjit.ir.types import DType

    for name, arr in feeds.items():
        arr = np.asarray(arr)
        vi = g.input.add()
        vi.name = name
        vi.type.tensor_type.elem_type = DType.from_numpy(arr.dtype).value
        for d in arr.shape:
            vi.type.tensor_type.shape.dim.add().dim_value = d
    for name in n.output:
        if name:
            g.output.add().name = name
    compiled = prepare(m.SerializeToString(), device, **kwargs).compiled
    return list(compiled(**feeds))
