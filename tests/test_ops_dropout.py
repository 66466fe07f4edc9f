"""Dropout (`ir.ops.random.dropout`): inference forwards; training mode draws its mask on the host
at every call, reproducibly with a `seed` (numpy RandomState(seed), as the ONNX reference), with
`training_mode` as a constant or as a graph input bound per call."""

from __future__ import annotations

import numpy as np
import pytest
from models import finish
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.errors import InputError

F, B = TensorProto.FLOAT, TensorProto.BOOL


def model(seed=None, mode=None, ratio=None, mask=True, x_const=False):
    """Dropout(x, ratio, training_mode) -> y (, mask). `mode`/`ratio`: None (a graph input)
    or a constant; x a graph input of shape [3, 40], or a constant when `x_const`."""
    inputs, inits = [], []
    x = np.linspace(-1, 1, 120, dtype=np.float32).reshape(3, 40)
    if x_const:
        inits.append(numpy_helper.from_array(x, "x"))
    else:
        inputs.append(helper.make_tensor_value_info("x", F, [3, 40]))
    for name, value, t in (("r", ratio, F), ("t", mode, B)):
        if value is None:
            inputs.append(helper.make_tensor_value_info(name, t, []))
        else:
            inits.append(numpy_helper.from_array(np.array(value, dtype=np.float32 if t == F
                                                          else bool), name))
    outs = ["y", "z"] if mask else ["y"]
    attrs = {} if seed is None else {"seed": seed}
    node = helper.make_node("Dropout", ["x", "r", "t"], outs, **attrs)
    g = helper.make_graph([node], "dropout", inputs,
                          [helper.make_tensor_value_info("y", F, [3, 40])] +
                          ([helper.make_tensor_value_info("z", B, [3, 40])] if mask else []),
                          initializer=inits)
    return finish(g, 13), x


def expected(x, ratio, seed):
    keep = np.random.RandomState(seed).uniform(0, 1.0, x.shape) >= ratio
    return keep * x * (1 / (1 - np.float32(ratio))), keep


def test_seeded_training_mode_matches_the_reference_at_every_call():
    m, x = model(seed=3, mode=True, ratio=0.25)
    fn = onnxjit.compile(m, cache_dir=False)
    want_y, want_mask = expected(x, 0.25, 3)
    for _ in range(2):  # a fresh RandomState(seed) per call: the same mask again
        y, z = fn(x)
        np.testing.assert_array_equal(z, want_mask)
        np.testing.assert_allclose(y, want_y, rtol=1e-6)


def test_unseeded_masks_differ_between_calls_and_keep_about_one_minus_ratio():
    m, x = model(mode=True, ratio=0.5, x_const=True)   # constant x: must still not fold
    fn = onnxjit.compile(m, cache_dir=False)
    (y1, z1), (_, z2) = fn(), fn()
    assert not np.array_equal(z1, z2)
    assert 0.3 < z1.mean() < 0.7
    np.testing.assert_array_equal(y1, np.where(z1, x * np.float32(2), 0))  # kept: x / 0.5


def test_runtime_training_mode_and_ratio_are_bound_per_call():
    m, x = model(seed=0)
    fn = onnxjit.compile(m, cache_dir=False)
    y, z = fn(x, np.float32(0.5), np.bool_(False))  # inference: forwards, mask all true
    np.testing.assert_array_equal(y, x)
    assert z.all()
    y, z = fn(x, np.float32(0.75), np.bool_(True))
    want_y, want_mask = expected(x, 0.75, 0)
    np.testing.assert_array_equal(z, want_mask)
    np.testing.assert_allclose(y, want_y, rtol=1e-6)
    y, z = fn(x, np.float32(0.0), np.bool_(True))  # ratio 0 forwards even in training
    np.testing.assert_array_equal(y, x)
    assert z.all()


@pytest.mark.parametrize("ratio", [1.0, -0.5])
def test_training_ratio_out_of_range_from_the_call_is_an_input_error(ratio):
    fn = onnxjit.compile(model(seed=0)[0], cache_dir=False)
    with pytest.raises(InputError, match=r"Dropout.*ratio must be in \[0, 1\)"):
        fn(np.zeros((3, 40), np.float32), np.float32(ratio), np.bool_(True))
