"""FlexAttention (ai.onnx.preview) beyond the ONNX backend suite: against a plain numpy
attention written here, with GQA, f64, a score_mod reading a value of the enclosing graph,
a causal score_mod with a prob_mod, native nodes before and after it (the run-time shape phase
runs it on the host between compiled stages), symbolic inference and ModelErrors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxjit
from onnxjit.errors import ModelError
from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ir.opdef import resolve
from onnxjit.ir.types import DType, Sym, TensorType

PREVIEW = "ai.onnx.preview"


def attention(q, k, v, scale=None, bias=None, causal=False, prob_scale=None):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = (q @ np.swapaxes(k, -1, -2)) * (scale or 1 / np.sqrt(q.shape[-1]))
    if bias is not None:
        s = s + bias
    if causal:
        L, S = s.shape[-2:]
        s = np.where(np.arange(L)[:, None] >= np.arange(S)[None, :], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    if prob_scale is not None:
        p = p * prob_scale
    return p @ v


def bias_mod(tp):
    """score_mod(scores) = scores + bias, `bias` a value of the enclosing graph."""
    return helper.make_graph(
        [helper.make_node("Add", ["scores", "bias"], ["out"])], "bias_mod",
        [helper.make_tensor_value_info("scores", tp, ["B", "H", "L", "S"])],
        [helper.make_tensor_value_info("out", tp, ["B", "H", "L", "S"])])


def causal_mod(tp):
    nodes = [helper.make_node("Shape", ["scores"], ["shp"]),
             helper.make_node("Gather", ["shp", "i2"], ["L"], axis=0),
             helper.make_node("Gather", ["shp", "i3"], ["S"], axis=0),
             helper.make_node("Range", ["zero", "L", "one"], ["lr"]),
             helper.make_node("Unsqueeze", ["lr", "ax1"], ["li"]),
             helper.make_node("Range", ["zero", "S", "one"], ["si"]),
             helper.make_node("GreaterOrEqual", ["li", "si"], ["keep"]),
             helper.make_node("Where", ["keep", "scores", "ninf"], ["out"])]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("one", TensorProto.INT64, [], [1]),
             helper.make_tensor("i2", TensorProto.INT64, [], [2]),
             helper.make_tensor("i3", TensorProto.INT64, [], [3]),
             helper.make_tensor("ax1", TensorProto.INT64, [1], [1]),
             helper.make_tensor("ninf", tp, [], [-np.inf])]
    return helper.make_graph(
        nodes, "causal", [helper.make_tensor_value_info("scores", tp, None)],
        [helper.make_tensor_value_info("out", tp, None)], inits)


def prob_mod(tp, factor):
    return helper.make_graph(
        [helper.make_node("Mul", ["p", "f"], ["out"])], "pm",
        [helper.make_tensor_value_info("p", tp, None)],
        [helper.make_tensor_value_info("out", tp, None)],
        [helper.make_tensor("f", tp, [], [factor])])


def make(B=2, Hq=4, Hkv=2, L=5, S=7, E=8, Ev=6, dtype=np.float32, around=False, **attrs):
    rng = np.random.default_rng(0)
    tp = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    feeds = {"Q": rng.standard_normal((B, Hq, L, E)).astype(dtype),
             "K": rng.standard_normal((B, Hkv, S, E)).astype(dtype),
             "V": rng.standard_normal((B, Hkv, S, Ev)).astype(dtype)}
    nodes = []
    q = "Q"
    if around:  # native nodes before and after the host node
        nodes.append(helper.make_node("Neg", ["Q"], ["Qn"]))
        q = "Qn"
    nodes.append(helper.make_node("FlexAttention", [q, "K", "V"], ["Y0" if around else "Y"],
                                  domain=PREVIEW, **attrs))
    if around:
        nodes.append(helper.make_node("Relu", ["Y0"], ["Y"]))
    ins = [helper.make_tensor_value_info(n, tp, x.shape) for n, x in feeds.items()]
    if "score_mod" in attrs and attrs["score_mod"].name == "bias_mod":
        feeds["bias"] = rng.standard_normal((L, S)).astype(dtype)
        ins.append(helper.make_tensor_value_info("bias", tp, (L, S)))
    graph = helper.make_graph(nodes, "g", ins,
                              [helper.make_tensor_value_info("Y", tp, (B, Hq, L, Ev))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(PREVIEW, 1)])
    model.ir_version = 10
    return model, feeds


def run(model, feeds):
    (y,) = onnxjit.compile(model, cache_dir=False)(*feeds.values())
    return y


def test_gqa_default_scale():
    model, f = make()
    np.testing.assert_allclose(run(model, f), attention(f["Q"], f["K"], f["V"]), atol=1e-5)


def test_f64_explicit_scale():
    # the reference scales Q and K by sqrt(scale) taken in f32: 0.25 keeps that exact
    model, f = make(dtype=np.float64, Hkv=1, scale=0.25)
    y = run(model, f)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, attention(f["Q"], f["K"], f["V"], scale=0.25), atol=1e-12)


def test_score_mod_reads_outer_value():
    model, f = make(score_mod=bias_mod(TensorProto.FLOAT))
    want = attention(f["Q"], f["K"], f["V"], bias=f["bias"])
    np.testing.assert_allclose(run(model, f), want, atol=1e-5)


def test_causal_and_prob_mod_between_native_nodes():
    model, f = make(around=True, score_mod=causal_mod(TensorProto.FLOAT),
                    prob_mod=prob_mod(TensorProto.FLOAT, 0.5))
    want = np.maximum(attention(-f["Q"], f["K"], f["V"], causal=True, prob_scale=0.5), 0)
    np.testing.assert_allclose(run(model, f), want, atol=1e-5)


# --------------------------------------------------------------------------- inference, errors

F = DType.FLOAT


def infer(shapes, **attrs):
    ins = [Value(TensorType(F, s), f"x{k}") for k, s in enumerate(shapes)]
    node = Node("FlexAttention", ins, [Value(None, "y")], attrs, domain=PREVIEW, version=1,
                name="fa")
    return resolve(node).infer(node)


def test_symbolic_inference():
    b, lq, s = Sym.var("B"), Sym.var("L"), Sym.var("S")
    out = infer([(b, 4, lq, 8), (b, 2, s, 8), (b, 2, s, 5)])
    assert out[0] == TensorType(F, (b, 4, lq, 5))


def _region(n_out: int) -> Graph:
    x = Value(None, "x")
    return Graph([], [x], [x] * n_out, name="m")


@pytest.mark.parametrize("shapes, attrs, match", [
    ([(2, 4, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6)], {}, "multiple"),
    ([(2, 4, 5, 8), (2, 2, 7, 9), (2, 2, 7, 6)], {}, "head sizes"),
    ([(2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 6, 6)], {}, "sequence lengths"),
    ([(2, 4, 5), (2, 2, 7, 8), (2, 2, 7, 6)], {}, "4-D"),
    ([(2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 6)], {"softmax_precision": 6}, "softmax_precision"),
    ([(2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 6)], {"score_mod": "x"}, "must be a graph"),
    ([(2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 6)], {"prob_mod": _region(2)}, "one output"),
])
def test_bad_models(shapes, attrs, match):
    with pytest.raises(ModelError, match=match):
        infer(shapes, **attrs)
