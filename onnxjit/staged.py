"""Staged execution: the run-time shape phase for graphs whose shapes depend on data.

Shape specialisation binds the input shapes of a call and infers every other shape. Some shapes
still depend on values, not shapes: a Reshape whose target is computed, a ReduceSum whose axes
arrive as an input, the output of NonZero. Such a signature runs in stages; each stage is a
graph whose inputs are concrete arrays:

    stage(graph):
        P = the longest run of leading nodes whose output shapes are all static
        if P is not empty: compile P natively (one artifact) and run it
        else: F = the first node; evaluate F on the host (its op's numpy `evaluate`)
        the remaining nodes form the next stage, specialised on the arrays now known:
            every input's shape, and the VALUES of the small integer tensors that the next
            node reads (shape-like operands: targets, axes, pads, sizes), bound as constants

A child stage is built once per (shapes, bound values) key and kept, so a repeated call walks
the same chain of compiled stages: the host only evaluates ops whose output size depends on
large data (NonZero, Unique...). Every stage strictly consumes at least one node, so a chain
ends. Native stage artifacts go through the owner's memory and disk caches under a key that
extends the signature's key by the chain of stage keys.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxjit.errors import UnsupportedError
from onnxjit.ir.graph import Graph, Model, Node, Value, clone_model
from onnxjit.ir.types import DType, TensorType

__all__ = ["Staged", "first_dynamic", "BIND_LIMIT"]

#: Integer tensors with at most this many elements are bound by value into the next stage.
BIND_LIMIT = 64


def _static(v: Value) -> bool:
    t = v.type
    return isinstance(t, TensorType) and t.is_static


def first_dynamic(model: Model) -> int | None:
    """Index of the first node that cannot be compiled for the bound shapes (None: none):
    an output shape that is not static, or an op evaluated only on the host (its output size
    depends on data even when a declared type claims a fixed shape)."""
    from onnxjit.ir.opdef import resolve

    for i, n in enumerate(model.graph.nodes):
        if not all(_static(v) for v in n.outputs if v is not None):
            return i
        d = resolve(n)
        if d.lower is None and d.scalar is None and d.evaluate is not None:
            return i
        if any(v is not None and v.const is None for v in _value_inputs(n, d)):
            return i
    return None


def _value_inputs(node: Node, d: Any) -> list[Value | None]:
    return [node.input(k) for k in d.value_inputs]


class Stage:
    """One graph of the chain: a native prefix or a host node, then children by key."""

    def __init__(self, owner: Any, model: Model, key: str):
        self.owner = owner
        self.model = model
        self.key = key
        self.children: dict[tuple, Stage] = {}
        self.lock = threading.Lock()
        g = model.graph
        cut = first_dynamic(model)
        cut = len(g.nodes) if cut is None else cut
        #: Inputs whose values this stage binds into its child (then it computes nothing).
        self.bind: list[Value] = []
        self.host: Node | None = None
        if cut == 0 and g.nodes:
            from onnxjit.ir.opdef import resolve

            first = g.nodes[0]
            wanted = _value_inputs(first, resolve(first))
            self.bind = [v for v in g.inputs if v in first.inputs
                         and _bindable_type(v, any_dtype=v in wanted)]
            if not self.bind:
                self.host = first
        self.prefix = g.nodes[:cut]
        self.rest = g.nodes[1:] if self.host else g.nodes[cut:]
        done = self.prefix or ([self.host] if self.host else [])
        later = {v for n in self.rest for v in n.inputs if v is not None} | set(g.outputs)
        self.boundary = [v for n in done for v in n.outputs if v in later]
        self.artifact: Any = None
        self.prefix_inputs: list[int] = []
        if self.prefix:
            used = {v for n in self.prefix for v in n.inputs if v is not None}
            self.prefix_inputs = [i for i, v in enumerate(g.inputs) if v in used]

    # running ------------------------------------------------------------------------------
    def run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        g = self.model.graph
        env: dict[Value, np.ndarray] = dict(zip(g.inputs, arrays))
        if self.prefix:
            art = self.artifact or self._compile_prefix()
            outs = art.run([arrays[i] for i in self.prefix_inputs])
            env.update(zip(self.boundary, outs))
        elif self.host is not None:
            env.update(zip(self.host.outputs, _evaluate(self.host, env)))
        if not self.rest:
            return [_value(v, env) for v in g.outputs]
        needed = _needed_inputs(self.rest, g.outputs, env)
        feeds = [env[v] for v in needed]
        key = tuple((a.dtype.str, a.shape) for a in feeds) + tuple(
            env[v].tobytes() for v in self.bind)
        child = self.children.get(key)
        if child is None:
            with self.lock:
                child = self.children.get(key)
                if child is None:
                    child = self._child(needed, feeds, key)
                    self.children[key] = child
        return child.run([a for v, a in zip(needed, feeds) if v not in self.bind])

    # building -------------------------------------------------------------------------------
    def _compile_prefix(self) -> Any:
        with self.lock:
            if self.artifact is None:
                g = self.model.graph
                sub = Graph(list(self.prefix), [g.inputs[i] for i in self.prefix_inputs],
                            list(self.boundary),
                            [v for v in g.initializers
                             if any(v in n.inputs for n in self.prefix)], name=g.name)
                for k, v in enumerate(sub.outputs):
                    v.name = v.name or f"stage_value{k}"
                sub.output_names = [v.name for v in sub.outputs]
                model = Model(sub, dict(self.model.opset_imports))
                self.artifact = self.owner._stage_artifact(self.key, model)
            return self.artifact

    def _child(self, needed: list[Value], feeds: list[np.ndarray], key: tuple) -> Stage:
        g = self.model.graph
        inits = [v for v in g.initializers
                 if any(v in n.inputs for n in self.rest) or v in g.outputs]
        sub = Model(Graph(list(self.rest), list(needed), list(g.outputs), inits, g.name,
                          list(g.output_names or [])), dict(self.model.opset_imports))
        model = clone_model(sub)
        graph = model.graph
        for v, a in zip(list(graph.inputs), feeds):
            v.type = TensorType(DType.from_numpy(a.dtype), tuple(a.shape))
        for v, orig in zip(list(graph.inputs), needed):
            if orig in self.bind:
                v.const = env_copy(feeds[needed.index(orig)])
                graph.inputs.remove(v)
                graph.initializers.append(v)
        from onnxjit import cache as cache_mod

        child_key = cache_mod.make_key(self.key, repr(key))
        model = self.owner._stage_passes(model, child_key)
        return Stage(self.owner, model, child_key)


def env_copy(a: np.ndarray) -> np.ndarray:
    c = np.array(a, copy=True)
    c.flags.writeable = False
    return c


def _bindable_type(v: Value, any_dtype: bool = False) -> bool:
    """Small integer tensors (shape-like operands) are bound by value; so are small tensors of
    any numeric type that an op declares as value inputs (Resize scales...)."""
    t = v.type
    if not isinstance(t, TensorType) or not t.is_static:
        return False
    if t.dtype.numpy.kind not in ("iufb" if any_dtype else "iu"):
        return False
    return int(np.prod(t.shape, dtype=np.int64)) <= BIND_LIMIT


def _needed_inputs(nodes: list[Node], outputs: list[Value],
                   env: dict[Value, np.ndarray]) -> list[Value]:
    """Values known now (in `env`) that the remaining nodes or the outputs read, in a fixed
    order: first use."""
    seen: dict[Value, None] = {}
    for n in nodes:
        for v in n.inputs:
            if v is not None and v in env:
                seen.setdefault(v)
    for v in outputs:
        if v in env:
            seen.setdefault(v)
    return list(seen)


def _value(v: Value, env: dict[Value, np.ndarray]) -> np.ndarray:
    if v in env:
        return env[v]
    if v.const is not None:
        return np.array(v.const, copy=True)
    raise UnsupportedError(f"{v.describe()} was not computed by any stage")


def _evaluate(node: Node, env: dict[Value, np.ndarray]) -> list[np.ndarray]:
    from onnxjit.ir.opdef import resolve

    d = resolve(node)
    if d.evaluate is None:
        raise UnsupportedError("the output shape depends on input data and the op has no "
                               "host evaluation for a run-time shape phase", where=node)
    ins = [None if v is None else (env[v] if v in env else v.const) for v in node.inputs]
    outs = d.evaluate(node, ins)
    return [np.asarray(o) for o in outs]


class Staged:
    """The executable of a signature with data-dependent shapes (see the module docstring)."""

    def __init__(self, signature: tuple, root: Stage, on_run: Callable[[], None] | None = None):
        self.signature = signature
        self.root = root
        self.source = "staged"
        self.compile_seconds = 0.0

    def run(self, args: tuple | list) -> tuple:
        return tuple(self.root.run([np.ascontiguousarray(a) for a in args]))
