"""Convolutional models as one symbolic program against tier 0 and the specialised programs.

Each case is a small model whose batch, height and width are symbolic (`N`, `H`, `W`), with
random constant weights: convs of every padding mode, stride, dilation and group form
(depthwise, grouped, pointwise, strided pointwise, wide kernels, 1-D), with the bias and
activation epilogues the fuse passes build, residual adds, pools. It is compiled once with
`specialize="dynamic"`, then called with odd sizes, size-1 spatial dims, wide images, batches
> 1 and images too small for the kernel. The symbolic program must give the outputs of tier 0's
numpy interpreter (`tiered.interpreter.Plan`, which compiles nothing), serve every valid size
from one compile, and raise `InputError` exactly where the program specialised to the size
does. For the calls tier 0 gives no result for (`tier0_ref`: it raised, here on the images
too small for the kernel, or the call breaks the declared inputs) the specialised program is
compiled and is the reference; where tier 0 runs a call that fits the declaration, the
specialised program runs it too.
"""

import numpy as np
import pytest
from ocr_models import crnn, db_detector
from onnx import TensorProto, helper, numpy_helper
from tier0_ref import Tier0

import onnxjit

RNG = np.random.default_rng(5)


def _w(*shape):
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def _model(nodes, inits, c, out="y", rank=2, opset=17):
    spatial = ["H", "W"][2 - rank:] if rank <= 2 else ["D", "H", "W"]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, *spatial])
    y = helper.make_tensor_value_info(out, TensorProto.FLOAT, [None] * (rank + 2))
    g = helper.make_graph(nodes, "g", [x], [y],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _conv(name, x, w, b=None, out=None, **attrs):
    return helper.make_node("Conv", [x, w] + ([b] if b else []), [out or name], name=name,
                            **attrs)


def conv_case(cin, cout, k, with_bias=True, act="Relu", **attrs):
    kh, kw = (k, k) if isinstance(k, int) else k
    group = attrs.get("group", 1)
    inits = {"w": _w(cout, cin // group, kh, kw)}
    if with_bias:
        inits["b"] = _w(cout)
    nodes = [_conv("c", "x", "w", "b" if with_bias else None, out="t" if act else "y", **attrs)]
    if act:
        nodes.append(helper.make_node(act, ["t"], ["y"]))
    return _model(nodes, inits, cin)


def residual_case(c):
    """pointwise expand, depthwise, pointwise project, residual add (a MobileNetV2 block)."""
    inits = {"w1": _w(4 * c, c, 1, 1), "b1": _w(4 * c), "w2": _w(4 * c, 1, 3, 3),
             "b2": _w(4 * c), "w3": _w(c, 4 * c, 1, 1), "b3": _w(c)}
    nodes = [_conv("c1", "x", "w1", "b1", out="t1"), helper.make_node("Relu", ["t1"], ["r1"]),
             _conv("c2", "r1", "w2", "b2", out="t2", group=4 * c, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["t2", "lo", "hi"], ["r2"]),
             _conv("c3", "r2", "w3", "b3", out="t3"), helper.make_node("Add", ["t3", "x"], ["y"])]
    inits["lo"], inits["hi"] = np.array(0, np.float32), np.array(6, np.float32)
    return _model(nodes, inits, c)


def basic_block_case(c):
    """conv 3x3 + Relu, conv 3x3 + residual + Relu (a ResNet basic block: Winograd-sized)."""
    inits = {"w1": _w(c, c, 3, 3), "b1": _w(c), "w2": _w(c, c, 3, 3), "b2": _w(c)}
    nodes = [_conv("c1", "x", "w1", "b1", out="t1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["t1"], ["r1"]),
             _conv("c2", "r1", "w2", "b2", out="t2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["t2", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    return _model(nodes, inits, c)


def conv1d_case():
    inits = {"w": _w(6, 4, 5), "b": _w(6)}
    return _model([_conv("c", "x", "w", "b", out="y", pads=[2, 1], strides=[2])], inits, 4,
                  rank=1)


def pool_case(op, c=3, **attrs):
    """A conv, then the pool (so the pool reads a symbolic temp, as in a network)."""
    nodes = [_conv("c", "x", "w", "b", out="t", pads=[1, 1, 1, 1]),
             helper.make_node(op, ["t"], ["y"], **attrs)]
    return _model(nodes, {"w": _w(c, c, 3, 3), "b": _w(c)}, c)


def resize_case(scale=2.0, **attrs):
    nodes = [_conv("c", "x", "w", "b", out="t", pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["t", "", "s"], ["y"], **attrs)]
    inits = {"w": _w(3, 3, 3, 3), "b": _w(3), "s": np.array([1, 1, scale, scale], np.float32)}
    return _model(nodes, inits, 3)


def conv_transpose_case(cin, cout, k, group=1, **attrs):
    inits = {"w": _w(cin, cout // group, k, k), "b": _w(cout)}
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=group, **attrs)]
    return _model(nodes, inits, cin)


SHAPES = [(1, 5, 6), (2, 1, 1), (1, 7, 33), (3, 16, 16), (1, 2, 40), (1, 9, 3)]

CASES = {
    "pad1_bias_relu": (lambda: conv_case(3, 8, 3, pads=[1, 1, 1, 1]), SHAPES),
    "valid_no_bias": (lambda: conv_case(4, 6, 3, with_bias=False, act=None), SHAPES),
    "stride2_dilation2": (lambda: conv_case(5, 7, 3, strides=[2, 2], dilations=[2, 2],
                                            pads=[2, 1, 2, 2]), SHAPES),
    "same_upper_stride2": (lambda: conv_case(3, 4, 3, auto_pad="SAME_UPPER", strides=[2, 2]),
                           SHAPES),
    "same_lower_k4": (lambda: conv_case(3, 5, 4, auto_pad="SAME_LOWER"), SHAPES),
    "auto_valid_stride2": (lambda: conv_case(2, 3, (3, 2), auto_pad="VALID", strides=[1, 2]),
                           SHAPES),
    "grouped": (lambda: conv_case(8, 12, 3, group=4, pads=[1, 0, 1, 2]), SHAPES),
    "depthwise_s1": (lambda: conv_case(6, 6, 3, group=6, pads=[1, 1, 1, 1]), SHAPES),
    "depthwise_s2_mult2": (lambda: conv_case(4, 8, 3, group=4, strides=[2, 2],
                                             pads=[1, 1, 1, 1], act="Sigmoid"), SHAPES),
    "depthwise_same_5x5": (lambda: conv_case(3, 3, 5, group=3, auto_pad="SAME_UPPER",
                                             strides=[2, 2]), SHAPES),
    # the phased loop's rows copied to Y through the Relu in whole vectors of 16, 8 or 4
    # columns, the last overlapping, or one by one (`blocking.runtime_vectors`)
    "depthwise_phased_row_widths": (lambda: conv_case(5, 5, 3, group=5, pads=[1, 1, 1, 1]),
                                    [(1, 4, 14)] + [(1, 3, w) for w in (1, 3, 4, 5, 8, 9, 15,
                                                                        16, 17, 31, 32, 45)]),
    # rows wider than `depthwise_runtime.PHASED_WIDTH` by the hints: the direct nest, its
    # static-edge rows at widths around whole vectors, the border path on narrow images
    "depthwise_wide_s1": (lambda: conv_case(6, 6, 3, group=6, pads=[1, 1, 1, 1]),
                          [(1, 4, 40)] + SHAPES + [(1, 3, 17), (2, 2, 18), (1, 3, 2)]),
    "depthwise_wide_s2_asymmetric": (lambda: conv_case(
        4, 8, (3, 5), group=4, strides=[2, 2], dilations=[1, 2], pads=[1, 3, 0, 2]),
        [(1, 5, 80)] + SHAPES + [(1, 4, 35), (1, 3, 36), (1, 3, 10)]),
    "pointwise": (lambda: conv_case(8, 16, 1), SHAPES),
    "pointwise_stride2": (lambda: conv_case(8, 4, 1, strides=[2, 2]), SHAPES),
    # 512 outputs: blocks of at most 128 positions, as many as each call's P needs, of equal
    # width (320 positions: 3 of 112; 297: 112, 112, 73; 140: 80, 60)
    "pointwise_blocks": (lambda: conv_case(8, 512, 1),
                         [(1, 8, 40), (1, 9, 33), (2, 7, 20), (1, 16, 16)] + SHAPES),
    # 196 positions by the hints: one block of them (`runtime_sizes.SMALL_P`), its 512
    # channels split; larger calls take blocks of that width
    "pointwise_small_image": (lambda: conv_case(8, 512, 1),
                              [(1, 14, 14), (1, 9, 33), (2, 7, 20), (1, 16, 16)] + SHAPES),
    "stem_7x7_s2": (lambda: conv_case(3, 16, 7, strides=[2, 2], pads=[3, 3, 3, 3]), SHAPES),
    # 3 blocks of positions by the hints (224x224): 4, for two threads
    "stem_even_blocks": (lambda: conv_case(3, 8, 3, strides=[2, 2], pads=[1, 1, 1, 1]),
                         [(1, 224, 224), (1, 150, 333)] + SHAPES),
    "wide_kernel_1x19": (lambda: conv_case(2, 3, (1, 19), pads=[0, 9, 0, 9]), SHAPES),
    "kernel_2x1": (lambda: conv_case(4, 4, (2, 1), strides=[2, 1], act=None), SHAPES),
    "mobilenet_block": (lambda: residual_case(4), SHAPES),
    # the first call's sizes are the hints: enough channels and tiles for Winograd F(2x2, 3x3)
    "winograd_basic_block": (lambda: basic_block_case(64), [(1, 32, 32)] + SHAPES),
    # few blocks for the threads by the hints: output channels split over parallel chunks
    "winograd_split_channels": (lambda: conv_case(64, 64, 3, pads=[1, 1, 1, 1]),
                                [(1, 24, 24)] + SHAPES),
    "im2col_split_channels": (lambda: conv_case(32, 40, 5, pads=[2, 2, 2, 2]),
                              [(1, 10, 10)] + SHAPES),
    "winograd_same_no_bias": (lambda: conv_case(64, 64, 3, with_bias=False, act=None,
                                                auto_pad="SAME_LOWER"), [(2, 33, 17)] + SHAPES),
    "maxpool_2x2": (lambda: pool_case("MaxPool", kernel_shape=[2, 2], strides=[2, 2]), SHAPES),
    "maxpool_3x3_s2_pad_ceil": (lambda: pool_case("MaxPool", kernel_shape=[3, 3],
                                                  strides=[2, 2], pads=[1, 1, 1, 1],
                                                  ceil_mode=1), SHAPES),
    "maxpool_same_upper": (lambda: pool_case("MaxPool", kernel_shape=[3, 2], strides=[2, 2],
                                             auto_pad="SAME_UPPER"), SHAPES),
    "maxpool_2x1_crnn": (lambda: pool_case("MaxPool", kernel_shape=[2, 1], strides=[2, 1]),
                         SHAPES),
    "avgpool_include_pad": (lambda: pool_case("AveragePool", kernel_shape=[3, 3],
                                              pads=[1, 1, 1, 1], count_include_pad=1), SHAPES),
    "avgpool_exclude_pad_ceil": (lambda: pool_case("AveragePool", kernel_shape=[2, 3],
                                                   strides=[2, 2], pads=[0, 1, 1, 0],
                                                   ceil_mode=1), SHAPES),
    "lppool": (lambda: pool_case("LpPool", kernel_shape=[2, 2], p=2), SHAPES),
    "global_average": (lambda: pool_case("GlobalAveragePool"), SHAPES),
    "global_max": (lambda: pool_case("GlobalMaxPool"), SHAPES),
    "resize_nearest": (lambda: resize_case(mode="nearest"), SHAPES),
    "resize_nearest_asymmetric_ceil": (lambda: resize_case(
        3.0, mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="ceil"),
        SHAPES),
    "resize_linear_half_pixel": (lambda: resize_case(mode="linear"), SHAPES),
    "resize_linear_align_corners": (lambda: resize_case(
        mode="linear", coordinate_transformation_mode="align_corners"), SHAPES),
    "resize_linear_pytorch_half": (lambda: resize_case(
        0.5, mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), SHAPES),
    "resize_nearest_down": (lambda: resize_case(0.5, mode="nearest"), SHAPES),
    "conv_transpose_2x2_s2": (lambda: conv_transpose_case(4, 6, 2, strides=[2, 2]), SHAPES),
    "conv_transpose_3x3_s2_pads": (lambda: conv_transpose_case(
        4, 4, 3, group=2, strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 0],
        dilations=[1, 2]), SHAPES),
    "conv1d": (lambda: [conv1d_case()][0], [(1, 9), (2, 1), (1, 40), (3, 2)]),
}


def _run(fn, x):
    try:
        return fn(x)
    except onnxjit.OnnxJitError as e:
        return type(e)


def _check(model, shapes, c):
    dyn = onnxjit.compile(model, cache_dir=False, specialize="dynamic")
    ref = Tier0(model)
    spec = None  # compiled for the first size tier 0 declines
    served = 0
    for shape in shapes:
        x = RNG.standard_normal((shape[0], c, *shape[1:])).astype(np.float32)
        before = dyn.cache_info()["misses"]
        got = _run(dyn, x)
        compiled = dyn.cache_info()["misses"] - before
        want = ref.run([x])
        if want is None:  # no tier 0 result (an error): the specialised program's verdict
            spec = spec or onnxjit.compile(model, cache_dir=False, specialize="shape")
            want = _run(spec, x)
        if isinstance(want, type):
            assert got is want is onnxjit.InputError, (shape, got, want)
            continue
        if any(w.size == 0 for w in want):  # a pool with no window: an empty output, from a
            assert [g.shape for g in got] == [w.shape for w in want], shape  # reference
            continue  # (the symbolic program assumes a window)
        assert compiled == (0 if served else 1), (shape, "not served by the symbolic program")
        assert not isinstance(got, type), (shape, got)
        for g, w in zip(got, want):
            assert g.shape == w.shape, shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=str(shape))
        served += 1
    assert dyn._symbolic.reasons() == [], dyn._symbolic.reasons()
    assert len([p for p in dyn._symbolic.programs.values() if p is not None]) == 1
    return dyn, served


@pytest.mark.parametrize("name", sorted(CASES))
def test_symbolic_conv_matches_specialised(name):
    """`_check`: the symbolic program against tier 0, and against the specialised program
    where tier 0 gives no result (the name predates tier 0 as the reference)."""
    make, shapes = CASES[name]
    model = make()
    c = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    _, served = _check(model, shapes, c)
    assert served >= 2


def test_one_compile_serves_many_sizes():
    fn = onnxjit.compile(residual_case(4), cache_dir=False, specialize="dynamic")
    before = fn.cache_info()["misses"]
    for n, h, w in [(1, 8, 8), (2, 5, 17), (1, 1, 1), (4, 31, 9), (1, 3, 120), (2, 64, 48)]:
        fn(RNG.standard_normal((n, 4, h, w)).astype(np.float32))
    assert fn.cache_info()["misses"] - before == 1


def test_image_smaller_than_kernel_is_an_input_error():
    fn = onnxjit.compile(conv_case(3, 4, 3, act=None), cache_dir=False, specialize="dynamic")
    fn(np.ones((1, 3, 5, 5), np.float32))
    with pytest.raises(onnxjit.InputError, match="no output position"):
        fn(np.ones((1, 3, 2, 5), np.float32))


@pytest.mark.parametrize("lstm", [False, True], ids=["matmul_head", "lstm_head"])
def test_crnn_recognizer(lstm):
    """Conv stack, (2,1) pools, a sequence head (two MatMuls or a bidirectional LSTM): one
    symbolic program for every width and batch."""
    shapes = [(1, 32, 100), (2, 32, 37), (1, 32, 8), (3, 32, 64), (1, 32, 4)]
    _, served = _check(crnn(lstm=lstm), shapes, 1)
    assert served >= 4


def test_db_detector():
    """Strided convs, nearest and linear x2 Resize, Concat skips, ConvTranspose head."""
    _, served = _check(db_detector(), [(1, 64, 64), (1, 24, 40), (2, 8, 16), (1, 96, 160)], 3)
    assert served == 4


def test_few_channel_convs_take_runtime_winograd(monkeypatch):
    """A DB detector head's 3x3 convs (few channels, run-time H and W: its 96->24) take the
    run-time Winograd, 1.4-2x faster than im2col there on 8- and 16-lane hosts alike
    (`conv.winograd_runtime`), and match tier 0 at every size, images under a tile too."""
    from onnxjit.ir.ops.conv import runtime_sizes

    calls = _counting(monkeypatch, runtime_sizes, "lower_winograd_runtime")
    _, served = _check(conv_case(24, 16, 3, pads=[1, 1, 1, 1]), [(1, 20, 40)] + SHAPES, 24)
    assert calls and served == 1 + len(SHAPES)



def stem_block_case(c):
    """A 3->c 3x3 stride-2 stem conv + Relu, then a ResNet basic block of c channels."""
    inits = {"w0": _w(c, 3, 3, 3), "b0": _w(c), "w1": _w(c, c, 3, 3), "b1": _w(c),
             "w2": _w(c, c, 3, 3), "b2": _w(c)}
    nodes = [_conv("c0", "x", "w0", "b0", out="t0", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["t0"], ["x1"]),
             _conv("c1", "x1", "w1", "b1", out="t1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["t1"], ["r1"]),
             _conv("c2", "r1", "w2", "b2", out="t2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["t2", "x1"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    return _model(nodes, inits, 3)


def _batch_only(model, h, w):
    """`model` with its input's H and W fixed: only the batch stays symbolic."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for d, v in zip(dims[2:], (h, w)):
        d.Clear()
        d.dim_value = v
    return model


def _counting(monkeypatch, module, name):
    calls: list = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("first", [1, 4], ids=["split_channels", "parts"])
def test_batch_symbolic_convs_are_the_specialised_code(first, monkeypatch):
    """Static H, W and a run-time batch (torch's dynamic_axes={0: "batch"}): the 3x3 convs
    take `conv.winograd_batch` (the first call's batch is the hint: 1 gives too few blocks,
    so the split-channel kernels; 4 the parts), the stem `conv.im2col_batch` when the hint
    gives it blocks enough; one program serves every batch, equal to the specialised
    program's bit for bit and to onnxruntime within rounding; a wrong H or channel count is
    still an InputError."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")
    from onnxjit.ir.ops.conv import im2col_batch, runtime_sizes

    wino = _counting(monkeypatch, runtime_sizes, "lower_winograd_batch")
    im2col = _counting(monkeypatch, im2col_batch, "lower_im2col_batch")
    model = _batch_only(stem_block_case(64), 32, 30)
    dyn = onnxjit.compile(model, cache_dir=False, specialize="dynamic")
    spec = onnxjit.compile(model, cache_dir=False, specialize="shape")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    xs = [RNG.standard_normal((n, 3, 32, 30)).astype(np.float32) for n in (first, 3, 0)]
    before = dyn.cache_info()["misses"]  # (the counter is shared with `spec`: its calls after)
    got = [dyn(x)[0] for x in xs]
    assert dyn.cache_info()["misses"] - before == 1
    for x, g in zip(xs, got):
        if len(x):
            np.testing.assert_array_equal(g, spec(x)[0], err_msg=str(x.shape))
        np.testing.assert_allclose(g, sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert (len(wino), len(im2col)) == (2, int(first > 1))
    for bad in ((2, 3, 33, 30), (2, 4, 32, 30)):
        with pytest.raises(onnxjit.InputError):
            dyn(np.ones(bad, np.float32))
