"""LinearAttention beyond the ONNX backend suite: every update rule against a plain per-head
numpy recurrence written here (float64, one state matrix at a time), through native code, the
loop-IR interpreter and the op table's numpy `evaluate`; GQA/MQA ratios, T=1 and T=0, no past,
per-dim and per-head decay, scalar beta, explicit scale, f16 activations with an f32 state,
an omitted present_state, symbolic shape inference and ModelErrors for bad shapes/attributes."""

from __future__ import annotations

import numpy as np
import pytest
from loop_harness import run_via_loop_ir
from onnx import TensorProto, helper

import onnxjit
from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.opdef import resolve
from onnxjit.ir.types import DType, Sym, TensorType

TP = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}
NAMES = ["query", "key", "value", "past_state", "decay", "beta"]


def reference(q, k, v, past, decay, beta, hq, hkv, rule, scale=0.0):
    """The recurrence of the ONNX doc, one (batch, kv head) state at a time, in float64."""
    B, T, _ = q.shape
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    G = hq // hkv
    scale = scale or 1.0 / np.sqrt(dk)
    f = [None if x is None else x.astype(np.float64) for x in (q, k, v, past, decay, beta)]
    q, k, v, past, decay, beta = f
    y = np.zeros((B, T, hq * dv))
    present = np.zeros((B, hkv, dk, dv))
    for b in range(B):
        for h in range(hkv):
            S = np.zeros((dk, dv)) if past is None else past[b, h].copy()
            for t in range(T):
                kt, vt = k[b, t, h * dk:(h + 1) * dk], v[b, t, h * dv:(h + 1) * dv]
                if rule in ("gated", "gated_delta"):
                    per_dim = decay.shape[2] == hkv * dk
                    e = np.exp(decay[b, t, h * dk:(h + 1) * dk] if per_dim else decay[b, t, h])
                    S = S * (e[:, None] if per_dim else e)
                u = vt
                if rule in ("delta", "gated_delta"):
                    bt = beta[b, t, h if beta.shape[2] == hkv else 0]
                    u = bt * (vt - S.T @ kt)
                S = S + np.outer(kt, u)
                for g in range(G):
                    qh = h * G + g
                    y[b, t, qh * dv:(qh + 1) * dv] = scale * (q[b, t, qh * dk:(qh + 1) * dk] @ S)
            present[b, h] = S
    return y, present


def make(rule="gated_delta", B=2, T=5, hq=4, hkv=2, dk=8, dv=6, past=True, decay_dim=True,
         beta_heads=True, dtype=np.float32, state_dtype=None, outputs=2, seed=0, **attrs):
    """A one-node model and its feeds (dict in input order)."""
    rng = np.random.default_rng(seed)
    state_dtype = state_dtype or dtype
    feeds = {"query": rng.standard_normal((B, T, hq * dk)),
             "key": rng.standard_normal((B, T, hkv, dk)),
             "value": rng.standard_normal((B, T, hkv * dv))}
    # unit keys keep the delta rules stable, as the op's doc asks
    feeds["key"] = (feeds["key"] / np.linalg.norm(feeds["key"], axis=-1, keepdims=True)
                    ).reshape(B, T, hkv * dk)
    if past:
        feeds["past_state"] = rng.standard_normal((B, hkv, dk, dv))
    if rule in ("gated", "gated_delta"):
        feeds["decay"] = -np.abs(rng.standard_normal((B, T, hkv * dk if decay_dim else hkv))) * .3
    if rule in ("delta", "gated_delta"):
        feeds["beta"] = rng.uniform(0.1, 0.9, (B, T, hkv if beta_heads else 1))
    feeds = {n: x.astype(state_dtype if n == "past_state" else dtype) for n, x in feeds.items()}
    names = [n if n in feeds else "" for n in NAMES]
    while names[-1] == "":
        names.pop()
    onames = ["output", "present_state"][:outputs]
    node = helper.make_node("LinearAttention", names, onames, name="la", q_num_heads=hq,
                            kv_num_heads=hkv, update_rule=rule, **attrs)
    ins = [helper.make_tensor_value_info(n, TP[x.dtype], x.shape) for n, x in feeds.items()]
    outs = [helper.make_tensor_value_info("output", TP[np.dtype(dtype)], (B, T, hq * dv)),
            helper.make_tensor_value_info("present_state", TP[np.dtype(state_dtype)],
                                          (B, hkv, dk, dv))]
    graph = helper.make_graph([node], "g", ins, outs[:outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])
    model.ir_version = 10
    return model, feeds


def expected(feeds, hq, hkv, rule, scale=0.0):
    return reference(*(feeds.get(n) for n in NAMES), hq, hkv, rule, scale)


def close(got, want, dtypes, tol=1e-5):
    assert len(got) == len(want)
    for g, w, dt in zip(got, want, dtypes):
        assert g.dtype == dt and g.shape == w.shape, (g.dtype, dt, g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=tol, atol=tol)


