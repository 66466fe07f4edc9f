"""RNN, GRU and LSTM beyond the ONNX backend suite: varying sequence_lens (including 0),
bidirectional with every output, layout=1, clip, non-default activations, peepholes,
input_forget, linear_before_reset, omitted inputs/outputs; against onnxruntime (which
implements these ops directly), through the loop-IR interpreter and natively. Also the numpy
evaluation (constant folding), symbolic shape inference and error messages."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from loop_harness import run_via_loop_ir
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.errors import InputError, ModelError
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.loops import Matmul, walk
from onnxjit.ir.opdef import resolve
from onnxjit.ir.types import DType, Sym, TensorType

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def make(kind: str, S=5, N=3, I=4, H=6, dirs=1, layout=0, opset=22, bias=True, lens=None,
         h0=True, c0=True, peep=False, outs=(1, 1, 1), dtype=np.float32, seed=0,
         scale=0.5, name="rnn", **attrs):
    """A one-node model (W, R, B, P as initializers) and its feeds (X, L, H0, C0)."""
    rng = np.random.default_rng(seed)
    g = GATES[kind]
    tp = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    feeds = {"X": rng.standard_normal((N, S, I) if layout else (S, N, I)).astype(dtype)}
    inits = {"W": (rng.standard_normal((dirs, g * H, I)) * scale).astype(dtype),
             "R": (rng.standard_normal((dirs, g * H, H)) * scale).astype(dtype)}
    names = ["X", "W", "R"]
    if bias:
        inits["B"] = rng.standard_normal((dirs, 2 * g * H)).astype(dtype)
    names.append("B" if bias else "")
    if lens is not None:
        feeds["L"] = np.asarray(lens, np.int32)
    names.append("L" if lens is not None else "")
    st = (N, dirs, H) if layout else (dirs, N, H)
    if h0:
        feeds["H0"] = rng.standard_normal(st).astype(dtype)
    names.append("H0" if h0 else "")
    if kind == "LSTM":
        if c0:
            feeds["C0"] = rng.standard_normal(st).astype(dtype)
        names.append("C0" if c0 else "")
        if peep:
            inits["P"] = rng.standard_normal((dirs, 3 * H)).astype(dtype)
        names.append("P" if peep else "")
    while names[-1] == "":
        names.pop()
    n_out = 3 if kind == "LSTM" else 2
    onames = [n if outs[k] else "" for k, n in enumerate(["Y", "Y_h", "Y_c"][:n_out])]
    while onames[-1] == "":
        onames.pop()
    if layout:
        attrs["layout"] = 1
    if dirs == 2:
        attrs["direction"] = "bidirectional"
    node = helper.make_node(kind, names, onames, name=name, hidden_size=H, **attrs)
    shapes = {"Y": (N, S, dirs, H) if layout else (S, dirs, N, H), "Y_h": st, "Y_c": st}
    ins = [helper.make_tensor_value_info(k, TensorProto.INT32 if k == "L" else tp, v.shape)
           for k, v in feeds.items()]
    ovi = [helper.make_tensor_value_info(n, tp, shapes[n]) for n in onames if n]
    graph = helper.make_graph([node], "g", ins, ovi,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model, feeds


def run_ort(model, feeds) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def close(got, want, tol=1e-5) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


CASES = {
    "rnn_lens": ("RNN", dict(lens=[5, 2, 0])),
    "rnn_bidir_lens": ("RNN", dict(dirs=2, lens=[1, 5, 3])),
    "rnn_relu_clip": ("RNN", dict(activations=["Relu"], clip=0.7)),
    "rnn_affine": ("RNN", dict(activations=["Affine"], activation_alpha=[0.3],
                               activation_beta=[0.6])),
    "rnn_no_options": ("RNN", dict(bias=False, h0=False, outs=(0, 1))),
    "gru_lens": ("GRU", dict(lens=[5, 2, 0], N=3)),
    "gru_bidir_reverse_lens": ("GRU", dict(dirs=2, lens=[3, 5, 1])),
    "gru_reverse_lens": ("GRU", dict(direction="reverse", lens=[3, 5, 1])),
    "gru_lbr": ("GRU", dict(linear_before_reset=1, dirs=2, lens=[1, 5, 3])),
    "gru_lbr_clip": ("GRU", dict(linear_before_reset=1, clip=0.3)),
    "gru_acts": ("GRU", dict(dirs=2, activations=["Sigmoid", "Elu", "HardSigmoid", "Affine"],
                             activation_alpha=[0.5])),
    "gru_only_yh": ("GRU", dict(outs=(0, 1), bias=False, h0=False)),
    "lstm_bidir_all": ("LSTM", dict(dirs=2, lens=[5, 2, 0], peep=True)),
    "lstm_reverse_lens": ("LSTM", dict(direction="reverse", lens=[4, 1, 5])),
    "lstm_clip_peep": ("LSTM", dict(peep=True, clip=0.5)),
    "lstm_input_forget": ("LSTM", dict(input_forget=1, peep=True)),
    "lstm_acts": ("LSTM", dict(dirs=2, activations=["HardSigmoid", "Softsign", "Softplus",
                                                    "Sigmoid", "LeakyRelu", "ScaledTanh"],
                               activation_alpha=[0.3, 0.1, 0.9], activation_beta=[0.4, 1.2])),
    "lstm_thresholded": ("LSTM", dict(activations=["Sigmoid", "ThresholdedRelu", "Relu"],
                                      activation_alpha=[0.2])),
    "lstm_only_yc": ("LSTM", dict(outs=(0, 0, 1), c0=False)),
    "lstm_opset7": ("LSTM", dict(opset=7, lens=[2, 5, 3])),
    # onnxruntime has no GRU-3 kernel: its reference is the same model at opset 7
    "gru_opset3": ("GRU", dict(opset=3, linear_before_reset=1, ort_opset=7)),
    "rnn_opset1": ("RNN", dict(opset=1, output_sequence=1, ort_opset=7)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_against_onnxruntime_loop_ir(case):
    kind, kw = CASES[case]
    kw = dict(kw)
    ort_opset = kw.pop("ort_opset", None)
    model, feeds = make(kind, **kw)
    if ort_opset is not None:
        kw.pop("output_sequence", None)
        want = run_ort(make(kind, **{**kw, "opset": ort_opset})[0], feeds)
    else:
        want = run_ort(model, feeds)
    close(run_via_loop_ir(model, list(feeds.values())), want)


@pytest.mark.parametrize("case", ["lstm_bidir_all", "gru_bidir_reverse_lens", "gru_lbr",
                                  "rnn_bidir_lens"])
def test_against_onnxruntime_native(case):
    kind, kw = CASES[case]
    model, feeds = make(kind, N=5, H=20, I=9, S=7, **{**kw, **(
        {"lens": [7, 3, 0, 6, 1]} if "lens" in kw else {})})
    got = onnxjit.compile(model, cache_dir=False)(*feeds.values())
    close(list(got), run_ort(model, feeds), tol=1e-5)


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
def test_layout_1(kind):
    # onnxruntime has no batch-major RNNs: run it on the layout-0 model with transposed data.
    lens = [4, 1, 5]
    m0, f0 = make(kind, dirs=2, lens=lens, peep=kind == "LSTM")
    m1, _ = make(kind, dirs=2, lens=lens, layout=1, peep=kind == "LSTM")
    f1 = {k: (v if k == "L" else v.swapaxes(0, 1).copy()) for k, v in f0.items()}
    want = run_ort(m0, f0)
    want = [want[0].transpose(2, 0, 1, 3)] + [w.swapaxes(0, 1) for w in want[1:]]
    close(run_via_loop_ir(m1, list(f1.values())), want)
    close(list(onnxjit.compile(m1, cache_dir=False)(*f1.values())), want)


def test_layout_1_against_reference():
    from onnx.reference import ReferenceEvaluator

    model, feeds = make("LSTM", layout=1, N=2, S=3)
    close(run_via_loop_ir(model, list(feeds.values())),
          ReferenceEvaluator(model).run(None, feeds))


def test_float64_against_reference():
    # onnxruntime has no f64 RNNs; onnx.reference does (without sequence_lens/clip).
    from onnx.reference import ReferenceEvaluator

    for kind in ("RNN", "GRU", "LSTM"):
        model, feeds = make(kind, dtype=np.float64, dirs=2)
        close(run_via_loop_ir(model, list(feeds.values())),
              ReferenceEvaluator(model).run(None, feeds), tol=1e-12)


@pytest.mark.parametrize("case", ["lstm_bidir_all", "gru_lbr", "gru_lens", "rnn_relu_clip"])
def test_numpy_evaluate(case):
    # The op table's evaluate (used by constant folding) on the same cases.
    from onnxjit.driver import import_model
    from onnxjit.options import CompileOptions

    kind, kw = CASES[case]
    model, feeds = make(kind, **kw)
    g = import_model(model.SerializeToString(), CompileOptions(verify=False)).graph
    node = g.nodes[0]
    arrays = {**{v.name: v.const for v in g.initializers}, **feeds}
    ins = [None if v is None else arrays[v.name] for v in node.inputs]
    close(resolve(node).evaluate(node, ins), run_ort(model, feeds))


def test_sequence_lens_out_of_range():
    model, feeds = make("LSTM", lens=[5, 6, 1])
    with pytest.raises(InputError, match="sequence_lens"):
        run_via_loop_ir(model, list(feeds.values()))


def test_empty_sequence():
    model, feeds = make("GRU", S=0)
    got = run_via_loop_ir(model, list(feeds.values()))
    assert got[0].shape == (0, 1, 3, 6)  # no step ends in state 0, not H0 (onnxruntime)
    assert feeds["H0"].any()
    np.testing.assert_array_equal(got[1], np.zeros_like(feeds["H0"]))


# --------------------------------------------------------------------------- inference, errors

F = DType.FLOAT


def infer(op: str, types: list, opset: int = 22, n_out: int = 2, **attrs):
    ins = [None if t is None else Value(TensorType(*t), f"x{k}") for k, t in enumerate(types)]
    node = Node(op, ins, [Value(None, f"o{k}") for k in range(n_out)], dict(attrs),
                version=opset, name="cell")
    return resolve(node).infer(node)


def test_symbolic_inference():
    s, n = Sym.var("S"), Sym.var("N")
    out = infer("LSTM", [(F, (s, n, 4)), (F, (2, 24, 4)), (F, (2, 24, 6))], n_out=3,
                direction="bidirectional")
    assert out[0].shape == (s, 2, n, 6) and out[1].shape == (2, n, 6) == out[2].shape
    out = infer("GRU", [(F, (n, s, 4)), (F, (1, 18, 4)), (F, (1, 18, 6))], layout=1)
    assert out[0].shape == (n, s, 1, 6) and out[1].shape == (n, 1, 6)
    # hidden_size comes from R when the attribute is absent
    out = infer("RNN", [(F, (s, n, 4)), (F, (1, 5, 4)), (F, (1, 5, 5))])
    assert out[1].shape == (1, n, 5)


def test_errors_name_the_node():
    x, w, r = (F, (5, 3, 4)), (F, (1, 24, 4)), (F, (1, 24, 6))
    with pytest.raises(ModelError, match="hidden_size 7 does not match.*R") as e:
        infer("LSTM", [x, w, r], n_out=3, hidden_size=7)
    assert "cell" in str(e.value)
    with pytest.raises(ModelError, match="W") as e:
        infer("LSTM", [x, (F, (1, 20, 4)), r], n_out=3)
    assert "cell" in str(e.value)
    with pytest.raises(ModelError, match="direction"):
        infer("LSTM", [x, w, r], n_out=3, direction="sideways")
    with pytest.raises(ModelError, match="W"):
        infer("LSTM", [x, w, r], n_out=3, direction="bidirectional")
    with pytest.raises(ModelError, match="activations"):
        infer("LSTM", [x, w, r], n_out=3, activations=("Sigmoid", "Tanh"))
    with pytest.raises(ModelError, match="unknown activation 'Swish'"):
        infer("RNN", [x, (F, (1, 6, 4)), (F, (1, 6, 6))], activations=("Swish",))
    with pytest.raises(ModelError, match="sequence_lens"):
        infer("GRU", [x, (F, (1, 18, 4)), (F, (1, 18, 6)), None, (DType.INT64, (3,))])
    with pytest.raises(ModelError, match="initial_h"):
        infer("GRU", [x, (F, (1, 18, 4)), (F, (1, 18, 6)), None, None, (F, (1, 2, 6))])
    with pytest.raises(ModelError, match="must match"):
        infer("RNN", [x, (DType.DOUBLE, (1, 6, 4)), (F, (1, 6, 6))])
    with pytest.raises(ModelError, match="i32.*does not accept"):
        i = DType.INT32
        infer("RNN", [(i, (5, 3, 4)), (i, (1, 6, 4)), (i, (1, 6, 6))])


def test_hidden_size_mismatch_in_model():
    model, feeds = make("GRU", name="my_gru")
    model.graph.node[0].attribute[0].i = 5  # hidden_size
    with pytest.raises(ModelError, match="my_gru.*hidden_size 5"):
        onnxjit.compile(model, cache_dir=False)(*feeds.values())


def test_onnx_checker_accepts_test_models():
    model, _ = make("LSTM", dirs=2, lens=[1, 2, 3], peep=True)
    onnx.checker.check_model(model)


# --------------------------------------------------------------------------- blocked steps

BLOCKED = {  # hidden sizes giving several blocks of hidden units and a narrower tail block
    "lstm": ("LSTM", dict(H=100, peep=True, lens=[9, 4, 0, 7, 9, 1, 8, 2])),
    "gru": ("GRU", dict(H=150, lens=[9, 4, 0, 7, 9, 1, 8, 2])),
    "gru_lbr": ("GRU", dict(H=150, linear_before_reset=1)),
    "rnn": ("RNN", dict(H=200, lens=[9, 4, 0, 7, 9, 1, 8, 2])),
    # equal blocks wider than the tiled kernel's panels (R stored in panels, `pack_r`): LSTM 4
    # blocks of 32 units (128 columns), GRU 4 of 48 (z, r: 96 columns, an edge panel; h: 48),
    # RNN 4 of 128
    "lstm_panels": ("LSTM", dict(H=128, peep=True, lens=[9, 4, 0, 7, 9, 1, 8, 2])),
    "gru_panels": ("GRU", dict(H=192, lens=[9, 4, 0, 7, 9, 1, 8, 2])),
    "rnn_panels": ("RNN", dict(H=512, scale=0.05)),  # 512-term sums: keep tanh unsaturated
}


def _weights_as_inputs(model: onnx.ModelProto, feeds: dict) -> tuple[onnx.ModelProto, dict]:
    """The same model with W and R graph inputs instead of initializers (packed at run time)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    feeds = dict(feeds)
    for name in ("W", "R"):
        init = next(t for t in m.graph.initializer if t.name == name)
        feeds[name] = numpy_helper.to_array(init)
        m.graph.initializer.remove(init)
        m.graph.input.append(helper.make_tensor_value_info(name, init.data_type, init.dims))
    return m, feeds


