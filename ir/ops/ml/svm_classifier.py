"""SVMClassifier (ai.onnx.ml 1): support-vector classification, numpy semantics (host).

Two modes, as onnxruntime (what skl2onnx's SVC/NuSVC export relies on):

- SVC (`vectors_per_class` sums to V > 0): kernels K(x, v_j) against the V support vectors
  (`svm.kernel`), then libsvm's one-vs-one machines, one per class pair (i, j), i < j, in that
  order: s = sum over the class-i vectors of coefficients[j - 1, v] K_v + sum over the class-j
  vectors of coefficients[i, v] K_v + rho[pair]; a machine with s > 0 votes for i, else j, and
  the label is the class with most votes (the first on ties).
  Without prob_a the scores output is the pair scores ([N, pairs]; with two classes [-s, s],
  or [1 - t(s), t(s)] under a post transform t). With prob_a/prob_b (Platt scaling) each pair
  score becomes r_ij = 1 - logistic(s * prob_a + prob_b) clipped to [1e-7, 1 - 1e-7], and the
  class probabilities come from libsvm's pairwise coupling (`_coupling`: the fixed-point
  iteration of Wu, Lin & Weng, every row at once); the label still comes from the votes.
- linear (no support vectors): scores = X @ coefficients[C, F].T + rho[0]; the label is the
  class of the largest score, except that with two classes it is class 1 when that score is
  > 0 with some negative coefficient or >= 0.5 with all of them positive.
Scores then take the post transform (`forest_eval.post_transform`). Kernels compute in float64
(onnxruntime: float32 inputs, float64 sums), scores are float32.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import InputError, ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.ml.forest_eval import post_transform
from onnxjit.ir.ops.ml.simple import numeric_input
from onnxjit.ir.ops.ml.svm import kernel
from onnxjit.ir.types import DType, TensorType, ValueType


class _Svc:
    """The node's attributes, checked."""

    def __init__(self, node: Node):
        ints, strs = node.attr("classlabels_ints"), node.attr("classlabels_strings")
        self.labels = list(strs) if strs else [int(v) for v in (ints or ())]
        c = len(self.labels)
        if c < 2:
            raise ModelError("SVMClassifier needs at least two class labels "
                             "(classlabels_ints or classlabels_strings)", where=node)
        self.coef = np.asarray(node.attr("coefficients", ()), np.float64).reshape(-1)
        self.rho = np.asarray(node.attr("rho", ()), np.float64).reshape(-1)
        self.per_class = np.asarray(node.attr("vectors_per_class", ()), np.int64).reshape(-1)
        self.prob_a = np.asarray(node.attr("prob_a", ()), np.float64).reshape(-1)
        self.prob_b = np.asarray(node.attr("prob_b", ()), np.float64).reshape(-1)
        self.post = str(node.attr("post_transform", "NONE"))
        self.pairs = c * (c - 1) // 2
        n_sv = int(self.per_class.sum()) if len(self.per_class) else 0
        self.svc = n_sv > 0
        if self.svc:
            if len(self.per_class) != c:
                raise ModelError(f"vectors_per_class has {len(self.per_class)} entries for "
                                 f"{c} classes", where=node)
            self.sv = np.asarray(node.attr("support_vectors", ()), np.float64).reshape(-1)
            if len(self.sv) % n_sv or len(self.coef) < (c - 1) * n_sv or \
                    len(self.rho) < self.pairs:
                raise ModelError(f"{n_sv} support vectors and {c} classes need support_vectors "
                                 f"a multiple of {n_sv}, {(c - 1) * n_sv} coefficients and "
                                 f"{self.pairs} rho values", where=node)
            self.sv = self.sv.reshape(n_sv, -1)
            self.coef = self.coef[:(c - 1) * n_sv].reshape(c - 1, n_sv)
            self.proba = len(self.prob_a) > 0
            if self.proba and (len(self.prob_a) < self.pairs or len(self.prob_b) < self.pairs):
                raise ModelError(f"prob_a and prob_b need {self.pairs} values (one per class "
                                 "pair)", where=node)
        else:
            self.proba = False
            if len(self.coef) == 0 or len(self.coef) % c or len(self.rho) < 1:
                raise ModelError(f"a linear SVMClassifier needs coefficients [{c}, features] "
                                 "and rho", where=node)
            self.coef = self.coef.reshape(c, -1)
        self.all_positive = bool((np.asarray(node.attr("coefficients", ()))
                                  >= 0).all())

    @property
    def n_scores(self) -> int:
        c = len(self.labels)
        if self.svc and not self.proba:
            return 2 if c == 2 else self.pairs
        return c


def _infer(node: Node) -> list[ValueType | None]:
    t = numeric_input(node)
    n = None if t.shape is None else (1 if len(t.shape) == 1 else t.shape[0])
    s = _Svc(node)
    label = DType.STRING if node.attr("classlabels_strings") else DType.INT64
    return [TensorType(label, (n,)), TensorType(DType.FLOAT, (n, s.n_scores))]


