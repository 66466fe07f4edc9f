"""onnxruntime's contrib ops (com.microsoft) that its own tools emit, against onnxruntime on
models those tools produce here (issue 28): `onnxruntime.transformers.optimizer` on BERT and
GPT-2 shaped graphs, `onnxruntime.quantization.quantize_dynamic` (then onnxruntime's own
optimizer, which fuses DynamicQuantizeMatMul), the 4-bit MatMulNBits quantizer, and the
level-2 graph optimizer (FusedConv, FusedMatMul, BiasGelu, QuickGelu). Ops the tools only emit
for larger models are checked on single nodes. Each test also asserts the contrib ops it
expects are in the model, so a tool changing its output cannot make a test vacuous.
onnxruntime's u8 x s8 products saturate on x86 hosts without VNNI (`bench.quantized`): there
the 8-bit weights are quantized, or drawn, in 7 bits so that it stays a valid reference.
"""

from __future__ import annotations

import collections
import logging

import contrib_models
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxjit
from onnxjit.bench.quantized import ort_u8s8_saturates

RNG = np.random.default_rng(28)


def _ops(m: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in m.graph.node if n.domain == "com.microsoft")


def _feeds(m: onnx.ModelProto, batch: int = 2) -> dict:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else batch for d in i.shape]
        if i.type == "tensor(int64)":
            a = RNG.integers(0, 2, shape)
            if "mask" in i.name:
                a[:] = 1
                a[-1, -3:] = 0  # right padding in the last row
            feeds[i.name] = a.astype(np.int64)
        else:
            feeds[i.name] = RNG.standard_normal(shape).astype(np.float32)
    return feeds


