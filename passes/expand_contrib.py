"""expand-contrib: rewrite onnxruntime's contrib ops (domain com.microsoft) into standard ONNX
ops. The quantized QLinear family is expanded here; transformer ops (`contrib_transformer`,
`contrib_gqa`) and dynamically quantized / 4-bit ops (`contrib_quant`) by the tables of those
modules. When the
model has any of the latter, the walk also infers each node's types as it goes (as the
infer-shapes pass would), since their expansions need operands' ranks.

onnxruntime's quantization tool in QOperator format emits, besides the standard QLinearConv and
QLinearMatMul, contrib ops such as QLinearAdd, QLinearMul, QLinearSoftmax and QGemm. Each is,
by its definition, "dequantize the inputs, run the float op, quantize the result":

    QLinear<Op>(x, xs, xzp, ..., ys, yzp) = QuantizeLinear(<Op>(DequantizeLinear(x, xs, xzp),
                                                               ...), ys, yzp)

Algorithm, per graph (recursively through regions): every node whose (domain, op) is in
`EXPANSIONS` is replaced in place by that chain of standard nodes; the last node writes the
contrib node's own output value, so readers need no rewrite. Constant operands (weights, their
scales) fold away in fold-constants afterwards. An omitted output zero point is a zero of the
quantized input's type (`CastLike`), as the contrib schemas say (the output type is the input's).

Numerics: onnxruntime computes these ops with fused integer/float kernels (e.g. QLinearAdd as
`(as/cs)*(a-azp) + (bs/cs)*(b-bzp)`, QGemm with an int32 accumulator), so where the float
result lands on a rounding tie the two may differ by one quantization step; elsewhere the results
are equal.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Graph, Model, Node, Value
from onnxjit.ir.infer import infer_node
from onnxjit.ir.ops.fused.region import FUSED_DOMAIN
from onnxjit.ir.types import DType, TensorType
from onnxjit.passes import PassContext, PassResult
from onnxjit.passes.contrib_gqa import EXPANSIONS as GQA
from onnxjit.passes.contrib_quant import EXPANSIONS as QUANT
from onnxjit.passes.contrib_transformer import EXPANSIONS as TRANSFORMER
from onnxjit.passes.contrib_transformer import ONNX_DOMAIN_EXPANSIONS as ONNX_DOMAIN

# Tables whose expansions need operands' ranks (the walk infers types for them).
RANKED = {**TRANSFORMER, **GQA, **QUANT}

name = "expand-contrib"
level = "graph"

MS = "com.microsoft"


class _Emitter:
    """Builds the replacement nodes of one contrib node."""

    def __init__(self, graph: Graph, node: Node, taken: dict[str, int] | None = None) -> None:
        self.graph, self.node = graph, node
        self.nodes: list[Node] = []
        # Names given so far in this run: contrib nodes often have no name of their own, and
        # a staged program needs the values it passes between stages named uniquely.
        self.taken = taken if taken is not None else {}

    def name(self, hint: str) -> str:
        base = f"{self.node.name}/{hint}"
        k = self.taken.get(base, 0)
        self.taken[base] = k + 1
        return base if k == 0 else f"{base}.{k}"

    def value(self, hint: str) -> Value:
        return Value(None, self.name(hint))

    def const(self, arr: np.ndarray, hint: str) -> Value:
        arr = np.asarray(arr)
        v = Value(TensorType(DType.from_numpy(arr.dtype), tuple(arr.shape)), self.name(hint),
                  None, arr)
        self.graph.initializers.append(v)
        return v

    def emit(self, op: str, version: int, inputs: list[Value | None], hint: str,
             out: Value | None = None, **attrs) -> Value:
        name = self.name(hint)
        res = out if out is not None else Value(None, name)
        self.nodes.append(Node(op, list(inputs), [res], attrs, "", version, name))
        return res

    def dq(self, x: Value, scale: Value, zp: Value | None, hint: str, axis: int = 1) -> Value:
        return self.emit("DequantizeLinear", 13, [x, scale, zp], hint, axis=axis)

    def q(self, y: Value, scale: Value, zp: Value | None, like: Value) -> Value:
        if zp is None:  # the output type is the quantized input's type
            zp = self.emit("CastLike", 15, [self.const(np.array(0, np.int32), "zero"), like],
                           "out_zp")
        return self.emit("QuantizeLinear", 13, [y, scale, zp], "quantize",
                         out=self.node.outputs[0])


def _arg(node: Node, i: int, what: str) -> Value:
    v = node.input(i)
    if v is None:
        raise ModelError(f"input {i} ({what}) is required", where=node)
    return v


def _binary(float_op: str, version: int) -> Callable[[_Emitter], None]:
    """QLinearAdd/QLinearMul(a, as, azp, b, bs, bzp, cs, czp)."""

    def expand(e: _Emitter) -> None:
        n = e.node
        a = e.dq(_arg(n, 0, "A"), _arg(n, 1, "A_scale"), n.input(2), "dq_a")
        b = e.dq(_arg(n, 3, "B"), _arg(n, 4, "B_scale"), n.input(5), "dq_b")
        y = e.emit(float_op, version, [a, b], float_op.lower())
        e.q(y, _arg(n, 6, "C_scale"), n.input(7), n.inputs[0])  # type: ignore[arg-type]

    return expand


def _unary(float_op: str, version: int, attrs: tuple[str, ...] = ()
           ) -> Callable[[_Emitter], None]:
    """QLinear<Op>(x, xs, xzp, ys, yzp) with the float op's attributes passed through."""

    def expand(e: _Emitter) -> None:
        n = e.node
        kept = {k: n.attrs[k] for k in attrs if k in n.attrs}
        channels_last = bool(n.attr("channels_last", 0))
        x = e.dq(_arg(n, 0, "X"), _arg(n, 1, "X_scale"), n.input(2), "dq_x")
        if channels_last:  # NHWC in and out: the float op works on NCHW
            rank = _rank(n)
            x = e.emit("Transpose", 13, [x], "to_nchw",
                       perm=(0, rank - 1, *range(1, rank - 1)))
        y = e.emit(float_op, version, [x], float_op.lower(), **kept)
        if channels_last:
            rank = _rank(n)
            y = e.emit("Transpose", 13, [y], "to_nhwc", perm=(0, *range(2, rank), 1))
        e.q(y, _arg(n, 3, "Y_scale"), n.input(4), n.inputs[0])  # type: ignore[arg-type]

    return expand


