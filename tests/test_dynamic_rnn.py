"""RNN, GRU and LSTM compiled once for a run-time sequence length and batch.

Each case is a one-node recurrent model (`test_ops_rnn.make`: weights constant, so hidden and
input sizes stay fixed) whose X, sequence_lens and initial states declare the symbolic dims S
(sequence) and N (batch). It is compiled once with `specialize="dynamic"`, then called at sizes
that matter: no step (S = 0), one step, batch 1 and 0, and batches around the step product's
row tiles (3: one short tile, 8 and 13: a balanced pair after whole tiles, 40: several tiles);
it must give the outputs of tier 0's numpy interpreter (`tiered.interpreter.Plan`: no compile)
(an empty sequence ends in state 0, as onnxruntime has it: tests/test_rnn_empty_sequence.py),
and `reasons() == []` asserts that one symbolic program served every call (nothing fell back
to a shape-specialised compile).
One case runs against onnxruntime too; a call whose initial state's batch differs from X's
breaks a relation the symbolic program assumes and must fail as the specialised program does;
and a small CRNN head (MatMul -> Transpose -> LSTM -> Squeeze -> MatMul -> Softmax) runs
symbolically end to end.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_ops_rnn import make, run_ort
from tier0_ref import Tier0

import onnxjit

#: (seq, batch) of the calls
SIZES = [(5, 3), (1, 1), (0, 2), (7, 1), (3, 8), (2, 13), (4, 40), (3, 0)]

#: name -> (op, arguments of `make`, sequence_lens given)
CASES = {
    "lstm_forward": ("LSTM", {}, False),
    "lstm_reverse": ("LSTM", {"direction": "reverse"}, False),
    "lstm_bidirectional": ("LSTM", {"dirs": 2}, False),
    "gru_forward": ("GRU", {}, False),
    "gru_reverse": ("GRU", {"direction": "reverse"}, False),
    "gru_bidirectional": ("GRU", {"dirs": 2}, False),
    "rnn_forward": ("RNN", {}, False),
    "rnn_reverse": ("RNN", {"direction": "reverse"}, False),
    "rnn_bidirectional": ("RNN", {"dirs": 2}, False),
    "lstm_lens_peepholes": ("LSTM", {"dirs": 2, "peep": True}, True),
    "gru_lens_layout1_lbr": ("GRU", {"dirs": 2, "layout": 1, "linear_before_reset": 1}, True),
    "lstm_layout1_no_state": ("LSTM", {"layout": 1, "h0": False, "c0": False, "bias": False},
                              False),
    "rnn_clip_leaky": ("RNN", {"clip": 2.0, "activations": ["LeakyRelu"],
                               "activation_alpha": [0.2]}, False),
    "lstm_hidden_tail": ("LSTM", {"H": 40, "I": 24, "direction": "reverse"}, True),
}


def symbolic(model: onnx.ModelProto, layout: int, batch: str = "N") -> onnx.ModelProto:
    """`model` with X's sequence and batch dims named S and N, sequence_lens' N, and the
    initial states' batch dim named `batch`; outputs left to inference."""
    for inp in model.graph.input:
        dims = inp.type.tensor_type.shape.dim
        if inp.name == "X":
            named = {0: "N", 1: "S"} if layout else {0: "S", 1: "N"}
        elif inp.name == "L":
            named = {0: "N"}
        elif inp.name in ("H0", "C0"):
            named = {0 if layout else 1: batch}
        else:
            continue
        for axis, name in named.items():
            dims[axis].Clear()
            dims[axis].dim_param = name
    for out in model.graph.output:
        for d in out.type.tensor_type.shape.dim:
            d.Clear()
    return model


def feeds_at(op: str, kw: dict, lens: bool, seq: int, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seq * 31 + batch)
    lengths = rng.integers(0, seq + 1, batch).tolist() if lens else None
    return make(op, S=seq, N=batch, lens=lengths, seed=seq + batch, **kw)[1]


