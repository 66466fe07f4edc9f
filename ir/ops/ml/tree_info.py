"""What the tree-ensemble ops and their lowering read from a node: its `forest.Forest`
(built once per attribute set: cached on the identity of the node's attribute values, which
every clone of the graph shares), its post transform's name, and how a classifier turns
summed columns into probabilities and labels (`ClassifierInfo`; the conventions are in
`tree_ops`'s docstring). Apart from `tree_ops` so that `tree_lower` needs no op module.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.ops.ml import forest as F

#: forests by the identity of the node's attribute values (shared by every clone of the
#: graph, which copies the attrs dict but not the values), with the values kept alive
_CACHE: dict[tuple, tuple[list, object]] = {}


def forest_of(node: Node) -> tuple[F.Forest, np.ndarray | None]:
    """The node's Forest (and, for the legacy ops, the class columns used)."""
    vals = [node.op, *node.attrs.values()]
    key = tuple(id(v) for v in vals)
    hit = _CACHE.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], vals)):
        return hit[1]  # type: ignore[return-value]
    value = (F.from_v5(node), None) if node.op == "TreeEnsemble" else F.from_legacy(node)
    if len(_CACHE) > 16:
        _CACHE.clear()
    _CACHE[key] = (vals, value)
    return value


def post_name(node: Node) -> str:
    p = node.attr("post_transform", 0 if node.op == "TreeEnsemble" else "NONE")
    if isinstance(p, int):
        if not 0 <= p < len(F.POST_TRANSFORMS):
            raise ModelError(f"post_transform {p} is not in [0, 4]", where=node)
        p = F.POST_TRANSFORMS[p]
    if p not in F.POST_TRANSFORMS:
        raise ModelError(f"post_transform {p!r} is not one of {F.POST_TRANSFORMS}", where=node)
    return p


class ClassifierInfo:
    """How a classifier turns summed columns into probabilities and labels (module doc)."""

    def __init__(self, node: Node):
        ints, strs = node.attr("classlabels_int64s"), node.attr("classlabels_strings")
        self.string_labels = not ints
        self.labels = list(strs) if self.string_labels else [int(v) for v in ints]
        f, cols = forest_of(node)
        self.post = post_name(node)
        self.binary = len(self.labels) == 2 and len(cols) == 1
        self.column = int(cols[0]) if len(cols) else 0
        w = f.weights[f.true_child == np.arange(len(f.true_child))]
        self.all_positive = bool((w >= 0).all())
        bv = f.base_values
        self.base = 0.0 if bv is None else float(bv[1] if len(bv) == 2 else bv[0])
        if len(self.labels) == 1:
            raise UnsupportedError("a tree classifier with a single class label is not "
                                   "supported", where=node)


def classifier_info(node: Node) -> ClassifierInfo:
    return ClassifierInfo(node)