def _pair_scores(node: Node, s: _Svc, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pair scores [N, pairs], votes [N, C]) of the one-vs-one machines."""
    if s.sv.shape[1] != x.shape[1]:
        raise InputError(f"node '{node.name}' (SVMClassifier): X has {x.shape[1]} features, "
                         f"the support vectors {s.sv.shape[1]}")
    k = kernel(node, x, s.sv)
    c = len(s.labels)
    start = np.concatenate([[0], np.cumsum(s.per_class)])
    scores = np.empty((len(x), s.pairs))
    votes = np.zeros((len(x), c), dtype=np.int64)
    p = 0
    for i in range(c):
        vi = slice(start[i], start[i + 1])
        for j in range(i + 1, c):
            vj = slice(start[j], start[j + 1])
            sc = k[:, vi] @ s.coef[j - 1, vi] + k[:, vj] @ s.coef[i, vj] + s.rho[p]
            scores[:, p] = sc
            votes[:, i] += sc > 0
            votes[:, j] += sc <= 0
            p += 1
    return scores, votes


def _coupling(r: np.ndarray) -> np.ndarray:
    """libsvm's multiclass_probability for every row: r [N, C, C] pairwise probabilities
    (r[i, j] = P(i | i or j)) -> class probabilities [N, C]. Rows stop iterating one by one,
    each when its own error is small (as the per-row loop does)."""
    n, c, _ = r.shape
    eye = np.eye(c, dtype=bool)
    q = np.where(eye, 0.0, -np.swapaxes(r, 1, 2) * r)
    q[:, eye] = (np.where(eye, 0.0, r) ** 2).sum(axis=1)
    p = np.full((n, c), 1.0 / c)
    live = np.arange(n)
    for _ in range(max(100, c)):
        qp = np.einsum("nij,nj->ni", q[live], p[live])
        pqp = (p[live] * qp).sum(1)
        going = np.abs(qp - pqp[:, None]).max(1) >= 0.005 / c
        live, qp, pqp = live[going], qp[going], pqp[going]
        if not len(live):
            break
        pl, ql = p[live], q[live]
        for t in range(c):
            qtt = ql[:, t, t]
            diff = (pqp - qp[:, t]) / qtt
            pl[:, t] += diff
            pqp = (pqp + diff * (diff * qtt + 2 * qp[:, t])) / (1 + diff) ** 2
            pl /= (1 + diff)[:, None]
            qp = (qp + diff[:, None] * ql[:, t, :]) / (1 + diff)[:, None]
        p[live] = pl
    return p


def _probabilities(s: _Svc, scores: np.ndarray) -> np.ndarray:
    c = len(s.labels)
    r = np.zeros((len(scores), c, c))
    iu = np.triu_indices(c, 1)  # (0, 1), (0, 2), ... (1, 2): the pair order
    v = 1.0 - 1.0 / (1.0 + np.exp(-(scores * s.prob_a[:s.pairs] + s.prob_b[:s.pairs])))
    v = np.clip(v, 1e-7, 1 - 1e-7)
    r[:, iu[0], iu[1]] = v
    r[:, iu[1], iu[0]] = 1 - v
    return _coupling(r)


def _binary_scores(node: Node, s: np.ndarray, post: str) -> np.ndarray:
    """The two columns written for one pair score (onnxruntime's conventions)."""
    if post == "NONE":
        return np.stack([-s, s], 1)
    if post == "PROBIT":
        raise UnsupportedError("SVMClassifier with two classes, no probabilities and "
                               "post_transform PROBIT (onnxruntime leaves one of the two "
                               "score columns unset)", where=node)
    t = post_transform(s[:, None], "LOGISTIC")[:, 0] if post == "LOGISTIC" else s
    return np.stack([1 - t, t], 1)


def _evaluate(node: Node, ins: list) -> list[np.ndarray]:
    x = np.asarray(ins[0], dtype=np.float32).astype(np.float64)
    x = x.reshape(1, -1) if x.ndim == 1 else x
    s = _Svc(node)
    c = len(s.labels)
    if not s.svc:
        if s.coef.shape[1] != x.shape[1]:
            raise InputError(f"node '{node.name}' (SVMClassifier): X has {x.shape[1]} "
                             f"features, the coefficients {s.coef.shape[1]}")
        z = x @ s.coef.T + s.rho[0]
        idx = np.argmax(z, axis=1)
        if c == 2:
            top = z[np.arange(len(z)), idx]
            one = (top >= 0.5) if s.all_positive else (top > 0)
            idx = np.where(one, 1, idx)
        z = post_transform(z, s.post)
    else:
        scores, votes = _pair_scores(node, s, x)
        idx = np.argmax(votes, axis=1)
        if s.proba:
            z = post_transform(_probabilities(s, scores), s.post)
        elif c == 2:
            z = _binary_scores(node, scores[:, 0], s.post)
        else:
            z = post_transform(scores, s.post)
    labels = np.array(s.labels, dtype=object if node.attr("classlabels_strings")
                      else np.int64)[idx]
    return [labels, z.astype(np.float32)]


op("SVMClassifier", (1,), domain="ai.onnx.ml", infer=_infer, evaluate=_evaluate,
   doc="support-vector classification (all kernels, one-vs-one votes, Platt probabilities); "
       "host")