def compile_case(op: str, kw: dict, lens: bool, batch: str = "N") -> tuple:
    model, _ = make(op, lens=[1, 1, 1] if lens else None, **kw)
    model = symbolic(model, kw.get("layout", 0), batch)
    return (onnxjit.compile(model, cache_dir=False, specialize="dynamic"),
            onnxjit.compile(model, cache_dir=False, specialize="shape"), model)


def outcome(fn, feeds: dict) -> list | type:
    try:
        return fn(**feeds)
    except onnxjit.OnnxJitError as e:
        return type(e)


def assert_same(got: list, want: list, what: object) -> None:
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (what, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=str(what))


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_program_serves_every_sequence_and_batch(name):
    op, kw, lens = CASES[name]
    model, _ = make(op, lens=[1, 1, 1] if lens else None, **kw)
    model = symbolic(model, kw.get("layout", 0), "N")
    dyn = onnxjit.compile(model, cache_dir=False, specialize="dynamic")
    ref = Tier0(model)
    names = [i.name for i in model.graph.input]
    for seq, batch in SIZES:
        feeds = feeds_at(op, kw, lens, seq, batch)
        want = ref.run([feeds[n] for n in names])
        assert want is not None, ((seq, batch), "tier 0 declined")
        got = outcome(dyn, feeds)
        assert not isinstance(want, type), ((seq, batch), want)
        assert not isinstance(got, type), ((seq, batch), got)
        assert_same(got, want, (seq, batch))
        if seq == 0:  # no step: state 0 (onnxruntime), whatever the initial state
            assert got[0].size == 0
            np.testing.assert_array_equal(got[1], np.zeros_like(got[1]))
    assert dyn._symbolic.reasons() == [], dyn._symbolic.reasons()
    assert [p for p in dyn._symbolic.programs.values() if p is not None]


def test_against_onnxruntime():
    op, kw, lens = "LSTM", {"dirs": 2, "peep": True}, True
    dyn, _, model = compile_case(op, kw, lens)
    for seq, batch in [(5, 3), (1, 1), (6, 8), (2, 13)]:
        feeds = feeds_at(op, kw, lens, seq, batch)
        want = run_ort(model, feeds)
        got = dyn(**feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=str((seq, batch)))
    assert dyn._symbolic.reasons() == []


def test_sequence_lens_past_the_sequence_fails_alike():
    op, kw = "GRU", {"dirs": 2}
    dyn, spec, _ = compile_case(op, kw, True)
    feeds = feeds_at(op, kw, True, 4, 3)
    feeds["L"] = np.array([2, 5, 1], np.int32)
    assert outcome(spec, feeds) is onnxjit.InputError
    with pytest.raises(onnxjit.InputError, match="sequence_lens"):
        dyn(**feeds)


def test_initial_state_of_another_batch_fails_alike():
    """H0's batch is its own symbol M: the program assumes M == N, and a call breaking that
    goes to the specialised path, which refuses it (never a read past H0)."""
    op, kw = "LSTM", {}
    dyn, spec, _ = compile_case(op, kw, False, batch="M")
    good = feeds_at(op, kw, False, 4, 3)
    assert_same(dyn(**good), spec(**good), "matching batches")
    other = feeds_at(op, kw, False, 4, 2)
    bad = dict(good, H0=other["H0"], C0=other["C0"])
    want = outcome(spec, bad)
    assert isinstance(want, type) and issubclass(want, onnxjit.OnnxJitError)
    assert outcome(dyn, bad) is want
    assert dyn._symbolic.reasons() == []


