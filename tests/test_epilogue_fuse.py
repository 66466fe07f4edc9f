"""Epilogues applied in the tiled kernel's stores (`codegen/epilogue_fuse.py`): a fused conv's or
matmul's epilogue nest is recognized after its Matmul and run on the accumulator vectors. Each
case compiles with the fusion on and off (`llvmgen.FUSE_EPILOGUES`): the results must be the
same bits (NaN and infinities in the inputs included), close to onnxruntime, on one and two
threads, and the separate pass (the nest's column loop, `ec`) must be gone from the LLVM IR
exactly where the fusion applies. Depthwise convs apply theirs in the fused rows
(`depthwise_direct.INLINE_EPILOGUE`), checked the same way."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit import runtime
from onnxjit.codegen import llvmgen
from onnxjit.codegen.epilogue_fuse import match
from onnxjit.ir.loops import Loop, Matmul
from onnxjit.ir.types import DType

RNG = np.random.default_rng(3)


def _conv(cin: int, cout: int, hw: int, tail: str, k: int = 1, stride: int = 1,
          group: int = 1) -> tuple:
    """Conv (bias) + `tail` ('clip', 'relu', 'res' = Add of a second input, 'res_relu',
    'sigmoid', 'none'); returns (model, feeds)."""
    w = (RNG.standard_normal((cout, cin // group, k, k)) * 0.2).astype(np.float32)
    bias = RNG.standard_normal(cout).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k],
                              pads=[k // 2] * 4, strides=[stride, stride], group=group)]
    out = (hw + 2 * (k // 2) - k) // stride + 1
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])]
    feeds = {"x": RNG.standard_normal((1, cin, hw, hw)).astype(np.float32)}
    last = "c"
    if tail.startswith("res"):
        ins.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, cout, out, out]))
        feeds["r"] = RNG.standard_normal((1, cout, out, out)).astype(np.float32)
        nodes.append(helper.make_node("Add", ["c", "r"], ["s"]))
        last = "s"
    if tail == "clip":
        inits += [numpy_helper.from_array(np.array(v, np.float32), n)
                  for v, n in ((0.0, "lo"), (6.0, "hi"))]
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["y"]))
    elif tail in ("relu", "res_relu", "sigmoid"):
        nodes.append(helper.make_node("Sigmoid" if tail == "sigmoid" else "Relu", [last], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [1, cout, out, out])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), feeds


def _mlp(m: int, k: int, n: int) -> tuple:
    w = (RNG.standard_normal((k, n)) * 0.2).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, {"x": RNG.standard_normal((m, k)).astype(np.float32)}


def _compiled(model, feeds: dict, on: bool, threads: int, tmp_path, monkeypatch) -> tuple:
    """(outputs, LLVM IR text, the compiled model) with the fusion on or off."""
    monkeypatch.setattr(llvmgen, "FUSE_EPILOGUES", on)
    runtime._MEMORY.clear()  # the process-wide artifact cache does not key on the switch
    dump = tmp_path / f"dump{int(on)}{threads}"
    fn = onnxjit.compile(model, num_threads=threads, cache_dir=False, dump_ir=str(dump))
    out = fn(**feeds)[0]
    (ll,) = dump.glob("*/[0-9][0-9]-llvm.ll")
    return out, ll.read_text(), fn


@pytest.mark.parametrize("case, fused", [
    (("conv", 16, 96, 56, "clip"), True),      # MobileNetV2's expansions
    (("conv", 24, 20, 13, "relu"), True),      # edge tiles: 20 rows, 169 columns
    (("conv", 40, 24, 28, "res"), True),       # residual: an extra of Y's shape
    (("conv", 64, 32, 14, "res_relu"), True),
    (("conv", 96, 24, 28, "none"), True),      # the bias alone
    (("conv", 16, 32, 28, "sigmoid"), False),  # no vector form: the separate pass
    (("conv", 320, 64, 40, "res_relu"), True),  # two depth blocks: in the last one's stores
    (("conv", 64, 48, 80, "clip", 3, 2), True),  # im2col panels, depth 576
    (("conv", 300, 64, 14, "relu"), False),    # the transposed form: its own epilogue pass
    # a top-level product split over threads by codegen (two blocks of 16 rows): its nest
    # runs in each block, in the block's stores
    (("mlp", 32, 200, 150), True),
])
@pytest.mark.parametrize("threads", [1, 2])
def test_epilogue_in_stores_is_bit_identical(case: tuple, fused: bool, threads: int, tmp_path,
                                             monkeypatch) -> None:
    model, feeds = _conv(*case[1:]) if case[0] == "conv" else _mlp(*case[1:])
    x = feeds["x"].reshape(-1)
    x[RNG.choice(x.size, 6, replace=False)] = [np.nan, np.inf, -np.inf, np.nan, 1e30, -1e30]
    got_off, ll_off, _ = _compiled(model, feeds, False, threads, tmp_path, monkeypatch)
    got_on, ll_on, fused_fn = _compiled(model, feeds, True, threads, tmp_path, monkeypatch)
    assert "ec.head:" in ll_off
    assert ("ec.head:" not in ll_on) == fused
    np.testing.assert_array_equal(got_on, got_off)
    clean = {k: np.nan_to_num(v, nan=0.5, posinf=3.0, neginf=-3.0) for k, v in feeds.items()}
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, clean)[0]
    got = fused_fn(**clean)[0]  # the fused program again (same shapes: not recompiled)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", [
    (48, 48, 56, "clip", 3, 1, 48),    # MobileNetV2's depthwise convs, whole-vector rows
    (32, 32, 113, "clip", 3, 2, 32),   # stride 2, an odd row
    (24, 24, 40, "res_relu", 5, 1, 24),
    (16, 16, 33, "sigmoid", 3, 1, 16),  # any elementwise epilogue: it is loop IR
])
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise_epilogue_in_rows_is_bit_identical(case: tuple, threads: int,
                                                     monkeypatch) -> None:
    """Depthwise convs apply the epilogue in their fused rows' interior loop
    (`depthwise_direct.INLINE_EPILOGUE`) and as a pass over the other columns and rows: the
    same bits as the pass over each plane, and onnxruntime's values."""
    from onnxjit.ir.ops.conv import depthwise_direct

    model, feeds = _conv(*case)
    x = feeds["x"].reshape(-1)
    x[RNG.choice(x.size, 6, replace=False)] = [np.nan, np.inf, -np.inf, np.nan, 1e30, -1e30]
    got = []
    for on in (False, True):
        monkeypatch.setattr(depthwise_direct, "INLINE_EPILOGUE", on)
        runtime._MEMORY.clear()
        fn = onnxjit.compile(model, num_threads=threads, cache_dir=False)
        got.append(fn(**feeds)[0])
    np.testing.assert_array_equal(got[1], got[0])
    clean = {k: np.nan_to_num(v, nan=0.5, posinf=3.0, neginf=-3.0) for k, v in feeds.items()}
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, clean)[0]
    got = fn(**clean)[0]  # the inline-epilogue program again (same shapes: not recompiled)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_match_needs_the_products_own_window() -> None:
    """The nest must cover exactly the Matmul's window of C: one row short, or another
    buffer's store, is left alone."""
    from onnxjit.driver import import_model, lower_signature
    from onnxjit.options import CompileOptions

    model, _ = _conv(16, 96, 56, "clip")
    opts = CompileOptions(verify=False)
    prog = lower_signature(import_model(model.SerializeToString(), opts),
                           ((DType.FLOAT, (1, 16, 56, 56)),), opts)[1]
    pairs = []
    for k in prog.kernels:
        for s in k.body:
            if isinstance(s, Loop):
                body = s.body
                pairs += [(a, n) for a, n in zip(body, body[1:]) if isinstance(a, Matmul)]
    assert pairs and all(match(a, n) is not None for a, n in pairs)
    mm, nest = pairs[0]
    short = Loop(nest.var, nest.start, type(nest.stop)(mm.m - 1, nest.stop.dtype), 1, nest.body)
    assert match(mm, short) is None
    other = Matmul(mm.a, mm.c_off, mm.ldc, mm.a, mm.a_off, mm.lda, mm.b, mm.b_off, mm.ldb,
                   mm.m, mm.n, mm.k)
    assert match(other, nest) is None


