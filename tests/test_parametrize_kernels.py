"""parametrize-kernels: layers equal but for their sizes share one compiled function."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.passes import parametrize_kernels


def _depthwise_chain(channels=(24, 48, 96), size=20) -> tuple[object, np.ndarray]:
    """Depthwise 3x3 convs (+ Relu) on other channel counts and sizes, joined by 1x1 convs:
    the depthwise kernels differ only in integer constants."""
    rs = np.random.RandomState(0)
    nodes, inits = [], []
    x, c = "x", channels[0]
    for k, ch in enumerate(channels):
        if ch != c:
            w = numpy_helper.from_array((0.3 * rs.randn(ch, c, 1, 1)).astype(np.float32), f"p{k}")
            inits.append(w)
            nodes.append(helper.make_node("Conv", [x, w.name], [f"pw{k}"]))
            x, c = f"pw{k}", ch
        w = numpy_helper.from_array((0.3 * rs.randn(ch, 1, 3, 3)).astype(np.float32), f"d{k}")
        inits.append(w)
        stride = 1
        nodes.append(helper.make_node("Conv", [x, w.name], [f"dw{k}"], group=ch,
                                      pads=[1, 1, 1, 1], strides=[stride, stride]))
        nodes.append(helper.make_node("Relu", [f"dw{k}"], [f"r{k}"]))
        x = f"r{k}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["n", channels[0], "h", "w"])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model, rs.randn(1, channels[0], size, size).astype(np.float32)


def _dense_block(layers=5, growth=8, channels=16, size=12) -> tuple[object, np.ndarray]:
    """A DenseNet block: each layer a 1x1 conv + Relu over the concatenation of all earlier
    outputs, so its products differ only in their depth (input channels)."""
    rs = np.random.RandomState(1)
    nodes, inits, cat, c = [], [], "x", channels
    for k in range(layers):
        w = numpy_helper.from_array((0.3 * rs.randn(growth, c, 1, 1)).astype(np.float32),
                                    f"w{k}")
        inits.append(w)
        nodes += [helper.make_node("Conv", [cat, w.name], [f"c{k}"]),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"]),
                  helper.make_node("Concat", [cat, f"r{k}"], [f"cat{k}"], axis=1)]
        cat, c = f"cat{k}", c + growth
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["n", channels, "h", "w"])],
        [helper.make_tensor_value_info(cat, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model, rs.randn(1, channels, size, size).astype(np.float32)


def _kernel_functions(fn) -> int:
    """Kernel functions defined in the model's LLVM module (a twin calls another's)."""
    return len(re.findall(r'^define [^@]*@"[^"]*\.k\d+\.\w+"\(', fn.ir("llvm"), re.M))


@pytest.mark.parametrize("build,specialize", [(_depthwise_chain, "shape"),
                                               (_dense_block, "shape"),
                                               (_dense_block, "dynamic")])
def test_layers_of_other_sizes_share_a_function(monkeypatch, specialize, build):
    """Outputs equal onnxruntime's with and without the pass, with fewer kernel functions
    (a symbolic program too: its sizes are variables, its layers' depths parameters)."""
    model, x = build()
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    counts = {}
    for on in (False, True):
        monkeypatch.setattr(parametrize_kernels, "MIN_GROUP", 2 if on else 10**9)
        model.doc_string = f"parametrize {on}"  # another model: no in-memory cache hit
        fn = onnxjit.compile(model, cache_dir=False, specialize=specialize)
        np.testing.assert_allclose(fn(x)[0], want, rtol=1e-4, atol=1e-4)
        counts[on] = _kernel_functions(fn)
        loops = fn.ir("loops")
        assert ("_params: i64[" in loops) == on
    assert counts[True] < counts[False]


def test_values_that_agree_stay_constants_and_checks_stay_apart():
    """Only the slots whose values differ become parameters; a kernel with a Check (its
    failure code is its own) is never grouped; an innermost loop keeps its constants."""
    from onnxjit.ir.loop_builder import Builder
    from onnxjit.ir.loops import Buffer, Check, Const, Kernel, Program, i64
    from onnxjit.ir.types import DType
    from onnxjit.passes import PassContext

    x = Buffer("x", DType.FLOAT, (1024,), "input", slot=0)
    y = Buffer("y", DType.FLOAT, (1024,), "output", slot=1)

    def kernel(n: int, scale: float, check: bool, width: int = 4) -> Kernel:
        b = Builder()
        with b.loop(0, n, hint="i") as i:
            base = b.iadd(b.imul(i, width), i64(3))
            with b.loop(0, width, hint="j") as j:  # innermost: its bound stays a constant
                at = b.iadd(base, j)
                b.store(y, at, b.op("mul", b.load(x, at), Const(scale, DType.FLOAT)))
        body = b.body
        if check:
            body.insert(0, Check(i64(1), "never"))
        return Kernel(f"k{n}", body)

    kernels = [kernel(100, 2.0, False), kernel(200, 2.0, False), kernel(150, 2.0, True),
               kernel(250, 3.0, False), kernel(120, 2.0, False, width=5)]
    program = Program([x, y], kernels)
    parametrize_kernels.run(program, PassContext())
    params = [b for b in program.buffers if b.name.endswith("_params")]
    # k100 and k200 share a skeleton: k250 multiplies by another float, k150 has a Check,
    # k120's innermost loop has another trip count (a constant, so another skeleton)
    assert sorted(b.name for b in params) == ["k100_params", "k200_params"]
    assert [b.data.tolist() for b in params] == [[100], [200]]  # 4 and 3 stay constants


@pytest.mark.parametrize("build", [_depthwise_chain, _dense_block])
def test_share_keys_name_equal_canonical_texts(monkeypatch, build):
    """Code generation trusts the pass's `share_key` instead of printing kernels again:
    kernels with equal keys must have equal canonical texts."""
    from onnxjit import codegen
    from onnxjit.ir.loop_canon import kernel_key

    programs = []
    compile_program = codegen.compile_program
    monkeypatch.setattr(codegen, "compile_program",
                        lambda p, *a, **k: programs.append(p) or compile_program(p, *a, **k))
    model, x = build()
    model.doc_string = "share keys"  # another model: no in-memory cache hit
    onnxjit.compile(model, cache_dir=False, specialize="shape")(x)
    kernels = programs[0].kernels
    assert all(k.share_key is not None for k in kernels)
    by_key: dict[str, list] = {}
    for k in kernels:
        by_key.setdefault(k.share_key, []).append(k)
    shared = [ks for ks in by_key.values() if len(ks) > 1]
    assert shared
    for ks in shared:
        assert len({kernel_key(k) for k in ks}) == 1


@pytest.mark.parametrize("depth", [-1, parametrize_kernels.DIVIDE_DEPTH])
def test_channel_divisors_become_parameters(monkeypatch, depth):
    """A symbolic program's depthwise convs loop over batch x channels and take the channel
    back by div/rem: outside the inner loops those divisors are parameters, so layers of
    other channel counts share a function (fewer than without), and still match
    onnxruntime; with no divisor a parameter (depth -1) they stay apart."""
    model, x = _depthwise_chain(channels=(16, 32, 64))
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    monkeypatch.setattr(parametrize_kernels, "DIVIDE_DEPTH", depth)
    model.doc_string = f"divisors {depth}"  # another model: no in-memory cache hit
    fn = onnxjit.compile(model, cache_dir=False, specialize="dynamic")
    for n in (1, 2):
        xs = np.concatenate([x] * n)
        np.testing.assert_allclose(fn(xs)[0], np.concatenate([want] * n), rtol=1e-4, atol=1e-4)
    depthwise = re.findall(r'^define [^@]*@"[^"]*\.k\d+\.conv_depthwise\w*"\(', fn.ir("llvm"),
                           re.M)
    assert len(depthwise) == (1 if depth >= 1 else 3)


def _pointwise_chain(channels=(16, 128, 160, 144)) -> tuple[object, np.ndarray]:
    """1x1 convs (+ bias + Relu) from one channel count to the next: products differing in
    their rows (output channels; a thread's half of them at least `MIN_TRIP`, the epilogue's
    row loop) and depth."""
    rs = np.random.RandomState(2)
    nodes, inits, x = [], [], "x"
    for k, (c, m) in enumerate(zip(channels, channels[1:])):
        w = numpy_helper.from_array((0.3 * rs.randn(m, c, 1, 1)).astype(np.float32), f"w{k}")
        b = numpy_helper.from_array(rs.randn(m).astype(np.float32), f"b{k}")
        inits += [w, b]
        nodes += [helper.make_node("Conv", [x, w.name, b.name], [f"c{k}"]),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"])]
        x = f"r{k}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, channels[0], "h", "w"])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model, rs.randn(1, channels[0], 20, 64).astype(np.float32)


@pytest.mark.parametrize("runtime_m", [False, True])
def test_symbolic_products_of_other_rows_share_a_function(monkeypatch, runtime_m):
    """A symbolic program's pointwise convs, whose columns (pixels) are counted at run time,
    take their rows (output channels) as a parameter too: fewer functions for the three
    layers (three without; a layer split over threads by rows has other loops than one
    that is not), matching onnxruntime at several image sizes."""
    model, x = _pointwise_chain()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    monkeypatch.setattr(parametrize_kernels, "RUNTIME_M", runtime_m)
    model.doc_string = f"runtime m {runtime_m}"  # another model: no in-memory cache hit
    fn = onnxjit.compile(model, cache_dir=False, specialize="dynamic")
    for h, w in ((20, 64), (1, 1), (5, 70), (9, 31), (24, 100)):
        xs = np.ascontiguousarray(np.resize(x, (1, 16, h, w)))
        want = sess.run(None, {"x": xs})[0]
        np.testing.assert_allclose(fn(xs)[0], want, rtol=1e-4, atol=1e-4)
    products = re.findall(r'^define [^@]*@"[^"]*\.k\d+\.conv_gemm\w*"\(', fn.ir("llvm"), re.M)
    assert len(products) < 3 if runtime_m else len(products) == 3
