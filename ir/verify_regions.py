"""Verifier rules between a control-flow node and its regions (If, Loop, Scan, SequenceMap).

The ONNX IR spec fixes how many inputs and outputs each region has in terms of its node: an If
branch yields one value per output of the If; a Loop body takes the iteration number, the
condition and the carried values and yields the condition, the carried values and the scan
outputs; a Scan body takes the states and one slice per scan input. `check_regions` compares
the counts (types are left to shape inference, since region values may be untyped) and raises a
ModelError naming the subgraph and the node.
"""

from __future__ import annotations

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Graph, Node


def check_regions(node: Node) -> None:
    """Check the region arity rules of one node (see the module docstring); ModelError names
    the subgraph and the node."""
    def region(name: str) -> Graph | None:
        g = node.attrs.get(name)
        return g if isinstance(g, Graph) else None

    def bad(g: Graph, role: str, what: str, have: int, want: str) -> ModelError:
        return ModelError(f"subgraph '{g.name}' ({role} of {node.op}) has {have} {what}; "
                          f"expected {want}", where=node)

    n_out = len(node.outputs)
    if node.op == "If":
        for role in ("then_branch", "else_branch"):
            g = region(role)
            if g is None:
                raise ModelError(f"If needs a graph attribute '{role}'", where=node)
            if len(g.outputs) != n_out:
                raise bad(g, role, "outputs", len(g.outputs), f"{n_out}, one per output of If")
    elif node.op == "Loop":
        g = region("body")
        if g is None:
            raise ModelError("Loop needs a graph attribute 'body'", where=node)
        n_car = max(len(node.inputs) - 2, 0)
        if len(g.inputs) != n_car + 2:
            raise bad(g, "body", "inputs", len(g.inputs),
                      f"{n_car + 2} (iteration number, condition, {n_car} carried)")
        if len(g.outputs) != n_out + 1 or n_out < n_car:
            raise bad(g, "body", "outputs", len(g.outputs),
                      f"{n_out + 1} (condition, {n_car} carried, then scan outputs) for "
                      f"{n_out} Loop outputs")
    elif node.op == "Scan":
        g = region("body")
        if g is None:
            raise ModelError("Scan needs a graph attribute 'body'", where=node)
        first = 1 if node.version < 9 else 0
        n_state = len(node.inputs) - first - int(node.attrs.get("num_scan_inputs", 0) or 0)
        if len(g.inputs) != len(node.inputs) - first:
            raise bad(g, "body", "inputs", len(g.inputs), f"{len(node.inputs) - first} "
                      "(states, then one slice per scan input)")
        if len(g.outputs) != n_out or n_out < n_state:
            raise bad(g, "body", "outputs", len(g.outputs), f"{n_out}, one per Scan output")
    elif node.op == "SequenceMap":
        g = region("body")
        if g is not None and (len(g.inputs) != len(node.inputs) or len(g.outputs) != n_out):
            raise bad(g, "body", "inputs and outputs", len(g.inputs) + len(g.outputs),
                      f"{len(node.inputs)} inputs and {n_out} outputs")
