"""Contrib Attention and MultiHeadAttention with past state (`passes.contrib_past`), as GPT-2
decoders carry them after onnxruntime's optimizer: against onnxruntime with an empty past and
a non-empty one (the same compiled model, the past length a symbolic dim), causal or not,
with a raw attention mask or none."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxjit

RNG = np.random.default_rng(3)
B, S, H, D = 2, 3, 2, 4
HID = H * D


def _model(node, inputs, outputs, inits):
    g = helper.make_graph([node], "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m


def _attention(causal: int, mask: bool):
    w = (RNG.standard_normal((HID, 3 * HID)) * 0.3).astype(np.float32)
    bias = (RNG.standard_normal(3 * HID) * 0.1).astype(np.float32)
    node = helper.make_node("Attention", ["x", "w", "b", "m" if mask else "", "past"],
                            ["y", "present"], domain="com.microsoft", num_heads=H,
                            unidirectional=causal)
    ins = [helper.make_tensor_value_info("x", T.FLOAT, ["B", "S", HID]),
           helper.make_tensor_value_info("past", T.FLOAT, [2, "B", H, "P", D])]
    ins += [helper.make_tensor_value_info("m", T.INT32, ["B", "T"])] if mask else []
    outs = [helper.make_tensor_value_info("y", T.FLOAT, ["B", "S", HID]),
            helper.make_tensor_value_info("present", T.FLOAT, [2, "B", H, "T", D])]
    return _model(node, ins, outs, [numpy_helper.from_array(w, "w"),
                                    numpy_helper.from_array(bias, "b")])


def _mha(causal: int):
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "", "pk", "pv"],
                            ["y", "present_k", "present_v"], domain="com.microsoft",
                            num_heads=H, unidirectional=causal)
    ins = [helper.make_tensor_value_info(n, T.FLOAT, ["B", "S", HID]) for n in "qkv"]
    ins += [helper.make_tensor_value_info(n, T.FLOAT, ["B", H, "P", D]) for n in ("pk", "pv")]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, ["B", "S", HID])]
    outs += [helper.make_tensor_value_info(n, T.FLOAT, ["B", H, "T", D])
             for n in ("present_k", "present_v")]
    return _model(node, ins, outs, [])


def _feeds(m, past: int) -> dict:
    feeds = {}
    for vi in m.graph.input:
        dims = [d.dim_value or {"B": B, "S": S, "P": past, "T": past + S}[d.dim_param]
                for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == T.INT32:  # a raw mask: one padded key
            feeds[vi.name] = np.ones(dims, np.int32)
            feeds[vi.name][1, 0] = 0
        else:
            feeds[vi.name] = RNG.standard_normal(dims).astype(np.float32)
    return feeds


def _check(m):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    f = onnxjit.compile(m, cache_dir=False)
    for past in (0, 5):  # an empty past, then a non-empty one (the past dim turns symbolic)
        feeds = _feeds(m, past)
        for got, want in zip(f.run(None, feeds), s.run(None, feeds)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal,mask", [(1, True), (0, False)])
def test_attention_with_past(causal, mask):
    _check(_attention(causal, mask))


def test_multi_head_attention_with_past():
    _check(_mha(1))