def crnn_head() -> onnx.ModelProto:
    """x [B, T, 12] -> MatMul 12x16 -> Transpose to [T, B, 16] -> LSTM (hidden 8) -> Y
    [T, 1, B, 8] -> Squeeze -> MatMul 8x5 + bias -> Softmax over the 5 classes."""
    rng = np.random.default_rng(3)
    inits = {"w1": rng.standard_normal((12, 16)) * 0.3,
             "W": rng.standard_normal((1, 32, 16)) * 0.3,
             "R": rng.standard_normal((1, 32, 8)) * 0.3,
             "B": rng.standard_normal((1, 64)) * 0.1,
             "w2": rng.standard_normal((8, 5)), "b2": rng.standard_normal(5)}
    tensors = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()]
    tensors.append(numpy_helper.from_array(np.array([1], np.int64), "ax"))
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["f"]),
             helper.make_node("Transpose", ["f"], ["ft"], perm=[1, 0, 2]),
             helper.make_node("LSTM", ["ft", "W", "R", "B"], ["y"], hidden_size=8),
             helper.make_node("Squeeze", ["y", "ax"], ["ys"]),
             helper.make_node("MatMul", ["ys", "w2"], ["lg"]),
             helper.make_node("Add", ["lg", "b2"], ["lb"]),
             helper.make_node("Softmax", ["lb"], ["p"], axis=-1)]
    g = helper.make_graph(
        nodes, "crnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", 12])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, ["T", "B", 5])], tensors)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_crnn_head():
    model = crnn_head()
    dyn = onnxjit.compile(model, cache_dir=False, specialize="dynamic")
    spec = onnxjit.compile(model, cache_dir=False, specialize="shape")
    rng = np.random.default_rng(5)
    for b, t in [(2, 7), (1, 1), (5, 3), (3, 0)]:
        x = rng.standard_normal((b, t, 12)).astype(np.float32)
        want, got = outcome(spec, {"x": x}), outcome(dyn, {"x": x})
        assert not isinstance(want, type), ((b, t), want)
        assert not isinstance(got, type), ((b, t), got)
        assert_same(got, want, (b, t))
        assert got[0].shape == (t, b, 5)
        if t:
            np.testing.assert_allclose(got[0].sum(-1), 1, rtol=1e-5)
            np.testing.assert_allclose(got[0], run_ort(model, {"x": x})[0], rtol=1e-4,
                                       atol=1e-5)
    assert dyn._symbolic.reasons() == [], dyn._symbolic.reasons()


def test_weights_as_inputs_every_dim_symbolic():
    """W, R and B as graph inputs and every dim symbolic (the ONNX backend tests' form): the
    sizes hidden_size fixes are assumed of R, W and B, and the input size is a run-time depth
    of the projection."""
    model, _ = make("GRU", dirs=2, lens=[1, 1, 1])
    g = model.graph
    for t in list(g.initializer):
        g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    del g.initializer[:]
    for inp in g.input:
        for k, d in enumerate(inp.type.tensor_type.shape.dim):
            d.Clear()
            d.dim_param = f"{inp.name}_{k}"
    for out in g.output:
        for d in out.type.tensor_type.shape.dim:
            d.Clear()
    dyn = onnxjit.compile(model, cache_dir=False, specialize="dynamic")
    spec = onnxjit.compile(model, cache_dir=False, specialize="shape")
    for seq, batch, inp in [(5, 3, 4), (1, 1, 7), (0, 2, 4), (3, 8, 1)]:
        mdl, feeds = make("GRU", S=seq, N=batch, I=inp, dirs=2, lens=[seq] * batch, seed=inp)
        feeds.update({t.name: numpy_helper.to_array(t) for t in mdl.graph.initializer})
        assert_same(dyn(**feeds), spec(**feeds), (seq, batch, inp))
    bad = dict(feeds, R=feeds["R"][:, :, :5])  # hidden_size is 6
    want = outcome(spec, bad)
    assert isinstance(want, type) and issubclass(want, onnxjit.OnnxJitError)
    assert outcome(dyn, bad) is want
    assert dyn._symbolic.reasons() == [], dyn._symbolic.reasons()
