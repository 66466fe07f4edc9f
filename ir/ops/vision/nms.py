"""NonMaxSuppression (opsets 10, 11): greedy box selection per (batch, class).

Inputs: boxes (B, N, 4), scores (B, C, N), optional max_output_boxes_per_class (int64, one
value; absent or 0 selects nothing), iou_threshold and score_threshold (float, one value each).
For each batch b and class c, in that order:

1. candidates are the boxes whose score is > score_threshold (all boxes without one);
2. they are visited by decreasing score, ties in increasing box index (a stable sort);
3. a candidate is selected unless its IoU with an already selected box of this (b, c) is
   > iou_threshold; selection stops after max_output_boxes_per_class boxes.

IoU follows onnxruntime (and the ONNX reference): boxes are (y1, x1, y2, x2) with corners in
either order (`center_point_box=0`) or (x_center, y_center, width, height) (`=1`); an empty
intersection, or a box or union of area <= 0, never suppresses.

The output, (num_selected, 3) int64 rows (batch, class, box), has a data-dependent length: the
op has no lowering, so the run-time shape phase (onnxjit.staged) evaluates it on the host.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import InputError, ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.elementwise.arithmetic import FLOATS, accept, accept_same, arity, int_attr
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType


def _infer(node: Node) -> list:
    given = arity(node, 2, 5)
    accept_same(node, (0, 1), ((10, FLOATS),))
    if 2 in given and tensor_input(node, 2).dtype != DType.INT64:
        raise ModelError("max_output_boxes_per_class must be int64", where=node)
    for i in (3, 4):
        if i in given:
            accept(node, i, ((10, frozenset({DType.FLOAT})),))
    int_attr(node, "center_point_box", 0, (0, 1))
    boxes, scores = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if boxes is not None and (len(boxes) != 3 or (isinstance(boxes[2], int) and boxes[2] != 4)):
        raise ModelError(f"boxes must have shape (batches, boxes, 4), got {list(boxes)}",
                         where=node)
    if scores is not None and len(scores) != 3:
        raise ModelError(f"scores must have shape (batches, classes, boxes), got "
                         f"{list(scores)}", where=node)
    if boxes is not None and scores is not None:
        for k, (a, s) in enumerate(((boxes[0], scores[0]), (boxes[1], scores[2]))):
            if isinstance(a, int) and isinstance(s, int) and a != s:
                what = ("batches", "boxes")[k]
                raise ModelError(f"boxes and scores disagree on the number of {what}: "
                                 f"{a} vs {s}", where=node)
    return tensor(DType.INT64, (None, 3))


def _scalar(x: np.ndarray | None, default: float, what: str, node: Node) -> float:
    if x is None or x.size == 0:
        return default
    if x.size != 1:
        raise InputError(f"{what} must hold one value, got shape {list(x.shape)}", where=node)
    return x.reshape(-1)[0].item()


def _corners(boxes: np.ndarray, center: bool) -> np.ndarray:
    """(N, 4) as (x_min, x_max, y_min, y_max) in float64."""
    b = boxes.astype(np.float64)
    if center:
        xc, yc, w, h = b[:, 0], b[:, 1], b[:, 2] / 2, b[:, 3] / 2
        return np.stack([xc - w, xc + w, yc - h, yc + h], axis=1)
    y1, x1, y2, x2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    return np.stack([np.minimum(x1, x2), np.maximum(x1, x2),
                     np.minimum(y1, y2), np.maximum(y1, y2)], axis=1)


def _suppressed(c: np.ndarray, i: int, sel: list[int], thr: float) -> bool:
    """True if box i overlaps any selected box by IoU > thr (see the module docstring)."""
    if not sel:
        return False
    s = c[sel]
    ix = np.minimum(c[i, 1], s[:, 1]) - np.maximum(c[i, 0], s[:, 0])
    iy = np.minimum(c[i, 3], s[:, 3]) - np.maximum(c[i, 2], s[:, 2])
    inter = ix * iy
    a1 = (c[i, 1] - c[i, 0]) * (c[i, 3] - c[i, 2])
    a2 = (s[:, 1] - s[:, 0]) * (s[:, 3] - s[:, 2])
    union = a1 + a2 - inter
    ok = (ix > 0) & (iy > 0) & (inter > 0) & (a1 > 0) & (a2 > 0) & (union > 0)
    with np.errstate(all="ignore"):
        iou = np.where(ok, inter / np.where(ok, union, 1.0), 0.0)
    return bool(np.any(ok & (iou > thr)))


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    boxes, scores = inputs[0], inputs[1]
    rest = list(inputs[2:]) + [None] * (5 - len(inputs))
    limit = int(_scalar(rest[0], 0, "max_output_boxes_per_class", node))
    iou_thr = float(_scalar(rest[1], 0.0, "iou_threshold", node))
    has_score = rest[2] is not None and rest[2].size != 0
    score_thr = float(_scalar(rest[2], 0.0, "score_threshold", node))
    center = int_attr(node, "center_point_box", 0) == 1
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 \
            or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise InputError(f"boxes {list(boxes.shape)} and scores {list(scores.shape)} do not "
                         "fit (B, N, 4) and (B, C, N)", where=node)
    out: list[tuple[int, int, int]] = []
    for b in range(boxes.shape[0]):
        c = _corners(boxes[b], center)
        for k in range(scores.shape[1]):
            s = scores[b, k].astype(np.float64)
            idx = np.arange(len(s))
            if has_score:
                idx = idx[s > score_thr]
            order = idx[np.argsort(-s[idx], kind="stable")]
            sel: list[int] = []
            for i in order:
                if len(sel) >= limit:
                    break
                if not _suppressed(c, int(i), sel, iou_thr):
                    sel.append(int(i))
                    out.append((b, k, int(i)))
    return [np.array(out, dtype=np.int64).reshape(-1, 3)]


op("NonMaxSuppression", (10, 11), infer=_infer, evaluate=_evaluate,
   doc="greedy IoU box selection per batch and class (data-dependent output; host)")
