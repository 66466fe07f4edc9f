"""onehot-gather: a one-hot matrix times a constant weight becomes a gather of its rows.

Exporters write an embedding lookup as a dense product: `onehot(idx, D) @ W` with W (D, N)
constant, which costs D multiply-adds per output element and a (..., D) float tensor where a
row copy does. Two spellings of the one-hot operand are recognised (its float dtype = W's):
  a) `OneHot(idx, depth, values, axis=-1)` with constant depth == D and values == [0, 1];
     OneHot's rules: idx in [-D, 0) counts from the end, anything else out of [0, D) gives a
     row of zeros;
  b) `Cast(Equal(X, c), to=float)` (jax's and tf2onnx's form) with c a constant of shape
     (1, ..., 1, D) holding 0 .. D-1, and X an integer tensor whose last dim is 1 and whose
     leading dims are the one-hot's (X broadcast along its last dim against c); a row is W[x]
     for 0 <= x < D, zeros otherwise (a negative x matches no column).
Rewrite, for a `MatMul(onehot, W)` (W 2-D, constant, every element finite), or a
`Gemm(onehot, W, C)` without transA (W := alpha * W, transposed for transB; then + beta * C):
    k   = Cast(idx, int64)                              (skipped for int64)
    k   = Where(Less(k, 0), Add(k, D), k)               (a only: OneHot's negative indices)
    sel = Where(Or(Less(k, 0), Greater(k, D - 1)), D, k)
    y   = Gather(W0, sel, axis=0)                       (b: sel's last dim squeezed first)
with W0 = W plus a row of zeros at index D, the row out-of-range indices select. Exact: the
product's row is 1 * W[k] plus zeros (hence the finite W: 0 * inf is NaN), or all zeros.
Needs opset >= 9 (Where). The one-hot nodes stay for their other readers; `dce` drops them
otherwise. Runs in both pipelines: form b's "last dim 1" is often known only once a
signature's shapes are bound (jax broadcasts X with an Expand to a computed shape).
"""

from __future__ import annotations

import numpy as np

from onnxjit.ir.graph import Graph, Model, Node, Value, replace_uses
from onnxjit.ir.types import DType, TensorType
from onnxjit.passes import PassContext, PassResult

name = "onehot-gather"
level = "graph"

_I64 = DType.INT64


def _const(graph: Graph, arr: np.ndarray, hint: str) -> Value:
    arr = np.ascontiguousarray(arr)
    v = Value(TensorType(DType.from_numpy(arr.dtype), tuple(arr.shape)), hint, const=arr)
    graph.initializers.append(v)
    return v


def _default(node: Node | None, op: str) -> bool:
    return node is not None and node.op == op and node.domain in ("", "ai.onnx")


def _onehot_form(v: Value, depth: int) -> tuple[Value, bool] | None:
    """(indices, wraps negatives) when `v` is a 0/1 one-hot of `depth` columns (module
    docstring, forms a and b), else None."""
    p = v.producer
    if _default(p, "OneHot"):
        idx, d, vals = p.input(0), p.input(1), p.input(2)
        if idx is None or d is None or vals is None or d.const is None or vals.const is None \
                or idx.dtype is None or not idx.dtype.is_int or idx.dtype == DType.UINT64 \
                or idx.shape is None:
            return None
        if p.attr("axis", -1) not in (-1, len(idx.shape)) or d.const.size != 1 \
                or int(d.const.reshape(-1)[0]) != depth or vals.const.size != 2 \
                or vals.const.reshape(-1).tolist() != [0, 1]:
            return None
        return idx, True
    if not _default(p, "Cast") or p.inputs[0] is None:
        return None
    eq = p.inputs[0].producer
    if not _default(eq, "Equal") or len(eq.inputs) != 2:
        return None
    for x, c in (eq.inputs, eq.inputs[::-1]):
        if _equal_arange(x, c, depth):
            return x, False
    return None


def _equal_arange(x: Value | None, c: Value | None, depth: int) -> bool:
    """Whether Equal(x, c) is form b's one-hot."""
    if x is None or c is None or c.const is None or x.dtype is None or not x.dtype.is_int:
        return False
    xs, cs = x.shape, c.const.shape
    # c's leading dims are 1 and no more than x's: the one-hot's leading dims are x's
    if xs is None or not xs or xs[-1] != 1 or not cs or len(cs) > len(xs) \
            or any(d != 1 for d in cs[:-1]) or cs[-1] != depth:
        return False
    return bool(np.array_equal(c.const.reshape(-1), np.arange(depth)))


