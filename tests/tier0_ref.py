"""Tier 0's numpy interpreter (`onnxjit.tiered.interpreter.Plan`) as a test reference: the
outputs of a model without compiling it.

Tier 0 returns None where running the graph raises (the native code's own checks then say
what is wrong), but it does not check a call against the graph's declared inputs, which the
compiled model does first. `Tier0.run` does that check, so None means: no reference here (the
call breaks the declared dtypes, ranks, static sizes or the equality of a symbol's sizes, tier
0 raised, or the graph is one tier 0 does not plan); the test then asks the program
specialised to the call.
"""

from __future__ import annotations

import numpy as np

from onnxjit.driver import import_model
from onnxjit.options import CompileOptions
from onnxjit.tiered.interpreter import NotPlannable, Plan


class Tier0:
    """`Tier0(model).run(arrays)`: the outputs for the graph inputs in order, or None."""

    def __init__(self, model) -> None:
        src = model.SerializeToString() if hasattr(model, "SerializeToString") else model
        graph = import_model(src, CompileOptions.from_user({"cache_dir": False})).graph
        self.inputs = list(graph.inputs)  # the graph inputs, overridable initializers included
        self.types = [v.type for v in self.inputs]
        try:
            self.plan: Plan | None = Plan(graph)
        except NotPlannable:
            self.plan = None

    def fits(self, arrays: list[np.ndarray]) -> bool:
        """The call has the declared dtypes, ranks and static sizes, one size per symbol."""
        if len(arrays) != len(self.types):
            return False
        sizes: dict[str, int] = {}
        for t, a in zip(self.types, arrays):
            if a.dtype != t.dtype.numpy or t.shape is not None and len(t.shape) != a.ndim:
                return False
            for d, n in zip(t.shape or (), a.shape):
                if isinstance(d, int):
                    if d != n:
                        return False
                elif d is not None and sizes.setdefault(str(d), n) != n:
                    return False
        return True

    def run(self, arrays: list[np.ndarray]) -> tuple | None:
        if self.plan is None or not self.fits(arrays):
            return None
        return self.plan.run(list(arrays))