@pytest.mark.parametrize("case", sorted(BLOCKED))
def test_blocked_steps_on_two_threads(case):
    # Big enough that each step's blocks dispatch to the pool (test_threads checks the plan);
    # constant weights are packed at compile time, weights given as inputs by a pack kernel:
    # both must match onnxruntime.
    kind, kw = BLOCKED[case]
    kw = {"scale": 0.2, **kw}
    model, feeds = make(kind, S=9, N=8, I=16, dirs=2 if kind == "GRU" else 1, **kw)
    want = run_ort(model, feeds)
    # weights as inputs: the pack kernel's layout (both GRU gate groups, panels)
    variants = [(model, feeds), _weights_as_inputs(model, feeds)]
    for m, f in variants:
        fn = onnxjit.compile(m, cache_dir=False, num_threads=2)
        close(list(fn(**f)), want, tol=2e-5)


def test_blocked_steps_loop_ir():
    # The loop-IR interpreter runs the same blocked lowering (both R forms).
    model, feeds = make("LSTM", S=4, N=3, I=5, H=40, dirs=2, lens=[4, 0, 2])
    want = run_ort(model, feeds)
    close(run_via_loop_ir(model, list(feeds.values())), want)
    m, f = _weights_as_inputs(model, feeds)
    close(run_via_loop_ir(m, [f[v.name] for v in m.graph.input]), want)


