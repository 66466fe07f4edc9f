"""Tier 0's numpy kernels against onnxruntime on the cases their fast paths take: convolutions
on flat columns (stride 1, 32 or more channels a group: `kernels_nn._conv_flat`), depthwise
taps (channels last, or flat columns on large maps of stride 1), im2col, Softmax/LogSoftmax
and LayerNormalization computed in place, and shape ops that read a constant shape input once
(`kernels_shape._ints_of`) while still reading an overridden default as it comes. No kernel
writes into its inputs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tier0_ref import Tier0

ort = pytest.importorskip("onnxruntime")


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _ort(m, feeds):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _check(m, arrays, names, rtol=1e-4, atol=1e-4):
    before = [a.copy() for a in arrays]
    got = Tier0(m).run(arrays)
    assert got is not None, "tier 0 declined the whole call"
    want = _ort(m, dict(zip(names, arrays)))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    for a, b in zip(arrays, before):
        np.testing.assert_array_equal(a, b)  # inputs untouched


CONVS = [  # (C, M, group, kernel, pads, dilations, strides, H, W)
    (32, 16, 1, (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), 9, 11),      # flat columns
    (48, 24, 1, (3, 3), (0, 2, 1, 0), (2, 1), (1, 1), 12, 10),     # asymmetric, dilated
    (64, 32, 2, (1, 3), (0, 1, 0, 1), (1, 1), (1, 1), 5, 17),      # groups, 1x3
    (40, 8, 1, (5, 5), (2, 2, 2, 2), (1, 1), (1, 1), 3, 4),        # kernel beyond the map
    (32, 16, 1, (3, 3), (1, 1, 1, 1), (1, 1), (2, 2), 9, 11),      # stride 2: im2col
    (3, 16, 1, (3, 3), (1, 1, 1, 1), (1, 1), (2, 2), 16, 16),      # stem: im2col
    (8, 8, 8, (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), 7, 9),         # depthwise, channels last
    (8, 8, 8, (5, 5), (2, 1, 2, 3), (1, 2), (1, 1), 8, 6),         # ... dilated
    (8, 8, 8, (3, 3), (1, 1, 1, 1), (1, 1), (2, 2), 7, 9),         # ... strided
    (4, 4, 4, (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), 70, 66),       # depthwise, flat columns
    (4, 4, 4, (3, 5), (0, 2, 1, 0), (2, 1), (1, 1), 64, 70),       # ... dilated, asymmetric
    (4, 4, 4, (3, 3), (1, 1, 1, 1), (1, 1), (2, 2), 70, 66),       # depthwise, strided views
    (4, 4, 4, (3, 5), (0, 2, 1, 0), (2, 1), (2, 3), 64, 70),       # ... dilated, asymmetric
]
DEPTHWISE_LARGE = [c for c in CONVS if c[2] == c[0] == c[1] and c[7] * c[8] >= 4096]


@pytest.mark.parametrize("case", CONVS, ids=[str(i) for i in range(len(CONVS))])
@pytest.mark.parametrize("batch", [1, 2])
def test_conv_paths_match_onnxruntime(case, batch):
    c, m, g, k, pads, dil, strides, h, w = case
    rng = np.random.default_rng(sum(case[:3]) + batch)
    wt = rng.standard_normal((m, c // g) + k).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=g, kernel_shape=list(k),
                            pads=list(pads), dilations=list(dil), strides=list(strides))
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                          [batch, c, h, w])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(bias, "b")])
    x = rng.standard_normal((batch, c, h, w)).astype(np.float32)
    _check(model, [x], ["x"])


@pytest.mark.parametrize("case", DEPTHWISE_LARGE, ids=[str(i) for i in range(len(DEPTHWISE_LARGE))])
def test_depthwise_blocks_match_onnxruntime(case, monkeypatch):
    """Blocks far smaller than a map: partial blocks of rows, columns and output lines."""
    from onnxjit.tiered import depthwise

    monkeypatch.setattr(depthwise, "BLOCK", 300)
    test_conv_paths_match_onnxruntime(case, 2)


@pytest.mark.parametrize("op,attrs", [("HardSwish", {}), ("HardSigmoid", {"alpha": 0.3,
                                                                          "beta": 0.4})])
def test_hard_activations_in_blocks_match_onnxruntime(op, attrs):
    """Over several blocks of `kernels.BLOCK` elements and a partial one."""
    shape = (2, 3, 331, 113)  # 224,418 elements: three blocks and a part
    x = (np.random.default_rng(5).standard_normal(shape) * 4).astype(np.float32)
    model = _model([helper.make_node(op, ["x"], ["y"], **attrs)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], opset=17)
    _check(model, [x], ["x"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op,axis", [("Softmax", -1), ("Softmax", 1), ("LogSoftmax", -1),
                                     ("LogSoftmax", 0)])
def test_softmax_in_place_matches_onnxruntime(op, axis):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 5, 7)) * 20).astype(np.float32)
    x[0, 0, :] = -np.inf
    x[0, 0, 2] = 1.0  # a row with -inf entries
    model = _model([helper.make_node(op, ["x"], ["y"], axis=axis)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, 7])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    _check(model, [x], ["x"])


@pytest.mark.parametrize("shape,axis", [((1, 1, 256), -1), ((2, 5, 6, 8), 2), ((4, 3), 0)])
def test_layer_norm_matches_onnxruntime(shape, axis):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    norm = shape[axis:] if axis >= 0 else shape[axis:]
    scale = rng.standard_normal(norm).astype(np.float32)
    bias = rng.standard_normal(norm).astype(np.float32)
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=axis,
                            epsilon=1e-3)
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(bias, "b")])
    _check(model, [x], ["x"])


def test_shape_ops_read_constants_once_and_overridden_defaults_as_given():
    """Reshape's shape is an input with a default (an overridable initializer): the default is
    read at build time, a caller's own shape at the call; Unsqueeze/Slice/Expand take theirs
    from constants."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "ax"], ["u"]),
             helper.make_node("Slice", ["u", "st", "en", "sax"], ["s"]),
             helper.make_node("Expand", ["s", "ex"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0, -1], np.int64), "shape"),
             numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([1, -100], np.int64), "st"),
             numpy_helper.from_array(np.array([100, 100], np.int64), "en"),
             numpy_helper.from_array(np.array([2, 1], np.int64), "sax"),
             numpy_helper.from_array(np.array([3, 1, 1, 1], np.int64), "ex")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
                           helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t0 = Tier0(model)
    default = t0.inputs[1].const
    for shape in (default, np.array([4, -1], np.int64), np.array([-1, 2], np.int64)):
        for _ in range(2):  # the second call takes the kernels' cached paths
            got = t0.run([x, shape])
            want = _ort(model, {"x": x, "shape": shape})
            assert got is not None
            np.testing.assert_array_equal(got[0], want[0])


