"""`fn.ir(stage, signature=None)`: the last signature *called* by default, whichever path served
the call (new signature, dictionary hit, the fast builtin), or the one named by input shapes."""

import numpy as np
import pytest
from models import mlp

import onnxjit

SIZES = (8, 16, 4)


@pytest.fixture
def fn():
    return onnxjit.compile(mlp(SIZES), cache_dir=False, specialize="shape")


def _x(batch):
    return np.ones((batch, SIZES[0]), np.float32)


def _batch_in_graph(text):
    return "f32[2," in text, "f32[3," in text


def test_default_is_the_last_signature_called(fn):
    with pytest.raises(onnxjit.OnnxJitError, match="call the model first"):
        fn.ir("graph")
    a, b = _x(2), _x(3)
    fn(a), fn(a), fn(a)  # batch 2 now runs through the fast builtin
    fn(b)  # a new signature: compiled
    assert _batch_in_graph(fn.ir("graph")) == (False, True)
    fn(a)  # back to batch 2, served from the dictionary of signatures
    assert _batch_in_graph(fn.ir("graph")) == (True, False)
    fn(b), fn(b), fn(b)  # the builtin is batch 3's now
    assert _batch_in_graph(fn.ir("graph")) == (False, True)
    fn(a), fn(a)  # a dictionary hit, then batch 2's builtin
    assert _batch_in_graph(fn.ir("graph")) == (True, False)


def test_signature_by_shapes(fn):
    fn(_x(2)), fn(_x(3))
    assert _batch_in_graph(fn.ir("graph", signature={"input": (2, 8)})) == (True, False)
    assert _batch_in_graph(fn.ir("graph", signature=[(3, 8)])) == (False, True)
    assert "f32[2," in fn.ir("loops", signature=((2, 8),))
    assert _batch_in_graph(fn.ir("graph")) == (False, True)  # asking changes no default


@pytest.mark.parametrize("signature, message", [
    ({"input": (5, 8)}, r"no signature with shapes .*called: input: f32\[2,8\]"),
    ({"x": (2, 8)}, r"unknown input name\(s\) \['x'\]; inputs are \['input'\]"),
    ([(2, 8), (2, 8)], "2 shapes given for the 1 inputs"),
    ({"input": "2x8"}, "shapes must be sequences of ints"),
    ({"input": "28"}, "shapes must be sequences of ints"),
    (42, "as a dict name -> shape or a tuple of shapes"),
])
def test_unknown_signature_is_a_clear_error(fn, signature, message):
    fn(_x(2))
    with pytest.raises(onnxjit.InputError, match=message):
        fn.ir("graph", signature=signature)
