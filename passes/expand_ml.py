"""expand-ml: rewrite numeric ai.onnx.ml ops into standard ONNX ops, so that classical
pipelines compile natively and fuse (Scaler -> LinearClassifier -> Softmax becomes a Gemm
with an epilogue and one elementwise loop) instead of running on the host.

Contract: runs after infer-shapes (the rewrites read input ranks and dtypes) and re-infers the
graph when it changed. A node is left as it is (its numpy `evaluate` runs on the host) when a
rewrite would need what is unknown or has no standard form (an input of unknown rank, a
string-typed value, PROBIT, SOFTMAX_ZERO).

Rewrites (semantics in `ir.ops.ml.simple`):
- Binarizer: Where(x > t, 1, 0) in x's type;
- Scaler: (Cast(x, f32) - offset) * scale;
- Imputer: Where(IsNaN(x) or x == replaced, imputed, x);
- Normalizer: x / Max(norm, 1e-30) with norm ReduceMax(|x|), ReduceSum(|x|) or
  Sqrt(ReduceSum(x * x)) over the last axis (rank 2);
- ArrayFeatureExtractor (rank >= 2 and constant indices): Gather(x, indices, axis=-1);
- LinearRegressor (rank 2, NONE): Gemm(Cast(x, f32), coefficients, intercepts, transB=1);
- LinearClassifier (rank 2, NONE/LOGISTIC/SOFTMAX): the Gemm scores ([-s, s] for one score
  column and two labels), the post transform, and the label Gather(labels, ArgMax(scores));
- TreeEnsembleClassifier with string labels: the classifier with labels 0..C-1 (native), and
  Gather(labels, index) (the one host node).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxjit.ir.graph import Graph, Model, Node, Value
from onnxjit.ir.types import DType, TensorType
from onnxjit.passes import PassContext, PassResult
from onnxjit.passes.expand_contrib import _Emitter

name = "expand-ml"
level = "graph"

ML = "ai.onnx.ml"
F32 = int(DType.FLOAT.value)


def _rank(v: Value | None) -> int | None:
    t = v.type if v is not None else None
    if not isinstance(t, TensorType) or t.shape is None or t.dtype == DType.STRING:
        return None
    return len(t.shape)


def _c(e: _Emitter, arr, hint: str, dtype=np.float32) -> Value:
    return e.const(np.asarray(arr, dtype=dtype), hint)


def _binarizer(e: _Emitter) -> bool:
    n = e.node
    x = n.inputs[0]
    dt = x.type.dtype.numpy  # type: ignore[union-attr]
    t = float(n.attr("threshold", 0.0))
    # compare in x's type for floats; an int x compares as float against a fractional t
    xc = x if np.issubdtype(dt, np.floating) else e.emit("Cast", 13, [x], "xf",
                                                          to=int(DType.DOUBLE.value))
    tdt = dt if np.issubdtype(dt, np.floating) else np.float64
    gt = e.emit("Greater", 13, [xc, _c(e, t, "t", tdt)], "gt")
    e.emit("Where", 16, [gt, _c(e, 1, "one", dt), _c(e, 0, "zero", dt)], "where",
           out=n.outputs[0])
    return True


def _scaler(e: _Emitter) -> bool:
    n = e.node
    x = e.emit("Cast", 13, [n.inputs[0]], "x", to=F32)
    off = _c(e, n.attr("offset", (0.0,)), "offset")
    sc = _c(e, n.attr("scale", (1.0,)), "scale")
    e.emit("Mul", 14, [e.emit("Sub", 14, [x, off], "sub"), sc], "mul", out=n.outputs[0])
    return True


def _imputer(e: _Emitter) -> bool:
    from onnxjit.ir.ops.ml.simple import imputer_params

    n = e.node
    x = n.inputs[0]
    vals, rep = imputer_params(n)
    dt = x.type.dtype.numpy  # type: ignore[union-attr]
    if np.isnan(rep) and not np.issubdtype(dt, np.floating):
        return False  # an int x holds no NaN: the host op passes it through
    fill = _c(e, vals, "imputed", dt)
    if np.isnan(rep):
        hit = e.emit("IsNaN", 20, [x], "isnan")
    else:
        hit = e.emit("Equal", 19, [x, _c(e, rep, "replaced", dt)], "eq")
    e.emit("Where", 16, [hit, fill, x], "where", out=n.outputs[0])
    return True


def _normalizer(e: _Emitter) -> bool:
    n = e.node
    norm = n.attr("norm", "MAX")
    if _rank(n.inputs[0]) != 2 or norm not in ("MAX", "L1", "L2"):
        return False
    x = e.emit("Cast", 13, [n.inputs[0]], "x", to=F32)
    axes = e.const(np.array([1], np.int64), "axes")
    if norm == "MAX":
        d = e.emit("ReduceMax", 13, [e.emit("Abs", 13, [x], "abs")], "max", axes=(1,))
    elif norm == "L1":
        d = e.emit("ReduceSum", 13, [e.emit("Abs", 13, [x], "abs"), axes], "l1")
    else:
        d = e.emit("Sqrt", 13, [e.emit("ReduceSum", 13, [e.emit("Mul", 14, [x, x], "sq"), axes],
                                       "sumsq")], "l2")
    d = e.emit("Max", 13, [d, _c(e, 1e-30, "tiny")], "clamp")
    e.emit("Div", 14, [x, d], "div", out=n.outputs[0])
    return True


def _feature_extractor(e: _Emitter) -> bool:
    n = e.node
    idx = n.inputs[1] if len(n.inputs) > 1 else None
    rank = _rank(n.inputs[0])
    if rank is None or rank < 2 or idx is None or idx.const is None:
        return False
    flat = e.const(np.asarray(idx.const, np.int64).reshape(-1), "indices")
    e.emit("Gather", 13, [n.inputs[0], flat], "gather", out=n.outputs[0], axis=-1)
    return True


def _gemm(e: _Emitter, out: Value | None) -> Value | None:
    from onnxjit.ir.ops.ml.simple import linear_params

    n = e.node
    if _rank(n.inputs[0]) != 2:
        return None
    coef, ic, t = linear_params(n)
    x = e.emit("Cast", 13, [n.inputs[0]], "x", to=F32)
    ins = [x, _c(e, coef, "coefficients")]
    if ic is not None:
        ins.append(_c(e, ic, "intercepts"))
    return e.emit("Gemm", 13, ins, "gemm", out=out, transB=1)


def _linear_regressor(e: _Emitter) -> bool:
    if e.node.attr("post_transform", "NONE") != "NONE":
        return False
    return _gemm(e, e.node.outputs[0]) is not None


def _linear_classifier(e: _Emitter) -> bool:
    from onnxjit.ir.ops.ml.simple import _labels, linear_params

    n = e.node
    post = n.attr("post_transform", "NONE")
    labels = _labels(n)
    if post not in ("NONE", "LOGISTIC", "SOFTMAX") or _rank(n.inputs[0]) != 2:
        return False
    _, _, t = linear_params(n)
    s = _gemm(e, None)
    if s is None:
        return False
    if t == 1 and len(labels) == 2:
        s = e.emit("Concat", 13, [e.emit("Neg", 13, [s], "neg"), s], "pair", axis=1)
    z_out = n.outputs[1] if len(n.outputs) > 1 else None
    if post == "NONE":
        e.emit("Identity", 16, [s], "scores", out=z_out)
    elif post == "LOGISTIC":
        e.emit("Sigmoid", 13, [s], "sigmoid", out=z_out)
    else:
        e.emit("Softmax", 13, [s], "softmax", out=z_out, axis=-1)
    arg = e.emit("ArgMax", 13, [s], "argmax", axis=1, keepdims=0)
    table = np.array(labels, dtype=object if isinstance(labels[0], str) else np.int64)
    e.emit("Gather", 13, [e.const(table, "labels"), arg], "label", out=n.outputs[0], axis=0)
    return True


def _string_labels(e: _Emitter) -> bool:
    """A tree classifier with string labels: the same classifier with labels 0..C-1 (native
    code), then Gather of the strings (the only node left on the host)."""
    n = e.node
    strs = n.attr("classlabels_strings")
    if not strs or n.attr("classlabels_int64s") or _rank(n.inputs[0]) is None:
        return False
    attrs = {k: v for k, v in n.attrs.items() if k != "classlabels_strings"}
    attrs["classlabels_int64s"] = tuple(range(len(strs)))
    idx = Value(None, f"{n.name}/label_index")
    e.nodes.append(Node(n.op, list(n.inputs), [idx, *n.outputs[1:]], attrs, n.domain,
                        n.version, f"{n.name}/int_labels"))
    table = np.array(list(strs), dtype=object)
    e.emit("Gather", 13, [e.const(table, "labels"), idx], "label", out=n.outputs[0], axis=0)
    return True


EXPANSIONS: dict[str, Callable[[_Emitter], bool]] = {
    "TreeEnsembleClassifier": _string_labels,
    "Binarizer": _binarizer,
    "Scaler": _scaler,
    "Imputer": _imputer,
    "Normalizer": _normalizer,
    "ArrayFeatureExtractor": _feature_extractor,
    "LinearRegressor": _linear_regressor,
    "LinearClassifier": _linear_classifier,
}


def _numeric_io(node: Node) -> bool:
    outs = node.outputs[1:] if node.op == "TreeEnsembleClassifier" else node.outputs
    for v in list(node.inputs[:1]) + list(outs):
        if v is None or not isinstance(v.type, TensorType):
            return False
    return node.inputs[0].type.dtype != DType.STRING  # type: ignore[union-attr]


def _expand_graph(graph: Graph) -> bool:
    changed = False
    out: list[Node] = []
    for node in graph.nodes:
        for g in node.regions():
            changed |= _expand_graph(g)
        fn = EXPANSIONS.get(node.op) if node.domain == ML else None
        e = _Emitter(graph, node)
        if fn is None or not _numeric_io(node) or not fn(e):
            out.append(node)
            continue
        out.extend(e.nodes)
        changed = True
    graph.nodes = out
    return changed


def run(model: Model, ctx: PassContext) -> PassResult:
    """Expand the numeric ai.onnx.ml ops, then re-infer the types when anything changed."""
    changed = _expand_graph(model.graph)
    if changed:
        # a model of ai.onnx.ml alone now holds standard ops (each node names its version)
        model.opset_imports.setdefault("", 21)
        from onnxjit.passes import infer_shapes

        model = infer_shapes.run(model, ctx).ir
    return PassResult(model, changed)
