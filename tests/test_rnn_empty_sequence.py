"""RNN, GRU and LSTM over an empty sequence (S = 0) without sequence_lens end in state 0, as
onnxruntime gives (and as an entry of length 0 in sequence_lens does): Y_h and Y_c are zeros,
not initial_h / initial_c. Checked for the specialised and the symbolic program and against
the numpy semantics tier 0 and constant folding use. onnxruntime itself is not called with
S = 0 here: its answer is zeros where it runs (an RNN), but on some of these calls (1.32) it
ends the process (`terminate called without an active exception`); it is the reference for
the symbolic program's next, non-empty call."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tier0_ref import Tier0

import onnxjit

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
H, I, N = 3, 2, 2


def _model(kind: str, seq: object):
    rng = np.random.default_rng(7)
    g = GATES[kind]
    inits = [numpy_helper.from_array(rng.standard_normal((1, g * H, I)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((1, g * H, H)).astype(np.float32), "R")]
    ins = ["x", "W", "R", "", "", "h0"] + (["c0"] if kind == "LSTM" else [])
    outs = ["y", "yh"] + (["yc"] if kind == "LSTM" else [])
    vi = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, N, I]),
          helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, N, H])]
    if kind == "LSTM":
        vi.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, [1, N, H]))
    g = helper.make_graph([helper.make_node(kind, ins, outs, hidden_size=H)], "g", vi,
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                           for o in outs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


def _feeds(kind: str, seq: int) -> dict:
    f = {"x": np.ones((seq, N, I), np.float32), "h0": np.full((1, N, H), 0.5, np.float32)}
    if kind == "LSTM":
        f["c0"] = np.full((1, N, H), 0.25, np.float32)
    return f


@pytest.mark.parametrize("kind", sorted(GATES))
@pytest.mark.parametrize("specialize", ["shape", "dynamic"])
def test_empty_sequence_ends_in_state_zero(kind, specialize):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")
    model = _model(kind, "S" if specialize == "dynamic" else 0)
    fn = onnxjit.compile(model, cache_dir=False, specialize=specialize)
    feeds = _feeds(kind, 0)
    got = fn(**feeds)
    assert got[0].shape == (0, 1, N, H)
    for g in got[1:]:
        np.testing.assert_array_equal(g, np.zeros((1, N, H), np.float32))
    if specialize == "dynamic":  # the same program still carries the state over S > 0
        longer = _feeds(kind, 3)
        ref = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, longer)
        for g, w in zip(fn(**longer), ref):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        assert fn._symbolic.reasons() == []


@pytest.mark.parametrize("kind", sorted(GATES))
def test_numpy_semantics_agree(kind):
    """Tier 0 and constant folding (`rnn_evaluate`) give the native code's zeros."""
    model = _model(kind, "S")
    feeds = _feeds(kind, 0)
    ref = Tier0(model)
    got = ref.run([feeds[v.name] for v in ref.inputs])
    assert got is not None
    native = onnxjit.compile(model, cache_dir=False, specialize="dynamic")(**feeds)
    for g, w in zip(got, native):
        np.testing.assert_array_equal(g, w)
