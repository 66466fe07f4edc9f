"""The tree-ensemble ops: TreeEnsembleRegressor, TreeEnsembleClassifier (ml 1, 3) and
TreeEnsemble (ml 5).

Each node's attributes become a `forest.Forest` once (cached on the node's attribute dict
identity), shared by inference, numpy evaluation and the native lowering (`tree_lower`).

Classifier outputs follow onnxruntime's conventions, which skl2onnx and onnxmltools rely on:

- binary case (two class labels, every weight on one class column c): the score s is that
  column plus the base value (`base_values[1]` when two are given, else `base_values[0]`).
  With c == 0 (how the converters write it) the probabilities are [1 - s, s] when every
  weight is positive (a random forest's averaged probabilities; no post transform) and the
  label is class 1 iff s > 0.5; otherwise (boosted margins) they are [sigmoid(-s), sigmoid(s)]
  under LOGISTIC, [-s, s] under NONE, and the label is class 1 iff s > 0;
- otherwise scores are the columns plus base values, then the post transform; the label is
  the class of the largest raw score (the first on ties).

Labels are int64 (`classlabels_int64s`) or strings (`classlabels_strings`, the node then runs
on the host like every string op). `evaluate` is the numpy form of all of this.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.ml import forest as F
from onnxjit.ir.ops.ml import forest_eval as FE
from onnxjit.ir.ops.ml.tree_info import ClassifierInfo, classifier_info, forest_of, post_name
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType, TensorType, ValueType

_IN_DTYPES = (DType.FLOAT, DType.DOUBLE, DType.INT64, DType.INT32, DType.FLOAT16)
def _x_type(node: Node) -> TensorType:
    t = tensor_input(node, 0)
    if t.dtype not in _IN_DTYPES:
        raise UnsupportedError(f"op '{node.op}' on X of type {t.dtype.short} (expected f32, "
                               "f64, i64 or i32)", where=node)
    if t.shape is not None and len(t.shape) not in (1, 2):
        raise ModelError(f"X must be [N, F] (or [F]), got rank {len(t.shape)}", where=node)
    return t


def _rows(t: TensorType):
    if t.shape is None:
        return None
    return 1 if len(t.shape) == 1 else t.shape[0]


def out_dtype(node: Node) -> DType:
    if node.op == "TreeEnsemble":
        return _x_type(node).dtype
    return DType.FLOAT


def _infer(node: Node) -> list[ValueType | None]:
    t = _x_type(node)
    f, _ = forest_of(node)
    if node.op == "TreeEnsemble" and t.dtype not in (DType.FLOAT, DType.DOUBLE, DType.FLOAT16):
        raise ModelError(f"TreeEnsemble's X must be a float tensor, got {t.dtype.short}",
                         where=node)
    n = _rows(t)
    if node.op != "TreeEnsembleClassifier":
        return [TensorType(out_dtype(node), (n, f.n_targets))]
    cls = classifier_info(node)
    label = DType.STRING if cls.string_labels else DType.INT64
    return [TensorType(label, (n,)), TensorType(DType.FLOAT, (n, len(cls.labels)))]


def finish_classifier(cls: ClassifierInfo, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(label index [N], probabilities [N, C] float32) from summed columns (no base added
    yet for the binary case; see the module doc)."""
    if cls.binary and cls.column == 0:
        s = raw[:, 0] + cls.base
        if cls.all_positive:
            return (s > 0.5).astype(np.int64), np.stack([1 - s, s], 1).astype(np.float32)
        if cls.post == "LOGISTIC":
            z = np.stack([FE.post_transform(-s[:, None], "LOGISTIC")[:, 0],
                          FE.post_transform(s[:, None], "LOGISTIC")[:, 0]], 1)
        else:
            z = np.stack([-s, s], 1)
        return (s > 0).astype(np.int64), z.astype(np.float32)
    return np.argmax(raw, axis=1), FE.post_transform(raw, cls.post).astype(np.float32)


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    f, _ = forest_of(node)
    if node.op != "TreeEnsembleClassifier":
        y = FE.predict_raw(f, x2, np.float64)
        if node.op == "TreeEnsemble" or post_name(node) != "NONE":
            y = FE.post_transform(y, post_name(node))
        return [y.astype(out_dtype(node).numpy)]
    cls = classifier_info(node)
    if cls.binary:  # base value added by finish_classifier
        f = F.Forest(**{**f.__dict__, "base_values": None})
    idx, z = finish_classifier(cls, FE.predict_raw(f, x2, np.float64))
    labels = np.array(cls.labels, dtype=object if cls.string_labels else np.int64)[idx]
    return [labels, z]


_DOC = ("tree ensemble: a flattened node-array walk compiled to native code, rows in parallel "
        "(`ir.ops.ml.tree_lower`)")


def _lower(ctx, node: Node) -> None:
    from onnxjit.ir.ops.ml.tree_lower import lower_trees

    lower_trees(ctx, node)


for _name, _versions in (("TreeEnsembleRegressor", (1, 3)), ("TreeEnsembleClassifier", (1, 3)),
                         ("TreeEnsemble", (5,))):
    op(_name, _versions, domain="ai.onnx.ml", infer=_infer, evaluate=_evaluate, lower=_lower,
       doc=_DOC, symbolic=True)
