"""The numeric ai.onnx.ml ops: Binarizer, Scaler, Normalizer, Imputer, ArrayFeatureExtractor,
FeatureVectorizer, LinearRegressor, LinearClassifier.

Each has its ONNX-ML semantics here as numpy (`evaluate`: constant folding, the host path);
the `expand-ml` pass rewrites them into standard ONNX ops (Sub, Mul, Gemm, Where, Softmax,
ArgMax, Gather...) before shape inference, so they compile natively and fuse with their
neighbours like any elementwise chain (Scaler -> LinearClassifier -> Softmax is one Gemm with
an epilogue and one elementwise loop).

- Binarizer: x > threshold ? 1 : 0, in x's type.
- Scaler: (x - offset) * scale as float32; offset/scale of one value apply to every column.
- Normalizer (rows of a [N, C] or [C] input): MAX divides by max |x|, L1 by sum |x|, L2 by
  sqrt(sum x^2); the divisor is at least 1e-30 (an all-zero row stays zero).
- Imputer: x where x is not the replaced value (NaN: where x is NaN) else the imputed value
  of its column (one value: every column).
- ArrayFeatureExtractor: X[..., indices] (indices flattened), a [C] input giving [1, k].
- FeatureVectorizer: inputs as [N, d] (1-D ones as [N, 1]) cut or zero-padded to
  `inputdimensions`, concatenated along columns, as float32.
- LinearRegressor: x @ coefficients.reshape(targets, F).T + intercepts; PROBIT on one
  target.
- LinearClassifier: scores = x @ coefficients.reshape(C', F).T + intercepts; with one score
  column and two labels the scores become [-s, s]; then the post transform; the label is the
  class of the largest score (one column and two labels: class 1 iff s > 0).
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import InputError, ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.ml import forest_eval as FE
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType, TensorType, ValueType

ML = "ai.onnx.ml"
_NUMERIC = (DType.FLOAT, DType.DOUBLE, DType.INT64, DType.INT32)


def numeric_input(node: Node, i: int = 0) -> TensorType:
    t = tensor_input(node, i)
    if t.dtype not in _NUMERIC:
        raise ModelError(f"input {i} of {node.op} must be f32, f64, i64 or i32, got "
                         f"{t.dtype.short}", where=node)
    return t


def floats(node: Node, name: str, default=None) -> np.ndarray:
    v = node.attr(name, default)
    if v is None:
        raise ModelError(f"missing required attribute '{name}'", where=node)
    return np.asarray(v, dtype=np.float64).reshape(-1)


def _rows_cols(t: TensorType):
    if t.shape is None:
        return None, None
    if len(t.shape) == 1:
        return 1, t.shape[0]
    return t.shape[0], t.shape[-1]


# ------------------------------------------------------------------- Binarizer, Scaler, ...


def _binarizer_infer(node: Node) -> list[ValueType | None]:
    t = numeric_input(node)
    return [TensorType(t.dtype, t.shape)]


def _binarizer_eval(node: Node, ins: list) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    return [(x > float(node.attr("threshold", 0.0))).astype(x.dtype)]


def _scaler_infer(node: Node) -> list[ValueType | None]:
    t = numeric_input(node)
    return [TensorType(DType.FLOAT, t.shape)]


def _scaler_eval(node: Node, ins: list) -> list[np.ndarray]:
    x = np.asarray(ins[0], dtype=np.float32)
    off = floats(node, "offset", (0.0,)).astype(np.float32)
    sc = floats(node, "scale", (1.0,)).astype(np.float32)
    return [((x - off) * sc).astype(np.float32)]


def _same_infer(node: Node) -> list[ValueType | None]:
    t = numeric_input(node)
    dt = t.dtype if node.op == "Imputer" else DType.FLOAT
    return [TensorType(dt, t.shape)]


def _normalizer_eval(node: Node, ins: list) -> list[np.ndarray]:
    x = np.asarray(ins[0], dtype=np.float32)
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    norm = node.attr("norm", "MAX")
    if norm == "MAX":
        d = np.abs(x2).max(axis=1, keepdims=True) if x2.shape[1] else np.ones((len(x2), 1))
    elif norm == "L1":
        d = np.abs(x2).sum(axis=1, keepdims=True)
    elif norm == "L2":
        d = np.sqrt((x2 * x2).sum(axis=1, keepdims=True))
    else:
        raise ModelError(f"norm {norm!r} is not MAX, L1 or L2", where=node)
    return [(x2 / np.maximum(d, 1e-30)).astype(np.float32).reshape(x.shape)]


def imputer_params(node: Node) -> tuple[np.ndarray, float]:
    fv, iv = node.attr("imputed_value_floats"), node.attr("imputed_value_int64s")
    if fv:
        return np.asarray(fv, np.float64), float(node.attr("replaced_value_float", 0.0))
    if iv:
        return np.asarray(iv, np.float64), float(node.attr("replaced_value_int64", 0))
    raise ModelError("Imputer needs imputed_value_floats or imputed_value_int64s", where=node)


def _imputer_eval(node: Node, ins: list) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    vals, rep = imputer_params(node)
    cols = x.shape[-1] if x.ndim else 1
    if len(vals) not in (1, cols):
        raise InputError(f"node '{node.name}' (Imputer): X has {cols} columns but "
                         f"{len(vals)} imputed values are given")
    hit = np.isnan(x) if np.isnan(rep) else x == rep
    return [np.where(hit, vals.astype(x.dtype), x)]


# ------------------------------------------------------------ feature extraction / vectors


def _afe_infer(node: Node) -> list[ValueType | None]:
    t = tensor_input(node, 0)
    it = tensor_input(node, 1)
    if it.dtype != DType.INT64:
        raise ModelError(f"input 1 (indices) must be i64, got {it.dtype.short}", where=node)
    k = None
    if it.shape is not None and all(isinstance(d, int) for d in it.shape):
        k = int(np.prod(it.shape, dtype=np.int64))
    if t.shape is None:
        return [TensorType(t.dtype, None)]
    lead = (1,) if len(t.shape) == 1 else tuple(t.shape[:-1])
    return [TensorType(t.dtype, lead + (k,))]


def _afe_eval(node: Node, ins: list) -> list[np.ndarray]:
    x, idx = np.asarray(ins[0]), np.asarray(ins[1]).reshape(-1)
    c = x.shape[-1]
    if ((idx < 0) | (idx >= c)).any():
        raise InputError(f"node '{node.name}' (ArrayFeatureExtractor): an index is out of "
                         f"range [0, {c})")
    out = x[..., idx]
    return [out.reshape(1, -1) if x.ndim == 1 else out]


def _fv_infer(node: Node) -> list[ValueType | None]:
    dims = node.attr("inputdimensions")
    if dims is None or len(dims) != len(node.inputs):
        raise ModelError("inputdimensions must give one size per input", where=node)
    n = None
    for i in range(len(node.inputs)):
        t = numeric_input(node, i)
        n = _rows_cols(t)[0] if n is None else n
    return [TensorType(DType.FLOAT, (n, int(sum(dims))))]


def _fv_eval(node: Node, ins: list) -> list[np.ndarray]:
    parts = []
    for a, d in zip(ins, node.attr("inputdimensions")):
        a = np.asarray(a, dtype=np.float32)
        a = a.reshape(-1, 1) if a.ndim == 1 else a.reshape(len(a), -1)
        b = np.zeros((len(a), int(d)), dtype=np.float32)
        w = min(int(d), a.shape[1])
        b[:, :w] = a[:, :w]
        parts.append(b)
    return [np.concatenate(parts, axis=1)]


# ---------------------------------------------------------------------------- linear models


def linear_params(node: Node) -> tuple[np.ndarray, np.ndarray | None, int]:
    """(coefficients [T, F] float64, intercepts [T] or None, T)."""
    coef = floats(node, "coefficients")
    if node.op == "LinearRegressor":
        t = int(node.attr("targets", 1))
    else:
        inter = node.attr("intercepts")
        t = len(inter) if inter else 0
        labels = _labels(node)
        t = t or (1 if len(labels) == 2 and len(coef) % 2 else len(labels))
    if t <= 0 or len(coef) % t:
        raise ModelError(f"coefficients ({len(coef)}) are not a multiple of {t} targets",
                         where=node)
    inter = node.attr("intercepts")
    ic = np.asarray(inter, np.float64).reshape(-1) if inter else None
    if ic is not None and len(ic) != t:
        raise ModelError(f"intercepts has {len(ic)} values for {t} targets", where=node)
    return coef.reshape(t, -1), ic, t


def _labels(node: Node) -> list:
    ints, strs = node.attr("classlabels_ints"), node.attr("classlabels_strings")
    if not ints and not strs:
        raise ModelError("classlabels_ints or classlabels_strings is required", where=node)
    return [int(v) for v in ints] if ints else list(strs)


def _linreg_infer(node: Node) -> list[ValueType | None]:
    t = numeric_input(node)
    _, _, nt = linear_params(node)
    return [TensorType(DType.FLOAT, (_rows_cols(t)[0], nt))]


def _scores(node: Node, x: np.ndarray) -> np.ndarray:
    coef, ic, _ = linear_params(node)
    x = np.asarray(x, dtype=np.float32)
    x = x.reshape(1, -1) if x.ndim == 1 else x
    if x.shape[1] != coef.shape[1]:
        raise InputError(f"node '{node.name}' ({node.op}): X has {x.shape[1]} features, the "
                         f"coefficients {coef.shape[1]}")
    s = x.astype(np.float64) @ coef.T
    return s + ic if ic is not None else s


def _linreg_eval(node: Node, ins: list) -> list[np.ndarray]:
    s = _scores(node, ins[0])
    post = node.attr("post_transform", "NONE")
    if post not in ("NONE", "PROBIT"):
        raise ModelError(f"LinearRegressor post_transform {post!r} is not NONE or PROBIT",
                         where=node)
    return [FE.post_transform(s, post).astype(np.float32)]


def _lincls_infer(node: Node) -> list[ValueType | None]:
    t = numeric_input(node)
    labels = _labels(node)
    linear_params(node)
    n = _rows_cols(t)[0]
    ldt = DType.STRING if isinstance(labels[0], str) else DType.INT64
    cols = max(len(labels), linear_params(node)[2])
    return [TensorType(ldt, (n,)), TensorType(DType.FLOAT, (n, cols))]


def _lincls_eval(node: Node, ins: list) -> list[np.ndarray]:
    s = _scores(node, ins[0])
    labels = _labels(node)
    post = node.attr("post_transform", "NONE")
    if s.shape[1] == 1 and len(labels) == 2:
        s = np.concatenate([-s, s], axis=1)
    idx = np.argmax(s, axis=1)
    z = FE.post_transform(s, post).astype(np.float32)
    lab = np.array(labels, dtype=object if isinstance(labels[0], str) else np.int64)[idx]
    return [lab, z]


op("Binarizer", (1,), domain=ML, infer=_binarizer_infer, evaluate=_binarizer_eval,
   doc="x > threshold ? 1 : 0 (rewritten to standard ops by expand-ml)")
op("Scaler", (1,), domain=ML, infer=_scaler_infer, evaluate=_scaler_eval,
   doc="(x - offset) * scale (rewritten to Sub/Mul by expand-ml)")
op("Normalizer", (1,), domain=ML, infer=_same_infer, evaluate=_normalizer_eval,
   doc="rows divided by their MAX, L1 or L2 norm (rewritten by expand-ml)")
op("Imputer", (1,), domain=ML, infer=_same_infer, evaluate=_imputer_eval,
   doc="replaced (or NaN) values -> per-column imputed values (rewritten to Where)")
op("ArrayFeatureExtractor", (1,), domain=ML, infer=_afe_infer, evaluate=_afe_eval,
   doc="X[..., indices] (rewritten to Gather by expand-ml)")
op("FeatureVectorizer", (1,), domain=ML, infer=_fv_infer, evaluate=_fv_eval,
   doc="inputs cut/padded to inputdimensions and concatenated as float32")
op("LinearRegressor", (1,), domain=ML, infer=_linreg_infer, evaluate=_linreg_eval,
   doc="x @ coefficients.T + intercepts (rewritten to Gemm by expand-ml)")
op("LinearClassifier", (1,), domain=ML, infer=_lincls_infer, evaluate=_lincls_eval,
   doc="Gemm scores, post transform, argmax label (rewritten by expand-ml)")