@pytest.mark.parametrize("threads", [1, 2])
def test_folded_rows_are_one_product_split_by_codegen(threads: int, monkeypatch) -> None:
    """A FusedMatMul over 128 rows of 1536 columns is one Matmul and its epilogue nest (code
    generation splits it in two blocks of 64 rows), not 3 blocks of 40 rows and 8 rows after
    them (`fused_linear.ONE_PRODUCT`); it matches onnxruntime."""
    from onnxjit.driver import import_model, lower_signature
    from onnxjit.ir.ops.fused import linear as fused_linear
    from onnxjit.options import CompileOptions

    model, feeds = _mlp(128, 96, 1536)
    opts = CompileOptions(verify=False)

    def top_level(on: bool) -> list:
        monkeypatch.setattr(fused_linear, "ONE_PRODUCT", on)
        gm = import_model(model.SerializeToString(), opts)
        _, prog = lower_signature(gm, ((DType.FLOAT, (128, 96)),), opts)
        (kernel,) = [k for k in prog.kernels if "matmul" in k.name]
        return kernel.body

    body = top_level(True)
    assert isinstance(body[0], Matmul) and body[0].m == 128 and isinstance(body[1], Loop)
    old = top_level(False)
    assert isinstance(old[0], Loop) and old[0].parallel and int(old[0].stop.value) == 3
    monkeypatch.setattr(fused_linear, "ONE_PRODUCT", True)
    runtime._MEMORY.clear()
    got = onnxjit.compile(model, num_threads=threads, cache_dir=False)(**feeds)[0]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _lstm(seq: int, batch: int, hidden: int) -> tuple:
    w = (RNG.standard_normal((1, 4 * hidden, 16)) * 0.1).astype(np.float32)
    r = (RNG.standard_normal((1, 4 * hidden, hidden)) * 0.05).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=hidden)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq, 1, batch, hidden])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(r, "r")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, {"x": RNG.standard_normal((seq, batch, 16)).astype(np.float32)}


