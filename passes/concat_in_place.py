"""Concat in place: the producers of a Concat's inputs write straight into its output.

Part of lower-to-loops (it runs before any node is lowered, so it is not a pass of its own):
a Concat whose every input is one contiguous block of its output (all dims before the axis are
1: batch-1 NCHW concats on the channel axis, any axis-0 concat) gives each eligible input value
a buffer that is a view of the output at that input's byte offset. Its producer then writes the
block in place, and the Concat's lowering (`tensor.movement._concat_lower`) copies only the inputs
not placed (none, usually: no kernel at all). Inception and SqueezeNet modules concatenate
branch outputs this way; DenseNet's chains of concats nest (a concat's output placed in the
next one).

Algorithm: walk the Concats last to first (a later concat places its inputs first, so an
earlier concat whose output is one of them nests inside it); the output needs a buffer that is
a temp of this lowering or a view made here (not a graph output: outputs never alias). An input
is placed when it is a value computed by a node (not a graph input, constant or output), not
yet given a buffer (another Concat placed it, or it appears twice), of the output's dtype and
with elements. Placement only decides where values live: what each kernel computes is
unchanged, and plan-memory keeps the whole output live from its first block's producer on.
"""

from __future__ import annotations

import math
from typing import Protocol

from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ir.loops import Buffer


class Lowering(Protocol):
    """What this step uses of lower-to-loops' `Lowering` (which calls it)."""

    graph: Graph
    of: dict[Value, Buffer]

    def buf(self, value: Value) -> Buffer: ...

    def place(self, value: Value, base: Buffer, offset: int) -> Buffer: ...

#: Place Concat inputs in their output; False copies every input (one kernel per Concat).
IN_PLACE = True


def place_concat_inputs(low: Lowering) -> None:
    """Give the inputs of eligible Concats views into their outputs (see the module docstring)."""
    if not IN_PLACE:
        return
    g = low.graph
    fixed = {id(v) for v in g.inputs} | {id(v) for v in g.outputs}
    made: set[int] = set()  # buffers made here (outputs of later concats may be views)
    for node in reversed(g.nodes):
        if node.op != "Concat" or node.domain not in ("", "ai.onnx"):
            continue
        out = node.outputs[0]
        if id(out) in fixed or out.const is not None or not _blocks(node):
            continue
        have = low.of.get(out)
        if have is not None and id(have) not in made:
            continue
        y = low.buf(out)
        made.add(id(y))
        offset = 0
        for v in node.inputs:
            if v is None:
                continue
            nbytes = math.prod(v.type.shape) * y.dtype.itemsize  # type: ignore[union-attr]
            if _placeable(v, y, fixed, low):
                low.of[v] = view = low.place(v, y, offset)
                made.add(id(view))
            offset += nbytes


def _blocks(node: Node) -> bool:
    """True when each input of the Concat is one contiguous block of its output."""
    shape = getattr(node.outputs[0].type, "shape", None)
    if shape is None or not all(isinstance(d, int) for d in shape):
        return False
    axis = int(node.attr("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    return 0 <= axis < len(shape) and math.prod(shape[:axis]) == 1


def _placeable(v: Value, y: Buffer, fixed: set[int], low: Lowering) -> bool:
    t = v.type
    return (id(v) not in fixed and v.const is None and v.producer is not None
            and v not in low.of and getattr(t, "dtype", None) == y.dtype
            and getattr(t, "is_static", False) and math.prod(t.shape) > 0)  # type: ignore