class _Emitter:
    """Appends default-domain nodes of one opset version to a list."""

    def __init__(self, graph: Graph, version: int, label: str):
        self.graph, self.version, self.label, self.nodes = graph, version, label, []

    def node(self, op: str, inputs: list[Value], dtype: DType, shape: tuple | None,
             **attrs) -> Value:
        out = Value(TensorType(dtype, shape), f"{self.label}_{op.lower()}")
        self.nodes.append(Node(op, inputs, [out], attrs, "", self.version, name=out.name))
        return out

    def const(self, value: int) -> Value:
        return _const(self.graph, np.array(value, np.int64), f"{self.label}_k")


def _gather(graph: Graph, mm: Node, idx: Value, wraps: bool, w: np.ndarray
            ) -> tuple[list[Node], Value]:
    """The nodes computing mm's output as a row gather (module docstring)."""
    depth = w.shape[0]
    e = _Emitter(graph, mm.version, mm.name or "onehot")
    shape = idx.shape
    k = idx if idx.dtype == _I64 else e.node("Cast", [idx], _I64, shape, to=_I64.value)
    zero, d = e.const(0), e.const(depth)
    if wraps:
        neg = e.node("Less", [k, zero], DType.BOOL, shape)
        k = e.node("Where", [neg, e.node("Add", [k, d], _I64, shape), k], _I64, shape)
    bad = e.node("Or", [e.node("Less", [k, zero], DType.BOOL, shape),
                        e.node("Greater", [k, e.const(depth - 1)], DType.BOOL, shape)],
                 DType.BOOL, shape)
    sel = e.node("Where", [bad, d, k], _I64, shape)
    if not wraps:  # form b: X's last dim (1) is the one the one-hot spreads along
        axis = len(shape) - 1
        shape = tuple(shape[:-1])
        if mm.version >= 13:
            sel = e.node("Squeeze", [sel, _const(graph, np.array([axis], np.int64), "axes")],
                         _I64, shape)
        else:
            sel = e.node("Squeeze", [sel], _I64, shape, axes=(axis,))
    padded = np.concatenate([w, np.zeros((1, w.shape[1]), w.dtype)])
    y = mm.outputs[0]
    c = mm.input(2)  # a Gemm's C: y = rows + beta * C
    out = Value(y.type, y.name if c is None else f"{y.name}_rows")
    e.nodes.append(Node("Gather", [_const(graph, padded, "rows"), sel], [out], {"axis": 0}, "",
                        mm.version, name=mm.name))
    if c is None:
        return e.nodes, out
    beta = float(mm.attr("beta", 1.0))
    if beta != 1.0:
        c = e.node("Mul", [c, _const(graph, np.array(beta, w.dtype), "beta")], c.dtype, c.shape)
    total = Value(y.type, y.name)
    e.nodes.append(Node("Add", [out, c], [total], {}, "", mm.version, name=mm.name))
    return e.nodes, total


def _stored_weight(node: Node) -> np.ndarray | None:
    """The constant B of a MatMul, or of a Gemm without transA, as stored (no copy), else
    None."""
    if node.version < 9 or node.domain not in ("", "ai.onnx") or node.input(1) is None:
        return None
    w = node.inputs[1].const
    if w is None or w.ndim != 2:
        return None
    if node.op == "MatMul" and len(node.inputs) == 2:
        return w
    if node.op != "Gemm" or node.attr("transA", 0) or len(node.outputs) != 1:
        return None
    return w


def _weight(node: Node, w: np.ndarray) -> np.ndarray:
    """The (D, N) weight the node multiplies its first input by, from its stored B (a Gemm's
    alpha and transB applied: alpha * W[k] rounds as alpha * (1 * W[k] + zeros) does)."""
    if node.op == "MatMul":
        return w
    w = w.T if node.attr("transB", 0) else w
    return (w * w.dtype.type(node.attr("alpha", 1.0))).astype(w.dtype)


def _rewrite(graph: Graph, node: Node) -> tuple[list[Node], Value] | None:
    stored = _stored_weight(node)
    a = node.inputs[0] if stored is not None else None
    if a is None or a.dtype is None or not a.dtype.is_float or node.inputs[1].dtype != a.dtype:
        return None
    # the graph pattern first, the weight's copy and scan only for a one-hot operand (they
    # took 40-60 ms of ResNet-50's compile, whose classifier is no embedding)
    transposed = node.op == "Gemm" and node.attr("transB", 0)
    form = _onehot_form(a, stored.shape[1 if transposed else 0])
    w = None if form is None else _weight(node, stored)
    if w is None or not np.isfinite(w).all():
        return None
    return _gather(graph, node, form[0], form[1], np.ascontiguousarray(w))


def run(model: Model, ctx: PassContext) -> PassResult:
    graph = model.graph
    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        done = _rewrite(graph, node)
        if done is None:
            nodes.append(node)
            continue
        new, out = done
        nodes.extend(new)
        replace_uses(graph, node.outputs[0], out)
        changed = True
    graph.nodes = nodes  # the one-hot nodes and the weight are left for dce
    return PassResult(model, changed)
