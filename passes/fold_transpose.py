"""fold-transpose: transposes into matmul operands; transpose and reshape chains collapse.

Requires concrete shapes (it runs per signature). One forward sweep over the nodes:
1) Transpose(Transpose(x, p1), p2) reads x directly with the composed perm q[i] = p1[p2[i]];
   a Transpose whose (composed) perm is the identity is removed (its readers read x);
2) a Reshape whose input comes from a reshape-like node (Reshape, Flatten, Squeeze, Unsqueeze)
   reshapes that node's source instead, to its own static output shape (a new constant shape;
   never when that shape holds a 0, which Reshape would read as "copy"); a Reshape to its
   input's own shape is removed;
3) a float MatMul (both operands of rank >= 2) whose operand is a Transpose swapping only the
   last two dims becomes an `onnxjit.FusedMatMul` reading the transpose's input with
   trans_a/trans_b set (the `Matmul` statement reads a transposed window directly); a Gemm
   whose A or B is a 2-D Transpose toggles transA/transB instead.
Readers of a folded node's output that are not rewritten keep it alive; dce removes the
transposes nobody reads any more.
"""

from __future__ import annotations

import numpy as np

from onnxjit.ir.graph import Graph, Model, Node, Value
from onnxjit.ir.ops_fused import FUSED_DOMAIN
from onnxjit.ir.types import DType, TensorType
from onnxjit.passes import PassContext, PassResult
from onnxjit.passes.simplify import replace_uses

name = "fold-transpose"
level = "graph"

_RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
_FLOATS = (DType.FLOAT, DType.DOUBLE)


def _is(node: Node | None, *ops: str) -> bool:
    return node is not None and node.domain in ("", "ai.onnx") and node.op in ops


def perm_of(node: Node) -> tuple[int, ...] | None:
    """A Transpose's permutation (default: reversed dims); None if the rank is unknown."""
    shape = node.inputs[0].shape
    if shape is None:
        return None
    perm = node.attr("perm")
    return tuple(int(p) for p in perm) if perm is not None else tuple(range(len(shape)))[::-1]


def _swaps_last_two(node: Node) -> bool:
    perm = perm_of(node)
    if perm is None or len(perm) < 2:
        return False
    r = len(perm)
    return perm == (*range(r - 2), r - 1, r - 2)


def _static(v: Value) -> tuple | None:
    t = v.tensor_type
    return t.shape if t is not None and t.is_static else None


def _fold_transpose_pair(node: Node) -> bool:
    src = node.inputs[0].producer
    if not _is(src, "Transpose"):
        return False
    p1, p2 = perm_of(src), perm_of(node)
    if p1 is None or p2 is None or len(p1) != len(p2):
        return False
    node.inputs = [src.inputs[0]]
    node.attrs = {**node.attrs, "perm": tuple(p1[i] for i in p2)}
    return True


def _fold_reshape(graph: Graph, node: Node) -> bool:
    src = node.inputs[0].producer
    out = _static(node.outputs[0])
    if not _is(src, *_RESHAPES) or out is None or 0 in out or src.inputs[0] is None:
        return False
    arr = np.array(out, dtype=np.int64)
    shape = Value(TensorType(DType.INT64, (len(out),)), "shape", const=arr)
    graph.initializers.append(shape)
    node.inputs = [src.inputs[0], shape]
    return True


def _fold_into_matmul(node: Node) -> Node | None:
    a, b = node.inputs[0], node.inputs[1]
    if a.shape is None or b.shape is None or len(a.shape) < 2 or len(b.shape) < 2 or \
            node.outputs[0].dtype not in _FLOATS:
        return None
    ta = _is(a.producer, "Transpose") and _swaps_last_two(a.producer)
    tb = _is(b.producer, "Transpose") and _swaps_last_two(b.producer)
    if not (ta or tb):
        return None
    ins = [a.producer.inputs[0] if ta else a, b.producer.inputs[0] if tb else b]
    out = Value(node.outputs[0].type, node.outputs[0].name)
    attrs = {"trans_a": int(ta), "trans_b": int(tb), "alpha": 1.0}
    return Node("FusedMatMul", ins, [out], attrs, FUSED_DOMAIN, 1, name=node.name)


def _fold_into_gemm(node: Node) -> bool:
    changed = False
    for i, attr in ((0, "transA"), (1, "transB")):
        v = node.inputs[i]
        if _is(v.producer, "Transpose") and len(v.shape or ()) == 2 and \
                perm_of(v.producer) == (1, 0):
            node.inputs[i] = v.producer.inputs[0]
            node.attrs = {**node.attrs, attr: 1 - int(node.attr(attr, 0))}
            changed = True
    return changed


def run(model: Model, ctx: PassContext) -> PassResult:
    graph = model.graph
    changed = False
    kept: list[Node] = []
    for node in graph.nodes:
        if _is(node, "Transpose"):
            changed |= _fold_transpose_pair(node)
            perm = perm_of(node)
            # Only with a static shape: the output's type must not lose what it declares.
            if perm is not None and perm == tuple(range(len(perm))) and \
                    _static(node.inputs[0]) is not None:
                replace_uses(graph, node.outputs[0], node.inputs[0])
                changed = True
                continue
        elif _is(node, "Reshape"):
            changed |= _fold_reshape(graph, node)
            if _static(node.inputs[0]) is not None and \
                    _static(node.inputs[0]) == _static(node.outputs[0]):
                replace_uses(graph, node.outputs[0], node.inputs[0])
                changed = True
                continue
        elif _is(node, "MatMul"):
            fused = _fold_into_matmul(node)
            if fused is not None:
                replace_uses(graph, node.outputs[0], fused.outputs[0])
                model.opset_imports.setdefault(FUSED_DOMAIN, 1)
                kept.append(fused)
                changed = True
                continue
        elif _is(node, "Gemm"):
            changed |= _fold_into_gemm(node)
        kept.append(node)
    graph.nodes = kept
    return PassResult(model, changed)