def test_blocked_steps_loop_ir_panels():
    # Blocks wider than a panel: the steps' products read R in panels, in the interpreter too.
    from loop_harness import import_model, lower_signature

    from onnxjit.options import CompileOptions

    opts = CompileOptions(verify=False, num_threads=2)  # GRU hidden 192: 4 blocks of 48 units
    model, feeds = make("GRU", S=2, N=2, I=5, H=192, dirs=2, lens=[2, 0], scale=0.2)
    want = run_ort(model, feeds)
    for m, f in (model, feeds), _weights_as_inputs(model, feeds):
        inputs = [f[v.name] for v in m.graph.input]
        sig = tuple((DType.from_numpy(v.dtype), v.shape) for v in inputs)
        _, prog = lower_signature(import_model(m.SerializeToString(), opts), sig, opts)
        steps = [s for k in prog.kernels if k.name.endswith("steps") for s in walk(k.body)
                 if isinstance(s, Matmul)]
        assert any(s.b_packed for s in steps)
        close(run_via_loop_ir(m, inputs, opts), want)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_directions_at_once_on_two_threads(kind):
    # A small bidirectional node on two threads runs its directions as one parallel loop of
    # two, each direction's state its own (`lowering._directions_together`); reverse steps,
    # sequence_lens and every output as onnxruntime, natively and in the interpreter.
    from loop_harness import import_model, lower_signature

    from onnxjit.ir.loops import Loop
    from onnxjit.options import CompileOptions

    model, feeds = make(kind, S=6, N=3, I=5, H=40, dirs=2, lens=[6, 0, 3], scale=0.3)
    want = run_ort(model, feeds)
    opts = CompileOptions(verify=False, num_threads=2)
    inputs = [feeds[v.name] for v in model.graph.input]
    sig = tuple((DType.from_numpy(v.dtype), v.shape) for v in inputs)
    _, prog = lower_signature(import_model(model.SerializeToString(), opts), sig, opts)
    steps = [k for k in prog.kernels if k.name.endswith("steps")]
    assert len(steps) == 1 and isinstance(steps[0].body[0], Loop) and steps[0].body[0].parallel
    close(run_via_loop_ir(model, inputs, opts), want)
    close(list(onnxjit.compile(model, cache_dir=False, num_threads=2)(**feeds)), want)


