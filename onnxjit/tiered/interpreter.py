"""Tier 0: the graph run with numpy while its native code compiles.

A `Plan` is a graph flattened once into steps over numbered slots: every value gets a slot, the
initializers fill theirs at build time, and each node becomes `fn(*inputs) -> outputs` from the
kernel table (`kernels`, `kernels_shape`, `kernels_nn`, `kernels_upsample`: numpy code with
the node's attributes read once) or, for an op without one, from the op's own host evaluation
(`ir.host_eval.evaluate_node`, the numpy semantics constant folding uses). A kernel meeting a
case it does not cover (an integer Div, a float16 sum) raises `Decline` and that call of the
node takes the host evaluation.

    run(arrays):
        slots = template (constants) + arrays in the input slots
        with one BLAS thread (`blas`: the other cores compile)
        for fn, ins, outs, dead in steps:
            slots[outs] = fn(*slots[ins]); slots[dead] = None   # free what no later step reads
        outputs: checked against the declared dtypes and sizes, copied when they alias an
                 input or a constant

A plan refuses, at build time, graphs it cannot run whole (regions, sequences, optionals,
strings, unknown ops: `NotPlannable`), and any exception while running is the caller's signal
to wait for the native code instead (`run` returns None): tier 0 only ever makes a first result
earlier, it never adds an error or a result the native code would not give.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnxjit.blas import one_thread
from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ir.types import DType, TensorType
from onnxjit.tiered.registry import KERNELS, TYPES, Decline

__all__ = ["Plan", "NotPlannable"]




_RANDOM = {"Bernoulli", "RandomUniform", "RandomUniformLike", "RandomNormal",
           "RandomNormalLike", "Multinomial"}


class NotPlannable(Exception):
    """The graph holds something tier 0 does not run (the reason is the message)."""


def _host(node: Node) -> Callable[..., list]:
    """fn(*inputs) running the node's host evaluation (numpy semantics of constant folding)."""
    from onnxjit.ir.host_eval import evaluate_node

    slots = list(node.inputs)

    def run(*ins: Any) -> list:
        env = {v: a for v, a in zip(slots, ins) if v is not None}
        return evaluate_node(node, env.__getitem__)

    return run


def _step(node: Node) -> tuple[Callable[..., list], Callable[..., list]]:
    """(the node's kernel, its host evaluation): the second serves a `Decline` of the first."""
    from onnxjit.tiered import (  # noqa: F401  (they fill KERNELS)
        kernels,
        kernels_nn,
        kernels_shape,
        kernels_upsample,
    )

    host = _host(node)
    build = KERNELS.get((node.domain if node.domain != "ai.onnx" else "", node.op))
    fast = build(node) if build is not None else None
    return (host if fast is None else fast), host


def _check_plannable(graph: Graph) -> None:
    from onnxjit.ir.host_eval import is_host_only
    from onnxjit.ir.opdef import resolve

    for v in list(graph.inputs) + list(graph.outputs):
        t = v.type
        if not isinstance(t, TensorType) or t.dtype == DType.STRING:
            raise NotPlannable(f"{v.describe()} is not a numeric tensor")
    for n in graph.nodes:
        if any(True for _ in n.regions()):
            raise NotPlannable(f"{n.describe()} has subgraph regions")
        if is_host_only(n):
            raise NotPlannable(f"{n.describe()} runs on the host (sequences, strings, "
                               "random draws)")
        for v in n.outputs:
            if v.dtype is not None and v.dtype not in TYPES:
                raise NotPlannable(f"{v.describe()} is {v.dtype.name}: the native code "
                                   "rounds such types once, numpy at every step")
        d = resolve(n)  # UnsupportedError / ModelError: the compile will say it
        if n.op in _RANDOM or d.draws is not None and d.draws(n):
            raise NotPlannable(f"{n.describe()} draws random numbers (seeded draws must be "
                               "the native code's)")
        if d.evaluate is None and d.scalar is None:
            raise NotPlannable(f"{n.describe()} has no host evaluation")


class Plan:
    """A graph's steps over numbered slots (module docstring)."""

    def __init__(self, graph: Graph):
        _check_plannable(graph)
        slot: dict[Value, int] = {}
        template: list[Any] = [None]  # slot 0: an omitted optional input

        def slot_of(v: Value | None) -> int:
            if v is None or not v.name and v.producer is None and v.const is None:
                return 0
            if v not in slot:
                slot[v] = len(template)
                template.append(v.const if v.const is not None and v.producer is None
                                else None)
            return slot[v]

        self.input_slots = [slot_of(v) for v in graph.inputs]
        for v in graph.initializers:
            slot_of(v)
        steps: list[tuple[tuple, tuple[int, ...], tuple[int, ...]]] = []
        for n in graph.nodes:
            ins = tuple(slot_of(v) for v in n.inputs)
            outs = tuple(slot_of(v) for v in n.outputs)
            steps.append((_step(n), ins, outs))
        self.output_slots = [slot_of(v) for v in graph.outputs]
        self.out_types = [v.type for v in graph.outputs]
        # free each computed value after its last reader (constants and inputs stay)
        keep = set(self.output_slots) | set(self.input_slots) | {0}
        keep |= {i for i, a in enumerate(template) if a is not None}
        last: dict[int, int] = {}
        for k, (_, ins, _) in enumerate(steps):
            for i in ins:
                last[i] = k
        dead: list[list[int]] = [[] for _ in steps]
        for i, k in last.items():
            if i not in keep:
                dead[k].append(i)
        self.steps = [(fn, host, ins, outs, tuple(d))
                      for ((fn, host), ins, outs), d in zip(steps, dead)]
        self.template = template
        self.consts = {id(a) for a in template if a is not None}

    def run(self, arrays: list[np.ndarray]) -> tuple | None:
        """The graph's outputs for `arrays` (the graph inputs in order), or None when tier 0
        cannot give them (the caller then waits for native code)."""
        env = list(self.template)
        for i, a in zip(self.input_slots, arrays):
            env[i] = a
        try:
            with one_thread(), np.errstate(all="ignore"):  # inf and NaN as the native code
                get = env.__getitem__
                for fn, host, ins, outs, dead in self.steps:
                    try:
                        res = fn(*map(get, ins))
                    except Decline:
                        res = host(*map(get, ins))
                    if len(outs) == 1:
                        env[outs[0]] = res[0]
                    else:
                        for i, r in zip(outs, res):
                            env[i] = r
                    for i in dead:
                        env[i] = None
            return self._outputs(env, arrays)
        except Exception:  # noqa: BLE001 - the native code's own checks will report it
            return None

    def _outputs(self, env: list[Any], arrays: list[np.ndarray]) -> tuple | None:
        given = {id(a) for a in arrays} | self.consts
        out = []
        for i, t in zip(self.output_slots, self.out_types):
            a = np.asarray(env[i])
            if a.dtype != t.dtype.numpy:
                return None  # a kernel disagreeing with the declared type: not ours to say
            if t.shape is not None:
                if len(t.shape) != a.ndim or any(isinstance(d, int) and d != n
                                                 for d, n in zip(t.shape, a.shape)):
                    return None
            if id(a) in given or not a.flags.owndata or not a.flags.c_contiguous:
                a = np.array(a, order="C")
            out.append(a)
        return tuple(out)
