"""fold-transpose: transposes into matmul operands; transpose and reshape chains collapse.

Requires concrete shapes (it runs per signature). One forward sweep over the nodes:
1) Transpose(Transpose(x, p1), p2) reads x directly with the composed perm q[i] = p1[p2[i]];
   a Transpose whose (composed) perm is the identity is removed (its readers read x);
2) a Reshape whose input comes from a reshape-like node (Reshape, Flatten, Squeeze, Unsqueeze)
   reshapes that node's source instead, to its own static output shape (a new constant shape;
   never when that shape holds a 0, which Reshape would read as "copy"); a Reshape to its
   input's own shape is removed;
3) a float MatMul (both operands of rank >= 2) whose operand is a Transpose becomes an
   `onnxjit.FusedMatMul` reading the transpose's input: with trans_a/trans_b set when the perm swaps
   only the last two dims (the `Matmul` statement reads a transposed window), else (with
   `FOLD_VIEWS`) with `a_perm`/`b_perm` when the transposed operand still has a contiguous dim among
   its last two (attention's heads: Transpose(Reshape(x), [0,2,1,3]) or [0,2,3,1];
   `ir/ops/linalg/strided_views.py` reads it as strided windows), unless K is a known 0 (the
   FusedMatMul lowering needs K > 0; the plain MatMul zero-fills); a Gemm whose A or B is a 2-D
   Transpose toggles transA/transB instead;
4) (with `FOLD_VIEWS`) a Transpose that is the only reader of a float MatMul's (or an
   epilogue-free FusedMatMul's) product, keeping the last dim last, is dropped: the product is
   written through it (`y_perm`), e.g. attention's context straight into [B, S, heads, dh];
   not after a MatMul whose K is a known 0 (as in 3).
Readers of a folded node's output that are not rewritten keep it alive; dce removes the
transposes nobody reads any more.
"""

from __future__ import annotations

import numpy as np

from onnxjit.ir.graph import Graph, Model, Node, Value, replace_uses
from onnxjit.ir.ops.fused.region import FUSED_DOMAIN
from onnxjit.ir.ops.linalg.strided_views import foldable, output_foldable
from onnxjit.ir.symbolic import known_shape
from onnxjit.ir.types import DType, TensorType
from onnxjit.passes import PassContext, PassResult

name = "fold-transpose"
level = "graph"

_RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
_FLOATS = (DType.FLOAT, DType.DOUBLE)

#: Fold batch-dim transposes into FusedMatMul operand/output views (`a_perm`, `b_perm`,
#: `y_perm`); False keeps them as copy kernels.
FOLD_VIEWS = True


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
    return known_shape(t)


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
    if not _is(src, *_RESHAPES) or out is None or 0 in out or src.inputs[0] is None or \
            not all(isinstance(d, int) for d in out):
        return False
    arr = np.array(out, dtype=np.int64)
    shape = Value(TensorType(DType.INT64, (len(out),)), "shape", const=arr)
    graph.initializers.append(shape)
    node.inputs = [src.inputs[0], shape]
    return True


def _operand(v: Value) -> tuple[Value, int, tuple[int, ...] | None] | None:
    """(value to read, trans, view perm) when the MatMul operand `v` is a foldable Transpose."""
    t = v.producer
    if not _is(t, "Transpose"):
        return None
    if _swaps_last_two(t):
        return t.inputs[0], 1, None
    shape, perm = _static(t.inputs[0]), perm_of(t)
    if FOLD_VIEWS and shape is not None and perm is not None and 0 not in shape and \
            foldable(shape, perm):
        return t.inputs[0], 0, perm
    return None


def _fold_into_matmul(node: Node) -> Node | None:
    a, b = node.inputs[0], node.inputs[1]
    if a.shape is None or b.shape is None or len(a.shape) < 2 or len(b.shape) < 2 or \
            node.outputs[0].dtype not in _FLOATS or a.shape[-1] == 0:
        return None  # (K = 0: the plain MatMul zero-fills; a FusedMatMul needs K > 0)
    folds = [_operand(a), _operand(b)]
    if folds == [None, None]:
        return None
    ins, attrs = [], {}
    for v, f, x in zip((a, b), folds, "ab"):
        ins.append(v if f is None else f[0])
        attrs[f"trans_{x}"] = 0 if f is None else f[1]
    attrs["alpha"] = 1.0
    for f, x in zip(folds, "ab"):
        if f is not None and f[2] is not None:
            attrs[f"{x}_perm"] = f[2]
    out = Value(node.outputs[0].type, node.outputs[0].name)
    return Node("FusedMatMul", ins, [out], attrs, FUSED_DOMAIN, 1, name=node.name)


def _readers(nodes: list[Node], v: Value) -> int:
    count = 0
    for n in nodes:
        count += sum(x is v for x in n.inputs)
        for g in n.regions():
            count += sum(x is v for m in g.walk() for x in m.inputs)
    return count


def _fold_output(graph: Graph, node: Node, live: list[Node], kept: list[Node]) -> bool:
    """Write the product of the MatMul/FusedMatMul feeding the Transpose `node` through the
    transpose (`y_perm`), when the transpose is the product's only reader."""
    p = node.inputs[0]
    mm = p.producer
    perm, shape = perm_of(node), _static(p)
    if not FOLD_VIEWS or mm is None or mm not in kept or perm is None or shape is None or \
            0 in shape or p.dtype not in _FLOATS or p in graph.outputs or \
            perm == tuple(range(len(perm))) or not output_foldable(shape, perm) or \
            _readers(live, p) != 1:
        return False
    if _is(mm, "MatMul"):
        if any(v.shape is None or len(v.shape) < 2 for v in mm.inputs) or \
                mm.inputs[0].shape[-1] == 0:
            return False  # (K = 0: the plain MatMul zero-fills; a FusedMatMul needs K > 0)
        fused = Node("FusedMatMul", list(mm.inputs), [p], {"trans_a": 0, "trans_b": 0,
                     "alpha": 1.0}, FUSED_DOMAIN, 1, name=mm.name)
        kept[kept.index(mm)] = mm = fused
    elif not (mm.domain == FUSED_DOMAIN and mm.op == "FusedMatMul" and len(mm.inputs) == 2
              and mm.attr("epilogue") is None and mm.attr("y_perm") is None):
        return False
    mm.attrs = {**mm.attrs, "y_perm": perm}
    mm.outputs = [node.outputs[0]]
    node.outputs[0].producer = mm
    return True


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
    for i, node in enumerate(graph.nodes):
        if _is(node, "Transpose"):
            changed |= _fold_transpose_pair(node)
            perm = perm_of(node)
            if _fold_output(graph, node, kept + graph.nodes[i:], kept):
                model.opset_imports.setdefault(FUSED_DOMAIN, 1)
                changed = True
                continue
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