def test_block_width():
    from onnxjit.ir.ops.recurrent.lowering import block_width

    # (hidden, gates, batch, itemsize, threads): equal blocks, a multiple of the threads,
    # within BLOCK_COLS gate columns and REC_BYTES of result; the widest with two a thread
    assert block_width(256, 4, 8, 4, 2) == 64  # 4 blocks of 256 columns
    assert block_width(256, 3, 8, 4, 2) == 64
    assert block_width(256, 1, 8, 4, 2) == 64  # 4 blocks, not 2 of 128
    assert block_width(256, 4, 64, 4, 2) == 32  # 64 x 128 results: 32 KB
    assert block_width(256, 4, 8, 4, 8) == 16  # 16 blocks for 8 threads
    assert block_width(256, 4, 8, 4, 3) == 16  # no equal split into 3: narrow blocks
    assert block_width(128, 4, 1, 4, 2) == 64  # 4 blocks would be 16K multiply-adds each
    assert block_width(64, 4, 16, 4, 2) == 16
    assert block_width(100, 4, 8, 4, 2) == 16  # 6 blocks and a tail of 4 units
    assert block_width(8, 4, 1, 4, 2) == 8


def test_pack_r_panels():
    from onnxjit.ir.loops import unpack_panels
    from onnxjit.ir.ops.recurrent.lowering import pack_r

    r = np.random.default_rng(0).standard_normal((1, 4 * 40, 40)).astype(np.float32)
    rows = pack_r(r, ((0, 1, 2, 3),), 32)
    panels = pack_r(r, ((0, 1, 2, 3),), 32, nr=48)
    assert panels.shape == rows.shape
    # block 0: 32 units x 4 gates = 128 columns (panels of 48, 48 and 32); the tail block, 8
    # units: 32 columns, narrower than a panel, so the same as row-major
    np.testing.assert_array_equal(unpack_panels(panels[:40 * 128], 40, 128, 48),
                                  rows[:40 * 128].reshape(40, 128))
    np.testing.assert_array_equal(panels[40 * 128:], rows[40 * 128:])