@pytest.mark.parametrize("case", ["conv_sigmoid", "lstm"])
@pytest.mark.parametrize("threads", [1, 2])
def test_product_beside_math_nest_is_its_own_function(case: str, threads: int, tmp_path,
                                                      monkeypatch) -> None:
    """In a kernel that also computes sigmoid or tanh (a conv whose Sigmoid epilogue has no
    vector form; an LSTM step: its blocks' products, then the cells), each product runs as a
    function of its own (`llvmgen.OUTLINE_PRODUCTS`), so the polynomials' constants cannot
    take the register tile's registers. The same bits either way."""
    model, feeds = _lstm(3, 8, 256) if case == "lstm" else _conv(16, 32, 28, "sigmoid")
    outs = {}
    for on in (True, False):
        monkeypatch.setattr(llvmgen, "OUTLINE_PRODUCTS", on)
        outs[on], ll, _ = _compiled(model, feeds, True, threads, tmp_path / str(on),
                                    monkeypatch)
        outlined = [d for d in ll.splitlines() if d.startswith("define") and ".mm0" in d]
        assert len(outlined) == (1 if on else 0)
    np.testing.assert_array_equal(outs[True], outs[False])


@pytest.mark.parametrize("k", [0, "k"])
def test_transposed_operand_with_no_inner_dim_takes_no_epilogue(k) -> None:
    # Transpose(A) folds into a FusedMatMul reading A with trans_a; with K = 0 (A is (0, 2))
    # the epilogue pass fused the Sigmoid into it anyway and lowering refused it, a
    # CompileError on a valid model (found by the differential fuzzer, issue 26)
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        [helper.make_node("Transpose", ["a"], ["t"], perm=[1, 0]),
         helper.make_node("MatMul", ["t", "b"], ["m"]),
         helper.make_node("Sigmoid", ["m"], ["y"])], "g",
        [vi("a", TensorProto.FLOAT, [k, 2]), vi("b", TensorProto.FLOAT, [k, 3])],
        [vi("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    a, b = np.zeros((0, 2), np.float32), np.zeros((0, 3), np.float32)
    for spec in ("shape", "auto", "dynamic"):
        y, = onnxjit.compile(m, cache_dir=False, specialize=spec)(a, b)
        np.testing.assert_array_equal(y, np.full((2, 3), 0.5, np.float32), err_msg=spec)


def test_short_epilogue_rows_stay_rolled() -> None:
    """A short block row (a Winograd block of a 10x10 map: at most 100 columns, however many
    tile rows a block takes on this host's vector width) keeps its column loop rolled
    (`epilogue.ROLL_COLS`): fully unrolled, LLVM vectorized the channel loop around it with
    gathers and spent most of the kernel's compile time in LoopLoadElimination. The result
    is unchanged. (A 14x14 map was one block of 196 columns on AVX-512, not short.)"""
    model, feeds = _conv(64, 64, 10, "relu", k=3)
    runtime._MEMORY.clear()
    fn = onnxjit.compile(model, cache_dir=False, tiered=False)
    got = fn(**feeds)[0]
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    loops = fn.ir("loops")
    assert "kernel @conv_winograd" in loops
    heads = [line for line in loops.splitlines() if line.strip().startswith("for %ec")]
    assert heads and all(line.rstrip().endswith("rolled {") for line in heads), heads
