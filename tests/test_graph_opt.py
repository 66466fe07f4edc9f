"""Graph-level optimisations: fold-batchnorm, fold-transpose, fuse-epilogue.

Each rewrite is checked numerically against onnxruntime running the unoptimised model, both
through the loop-IR interpreter and natively, and structurally: the graph IR after the
signature pipeline shows the folded/fused node and the loop IR has the expected kernels.
Negative cases check the rewrite does not happen where it must not.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from loop_harness import run_via_loop_ir
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxjit
from onnxjit.driver import import_model, lower_signature
from onnxjit.ir.parser import parse_model
from onnxjit.ir.printer import print_model
from onnxjit.ir.types import DType
from onnxjit.options import CompileOptions

RNG = np.random.default_rng(0)
F = np.float32


def _rand(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.normal(size=shape) * scale).astype(F)


class G:
    """A tiny model builder: nodes, initializers, one float input and output."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.k = 0

    def init(self, arr: np.ndarray) -> str:
        self.k += 1
        name = f"p{self.k}"
        self.inits.append(nh.from_array(np.asarray(arr), name))
        return name

    def node(self, op: str, ins: list[str], out: str | None = None, **attrs) -> str:
        self.k += 1
        out = out or f"t{self.k}"
        self.nodes.append(h.make_node(op, ins, [out], **attrs))
        return out

    def bn(self, x: str, c: int, **attrs) -> str:
        params = [RNG.uniform(0.5, 1.5, c), RNG.normal(0, 0.1, c), RNG.normal(0, 0.1, c),
                  RNG.uniform(0.5, 1.5, c)]
        return self.node("BatchNormalization", [x] + [self.init(p.astype(F)) for p in params],
                         **attrs)

    def model(self, inputs: dict[str, tuple], outputs: list[str], opset: int = 17
              ) -> onnx.ModelProto:
        g = h.make_graph(self.nodes, "g",
                         [h.make_tensor_value_info(n, TP.FLOAT, s) for n, s in inputs.items()],
                         [h.make_tensor_value_info(o, TP.FLOAT, None) for o in outputs],
                         self.inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
        m.ir_version = 10
        # onnx's shape inference fills in the outputs' shapes (the main graph needs them).
        return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def _graph_and_loops(model: onnx.ModelProto, feeds: list[np.ndarray]) -> tuple[str, str, int]:
    """(graph IR text after the signature pipeline, loop IR text, number of kernels)."""
    from onnxjit.ir.loop_parser import parse_program
    from onnxjit.ir.loop_printer import print_program

    opts = CompileOptions(verify=True, cache_dir=False)
    gm = import_model(model.SerializeToString(), opts)
    sig = tuple((DType.from_numpy(a.dtype), a.shape) for a in feeds)
    bound, program = lower_signature(gm, sig, opts)
    text = print_model(bound)
    assert print_model(parse_model(text)) == text  # the fused forms parse back
    loops = print_program(program)
    assert print_program(parse_program(loops)) == loops
    return text, loops, len(program.kernels)


def check(model: onnx.ModelProto, feeds: list[np.ndarray], rtol: float = 1e-4,
          atol: float = 1e-4) -> tuple[str, str, int]:
    """Compare loop-IR and native results against onnxruntime; return the IR texts."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    want = sess.run(None, dict(zip(names, feeds)))
    got = run_via_loop_ir(model, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    native = onnxjit.compile(model, cache_dir=False)(*feeds)
    for g, w in zip(native, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return _graph_and_loops(model, feeds)


# --------------------------------------------------------------------------- fold-batchnorm


def _conv_bn_relu(g: G, x: str, cin: int, cout: int, bias: bool = True, **conv) -> str:
    ins = [x, g.init(_rand(cout, cin // conv.get("group", 1), 3, 3, scale=0.3))]
    if bias:
        ins.append(g.init(_rand(cout, scale=0.1)))
    y = g.node("Conv", ins, pads=[1, 1, 1, 1], **conv)
    return g.node("Relu", [g.bn(y, cout)])


def test_resnet_block_folds_and_fuses():
    g = G()
    r = _conv_bn_relu(g, "x", 16, 16)
    c2 = g.node("Conv", [r, g.init(_rand(16, 16, 3, 3, scale=0.3))], pads=[1, 1, 1, 1])
    s = g.node("Add", [g.bn(c2, 16), "x"])
    g.node("Relu", [s], "y")
    m = g.model({"x": (2, 16, 10, 10)}, ["y"])
    text, loops, nk = check(m, [_rand(2, 16, 10, 10)])
    assert "BatchNormalization" not in text
    assert text.count("FusedConv") == 2 and "Relu" in text
    assert "Conv+Relu" in text and "Conv+Add+Relu" in text
    assert nk == 2  # one kernel per conv: bias, activation and residual ride in its epilogue
    assert "conv_bias" not in loops


@pytest.mark.parametrize("group", [1, 2, 8])
def test_conv_bn_groups_and_depthwise(group):
    g = G()
    y = _conv_bn_relu(g, "x", 8, 8, group=group)
    g.node("Identity", [y], "y")
    text, loops, nk = check(g.model({"x": (1, 8, 9, 7)}, ["y"]), [_rand(1, 8, 9, 7)])
    assert "BatchNormalization" not in text and "FusedConv" in text
    assert nk == 1


def test_pointwise_conv_epilogue_blocks():
    g = G()
    y = g.node("Conv", ["x", g.init(_rand(32, 16, 1, 1, scale=0.3)),
                        g.init(_rand(32, scale=0.1))])
    g.node("Clip", [y, g.init(np.array(0, F)), g.init(np.array(6, F))], "y")
    text, loops, nk = check(g.model({"x": (2, 16, 30, 30)}, ["y"]), [_rand(2, 16, 30, 30)])
    assert "Conv+Clip" in text and nk == 1


def test_conv_transpose_bn_folds():
    g = G()
    y = g.node("ConvTranspose", ["x", g.init(_rand(4, 3, 3, 3, scale=0.3))], group=2,
               strides=[2, 2])
    g.bn(y, 6)
    m = g.model({"x": (1, 4, 5, 5)}, [g.nodes[-1].output[0]])
    text, _, _ = check(m, [_rand(1, 4, 5, 5)])
    assert "BatchNormalization" not in text and "ConvTranspose" in text


def test_gemm_and_matmul_bn_fold():
    g = G()
    y = g.node("Gemm", ["x", g.init(_rand(6, 5)), g.init(_rand(6))], transB=1, beta=0.5)
    z = g.bn(y, 6)
    w = g.node("MatMul", [z, g.init(_rand(6, 4))])
    g.bn(w, 4)
    m = g.model({"x": (3, 5)}, [g.nodes[-1].output[0]])
    text, _, _ = check(m, [_rand(3, 5)])
    assert "BatchNormalization" not in text


def test_lone_bn_becomes_mul_add_and_fuses():
    g = G()
    y = g.node("Sigmoid", ["x"])
    g.node("Relu", [g.bn(y, 3)], "y")
    text, _, nk = check(g.model({"x": (2, 3, 4, 5)}, ["y"]), [_rand(2, 3, 4, 5)])
    assert "BatchNormalization" not in text
    assert "Mul" in text and "Add" in text and nk == 1  # Sigmoid+Mul+Add+Relu, one nest


def test_bn_not_folded_when_conv_output_has_two_users():
    g = G()
    c = g.node("Conv", ["x", g.init(_rand(4, 3, 3, 3))], pads=[1, 1, 1, 1])
    b = g.bn(c, 4)
    g.node("Add", [b, c], "y")
    text, _, _ = check(g.model({"x": (1, 3, 6, 6)}, ["y"]), [_rand(1, 3, 6, 6)])
    # The conv's output is read twice: its weights stay as they were and the BN becomes
    # Mul+Add, which (with the Add reading the conv twice) is the conv's epilogue.
    assert "BatchNormalization" not in text and "w_bn" not in text
    assert "Conv+Mul+Add+Add" in text


def test_bn_folds_fill_weights_in_place_only_when_nothing_else_holds_them():
    # weights made by ConstantOfShape (the ONNX light models' way) are arrays of this compile:
    # scaled in place when one conv reads them; a weight two convs read is copied for each,
    # and the model's own initializer is never written
    g = G()
    shape = g.init(np.array([4, 3, 3, 3], np.int64))
    fill = onnx.helper.make_tensor("v", TP.FLOAT, [1], [0.25])
    own = g.node("ConstantOfShape", [shape], value=fill)
    shared = g.node("ConstantOfShape", [shape], value=fill)
    given = g.init(_rand(4, 3, 3, 3))
    outs = [g.bn(g.node("Conv", ["x", w], pads=[1, 1, 1, 1]), 4)
            for w in (own, shared, shared, given)]
    g.node("Concat", outs, "y", axis=1)
    m = g.model({"x": (1, 3, 6, 6)}, ["y"])
    init = next(t for t in m.graph.initializer if t.name == given)
    before = nh.to_array(init).copy()
    text, _, _ = check(m, [_rand(1, 3, 6, 6)])
    assert "BatchNormalization" not in text and text.count("w_bn") >= 4
    np.testing.assert_array_equal(nh.to_array(init), before)


def test_bn_with_runtime_params_is_kept():
    g = G()
    c = g.node("Conv", ["x", g.init(_rand(4, 3, 3, 3))], pads=[1, 1, 1, 1])
    g.node("BatchNormalization", [c, "s", g.init(np.zeros(4, F)), g.init(np.zeros(4, F)),
                                  g.init(np.ones(4, F))], "y")
    m = g.model({"x": (1, 3, 6, 6), "s": (4,)}, ["y"])
    text, _, _ = check(m, [_rand(1, 3, 6, 6), _rand(4)])
    assert "BatchNormalization" in text


def test_bn_training_mode_is_kept():
    from onnxjit.ir.graph import Model
    from onnxjit.passes import PassContext, get_pass

    g = G()
    c = g.node("Conv", ["x", g.init(_rand(4, 3, 3, 3))], pads=[1, 1, 1, 1])
    g.bn(c, 4, training_mode=1)
    g.nodes[-1].output.extend(["rm", "rv"])  # training mode computes the running statistics
    m = g.model({"x": (2, 3, 6, 6)}, [g.nodes[-1].output[0]], opset=15)
    from onnxjit.importer import load_model

    model: Model = load_model(m.SerializeToString())
    for p in ("infer-shapes", "fold-constants", "fold-batchnorm"):
        model = get_pass(p).run(model, PassContext()).ir
    ops = [n.op for n in model.graph.nodes]
    assert "BatchNormalization" in ops


# --------------------------------------------------------------------------- fuse-epilogue


def test_matmul_bias_gelu_residual_fuses():
    g = G()
    y = g.node("MatMul", ["x", g.init(_rand(32, 48, scale=0.2))])
    y = g.node("Add", [y, g.init(_rand(48))])
    d = g.node("Div", [y, g.init(np.array(1.4142135, F))])
    e = g.node("Erf", [d])
    e1 = g.node("Add", [e, g.init(np.array(1, F))])
    m1 = g.node("Mul", [y, e1])
    m2 = g.node("Mul", [m1, g.init(np.array(0.5, F))])
    g.node("Add", [m2, "r"], "y")
    m = g.model({"x": (2, 8, 32), "r": (2, 8, 48)}, ["y"])
    text, loops, nk = check(m, [_rand(2, 8, 32), _rand(2, 8, 48)])
    assert "FusedMatMul" in text and "MatMul+Add+Div+Erf+Add+Mul+Mul+Add" in text
    assert nk == 1


def test_matmul_row_blocks_parallel():
    # one product over the 1024 rows and its epilogue nest: code generation splits it into
    # blocks of rows over the threads, the epilogue in each block (fused.linear.ONE_PRODUCT)
    g = G()
    y = g.node("MatMul", ["x", g.init(_rand(16, 64, scale=0.2))])
    g.node("Relu", [g.node("Add", [y, g.init(_rand(64))])], "y")
    text, loops, nk = check(g.model({"x": (1024, 16)}, ["y"]), [_rand(1024, 16)])
    assert nk == 1 and "m = 1024" in loops and "FusedMatMul" in text


def test_gemm_with_c_and_activation():
    g = G()
    y = g.node("Gemm", ["x", g.init(_rand(10, 7))], alpha=0.5, transB=1)
    g.node("Sigmoid", [y], "y")
    g2 = G()
    y2 = g2.node("Gemm", ["x", g2.init(_rand(7, 10)), g2.init(_rand(1, 10))], beta=2.0)
    g2.node("Tanh", [y2], "y")
    for model in (g.model({"x": (5, 7)}, ["y"]), g2.model({"x": (5, 7)}, ["y"])):
        text, _, nk = check(model, [_rand(5, 7)])
        assert "FusedMatMul" in text and "Gemm" in text and nk == 1


def test_no_fusion_when_intermediate_has_two_users():
    g = G()
    y = g.node("MatMul", ["x", g.init(_rand(8, 8))])
    r = g.node("Relu", [y])
    g.node("Add", [r, y], "y")
    g.node("Sigmoid", [r], "z")
    text, _, _ = check(g.model({"x": (4, 8)}, ["y", "z"]), [_rand(4, 8)])
    assert "FusedMatMul" not in text
    g = G()
    y = g.node("MatMul", ["x", g.init(_rand(8, 8))], "y")
    g.node("Relu", [y], "z")  # y is a graph output: not fused into the Relu
    text, _, _ = check(g.model({"x": (4, 8)}, ["y", "z"]), [_rand(4, 8)])
    assert "FusedMatMul" not in text


def test_no_fusion_for_non_channel_broadcast():
    g = G()
    c = g.node("Conv", ["x", g.init(_rand(4, 3, 3, 3))], pads=[1, 1, 1, 1])
    g.node("Add", [c, g.init(_rand(6, 6))], "y")  # broadcasts along H, W: not an epilogue
    text, _, _ = check(g.model({"x": (1, 3, 6, 6)}, ["y"]), [_rand(1, 3, 6, 6)])
    assert "FusedConv" not in text


# --------------------------------------------------------------------------- fold-transpose


def test_transpose_folds_into_batched_matmul():
    g = G()
    kt = g.node("Transpose", ["k"], perm=[0, 1, 3, 2])
    s = g.node("MatMul", ["q", kt])
    g.node("Mul", [s, g.init(np.array(0.125, F))], "y")
    m = g.model({"q": (2, 2, 5, 8), "k": (2, 2, 5, 8)}, ["y"])
    text, loops, nk = check(m, [_rand(2, 2, 5, 8), _rand(2, 2, 5, 8)])
    assert "Transpose" not in text and "trans_b = 1" in text and nk == 1


def test_transpose_a_and_gemm_transpose():
    g = G()
    at = g.node("Transpose", ["a"])
    g.node("MatMul", [at, g.init(_rand(6, 4))], "y")
    text, _, _ = check(g.model({"a": (6, 3)}, ["y"]), [_rand(6, 3)])
    assert "Transpose" not in text and "trans_a = 1" in text
    g = G()
    bt = g.node("Transpose", [g.init(_rand(4, 6))], perm=[1, 0])
    g.node("Gemm", ["a", bt], "y", transB=1)
    text, _, _ = check(g.model({"a": (3, 4)}, ["y"]), [_rand(3, 4)])
    assert "Transpose" not in text


def test_transpose_and_reshape_chains_collapse():
    g = G()
    t1 = g.node("Transpose", ["x"], perm=[0, 2, 3, 1])
    t2 = g.node("Transpose", [t1], perm=[0, 3, 1, 2])  # back to the identity
    r1 = g.node("Reshape", [t2, g.init(np.array([2, -1], np.int64))])
    r2 = g.node("Reshape", [r1, g.init(np.array([0, 6, 10], np.int64))])
    g.node("Transpose", [r2], "y", perm=[2, 1, 0])
    text, _, _ = check(g.model({"x": (2, 3, 4, 5)}, ["y"]), [_rand(2, 3, 4, 5)])
    assert text.count("Transpose") == 1 and text.count("Reshape") == 1


def test_transpose_with_other_reader_is_kept():
    g = G()
    t = g.node("Transpose", ["b"], perm=[1, 0])
    g.node("MatMul", ["a", t], "y")
    g.node("Relu", [t], "z")
    text, _, _ = check(g.model({"a": (3, 4), "b": (5, 4)}, ["y", "z"]),
                       [_rand(3, 4), _rand(5, 4)])
    assert "Transpose" in text and "trans_b = 1" in text


def test_conv_bias_moves_into_epilogue_even_without_members():
    g = G()
    c = g.node("Conv", ["x", g.init(_rand(4, 3, 3, 3)), g.init(_rand(4))], pads=[1, 1, 1, 1])
    g.node("Relu", [c], "y")  # the conv's output is read twice: no member can join
    g.node("Sigmoid", [c], "z")
    text, loops, nk = check(g.model({"x": (2, 3, 6, 6)}, ["y", "z"]), [_rand(2, 3, 6, 6)])
    assert "FusedConv" in text and "epilogue" not in text
    assert "conv_bias" not in loops and nk == 3  # the conv (bias per block), Relu, Sigmoid
