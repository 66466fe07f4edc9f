"""The pass registry: every pass is a module with `name`, `level` ("graph" -> "graph", or
"graph" -> "loops", or "loops" -> "loops") and `run(ir, ctx) -> PassResult`, one pass to a
file. A pipeline is a list of names; an unknown name fails loudly. A pass's module is imported
when a pipeline first asks for it (its file is its name with `_` for `-`), so a compile that
stops at the graph level imports none of the lowering.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from onnxjit.errors import CompileError

_MODULES = [
    "inline_functions", "infer_shapes", "fold_constants", "simplify", "dce", "fuse",
    "lower_to_loops", "plan_memory", "fold_batchnorm", "fold_transpose", "fuse_epilogue",
    "expand_contrib", "expand_ml", "prepack_weights", "materialize_dims", "onehot_gather",
    "sink_reshape", "flush_denormals", "parametrize_kernels",
]


@dataclass
class PassResult:
    ir: Any
    changed: bool = True


@dataclass
class PassContext:
    """What passes may read besides the IR: the options and, per signature, the bindings."""

    options: Any = None
    #: Concrete sizes of the model's symbolic dims for the signature being compiled.
    bindings: dict[str, int] = field(default_factory=dict)
    #: Free-form facts passes leave for later passes (e.g. statistics).
    notes: dict[str, Any] = field(default_factory=dict)


def _load() -> dict[str, ModuleType]:
    table: dict[str, ModuleType] = {}
    for mod_name in _MODULES:
        mod = importlib.import_module(f"onnxjit.passes.{mod_name}")
        table[mod.name] = mod
    return table


PASSES: dict[str, ModuleType] = {}


def get_pass(name: str) -> ModuleType:
    mod = PASSES.get(name)
    if mod is None:
        guess = name.replace("-", "_")
        if guess in _MODULES:
            found = importlib.import_module(f"onnxjit.passes.{guess}")
            PASSES[found.name] = found
        if name not in PASSES:  # a pass whose file is named otherwise
            PASSES.update(_load())
        try:
            mod = PASSES[name]
        except KeyError:
            raise CompileError(f"unknown pass '{name}'; known: "
                               f"{', '.join(sorted(PASSES))}") from None
    return mod
