"""The `onnxjit.Fused` op: a region of elementwise/broadcast nodes run as one loop nest.

The fuse pass builds it: `inputs` are the values the region reads from outside, `outputs` the
values it makes visible, and the `body` graph holds the member nodes (reading the body's own
input values) with the escaping values as its outputs. Every member has the output shape of the
region, so one loop nest over that shape computes them all.

Lowering (also used for a lone elementwise node): `loop_builder.elementwise` opens the nest and
loads each outside input with its broadcast index; the members' `scalar` rules then run in order
on scalar operands, and each escaping value is stored. Intermediate values never touch memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from onnxjit.errors import CompileError
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.loop_builder import Builder, elementwise
from onnxjit.ir.loops import Operand
from onnxjit.ir.opdef import LowerContext, op, resolve

FUSED_DOMAIN = "onnxjit"


def lower_elementwise_nodes(ctx: LowerContext, nodes: Sequence[Node], inputs: Sequence[Value],
                            body_inputs: Sequence[Value], outputs: Sequence[Value],
                            body_outputs: Sequence[Value], name: str) -> None:
    """One loop nest computing `nodes` (elementwise, in order) from `inputs` into `outputs`.

    `body_inputs[k]` is how the members refer to `inputs[k]`; `body_outputs[k]` is the member
    value stored into `outputs[k]`.
    """
    in_bufs = [ctx.buf(v) for v in inputs]
    out_bufs = [ctx.buf(v) for v in outputs]
    rules = [resolve(n).scalar for n in nodes]

    def body(b: Builder, args: list[Operand]) -> list[Operand]:
        env: dict[Value, Operand] = dict(zip(body_inputs, args))
        for n, rule in zip(nodes, rules):
            if rule is None:
                raise CompileError("fused region holds a non-elementwise node", where=n)
            operands = [None if v is None else env[v] for v in n.inputs]
            env[n.outputs[0]] = rule(b, n, operands)
        return [env[v] for v in body_outputs]

    b = Builder()
    elementwise(b, out_bufs, in_bufs, body)
    ctx.kernel(name, b.body)


def _lower_fused(ctx: LowerContext, node: Node) -> None:
    body = node.attrs["body"]
    lower_elementwise_nodes(ctx, body.nodes, node.inputs, body.inputs, node.outputs,
                            body.outputs, "fused")


op("Fused", (1,), domain=FUSED_DOMAIN, lower=_lower_fused,
   doc="elementwise region built by the fuse pass", symbolic=True)
