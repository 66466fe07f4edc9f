"""Initializers listed as graph inputs, by IR version, as the spec and onnxruntime have them
(issue 28).

Below IR 4 every initializer had to be listed as an input: they are constants (folded and
prepacked like any weight), not inputs: `input_names`, positional calls, the compiled
signature and `get_inputs()` show only the real inputs. From IR 4 an input with a same-named
initializer is overridable by name, but is not a required or positional input. `onnxjit run`
never invents a value for either.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxjit
from onnxjit import cli

RNG = np.random.default_rng(28)


def _conv_model(ir_version: int) -> onnx.ModelProto:
    """A small conv net whose weights are initializers that are also listed as inputs (the
    model zoo's IR-3 form), bias first, as SqueezeNet lists them."""
    w = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(8).astype(np.float32)
    fc = RNG.standard_normal((8, 4)).astype(np.float32)
    inits = [numpy_helper.from_array(b, "conv_b"), numpy_helper.from_array(w, "conv_w"),
             numpy_helper.from_array(fc, "fc_w")]
    nodes = [helper.make_node("Conv", ["data", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "fc_w"], ["y"])]
    inputs = [helper.make_tensor_value_info(t.name, T.FLOAT, list(t.dims)) for t in inits]
    inputs.append(helper.make_tensor_value_info("data", T.FLOAT, [1, 3, 8, 8]))
    g = helper.make_graph(nodes, "net", inputs, [helper.make_tensor_value_info("y", T.FLOAT,
                                                                                [1, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    m.ir_version = ir_version
    return m


def _ort(m: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def _x() -> np.ndarray:
    return RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)


def test_ir3_initializers_are_constants_not_inputs() -> None:
    m = _conv_model(3)
    fn = onnxjit.compile(m, cache_dir=False)
    assert fn.input_names == ["data"] and fn.required_inputs == ["data"]
    assert [a.name for a in fn.inputs] == [a.name for a in _ort(m).get_inputs()] == ["data"]
    assert fn.overridable_inputs == [] and _ort(m).get_overridable_initializers() == []
    x = _x()
    want = _ort(m).run(None, {"data": x})[0]
    np.testing.assert_allclose(fn(x)[0], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fn(**{fn.input_names[0]: x})[0], want, rtol=1e-4, atol=1e-5)
    # The weights are not part of the compiled signature: they were folded into the program.
    assert len(fn.signatures) == 1 and "conv_w" not in fn.signatures[0]
    assert "conv_w" not in fn.ir("graph").split("{")[0]
    with pytest.raises(onnxjit.InputError, match="conv_w"):  # not an input: as onnxruntime
        fn(data=x, conv_w=np.zeros((8, 3, 3, 3), np.float32))


def test_ir4_initializer_inputs_are_overridable_by_name_only() -> None:
    m = _conv_model(8)
    fn = onnxjit.compile(m, cache_dir=False)
    sess = _ort(m)
    assert fn.input_names == ["data"] == [a.name for a in sess.get_inputs()]
    assert [a.name for a in fn.overridable_inputs] == ["conv_b", "conv_w", "fc_w"]
    assert [a.name for a in sess.get_overridable_initializers()] == ["conv_b", "conv_w", "fc_w"]
    x, fc = _x(), RNG.standard_normal((8, 4)).astype(np.float32)
    np.testing.assert_allclose(fn(x)[0], sess.run(None, {"data": x})[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fn(x, fc_w=fc)[0], sess.run(None, {"data": x, "fc_w": fc})[0],
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(onnxjit.InputError, match="1 inputs"):  # weights are not positional
        fn(x, np.zeros(8, np.float32))


def test_cli_run_never_invents_weights(tmp_path, capsys) -> None:
    """`onnxjit run` with the data input given: the printed result is the model's, computed
    with its own weights (not random ones), for an IR-3 and an IR-8 model alike."""
    x = _x()
    np.save(tmp_path / "x.npy", x)
    for ir in (3, 8):
        m = _conv_model(ir)
        onnx.save(m, tmp_path / "m.onnx")
        out = tmp_path / "out.npz"
        assert cli.main(["run", str(tmp_path / "m.onnx"), "-i", f"data={tmp_path / 'x.npy'}",
                         "-o", str(out), "--cache-dir", str(tmp_path / "cache")]) == 0
        want = _ort(m).run(None, {"data": x})[0]
        np.testing.assert_allclose(np.load(out)["y"], want, rtol=1e-4, atol=1e-5)
    capsys.readouterr()


def test_light_squeezenet_lists_only_data_0() -> None:
    """The real IR-3 model the issue names: 52 weights listed as inputs, one real input."""
    import os

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        "light_squeezenet.onnx")
    assert onnx.load(path).ir_version == 3
    fn = onnxjit.compile(path, cache_dir=False)
    assert fn.input_names == ["data_0"] and fn.overridable_inputs == []
