"""The fast call of a staged signature that is one native prefix followed by a host-only tail.

A classifier exported by skl2onnx ends in ZipMap (a list of dicts, built on the host); all that
comes before it compiles natively. Such a signature's root stage has no child stage: every call
runs the prefix's builtin (`onnxjit.fastcall`), then the tail's host functions. `tail_fastcall`
composes the two into one callable with the builtin's protocol, so that the runtime serves the
signature from its fast path as it serves a native one. Values live in slots numbered once
(the constants the tail reads, the graph inputs, the prefix's outputs, each tail node's outputs):

    call(*arrays):
        r = prefix_builtin(*arrays)      # checks every dtype and shape, runs the native code
        if r is not a tuple: return r    # -2: take the checked path; k > 0: check k failed
        slots = [None] + consts + arrays + r   # slot 0: an omitted optional input
        for each tail node: slots += its step(slots at its input numbers)
        return the slots of the graph outputs

An error in the tail (or no memory for the prefix's outputs) returns -2: the checked path runs
the call again, which is safe because both parts are pure, and reports the error in context.
Tails that read region values, or whose outputs are constants, keep the checked path
(`Stage.run`). Steps never write their inputs, so the constants are passed uncopied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["tail_fastcall"]


class TailFast:
    """What the runtime takes from `Artifact.fast`: the callable as `fn`."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn


def _step(node: Any, fn: Callable | None) -> Callable[[list], list] | None:
    from onnxjit.ir.host_eval import host_step

    step = host_step(node)
    if step is not None or fn is None:
        return step

    def lookup(v: Any) -> Any:  # the node reads only its inputs (checked by the caller)
        raise KeyError(v)
    return lambda ins: fn(node, ins, lookup)


def tail_fastcall(stage: Any, reads: Callable[[Any], list]) -> TailFast | None:
    """The composed fast call of a root `stage` that is a native prefix taking every graph input
    plus a host-only tail, or None when the stage has another form (or the prefix no builtin);
    `reads(node)`: the values a node reads, its regions' free values included."""
    g = stage.model.graph
    if (not stage.prefix or stage.rest or stage.splice is not None or stage.host is not None
            or stage.bind or stage.artifact is None
            or stage.prefix_inputs != list(range(len(g.inputs)))):
        return None
    inputs = set(g.inputs)
    consts = list(dict.fromkeys(  # tables the tail reads (a classifier's string labels)
        v for n in stage.tail for v in reads(n)
        if v is not None and v.const is not None and v.producer is None and v not in inputs))
    # slot 0: an omitted optional input; then the constants, the inputs, the prefix's outputs
    slot = {v: i for i, v in enumerate(consts + list(g.inputs) + list(stage.boundary), 1)}
    steps = []
    for node, fn in zip(stage.tail, stage._tail_fns):
        got = [v for v in reads(node) if v is not None]
        step = _step(node, fn)
        if step is None or any(v not in slot for v in got) or set(got) != {
                v for v in node.inputs if v is not None}:
            return None  # a constant, a region's read, no host step: the checked path
        steps.append((step, [0 if v is None else slot[v] for v in node.inputs]))
        for v in node.outputs:
            slot[v] = len(slot) + 1
    if any(v not in slot or v in consts for v in g.outputs):
        return None  # (a constant output is copied for each call: the checked path)
    out = [slot[v] for v in g.outputs]
    built = stage.artifact.fast
    if built is None:
        return None
    prefix = built.fn
    tables = [v.const for v in consts]
    table_ids = {id(t) for t in tables}

    def call(*args: Any) -> Any:
        try:
            r = prefix(*args)
        except MemoryError:
            return -2
        if r.__class__ is not tuple:
            return r
        vals = [None, *tables, *args, *r]
        try:
            for step, ins in steps:
                vals.extend(step([vals[i] for i in ins]))
            res = tuple([vals[i] for i in out])
            if table_ids and not table_ids.isdisjoint(map(id, res)):
                return -2  # a constant passed through: the checked path copies it
            return res
        except Exception:  # the checked path runs the call again and reports it in context
            return -2

    return TailFast(call)
