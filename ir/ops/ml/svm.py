"""SVMRegressor (ai.onnx.ml 1): support-vector regression, numpy semantics (host).

score = sum_j coefficients[j] * K(x, support_vectors[j]) + rho[0] when n_supports > 0, else the
linear form dot(x, coefficients) + rho[0]; with one_class the output is 1 if score > 0 else
-1. Kernels (kernel_params = [gamma, coef0, degree]): LINEAR x.v, POLY (gamma x.v + coef0)^degree,
RBF exp(-gamma |x - v|^2), SIGMOID tanh(gamma x.v + coef0). Output [N, 1] float32, computed
in float64. SVMClassifier is in `svm_classifier`.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import InputError, ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.ml.simple import numeric_input
from onnxjit.ir.types import DType, TensorType, ValueType


def kernel(node: Node, x: np.ndarray, sv: np.ndarray) -> np.ndarray:
    """K(x_i, sv_j) for every row i and support vector j."""
    params = list(node.attr("kernel_params", ())) + [0.0, 0.0, 0.0]
    gamma, coef0, degree = float(params[0]), float(params[1]), float(params[2])
    kind = node.attr("kernel_type", "LINEAR")
    dot = x @ sv.T
    if kind == "LINEAR":
        return dot
    if kind == "POLY":
        return (gamma * dot + coef0) ** degree
    if kind == "RBF":
        d2 = (x * x).sum(1)[:, None] - 2 * dot + (sv * sv).sum(1)[None, :]
        return np.exp(-gamma * np.maximum(d2, 0.0))
    if kind == "SIGMOID":
        return np.tanh(gamma * dot + coef0)
    raise ModelError(f"kernel_type {kind!r} is not LINEAR, POLY, RBF or SIGMOID", where=node)


def _infer(node: Node) -> list[ValueType | None]:
    t = numeric_input(node)
    n = None if t.shape is None else (1 if len(t.shape) == 1 else t.shape[0])
    return [TensorType(DType.FLOAT, (n, 1))]


def _evaluate(node: Node, ins: list) -> list[np.ndarray]:
    x = np.asarray(ins[0], dtype=np.float64)
    x = x.reshape(1, -1) if x.ndim == 1 else x
    coef = np.asarray(node.attr("coefficients", ()), np.float64)
    rho = float((list(node.attr("rho", ())) or [0.0])[0])
    n_sv = int(node.attr("n_supports", 0))
    if n_sv > 0:
        sv = np.asarray(node.attr("support_vectors", ()), np.float64).reshape(n_sv, -1)
        if sv.shape[1] != x.shape[1]:
            raise InputError(f"node '{node.name}' (SVMRegressor): X has {x.shape[1]} features, "
                             f"the support vectors {sv.shape[1]}")
        s = kernel(node, x, sv) @ coef[:n_sv] + rho
    else:
        if len(coef) != x.shape[1]:
            raise InputError(f"node '{node.name}' (SVMRegressor): X has {x.shape[1]} features, "
                             f"the coefficients {len(coef)}")
        s = x @ coef + rho
    if node.attr("one_class", 0):
        s = np.where(s > 0, 1.0, -1.0)
    return [s.reshape(-1, 1).astype(np.float32)]


op("SVMRegressor", (1,), domain="ai.onnx.ml", infer=_infer, evaluate=_evaluate,
   doc="support-vector regression (all kernels); host")