def _rank(node: Node) -> int:
    shape = node.inputs[0].shape if node.inputs[0] is not None else None
    if shape is None:
        raise ModelError("channels_last needs the input's rank to be declared", where=node)
    return len(shape)


def _softmax(e: _Emitter) -> None:
    """QLinearSoftmax(x, xs, xzp, ys, yzp); `opset` picks Softmax's axis semantics."""
    n = e.node
    version = 13 if int(n.attr("opset", 13)) >= 13 else 11
    x = e.dq(_arg(n, 0, "X"), _arg(n, 1, "X_scale"), n.input(2), "dq_x")
    y = e.emit("Softmax", version, [x], "softmax", axis=int(n.attr("axis", -1)))
    e.q(y, _arg(n, 3, "y_scale"), n.input(4), n.inputs[0])  # type: ignore[arg-type]


def _concat(e: _Emitter) -> None:
    """QLinearConcat(ys, yzp, x0, x0s, x0zp, x1, ...; axis)."""
    n = e.node
    parts = []
    for k in range(2, len(n.inputs), 3):
        parts.append(e.dq(_arg(n, k, "X"), _arg(n, k + 1, "X_scale"), n.input(k + 2),
                          f"dq_{(k - 2) // 3}"))
    y = e.emit("Concat", 13, parts, "concat", axis=int(n.attr("axis", 0)))
    e.q(y, _arg(n, 0, "Y_scale"), n.input(1), n.inputs[2])  # type: ignore[arg-type]


