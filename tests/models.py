"""Small ONNX models built in code for the tests (no downloads)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def finish(graph: onnx.GraphProto, opset: int = 17) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10  # onnxruntime rejects the newer default
    return m


def mlp(sizes=(784, 512, 512, 10), seed: int = 0, batch="batch_size") -> onnx.ModelProto:
    """An MLP laid out the way torch.onnx exports nn.Linear: Gemm(x, W, b, transB=1) + Relu,
    with a symbolic batch dim."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "input"
    for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = (rng.standard_normal((b, a)) / np.sqrt(a)).astype(np.float32)
        bias = (0.1 * rng.standard_normal(b)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"fc{k}.weight"),
                  numpy_helper.from_array(bias, f"fc{k}.bias")]
        out = "output" if k == len(sizes) - 2 else f"/fc{k}/Gemm_output_0"
        nodes.append(helper.make_node("Gemm", [x, f"fc{k}.weight", f"fc{k}.bias"], [out],
                                      name=f"/fc{k}/Gemm", alpha=1.0, beta=1.0, transB=1))
        if k < len(sizes) - 2:
            x = f"/relu{k}/Relu_output_0"
            nodes.append(helper.make_node("Relu", [out], [x], name=f"/relu{k}/Relu"))
    g = helper.make_graph(
        nodes, "main_graph",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, sizes[0]])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, sizes[-1]])],
        inits)
    return finish(g)


def mlp_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    k = 0
    while f"fc{k}.weight" in w:
        x = x @ w[f"fc{k}.weight"].T + w[f"fc{k}.bias"]
        k += 1
        if f"fc{k}.weight" in w:
            x = np.maximum(x, 0)
    return x


def chain(n: int | str = 1024) -> onnx.ModelProto:
    """Six elementwise ops with Tanh and Erf: y = sigmoid(erf(tanh(x*0.5 + 0.1))) * x."""
    mk = helper.make_node
    nodes = [mk("Mul", ["x", "s"], ["t1"]), mk("Add", ["t1", "b"], ["t2"]),
             mk("Tanh", ["t2"], ["t3"]), mk("Erf", ["t3"], ["t4"]),
             mk("Sigmoid", ["t4"], ["t5"]), mk("Mul", ["t5", "x"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "s"),
             numpy_helper.from_array(np.array(0.1, np.float32), "b")]
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])], inits)
    return finish(g)


def one_node(op: str, inputs: list[tuple[str, int, list]], outputs: list[tuple[str, int, list]],
             opset: int = 17, **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _, _ in outputs], **attrs)
    g = helper.make_graph([node], op.lower(),
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    return finish(g, opset)


def node_model(op: str, inputs: list, n_out: int = 1, opset: int = 17, consts=(),
               **attrs) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    """A one-node model on arrays; `inputs` are arrays or None (omitted); indexes in `consts`
    become initializers. Outputs are typed by onnx's shape inference (so the model passes
    onnxjit's verifier). Returns (model, feeds)."""
    names, feeds, vis, inits = [], [], [], []
    for k, a in enumerate(inputs):
        if a is None:
            names.append("")
            continue
        a = np.asarray(a)
        names.append(f"in{k}")
        if k in consts:
            inits.append(numpy_helper.from_array(a, f"in{k}"))
        else:
            feeds.append(a)
            vis.append(helper.make_tensor_value_info(
                f"in{k}", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
    outs = [f"out{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    g = helper.make_graph([node], "g", vis,
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                           for o in outs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    inferred = onnx.shape_inference.infer_shapes(m)
    m.graph.ClearField("output")
    m.graph.output.extend(inferred.graph.output)
    return m, feeds


def value_info(name: str, dtype: int = TensorProto.FLOAT, shape=None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def control_model(nodes, inputs, outputs, inits=(), opset: int = 18, functions=(),
                  extra_opsets=()) -> onnx.ModelProto:
    """A checked model (IR version 10, so onnxruntime takes it) of a main graph."""
    g = helper.make_graph(nodes, "main", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", opset), *extra_opsets]
    m = helper.make_model(g, opset_imports=opsets, ir_version=10, functions=list(functions))
    onnx.checker.check_model(m)
    return m


def against_ort(m: onnx.ModelProto, feeds_list, rtol: float = 1e-5, atol: float = 1e-6):
    """Compile `m` and compare every output with onnxruntime for each feeds dict (dtype, shape,
    values); returns the compiled model."""
    import onnxruntime as ort

    import onnxjit

    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = onnxjit.compile(m, cache_dir=False)
    for feeds in feeds_list:
        ref = sess.run(None, feeds)
        got = fn.run(None, feeds)
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            assert g.dtype == r.dtype and g.shape == r.shape
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
    return fn
