"""fold-batchnorm: inference BatchNormalization with constant parameters disappears.

BN computes y = x * a[c] + b[c] per channel c (axis 1), with a = scale / sqrt(var + eps) and
b = B - mean * a (computed in x's element type, like the op's own semantics).

Algorithm, one forward sweep; a BN qualifies when it is in inference mode (no training_mode=1,
one output), its four parameters are constants, it has the per-channel layout (not the legacy
spatial=0 per-activation form), and its input is a float tensor of rank >= 2:
1) if x is produced by a Conv / ConvTranspose with a constant W (and constant bias, if any)
   whose output has no other reader, the producer's weights are scaled per output channel
   (W'[m] = W[m] * a[m]; for ConvTranspose, whose W is (C, M/group, ...), the output channel of
   W[c, j] is (c // (C/group)) * (M/group) + j) and its bias becomes B' = B * a + b; the BN is
   dropped and its readers read the producer's (new) output;
2) likewise after a Gemm with constant B (rank-2 x, channel = column): B's columns (rows when
   transB) are scaled by a, and C' = beta * C * a + b with beta = 1;
3) likewise after a 2-D MatMul with constant B: B's columns are scaled and an `Add(y, b)` is
   inserted (the epilogue pass later fuses it into the matmul);
4) any other qualifying BN becomes `Mul(x, a) -> Add(., b)` with a, b shaped (C, 1, ..., 1),
   which the elementwise fuser merges with its neighbours.
A weight shared by several nodes, or held by anything else, is copied; one only this graph
holds (a fill folding made, `_exclusive`) is scaled in place: ResNet-50's 100 MB took 100 ms.
"""

from __future__ import annotations

import sys

import numpy as np

from onnxjit.ir.graph import Graph, Model, Node, Value, replace_uses
from onnxjit.ir.ops.elementwise.arithmetic import float_attr, int_attr
from onnxjit.ir.types import DType, TensorType
from onnxjit.passes import PassContext, PassResult

name = "fold-batchnorm"
level = "graph"


def _const(graph: Graph, arr: np.ndarray, hint: str) -> Value:
    arr = np.ascontiguousarray(arr)
    v = Value(TensorType(DType.from_numpy(arr.dtype), tuple(arr.shape)), hint, const=arr)
    graph.initializers.append(v)
    return v