CASES = {
    "linear": dict(rule="linear"),
    "linear_no_past": dict(rule="linear", past=False),
    "gated_per_dim": dict(rule="gated"),
    "gated_per_head": dict(rule="gated", decay_dim=False, hkv=4),
    "delta": dict(rule="delta"),
    "delta_scalar_beta": dict(rule="delta", beta_heads=False, past=False),
    "gated_delta": dict(rule="gated_delta"),
    "gated_delta_per_head_decay": dict(rule="gated_delta", decay_dim=False),
    "gated_delta_mqa": dict(rule="gated_delta", hq=4, hkv=1, beta_heads=False),
    "gated_delta_mha": dict(rule="gated_delta", hq=3, hkv=3),
    "t1_decode": dict(rule="gated_delta", T=1),
    "t1_no_past": dict(rule="linear", T=1, past=False),
    "explicit_scale": dict(rule="gated", scale=0.37),
    "dk_ne_dv_gqa4": dict(rule="delta", hq=8, hkv=2, dk=5, dv=11),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_native_and_loop_ir_against_recurrence(case):
    kw = dict(CASES[case])
    model, feeds = make(**kw)
    rule, hq, hkv = kw.get("rule"), kw.get("hq", 4), kw.get("hkv", 2)
    want = expected(feeds, hq, hkv, rule, kw.get("scale", 0.0))
    dts = [np.float32, np.float32]
    close(list(onnxjit.compile(model, cache_dir=False)(*feeds.values())), want, dts)
    close(run_via_loop_ir(model, list(feeds.values())), want, dts)


@pytest.mark.parametrize("case", ["linear", "gated_per_head", "delta_scalar_beta",
                                  "gated_delta_mqa", "t1_no_past"])
def test_numpy_evaluate(case):
    # The op table's evaluate (constant folding, host interpreter) on the same cases.
    kw = dict(CASES[case])
    model, feeds = make(**kw)
    ins = [Value(TensorType(DType.from_numpy(feeds[n].dtype), feeds[n].shape), n)
           if n in feeds else None for n in NAMES]
    node = Node("LinearAttention", ins, [Value(None, "y"), Value(None, "s")],
                {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute},
                version=27, name="la")
    got = resolve(node).evaluate(node, [feeds.get(n) for n in NAMES])
    want = expected(feeds, kw.get("hq", 4), kw.get("hkv", 2), kw["rule"], kw.get("scale", 0.0))
    close(got, want, [np.float32, np.float32])


def test_constant_inputs_fold():
    # Every input an initializer: the node folds at compile time, with the same result.
    model, feeds = make("gated_delta", B=1, T=3)
    from onnx import numpy_helper
    g = model.graph
    g.initializer.extend(numpy_helper.from_array(x, n) for n, x in feeds.items())
    del g.input[:]
    fn = onnxjit.compile(model, cache_dir=False)
    close(list(fn()), expected(feeds, 4, 2, "gated_delta"), [np.float32, np.float32])
    assert "linear_attention" not in fn.ir("loops")


def test_lowering_is_native_and_parallel():
    model, feeds = make("gated_delta")
    fn = onnxjit.compile(model, cache_dir=False)
    fn(*feeds.values())
    text = fn.ir("loops")
    # products added one by one as the references do (no GEMM's fused multiply-adds)
    assert "linear_attention" in text and "parallel" in text and "matmul" not in text.lower()


def test_fp16_activations_f32_state():
    # T = f16 computed in f32 (rounded once at the store); S = f32 kept exact.
    model, feeds = make("gated_delta", dtype=np.float16, state_dtype=np.float32)
    want = expected(feeds, 4, 2, "gated_delta")
    got = list(onnxjit.compile(model, cache_dir=False)(*feeds.values()))
    close(got, want, [np.float16, np.float32], tol=2e-3)
    close(run_via_loop_ir(model, list(feeds.values())), want, [np.float16, np.float32],
          tol=2e-3)


def test_fp16_no_past_present_is_f16():
    model, feeds = make("linear", dtype=np.float16, past=False)
    got = list(onnxjit.compile(model, cache_dir=False)(*feeds.values()))
    close(got, expected(feeds, 4, 2, "linear"), [np.float16, np.float16], tol=3e-3)


def test_bf16_native_and_evaluate():
    bf16 = DType.BFLOAT16.numpy
    TP.setdefault(np.dtype(bf16), TensorProto.BFLOAT16)
    model, feeds = make("gated_delta", dtype=bf16)
    want = expected(feeds, 4, 2, "gated_delta")
    close(list(onnxjit.compile(model, cache_dir=False)(*feeds.values())), want, [bf16, bf16],
          tol=2e-2)
    ins = [Value(TensorType(DType.BFLOAT16, feeds[n].shape), n) for n in NAMES]
    node = Node("LinearAttention", ins, [Value(None, "y"), Value(None, "s")],
                {"q_num_heads": 4, "kv_num_heads": 2}, version=27, name="la")
    close(resolve(node).evaluate(node, [feeds[n] for n in NAMES]), want, [bf16, bf16], tol=2e-2)


def test_present_state_omitted():
    model, feeds = make("delta", outputs=1)
    got = list(onnxjit.compile(model, cache_dir=False)(*feeds.values()))
    close(got, expected(feeds, 4, 2, "delta")[:1], [np.float32])


def test_empty_sequence_keeps_past():
    model, feeds = make("gated_delta", T=0)
    y, s = onnxjit.compile(model, cache_dir=False)(*feeds.values())
    assert y.shape == (2, 0, 4 * 6)
    np.testing.assert_array_equal(s, feeds["past_state"])


def test_symbolic_batch_and_sequence_compile_per_shape():
    model, _ = make("gated_delta")
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        dims[0].dim_param = "B"
        if vi.name != "past_state":
            dims[1].dim_param = "T"
    fn = onnxjit.compile(model, cache_dir=False)
    for B, T in ((1, 1), (3, 7)):
        _, feeds = make("gated_delta", B=B, T=T, seed=B)
        close(list(fn(*feeds.values())), expected(feeds, 4, 2, "gated_delta"),
              [np.float32, np.float32])


# --------------------------------------------------------------------------- inference, errors

F = DType.FLOAT


def infer(types: list, n_out: int = 2, **attrs):
    ins = [None if t is None else Value(TensorType(*t), f"x{k}") for k, t in enumerate(types)]
    attrs = {"q_num_heads": 4, "kv_num_heads": 2, **attrs}
    node = Node("LinearAttention", ins, [Value(None, f"o{k}") for k in range(n_out)], attrs,
                version=27, name="la")
    return resolve(node).infer(node)


def test_symbolic_inference():
    b, t = Sym.var("B"), Sym.var("T")
    out = infer([(F, (b, t, 32)), (F, (b, t, 16)), (F, (b, t, 12))], update_rule="linear")
    assert out[0] == TensorType(F, (b, t, 24))
    assert out[1] == TensorType(F, (b, 2, 8, 6))
    # symbolic hidden sizes: head sizes become quotients
    hd = Sym.var("HD")
    out = infer([(F, (b, t, 2 * hd)), (F, (b, t, hd)), (F, (b, t, hd))], update_rule="linear")
    assert out[0].shape == (b, t, 2 * hd) and out[1].shape[:2] == (b, 2)
    # past_state in f32 with f16 activations: present_state follows past_state
    h = DType.FLOAT16
    out = infer([(h, (1, 1, 32)), (h, (1, 1, 16)), (h, (1, 1, 12)), (F, (1, 2, 8, 6)),
                 (h, (1, 1, 2)), (h, (1, 1, 1))])
    assert out[0].dtype == h and out[1] == TensorType(F, (1, 2, 8, 6))


QKV = [(F, (2, 3, 32)), (F, (2, 3, 16)), (F, (2, 3, 12))]


@pytest.mark.parametrize("types, attrs, match", [
    (QKV, dict(q_num_heads=3), "multiple of"),
    (QKV, dict(kv_num_heads=0), "multiple of"),
    (QKV, dict(update_rule="softmax"), "update_rule"),
    (QKV, dict(update_rule="gated"), "needs the decay"),
    (QKV, dict(update_rule="delta"), "needs the beta"),
    (QKV + [None, (F, (2, 3, 2))], dict(update_rule="linear"), "takes no decay"),
    (QKV + [None, (F, (2, 3, 5))], dict(update_rule="gated"), "decay's last dim"),
    (QKV + [None, None, (F, (2, 3, 3))], dict(update_rule="delta"), "beta's last dim"),
    (QKV + [(F, (2, 2, 8, 5))], dict(update_rule="linear"), "value head size"),
    (QKV + [(F, (2, 4, 8, 6))], dict(update_rule="linear"), "KV heads"),
    ([(F, (2, 3, 30)), QKV[1], QKV[2]], dict(update_rule="linear"), "not a multiple"),
    ([QKV[0], (F, (2, 3, 18)), QKV[2]], dict(update_rule="linear"), "key head size"),
    ([QKV[0], (F, (2, 4, 16)), QKV[2]], dict(update_rule="linear"), "sequence length"),
    ([QKV[0], QKV[1], (F, (1, 3, 12))], dict(update_rule="linear"), "batch size"),
    ([(F, (2, 3, 4, 8)), QKV[1], QKV[2]], dict(update_rule="linear"), "3-D"),
    ([QKV[0], (DType.FLOAT16, (2, 3, 16)), QKV[2]], dict(update_rule="linear"), "like the"),
    ([(DType.DOUBLE, (2, 3, 32))] + QKV[1:], dict(update_rule="linear"), "element type"),
])
def test_bad_models(types, attrs, match):
    with pytest.raises(ModelError, match=match):
        infer(types, **attrs)


def test_missing_head_attribute():
    ins = [Value(TensorType(*t), f"x{k}") for k, t in enumerate(QKV)]
    node = Node("LinearAttention", ins, [Value(None, "y")], {"q_num_heads": 4,
                                                             "update_rule": "linear"},
                version=27, name="la")
    with pytest.raises(ModelError, match="kv_num_heads"):
        resolve(node).infer(node)
