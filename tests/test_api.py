"""The public API end to end: compile, call styles, signatures, IR stages, vs onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from models import chain, mlp, mlp_reference
from onnx import TensorProto, helper

import onnxjit


@pytest.fixture(scope="module")
def mlp_model():
    return mlp()


@pytest.fixture(scope="module")
def mlp_fn(mlp_model, tmp_path_factory):
    return onnxjit.compile(mlp_model, cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("batch", [1, 32])
def test_mlp_matches_onnxruntime(mlp_model, mlp_fn, batch):
    x = np.random.default_rng(batch).standard_normal((batch, 784)).astype(np.float32)
    (y,) = mlp_fn(x)
    sess = ort.InferenceSession(mlp_model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {"input": x})
    assert y.shape == (batch, 10) and y.dtype == np.float32
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    np.testing.assert_allclose(y, mlp_reference(mlp_model, x), rtol=1e-4, atol=1e-5)


def test_call_styles(mlp_fn):
    x = np.ones((2, 784), np.float32)
    (a,) = mlp_fn(x)
    (b,) = mlp_fn(input=x)
    c = mlp_fn.run(None, {"input": x})
    d = mlp_fn.run(["output"], {"input": x})
    assert isinstance(c, list) and isinstance(d, list)
    for other in (b, c[0], d[0]):
        np.testing.assert_array_equal(a, other)
    assert mlp_fn.input_names == ["input"] and mlp_fn.output_names == ["output"]
    assert any("f32[2,784]" in s for s in mlp_fn.signatures)


def test_outputs_are_fresh_arrays(mlp_fn):
    x = np.ones((3, 784), np.float32)
    (a,) = mlp_fn(x)
    (b,) = mlp_fn(x)
    assert a is not b and not np.shares_memory(a, b)
    a[:] = 0
    np.testing.assert_array_equal(mlp_fn(x)[0], b)


def test_non_contiguous_and_fortran_inputs(mlp_fn):
    base = np.random.default_rng(0).standard_normal((4, 1568)).astype(np.float32)
    strided = base[:, ::2]
    fortran = np.asfortranarray(base[:, :784])
    np.testing.assert_allclose(mlp_fn(strided)[0], mlp_fn(np.ascontiguousarray(strided))[0])
    np.testing.assert_allclose(mlp_fn(fortran)[0], mlp_fn(np.ascontiguousarray(fortran))[0])


def test_ir_stages(mlp_fn):
    mlp_fn(np.ones((1, 784), np.float32))
    graph = mlp_fn.ir("graph")
    loops = mlp_fn.ir("loops")
    assert "Gemm" in graph
    assert "kernel" in loops and "load" in loops and "store" in loops
    assert "define" in mlp_fn.ir("llvm")
    from onnxjit.codegen.target import vector_bytes

    lanes = vector_bytes() // 4  # the host's widest vectors: 16 floats on AVX-512, 8 on AVX2
    assert f"<{lanes} x float>" in mlp_fn.ir("llvm-opt")
    assert mlp_fn.ir("asm").strip()
    with pytest.raises(onnxjit.OnnxJitError, match="unknown stage"):
        mlp_fn.ir("bogus")


def _relu_exp(dims: list) -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Relu", ["e"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y])).SerializeToString()


def test_ir_of_a_symbolic_program_shows_symbolic_sizes():
    fn = onnxjit.compile(_relu_exp(["n", 8]), cache_dir=False, specialize="dynamic")
    fn(np.ones((3, 8), np.float32))
    fn(np.ones((5, 8), np.float32))
    for sig in (None, {"x": (3, 8)}):
        assert "f32[n,8]" in fn.ir("graph", sig)
        loops = fn.ir("loops", sig)
        assert "f32[n,8]" in loops and "load %dims" in loops, loops
    assert "define" in fn.ir("llvm")


def test_ir_names_do_not_depend_on_earlier_compiles():
    fn = onnxjit.compile(_relu_exp([64]), cache_dir=False)
    fn(np.ones(64, np.float32))
    first = fn.ir("llvm")
    other = onnxjit.compile(_relu_exp([32]), cache_dir=False)
    other(np.ones(32, np.float32))
    assert "llvm.loop" in first  # loop metadata, whose ids once came from a counter
    assert fn.ir("llvm") == first


def test_elementwise_chain_is_one_loop(tmp_path):
    fn = onnxjit.compile(chain(4096), cache_dir=False)
    x = np.linspace(-3, 3, 4096, dtype=np.float32)
    (y,) = fn(x)
    from scipy_free_erf import erf

    t = np.tanh(x * np.float32(0.5) + np.float32(0.1))
    ref = 1 / (1 + np.exp(-erf(t))) * x
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-6)
    loops = fn.ir("loops")
    assert loops.count("kernel @") == 1, loops
    assert loops.count("for ") == 1, loops


def test_compile_from_path_and_bytes(tmp_path, mlp_model):
    p = tmp_path / "m.onnx"
    p.write_bytes(mlp_model.SerializeToString())
    x = np.ones((1, 784), np.float32)
    a = onnxjit.compile(p, cache_dir=False)(x)[0]
    b = onnxjit.compile(str(p), cache_dir=False)(x)[0]
    c = onnxjit.compile(p.read_bytes(), cache_dir=False)(x)[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def test_unknown_option():
    """`compile` names its options (help, IDEs and type checkers see them): a misspelt one is
    Python's TypeError naming it; the options object lists the known ones."""
    with pytest.raises(TypeError, match="'fast'"):
        onnxjit.compile(chain(4), cache_dir=False, fast=True)
    from onnxjit.options import CompileOptions

    with pytest.raises(onnxjit.OnnxJitError, match="unknown compile option.*known: base_dir"):
        CompileOptions.from_user({"fast": True})


def test_compile_keywords_mirror_compile_options():
    """Every CompileOptions field is a keyword-only parameter of `compile`, documented in its
    docstring and in the README's options table, and nothing else is."""
    import inspect
    from pathlib import Path

    from onnxjit.options import CompileOptions

    params = inspect.signature(onnxjit.compile).parameters
    keywords = [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY]
    assert set(keywords) == set(CompileOptions._fields)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for name in keywords:
        assert f"    {name}:" in onnxjit.compile.__doc__, name
        assert f"| `{name}` |" in readme, name


@pytest.mark.parametrize("declared", [None, "untyped-dims"])
def test_graph_outputs_may_leave_their_shape_to_inference(declared):
    """The spec requires a type on the main graph's outputs, not a shape: a hand-built model
    whose outputs say only `float16` (or a shape of unnamed dims) compiles, and its outputs
    have the shapes the graph computes (onnxruntime and onnx.reference accept it too)."""
    from onnx import TensorProto, helper

    shape = None if declared is None else [None, None]
    nodes = [helper.make_node("MatMul", ["x", "y"], ["m"]), helper.make_node("Relu", ["m"], ["z"])]
    g = helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["N", 3]),
        helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3, 5])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT16, shape)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    fn = onnxjit.compile(model, cache_dir=False)
    for n in (2, 7):
        x = np.linspace(-2, 2, n * 3).reshape(n, 3).astype(np.float16)
        y = np.linspace(1, -1, 15).reshape(3, 5).astype(np.float16)
        z, = fn(x, y)
        want = np.maximum(x.astype(np.float32) @ y.astype(np.float32), 0)
        assert z.shape == (n, 5) and z.dtype == np.float16
        np.testing.assert_allclose(z.astype(np.float32), want, rtol=2e-3, atol=2e-3)