CONV_TRANSPOSES = [  # (C, M, group, kernel, strides, attributes, spatial input)
    (24, 24, 1, (2, 2), (2, 2), {}, (9, 5)),                        # a detector's upsampling
    (8, 6, 1, (3, 3), (2, 2), {"pads": [1, 1, 1, 1], "output_padding": [1, 1]}, (5, 4)),
    (6, 4, 2, (3, 2), (1, 2), {"dilations": [2, 1], "pads": [0, 1, 2, 0]}, (4, 6)),
    (4, 4, 1, (3, 3), (2, 2), {"auto_pad": "SAME_UPPER"}, (5, 5)),
    (4, 4, 1, (3, 3), (2, 2), {"output_shape": [10, 9]}, (5, 5)),
    (5, 3, 1, (4,), (3,), {"pads": [1, 2]}, (7,)),                 # 1-D
    (4, 2, 1, (2, 2, 2), (2, 1, 2), {}, (3, 2, 3)),                # 3-D
]


@pytest.mark.parametrize("case", CONV_TRANSPOSES,
                         ids=[str(i) for i in range(len(CONV_TRANSPOSES))])
@pytest.mark.parametrize("batch,bias", [(1, True), (2, False)])
def test_conv_transpose_matches_onnxruntime(monkeypatch, case, batch, bias):
    """`kernels_upsample` computes ConvTranspose itself (the host evaluation is made to
    fail) and matches onnxruntime: strides, pads, output_padding, dilations, groups,
    auto_pad, output_shape, 1-D to 3-D."""
    from onnxjit.ir.ops.conv import transpose

    def host(*_):
        raise AssertionError("the host evaluation ran: tier 0's kernel declined")

    monkeypatch.setattr(transpose, "conv_transpose_numpy", host)
    c, m, g, k, strides, attrs, spatial = case
    rng = np.random.default_rng(len(spatial) + c + batch)
    wt = rng.standard_normal((c, m // g) + k).astype(np.float32)
    inits = [numpy_helper.from_array(wt, "w")]
    names = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b"))
        names.append("b")
    node = helper.make_node("ConvTranspose", names, ["y"], group=g, kernel_shape=list(k),
                            strides=list(strides), **attrs)
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                          [batch, c, *spatial])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    x = rng.standard_normal((batch, c, *spatial)).astype(np.float32)
    _check(model, [x], ["x"])