def _qgemm(e: _Emitter) -> None:
    """QGemm(a, as, azp, b, bs, bzp, c, ys, yzp): Y = alpha * (A'B' + C) * as * bs, C an int32
    bias in the scale as*bs; quantized with (ys, yzp) when ys is given, else float."""
    n = e.node
    trans_a, trans_b = int(n.attr("transA", 0)), int(n.attr("transB", 0))
    alpha = float(n.attr("alpha", 1.0))
    a_s, b_s = _arg(n, 1, "a_scale"), _arg(n, 4, "b_scale")
    a = e.dq(_arg(n, 0, "A"), a_s, n.input(2), "dq_a")
    # A per-column scale of B runs along N: axis 1 of a [K, N] B, axis 0 of a transposed one.
    b = e.dq(_arg(n, 3, "B"), b_s, n.input(5), "dq_b", axis=0 if trans_b else 1)
    c = None
    if n.input(6) is not None:
        cf = e.emit("Cast", 13, [n.input(6)], "c_float", to=int(DType.FLOAT.value))
        c = e.emit("Mul", 14, [cf, e.emit("Mul", 14, [a_s, b_s], "c_scale")], "dq_c")
    ins = [a, b] if c is None else [a, b, c]
    attrs = {"alpha": alpha, "beta": alpha, "transA": trans_a, "transB": trans_b}
    if n.input(7) is None:
        e.emit("Gemm", 13, ins, "gemm", out=n.outputs[0], **attrs)
        return
    y = e.emit("Gemm", 13, ins, "gemm", **attrs)
    e.q(y, n.inputs[7], n.input(8), n.inputs[0])  # type: ignore[arg-type]


_POOL_ATTRS = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")

EXPANSIONS: dict[str, Callable[[_Emitter], None]] = {
    "QLinearAdd": _binary("Add", 14),
    "QLinearMul": _binary("Mul", 14),
    "QLinearSigmoid": _unary("Sigmoid", 13),
    "QLinearLeakyRelu": _unary("LeakyRelu", 16, ("alpha",)),
    "QLinearGlobalAveragePool": _unary("GlobalAveragePool", 1),
    "QLinearAveragePool": _unary("AveragePool", 19, _POOL_ATTRS),
    "QLinearReduceMean": _unary("ReduceMean", 13, ("axes", "keepdims")),
    "QLinearSoftmax": _softmax,
    "QLinearConcat": _concat,
    "QGemm": _qgemm,
}


def _expansion(node: Node) -> Callable[[_Emitter], None] | None:
    if node.domain == MS:
        return EXPANSIONS.get(node.op) or RANKED.get(node.op)
    if node.domain == "":
        return ONNX_DOMAIN.get(node.op)
    return None


def _expand_graph(graph: Graph, infer: bool, taken: dict[str, int]) -> bool:
    """Expand the contrib nodes of `graph`; with `infer`, infer every node's types on the way
    (the shape inference pass's walk), since some expansions depend on operands' ranks."""
    changed = False
    out: list[Node] = []
    for node in graph.nodes:
        for g in node.regions():
            changed |= _expand_graph(g, False, taken)
        fn = _expansion(node)
        if fn is None:
            out.append(node)
            if infer:
                infer_node(node)
            continue
        if node.op in EXPANSIONS and len(node.outputs) != 1:
            raise ModelError(f"{node.op} has one output; the node names {len(node.outputs)}",
                             where=node)
        e = _Emitter(graph, node, taken)
        fn(e)
        out.extend(e.nodes)
        if infer:
            for m in e.nodes:
                infer_node(m)
        changed = True
    graph.nodes = out
    return changed


def run(model: Model, ctx: PassContext) -> PassResult:
    """Expand every contrib op of the expansion tables in the model's graphs."""
    infer = any(n.domain == MS and n.op in RANKED
                or (n.domain == "" and n.op in ONNX_DOMAIN) for n in model.graph.nodes)
    changed = _expand_graph(model.graph, infer, {})
    if changed:  # some expansions build onnxjit's own ops (`contrib_quant`: NBitsMatMul)
        model.opset_imports.setdefault(FUSED_DOMAIN, 1)
    return PassResult(model, changed)