def test_pack_r_layout():
    from onnxjit.ir.ops.recurrent.lowering import pack_r

    r = np.arange(2 * 3 * 5 * 5, dtype=np.float32).reshape(2, 15, 5)  # D=2, G=3, H=5
    packed = pack_r(r, ((0, 1), (2,)), 2)  # blocks of 2 units: widths 2, 2, 1
    assert packed.shape == (r.size,)
    # direction 1, group (0, 1), block j0=2 (w=2): after d0 (75), group block j0=0 (2*2*5)
    at = 75 + 2 * 2 * 5
    panel = packed[at:at + 5 * 4].reshape(5, 4)  # [k, gi*w + jj]
    np.testing.assert_array_equal(panel[:, 1], r[1, 0 * 5 + 2 + 1, :])
    np.testing.assert_array_equal(panel[:, 2], r[1, 1 * 5 + 2 + 0, :])
    # the last group's tail block (one unit) is the direction's last panel
    np.testing.assert_array_equal(packed[150 - 5:], r[1, 2 * 5 + 4, :])


def test_constant_bias_halves_summed_once():
    # A constant B's halves are added at compile time (`recurrent.lowering.BIAS_SUM`): the program
    # holds Wb + Rb per direction; a bias given at run time keeps both halves.
    from loop_harness import OPTIONS, import_model, lower_signature

    model, feeds = make("LSTM", S=3, N=2, I=4, H=16, dirs=2)
    sig = tuple((DType.from_numpy(v.dtype), v.shape) for v in feeds.values())
    _, prog = lower_signature(import_model(model.SerializeToString(), OPTIONS), sig, OPTIONS)
    sums = [b for b in prog.buffers if "bias_sum" in b.name]
    b = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "B"))
    assert len(sums) == 1
    np.testing.assert_array_equal(np.asarray(sums[0].data).reshape(2, -1),
                                  b[:, :64] + b[:, 64:])
    close(run_via_loop_ir(model, list(feeds.values())), run_ort(model, feeds))

    m, f = _weights_as_inputs(model, feeds)  # W, R inputs; B stays constant
    m.graph.input.append(helper.make_tensor_value_info("B", TensorProto.FLOAT, b.shape))
    m.graph.initializer.remove(next(t for t in m.graph.initializer if t.name == "B"))
    f["B"] = b
    names = [v.name for v in m.graph.input]
    sig = tuple((DType.from_numpy(f[n].dtype), f[n].shape) for n in names)
    _, prog = lower_signature(import_model(m.SerializeToString(), OPTIONS), sig, OPTIONS)
    assert not [b for b in prog.buffers if "bias_sum" in b.name]
