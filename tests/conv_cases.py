"""Shared by the convolution tests: one-node models, inputs, and the checks against onnx's
reference (through the loop-IR interpreter) and onnxruntime (natively)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from loop_harness import OPTIONS, run_via_loop_ir
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.driver import import_model, lower_signature
from onnxjit.ir.types import DType

ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.int32): TensorProto.INT32, np.dtype(np.float16): TensorProto.FLOAT16}
RNG = np.random.default_rng(0)


def model(op: str, x_shape: tuple, inits: list, attrs: dict, dtype=np.float32,
          out_dtype=None, opset: int = 22, x_dims: list | None = None, name: str = "conv0"):
    """A one-node model: input x (dims `x_dims`, default `x_shape`), the other inputs as
    initializers (None: omitted)."""
    names = ["x"] + ["" if a is None else f"i{k}" for k, a in enumerate(inits, 1)]
    init = [numpy_helper.from_array(np.asarray(a), f"i{k}")
            for k, a in enumerate(inits, 1) if a is not None]
    node = helper.make_node(op, names, ["y"], name=name, **attrs)
    x = helper.make_tensor_value_info("x", ONNX_TYPES[np.dtype(dtype)], x_dims or list(x_shape))
    out_t = ONNX_TYPES[np.dtype(out_dtype or dtype)]
    y = helper.make_tensor_value_info("y", out_t, [None] * len(x_shape))
    g = helper.make_graph([node], "g", [x], [y], init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def conv3x3_model(xs: tuple, m: int, attrs: dict, dt, bias: bool, fused: bool = False):
    """Conv 3x3 of x (shape `xs`) by m random filters (+ bias) (+ Relu and a residual Add of a
    second input `s` when `fused`): the Winograd tests' model."""
    ty = ONNX_TYPES[np.dtype(dt)]
    inputs = ["x", "w", "b"] if bias else ["x", "w"]
    nodes = [helper.make_node("Conv", inputs, ["c" if fused else "y"], kernel_shape=[3, 3],
                              **attrs)]
    ins = [helper.make_tensor_value_info("x", ty, xs)]
    if fused:
        nodes += [helper.make_node("Relu", ["c"], ["r"]),
                  helper.make_node("Add", ["r", "s"], ["y"])]
        ins.append(helper.make_tensor_value_info("s", ty, [None] * 4))
    inits = [numpy_helper.from_array(rand(m, xs[1], 3, 3, dtype=dt), "w")]
    if bias:
        inits.append(numpy_helper.from_array(rand(m, dtype=dt), "b"))
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", ty, [None] * 4)],
                          inits)
    mo = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mo.ir_version = 10
    return mo


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def reference(m, x: np.ndarray) -> np.ndarray:
    return ReferenceEvaluator(m).run(None, {"x": x})[0]


def ort_run(m, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    s = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def check(m, x: np.ndarray, native: bool = True, tol: float = 1e-4) -> None:
    want = reference(m, x)
    got = run_via_loop_ir(m, [x])[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    if native:
        (y,) = onnxjit.compile(m, cache_dir=False)(x)
        np.testing.assert_allclose(y, ort_run(m, x), rtol=tol, atol=tol)


def program(m, *xs: np.ndarray):
    gm = import_model(m.SerializeToString(), OPTIONS)
    sig = tuple((DType.from_numpy(x.dtype), x.shape) for x in xs)
    _, prog = lower_signature(gm, sig, OPTIONS)
    return prog