def bn_affine(node: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, b) of an inference BN with constant per-channel parameters, else None."""
    if node.op != "BatchNormalization" or node.domain not in ("", "ai.onnx"):
        return None
    if len(node.outputs) != 1 or len(node.inputs) != 5 or any(v is None for v in node.inputs):
        return None
    if node.version >= 14 and node.attr("training_mode", 0) != 0:
        return None
    if node.version < 9 and node.attr("spatial", 1) != 1:
        return None
    x = node.inputs[0]
    t = x.tensor_type
    if t is None or t.shape is None or len(t.shape) < 2 or not t.dtype.is_float:
        return None
    params = [v.const for v in node.inputs[1:]]
    if any(p is None or p.ndim != 1 for p in params):
        return None
    scale, bias, mean, var = params
    dt = np.dtype(t.dtype.numpy).type
    if dt not in (np.float32, np.float64):  # half types: keep the op's own rounding
        return None
    eps = float_attr(node, "epsilon", 1e-5)
    a = scale.astype(dt) / np.sqrt(var.astype(dt) + dt(eps))
    b = bias.astype(dt) - mean.astype(dt) * a
    return a, b


def _sole_reader(x: Value, readers: dict[Value, list[Node]], graph: Graph) -> bool:
    return len(readers.get(x, [])) == 1 and x not in graph.outputs


def _exclusive(arr: np.ndarray) -> bool:
    """Whether a writeable array owning its data is referenced by nothing but one Value's
    `const` and the caller's one variable (CPython's count, which views of it raise too): a
    weight folding made in this compile (ConstantOfShape's fill), not a model's initializer
    (read-only), nor an array another graph shares."""
    # references: the Value's attribute, the caller's variable, this parameter, the call's
    return arr.flags.owndata and arr.flags.writeable and sys.getrefcount(arr) <= 4


def _fold_conv(graph: Graph, prod: Node, a: np.ndarray, b: np.ndarray,
               readers: dict[Value, list[Node]]) -> bool:
    w = prod.inputs[1]
    bias = prod.input(2)
    if w is None or w.const is None or (bias is not None and bias.const is None):
        return False
    wc = w.const.astype(a.dtype, copy=False)  # no copies of equal dtype: ResNet-50's 100 MB
    if prod.op == "Conv":
        if wc.shape[0] != a.shape[0]:
            return False
        factor = a.reshape((-1,) + (1,) * (wc.ndim - 1))
    else:  # ConvTranspose: W is (C, M/group, *k)
        group = int_attr(prod, "group", 1)
        c, mg = wc.shape[0], wc.shape[1]
        if mg * group != a.shape[0] or c % group:
            return False
        out_ch = (np.arange(c)[:, None] // (c // group)) * mg + np.arange(mg)[None, :]
        factor = a[out_ch].reshape(wc.shape[:2] + (1,) * (wc.ndim - 2))
    if wc is w.const and _sole_reader(w, readers, graph) and _exclusive(wc):
        # no other reader of the weight, no other reference to its array: scaled in place
        new_w = np.multiply(wc, factor.astype(wc.dtype, copy=False), out=wc)
    else:
        new_w = (wc * factor).astype(w.const.dtype, copy=False)
    old_b = np.zeros_like(a) if bias is None else bias.const.astype(a.dtype)
    new_b = (old_b * a + b).astype(w.const.dtype)
    prod.inputs = [prod.inputs[0], _const(graph, new_w, "w_bn"), _const(graph, new_b, "b_bn")]
    return True


def _fold_gemm(graph: Graph, prod: Node, a: np.ndarray, b: np.ndarray) -> bool:
    bm = prod.inputs[1]
    if bm is None or bm.const is None or bm.const.ndim != 2:
        return False
    c = prod.input(2)
    if c is not None and c.const is None:
        return False
    trans_b = int_attr(prod, "transB", 0) != 0
    bc = bm.const.astype(a.dtype)
    if bc.shape[0 if trans_b else 1] != a.shape[0]:
        return False
    new_b = bc * (a[:, None] if trans_b else a[None, :])
    beta = float_attr(prod, "beta", 1.0)
    old_c = np.zeros(1, a.dtype) if c is None else beta * c.const.astype(a.dtype)
    new_c = old_c * a + b
    if new_c.ndim > 2:
        return False
    dt = bm.const.dtype
    prod.inputs = [prod.inputs[0], _const(graph, new_b.astype(dt), "w_bn"),
                   _const(graph, new_c.astype(dt), "c_bn")]
    prod.attrs = {**prod.attrs, "beta": 1.0}
    return True


def _fold_matmul(graph: Graph, prod: Node, bn: Node, a: np.ndarray, b: np.ndarray
                 ) -> Node | None:
    """Scale B's columns; returns the Add node carrying the shift (to insert after prod)."""
    bm = prod.inputs[1]
    y = prod.outputs[0]
    if bm is None or bm.const is None or bm.const.ndim != 2 or y.shape is None \
            or len(y.shape) != 2 or bm.const.shape[1] != a.shape[0]:
        return None
    dt = bm.const.dtype
    prod.inputs = [prod.inputs[0], _const(graph, (bm.const.astype(a.dtype) * a).astype(dt),
                                          "w_bn")]
    shifted = Value(y.type, bn.outputs[0].name)
    return Node("Add", [y, _const(graph, b.astype(dt), "b_bn")], [shifted], {}, "", bn.version,
                name=bn.name)


def _affine_nodes(graph: Graph, bn: Node, a: np.ndarray, b: np.ndarray) -> list[Node]:
    x, y = bn.inputs[0], bn.outputs[0]
    shape = (-1,) + (1,) * (len(x.shape) - 2)
    scaled = Value(y.type, (y.name or "bn") + "_scaled")
    mul = Node("Mul", [x, _const(graph, a.reshape(shape), "bn_a")], [scaled], {}, "", bn.version,
               name=bn.name)
    out = Value(y.type, y.name)
    add = Node("Add", [scaled, _const(graph, b.reshape(shape), "bn_b")], [out], {}, "", bn.version,
               name=bn.name)
    return [mul, add]


def run(model: Model, ctx: PassContext) -> PassResult:
    graph = model.graph
    readers = graph.users()
    new_nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        ab = bn_affine(node)
        if ab is None:
            new_nodes.append(node)
            continue
        a, b = ab
        x, y = node.inputs[0], node.outputs[0]
        prod = x.producer
        sole = prod is not None and prod.domain in ("", "ai.onnx") and \
            _sole_reader(x, readers, graph) and prod.outputs[0] is x
        if sole and prod.op in ("Conv", "ConvTranspose") and _fold_conv(graph, prod, a, b, readers):
            replace_uses(graph, y, x)
            x.name = x.name or y.name
        elif sole and prod.op == "Gemm" and len(x.shape) == 2 and _fold_gemm(graph, prod, a, b):
            replace_uses(graph, y, x)
        elif sole and prod.op == "MatMul" and node.version >= 7 and \
                (add := _fold_matmul(graph, prod, node, a, b)):
            new_nodes.append(add)
            replace_uses(graph, y, add.outputs[0])
        elif node.version >= 7:  # Mul/Add broadcast numpy-style from opset 7
            nodes = _affine_nodes(graph, node, a, b)
            new_nodes.extend(nodes)
            replace_uses(graph, y, nodes[-1].outputs[0])
        else:
            new_nodes.append(node)
            continue
        changed = True
    graph.nodes = new_nodes  # replaced weights are left for dce
    return PassResult(model, changed)