def _match(m: onnx.ModelProto, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    m.ir_version = min(m.ir_version, 10)
    feeds = _feeds(m)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    got = onnxjit.InferenceSession(m, cache_dir=False).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _ort_optimized(m: onnx.ModelProto, tmp_path) -> onnx.ModelProto:
    """The model as onnxruntime's extended graph optimizer saves it."""
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    m.ir_version = min(m.ir_version, 10)
    ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return onnx.load(so.optimized_model_filepath)


@pytest.fixture(autouse=True)
def _quiet_tools():
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's pre-processing advice


def test_bert_after_transformers_optimizer(tmp_path) -> None:
    optimizer = pytest.importorskip("onnxruntime.transformers.optimizer",
                                    reason="onnxruntime.transformers needs sympy")
    onnx.save(contrib_models.bert(), tmp_path / "bert.onnx")
    opt = optimizer.optimize_model(str(tmp_path / "bert.onnx"), model_type="bert", num_heads=4,
                                   hidden_size=32, opt_level=0).model
    assert {"Attention", "SkipLayerNormalization", "EmbedLayerNormalization",
            "BiasGelu"} <= set(_ops(opt))
    _match(opt)


def test_gpt2_after_transformers_optimizer(tmp_path) -> None:
    optimizer = pytest.importorskip("onnxruntime.transformers.optimizer",
                                    reason="onnxruntime.transformers needs sympy")
    onnx.save(contrib_models.gpt2_mlp(), tmp_path / "gpt2.onnx")
    opt = optimizer.optimize_model(str(tmp_path / "gpt2.onnx"), model_type="gpt2",
                                   num_heads=4, hidden_size=32, opt_level=0).model
    assert {"FastGelu", "SkipLayerNormalization"} <= set(_ops(opt))
    _match(opt)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_quantize_dynamic_then_ort_optimizer(tmp_path, per_channel: bool) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx.save(contrib_models.mlp(), tmp_path / "mlp.onnx")
    quantize_dynamic(str(tmp_path / "mlp.onnx"), str(tmp_path / "q.onnx"),
                     weight_type=QuantType.QInt8, per_channel=per_channel,
                     reduce_range=ort_u8s8_saturates())
    fused = _ort_optimized(onnx.load(tmp_path / "q.onnx"), tmp_path)
    assert _ops(fused)["DynamicQuantizeMatMul"] == 2
    _match(fused, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("direction,weights", [("bidirectional", "QInt8"),
                                               ("reverse", "QUInt8")])
def test_dynamic_quantize_lstm(tmp_path, direction: str, weights: str) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx.save(contrib_models.lstm(hidden=40, direction=direction), tmp_path / "lstm.onnx")
    # _match's onnxruntime runs on all cores (2 here): batch 2 is split in chunks of a row
    quantize_dynamic(str(tmp_path / "lstm.onnx"), str(tmp_path / "q.onnx"),
                     weight_type=getattr(QuantType, weights), reduce_range=ort_u8s8_saturates())
    q = onnx.load(tmp_path / "q.onnx")
    assert _ops(q) == {"DynamicQuantizeLSTM": 1}
    # h is quantized at every step as onnxruntime does (a float LSTM differs by ~1e-2)
    _match(q, rtol=1e-5, atol=1e-5)


def test_dynamic_quantize_lstm_sequence_lens(tmp_path) -> None:
    """Entries shorter than the sequence: onnxruntime zeroes their state (it enters the
    quantization range as zeros), and its reverse pass starts each at its own last step."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx.save(contrib_models.lstm(hidden=24, seq=6, direction="bidirectional", lens=True),
              tmp_path / "lstm.onnx")
    quantize_dynamic(str(tmp_path / "lstm.onnx"), str(tmp_path / "q.onnx"),
                     weight_type=QuantType.QInt8, reduce_range=ort_u8s8_saturates())
    q = onnx.load(tmp_path / "q.onnx")
    assert _ops(q) == {"DynamicQuantizeLSTM": 1}
    q.ir_version = min(q.ir_version, 10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2  # its batch split over threads is emulated for 2 threads
    sess = ort.InferenceSession(q.SerializeToString(), so, providers=["CPUExecutionProvider"])
    fn = onnxjit.InferenceSession(q, cache_dir=False, num_threads=2)
    x = RNG.standard_normal((6, 3, 8)).astype(np.float32)
    for lens in ([6, 3, 6], [2, 0, 6]):
        feeds = {"x": x, "lens": np.array(lens, np.int32)}
        for g, w in zip(fn.run(None, feeds), sess.run(None, feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("symmetric", [False, True], ids=["zero-points", "symmetric"])
def test_matmul_nbits_from_the_4bit_quantizer(symmetric: bool) -> None:
    nbits = pytest.importorskip("onnxruntime.quantization.matmul_nbits_quantizer",
                                reason="the 4-bit quantizer needs onnx_ir")
    q = nbits.MatMulNBitsQuantizer(contrib_models.mlp(), block_size=16 if symmetric else 32,
                                   is_symmetric=symmetric)
    q.process()
    m = q.model.model
    assert _ops(m)["MatMulNBits"] == 2
    _match(m, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt", ["QOperator", "QDQ"])
def test_quantize_static(tmp_path, fmt: str) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([{"x": _f(1, 3, 16, 16)} for _ in range(4)])

        def get_next(self) -> dict | None:
            return next(self.feeds, None)

    onnx.save(contrib_models.cnn(), tmp_path / "cnn.onnx")
    quantize_static(str(tmp_path / "cnn.onnx"), str(tmp_path / "q.onnx"), Reader(),
                    quant_format=getattr(QuantFormat, fmt))
    q = onnx.load(tmp_path / "q.onnx")
    if fmt == "QOperator":
        assert {"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearGlobalAveragePool",
                "QGemm", "QLinearSoftmax"} <= set(_ops(q))
    # onnxruntime runs QDQ groups as integer kernels: a rounding tie may land one step off.
    _match(q, rtol=0, atol=1 / 255 + 1e-6)


def test_level2_optimizer_fusions(tmp_path) -> None:
    fused = _ort_optimized(contrib_models.level2_patterns(), tmp_path)
    assert {"FusedConv", "FusedMatMul", "BiasGelu", "QuickGelu"} <= set(_ops(fused))
    _match(fused)


# ------------------------------------------------------------- single nodes the tools emit


def _node_model(node: onnx.NodeProto, inputs: dict, inits: dict | None = None
                ) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs.items()]
    types = {"mask_index": T.INT32}  # outputs are float but for these names
    outs = [helper.make_tensor_value_info(o, types.get(o, T.FLOAT), None)
            for o in node.output if o]
    g = helper.make_graph([node], "g", ins, outs,
                          [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _run_node(node: onnx.NodeProto, inputs: dict, inits: dict | None = None,
              tol: float = 1e-5) -> None:
    m = _node_model(node, inputs, inits)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, inputs)
    got = onnxjit.compile(m, cache_dir=False).run(None, inputs)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


MS = {"domain": "com.microsoft"}


@pytest.mark.parametrize(("mask", "unidirectional"), [("lengths", 0), ("raw", 1), ("none", 1)])
def test_attention_node(mask: str, unidirectional: int) -> None:
    b, s, h = 2, 5, 16
    ins = {"x": _f(b, s, h)}
    names = ["x", "w", "bias"]
    if mask == "lengths":
        ins["m"] = np.array([5, 3], np.int32)
    elif mask == "raw":
        ins["m"] = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], np.int32)
    if mask != "none":
        names.append("m")
    node = helper.make_node("Attention", names, ["y"], num_heads=4,
                            unidirectional=unidirectional, **MS)
    _run_node(node, ins, {"w": _f(h, 3 * h) * 0.3, "bias": _f(3 * h) * 0.1})


def test_normalizations_and_activations() -> None:
    x, skip, g, beta, bias = _f(2, 3, 8), _f(2, 3, 8), _f(8), _f(8), _f(8)
    ins = {"x": x, "skip": skip}
    _run_node(helper.make_node("SkipLayerNormalization", ["x", "skip", "g", "beta", "bias"],
                               ["y", "", "", "sum"], epsilon=1e-5, **MS), ins,
              {"g": g, "beta": beta, "bias": bias})
    _run_node(helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "g"], ["y"],
                               epsilon=1e-5, **MS), ins, {"g": g})
    _run_node(helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"], axis=-1,
                               epsilon=1e-5), {"x": x}, {"g": g})
    # BiasAdd has no CPU kernel in onnxruntime (CUDA only): checked against its definition.
    m = _node_model(helper.make_node("BiasAdd", ["x", "bias", "skip"], ["y"], **MS), ins,
                    {"bias": bias})
    np.testing.assert_allclose(onnxjit.compile(m, cache_dir=False)(x, skip)[0],
                               x + bias + skip, rtol=1e-6)
    _run_node(helper.make_node("Gelu", ["x"], ["y"], **MS), {"x": x})
    _run_node(helper.make_node("FastGelu", ["x", "bias"], ["y"], **MS), {"x": x},
              {"bias": bias})


def test_matmul_integer_to_float_node() -> None:
    a = RNG.integers(0, 255, (3, 8)).astype(np.uint8)
    lim = 64 if ort_u8s8_saturates() else 128
    node = helper.make_node("MatMulIntegerToFloat", ["a", "b", "sa", "sb", "za", "zb", "bias"],
                            ["y"], **MS)
    _run_node(node, {"a": a}, {"b": RNG.integers(-lim, lim - 1, (8, 4)).astype(np.int8),
                               "sa": np.array(0.02, np.float32), "sb": _f(4) * 0.01,
                               "za": np.array(128, np.uint8),
                               "zb": np.zeros(4, np.int8), "bias": _f(4)})


@pytest.mark.parametrize("extras", ["plain", "bias-mask"])
def test_multi_head_attention_node(extras: str) -> None:
    b, s, kv, h = 2, 4, 6, 16
    ins = {"q": _f(b, s, h), "k": _f(b, kv, h), "v": _f(b, kv, h)}
    names, inits = ["q", "k", "v"], {}
    if extras == "bias-mask":
        names += ["bias", "m"]
        inits["bias"] = _f(3 * h) * 0.1
        ins["m"] = np.array([[1] * 6, [1, 1, 1, 0, 0, 0]], np.int32)
    node = helper.make_node("MultiHeadAttention", names, ["y"], num_heads=4, **MS)
    _run_node(node, ins, inits)


@pytest.mark.parametrize(("positions", "interleaved"), [("ids", 0), ("offset", 1)])
def test_rotary_embedding_node(positions: str, interleaved: int) -> None:
    b, s, heads, d = 2, 3, 2, 8
    ins = {"x": _f(b, s, heads * d)}
    ins["p"] = np.array([[0, 1, 2], [2, 3, 4]], np.int64) if positions == "ids" \
        else np.array([1], np.int64)
    angles = np.arange(8)[:, None] / 10000 ** (np.arange(d // 2)[None] / (d // 2))
    node = helper.make_node("RotaryEmbedding", ["x", "p", "cos", "sin"], ["y"],
                            interleaved=interleaved, num_heads=heads, **MS)
    _run_node(node, ins, {"cos": np.cos(angles).astype(np.float32),
                          "sin": np.sin(angles).astype(np.float32)})


def test_info_counts_expanded_contrib_ops_as_supported(tmp_path, capsys) -> None:
    from onnxjit import cli

    node = helper.make_node("FastGelu", ["x", "bias"], ["y"], **MS)
    onnx.save(_node_model(node, {"x": _f(2, 8)}, {"bias": _f(8)}), tmp_path / "m.onnx")
    unknown = helper.make_node("NotAnOp", ["x"], ["y"], **MS)
    onnx.save(_node_model(unknown, {"x": _f(2, 8)}), tmp_path / "u.onnx")
    assert cli.main(["info", str(tmp_path / "m.onnx")]) == 0
    assert "FastGelu" in (out := capsys.readouterr().out) and "not supported" not in out
    assert cli.main(["info", str(tmp_path / "u.onnx")]) == 0
    assert "not supported" in capsys.readouterr().out


@pytest.mark.parametrize("with_mask", [False, True], ids=["no-mask", "mask"])
def test_embed_layer_normalization_node(with_mask: bool) -> None:
    h = 8
    inits = {"we": _f(10, h), "pe": _f(6, h), "se": _f(2, h), "g": _f(h), "b": _f(h)}
    ins = {"ids": RNG.integers(0, 10, (2, 4)).astype(np.int32),
           "seg": RNG.integers(0, 2, (2, 4)).astype(np.int32)}
    if with_mask:
        ins["mask"] = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], np.int32)
    node = helper.make_node("EmbedLayerNormalization", list(ins)[:2] + list(inits)
                            + (["mask"] if with_mask else []), ["y", "mask_index", "sum"],
                            epsilon=1e-12, **MS)
    _run_node(node, ins, inits)


@pytest.mark.parametrize("step", ["prompt", "decode-rotary", "decode-window"])
def test_group_query_attention_node(step: str) -> None:
    """Generation with a KV cache as onnxruntime-genai models run it: a prompt (no past),
    then one token at a time with the past (all batch rows of one length)."""
    b, heads, kv_heads, d = 2, 4, 2, 16
    s, past = (5, 0) if step == "prompt" else (1, 4)
    ins = {"q": _f(b, s, heads * d), "k": _f(b, s, kv_heads * d), "v": _f(b, s, kv_heads * d)}
    names = ["q", "k", "v", "", ""]
    if past:
        ins.update(pk=_f(b, kv_heads, past, d), pv=_f(b, kv_heads, past, d))
        names[3:] = ["pk", "pv"]
    ins.update(sk=np.full(b, past + s - 1, np.int32), tl=np.array(past + s, np.int32))
    names += ["sk", "tl"]
    inits, attrs = {}, {}
    if step == "decode-rotary":
        angles = np.arange(16)[:, None] / 10000 ** (np.arange(d // 2)[None] / (d // 2))
        inits = {"cos": np.cos(angles).astype(np.float32),
                 "sin": np.sin(angles).astype(np.float32)}
        names += ["cos", "sin"]
        attrs["do_rotary"] = 1
    if step == "decode-window":
        attrs["local_window_size"] = 3
    node = helper.make_node("GroupQueryAttention", names, ["y", "present_k", "present_v"],
                            num_heads=heads, kv_num_heads=kv_heads, **attrs, **MS)
    _run_node(node, ins, inits)
