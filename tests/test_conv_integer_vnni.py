"""ConvInteger and QLinearConv on the 8-bit VNNI kernel (`conv.integer_vnni`): exact against
onnxruntime for both signs of x and w, per-tensor and per-channel weight zero points, padding
(which takes x's zero point), strides, dilations, 1-D and 2-D, batches."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxjit
from onnxjit.codegen.kernel_shapes import has_vnni

pytestmark = pytest.mark.skipif(not has_vnni(), reason="the host has no AVX-512 VNNI")
RNG = np.random.default_rng(7)
U8, I8 = np.uint8, np.int8


def _conv_integer(x_dt, w_dt, xs, ws, attrs, wzp_per_channel):
    w = RNG.integers(-128 if w_dt == I8 else 0, 128 if w_dt == I8 else 256, ws).astype(w_dt)
    xzp = np.array(3 if x_dt == I8 else 131, x_dt)
    wzp = (RNG.integers(-5, 5, ws[0]) + (0 if w_dt == I8 else 128)).astype(w_dt) \
        if wzp_per_channel else np.array(-2 if w_dt == I8 else 126, w_dt)
    tdt = {U8: T.UINT8, I8: T.INT8}
    node = helper.make_node("ConvInteger", ["x", "w", "xzp", "wzp"], ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", tdt[x_dt], xs)],
                          [helper.make_tensor_value_info("y", T.INT32, None)],
                          [numpy_helper.from_array(a, n) for a, n in
                           ((w, "w"), (xzp, "xzp"), (wzp, "wzp"))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 10)])
    m.ir_version = 8
    x = RNG.integers(-128 if x_dt == I8 else 0, 128 if x_dt == I8 else 256, xs).astype(x_dt)
    return m, x


def _direct(m, x):
    """The spec's sum over (x - x_zp) and (w - w_zp) in int64, one output at a time."""
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    a = {at.name: list(at.ints) for at in m.graph.node[0].attribute}
    w = init["w"].astype(np.int64) - init["wzp"].astype(np.int64).reshape(-1, *[1] * (x.ndim - 1))
    xs = x.astype(np.int64) - init["xzp"].astype(np.int64)
    r = x.ndim - 2
    st, dl = a.get("strides", [1] * r), a.get("dilations", [1] * r)
    pads = a.get("pads", [0] * 2 * r)
    xs = np.pad(xs, [(0, 0), (0, 0)] + [(pads[i], pads[i + r]) for i in range(r)])
    k = w.shape[2:]
    out = [(xs.shape[2 + i] - dl[i] * (k[i] - 1) - 1) // st[i] + 1 for i in range(r)]
    y = np.zeros((x.shape[0], w.shape[0], *out), np.int64)
    for pos in np.ndindex(*out):
        win = tuple(slice(p * s, p * s + d * (kk - 1) + 1, d)
                    for p, s, d, kk in zip(pos, st, dl, k))
        y[(slice(None), slice(None), *pos)] = np.tensordot(
            xs[(slice(None), slice(None), *win)], w, axes=(list(range(1, r + 2)),) * 2)
    return y.astype(np.int32)


@pytest.mark.parametrize("x_dt,w_dt", [(U8, I8), (I8, I8), (U8, U8), (I8, U8)])
@pytest.mark.parametrize("xs,ws,attrs,per_channel", [
    ((2, 5, 9, 7), (6, 5, 3, 3), dict(pads=[1, 1, 1, 1]), True),
    ((1, 3, 10, 11), (70, 3, 3, 2), dict(strides=[2, 1], dilations=[1, 2], pads=[2, 0, 1, 1]),
     False),
    ((1, 4, 33), (9, 4, 5), dict(strides=[2], pads=[2, 2]), True),
], ids=["2d-pad", "2d-strided-dilated", "1d"])
def test_conv_integer_matches_onnxruntime(x_dt, w_dt, xs, ws, attrs, per_channel):
    m, x = _conv_integer(x_dt, w_dt, xs, ws, attrs, per_channel)
    fn = onnxjit.compile(m, cache_dir=False)
    got = fn(x)[0]
    assert "convinteger_im2col" in fn.ir("loops")
    if per_channel:  # onnxruntime's ConvInteger takes per-tensor zero points only
        want = _direct(m, x)
    else:
        want = ort.InferenceSession(m.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
