"""Tree ensembles in one flat form, built from any of the three ONNX-ML tree ops.

TreeEnsembleRegressor / TreeEnsembleClassifier (ml opsets 1-4: nodes named by (tree id, node
id), modes as strings, leaves as "LEAF" nodes with target/class entries) and TreeEnsemble (ml
opset 5: node and leaf arrays, uint8 modes, set membership) all become one `Forest`:

- every node, leaves included, is a row of flat arrays: feature, threshold, mode, nan_true,
  true child, false child. A leaf is a node whose children are itself, so a walk of a fixed
  number of steps (`depth` of its tree) always ends on the leaf: no test for "is leaf" in the
  hot loop;
- modes are reduced to LE, LT and EQ: GT, GE and NEQ swap the children of their complement
  (x > t is "not x <= t"), and the NaN rule becomes one bit, `nan_true`: a NaN feature goes to
  the true child iff it is set (ordered compares are false on NaN, so the bit alone decides).
  A NaN follows `missing_value_tracks_true`, except that NEQ (true on NaN in onnxruntime) always
  tracks true. A set-membership node becomes a chain of EQ nodes, one per member;
- leaf values are a dense [nodes, targets] table `weights` holding each leaf's summed weights
  per target and the aggregate's neutral element elsewhere (0 for SUM/AVERAGE, +inf for MIN,
  -inf for MAX), so aggregating is one loop over targets.

`forest_eval.predict_raw` walks every row at once with numpy (constant folding and the host
path), the native lowering (`tree_lower`) walks the same trees laid out as records
(`tree_layout`). Thresholds compare in `thr_dtype` (float64 when the model stores
double thresholds, else float32), as onnxruntime does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node

LE, LT, EQ = 0, 1, 2
#: mode name -> (reduced mode, swap children)
_MODES = {"BRANCH_LEQ": (LE, False), "BRANCH_LT": (LT, False), "BRANCH_GTE": (LT, True),
          "BRANCH_GT": (LE, True), "BRANCH_EQ": (EQ, False), "BRANCH_NEQ": (EQ, True)}
_MODE_CODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
               "BRANCH_MEMBER")
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


@dataclass
class Forest:
    feature: np.ndarray      # int64 [M]
    threshold: np.ndarray    # thr_dtype [M]
    mode: np.ndarray         # int8 [M]: LE, LT, EQ
    nan_true: np.ndarray     # bool [M]
    true_child: np.ndarray   # int64 [M]
    false_child: np.ndarray  # int64 [M]
    weights: np.ndarray      # float64 [M, n_targets]
    roots: np.ndarray        # int64 [trees]
    depth: np.ndarray        # int64 [trees]: steps that reach every leaf of the tree
    n_targets: int
    aggregate: str
    base_values: np.ndarray | None  # float64 [n_targets]
    thr_dtype: type

    @property
    def n_features_used(self) -> int:
        return int(self.feature.max()) + 1 if self.feature.size else 0


#: codes of the node modes (ml-opset-5 numbering, then LEAF)
_CODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4,
          "BRANCH_NEQ": 5, "BRANCH_MEMBER": 6, "LEAF": 7}
MEMBER, LEAF = 6, 7
#: code -> reduced mode; and whether the children swap
_REDUCED = np.array([LE, LT, LT, LE, EQ, EQ], dtype=np.int8)
_SWAP = np.array([False, False, True, True, False, True])


@dataclass
class _Nodes:
    """Nodes before reduction (arrays over nodes; children are node indexes, a leaf's are
    itself) and leaf entries (node, target, weight)."""

    code: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    mtt: np.ndarray
    tc: np.ndarray
    fc: np.ndarray
    entries: tuple[np.ndarray, np.ndarray, np.ndarray]
    members: list[list[float]]  # one list per BRANCH_MEMBER node, in node order


def _assemble(node: Node, nd: _Nodes, roots: np.ndarray, n_targets: int, agg: str,
              base, thr_dtype: type, n_trees: int) -> Forest:
    """Reduce modes, expand set membership, build the leaf table, measure depths."""
    n = len(nd.code)
    code = nd.code.astype(np.int64)
    if ((code < 0) | (code > LEAF)).any():
        raise ModelError("a node mode is not one of the ONNX-ML branch modes", where=node)
    leaf = code == LEAF
    branch = ~leaf & (code != MEMBER)
    feature = np.where(leaf, 0, nd.feature).astype(np.int64)
    if (feature < 0).any():
        raise ModelError("a node's feature id is negative", where=node)
    rc = np.where(branch, code, 0)
    mode = np.where(branch, _REDUCED[rc], EQ).astype(np.int8)
    mode[leaf] = LE
    nan_true = (nd.mtt != 0) | (code == 5)
    swap = branch & _SWAP[rc]
    tc = np.where(leaf, np.arange(n), np.where(swap, nd.fc, nd.tc))
    fc = np.where(leaf, np.arange(n), np.where(swap, nd.tc, nd.fc))
    nan_true = np.where(swap, ~nan_true, nan_true) & ~leaf
    thr = np.where(leaf, 0.0, nd.threshold)
    extra = _expand_members(node, code, feature, thr, mode, nan_true, tc, fc, nd.members)
    if extra is not None:
        feature, thr, mode, nan_true, tc, fc = extra
    m, t, w = nd.entries
    if ((t < 0) | (t >= n_targets)).any():
        raise ModelError(f"a leaf target id is out of range [0, {n_targets})", where=node)
    total = np.zeros((len(tc), n_targets))
    has = np.zeros((len(tc), n_targets), dtype=bool)
    np.add.at(total, (m, t), w)
    has[m, t] = True
    total[~has] = {"MIN": np.inf, "MAX": -np.inf}.get(agg, 0.0)
    if agg == "AVERAGE":
        total = total / max(n_trees, 1)
    bv = None if base is None or len(base) == 0 else np.asarray(base, np.float64).reshape(-1)
    return Forest(feature, thr.astype(thr_dtype), mode, nan_true.astype(bool), tc, fc, total,
                  roots, _depths(node, tc, fc, roots), n_targets, agg, bv, thr_dtype)


def _expand_members(node: Node, code, feature, thr, mode, nan_true, tc, fc, members):
    """Each BRANCH_MEMBER node becomes a chain of EQ nodes (new nodes appended)."""
    where = np.flatnonzero(code == MEMBER)
    if len(where) == 0:
        return None
    if len(members) != len(where):
        raise ModelError(f"membership_values holds {len(members)} sets for {len(where)} "
                         "BRANCH_MEMBER nodes", where=node)
    cols = [list(a) for a in (feature, thr, mode, nan_true, tc, fc)]
    for k, vals in zip(where, members):
        vals = vals or [float("nan")]  # an empty set: nothing is a member
        chain = [int(k)] + list(range(len(cols[0]), len(cols[0]) + len(vals) - 1))
        for c in cols:
            c.extend([0] * (len(vals) - 1))
        t, f = int(tc[k]), int(fc[k])
        for i, v in enumerate(vals):
            nxt = f if i == len(vals) - 1 else chain[i + 1]
            row = (int(feature[k]), v, EQ, bool(nan_true[k]) and i == 0, t, nxt)
            for c, x in zip(cols, row):
                c[chain[i]] = x
    dts = (np.int64, np.float64, np.int8, bool, np.int64, np.int64)
    return tuple(np.array(c, dtype=d) for c, d in zip(cols, dts))


def _depths(node: Node, tc: np.ndarray, fc: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """Steps from each root to its deepest leaf, all trees level by level (ModelError on a
    cycle)."""
    depth = np.zeros(len(roots), dtype=np.int64)
    frontier, tree = roots.astype(np.int64), np.arange(len(roots))
    level = 0
    while len(frontier):
        kids = np.concatenate([tc[frontier], fc[frontier]])
        owner = np.concatenate([tree, tree])
        keep = kids != np.concatenate([frontier, frontier])  # a leaf loops on itself
        kids, owner = kids[keep], owner[keep]
        if not len(kids):
            break
        level += 1
        if level > len(tc):
            raise ModelError("a tree has a cycle", where=node)
        depth[owner] = level
        frontier, first = np.unique(kids * len(roots) + owner, return_index=True)
        frontier, tree = kids[first], owner[first]
    return depth


# ----------------------------------------------------------------------- from the op forms


def _attr_list(node: Node, name: str, dtype=None) -> np.ndarray | None:
    v = node.attr(name)
    if v is None:
        return None
    return np.asarray(v, dtype=dtype).reshape(-1) if dtype else np.asarray(v).reshape(-1)


def _values(node: Node, name: str) -> tuple[np.ndarray | None, bool]:
    """`name` or `name_as_tensor` (double) as float64, and whether it was double."""
    t = node.attr(name + "_as_tensor")
    if t is not None:
        return np.asarray(t, dtype=np.float64).reshape(-1), np.asarray(t).dtype == np.float64
    v = _attr_list(node, name, np.float64)
    if v is not None:  # float attributes hold float32 values
        v = v.astype(np.float32).astype(np.float64)
    return v, False


def _lookup(node: Node, keys: np.ndarray, tree: np.ndarray, ids: np.ndarray,
            what: str) -> np.ndarray:
    """Index of node (tree, id) among `keys` (tree << 32 | id), per query."""
    q = (tree.astype(np.int64) << 32) + ids.astype(np.int64)
    order = np.argsort(keys, kind="stable")
    pos = np.searchsorted(keys, q, sorter=order)
    pos = np.minimum(pos, len(keys) - 1)
    found = order[pos]
    bad = keys[found] != q
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ModelError(f"{what} names node ({tree[k]}, {ids[k]}), which does not exist",
                         where=node)
    return found


def from_legacy(node: Node) -> tuple[Forest, np.ndarray]:
    """A Forest from TreeEnsembleRegressor/Classifier; also the class columns used."""
    classifier = node.op == "TreeEnsembleClassifier"
    p = "class" if classifier else "target"
    treeids = _attr_list(node, "nodes_treeids", np.int64)
    nodeids = _attr_list(node, "nodes_nodeids", np.int64)
    modes = node.attr("nodes_modes")
    if treeids is None or nodeids is None or modes is None:
        raise ModelError("nodes_treeids, nodes_nodeids and nodes_modes are required", where=node)
    n = len(treeids)
    feats = _attr_list(node, "nodes_featureids", np.int64)
    tids = _attr_list(node, "nodes_truenodeids", np.int64)
    fids = _attr_list(node, "nodes_falsenodeids", np.int64)
    thr, double = _values(node, "nodes_values")
    mtt = _attr_list(node, "nodes_missing_value_tracks_true", np.int64)
    for what, arr in (("nodes_nodeids", nodeids), ("nodes_modes", modes),
                      ("nodes_featureids", feats), ("nodes_truenodeids", tids),
                      ("nodes_falsenodeids", fids), ("nodes_values", thr)):
        if arr is None or len(arr) != n:
            raise ModelError(f"attribute '{what}' must have one entry per node ({n})",
                             where=node)
    if mtt is None or len(mtt) == 0:
        mtt = np.zeros(n, dtype=np.int64)
    try:
        code = np.array([_CODES[m] for m in modes], dtype=np.int64)
    except KeyError as e:
        raise ModelError(f"node mode {e.args[0]!r} is not an ONNX-ML node mode",
                         where=node) from None
    if (code == MEMBER).any():
        raise ModelError("BRANCH_MEMBER exists only in TreeEnsemble (ml opset 5)", where=node)
    if classifier:
        labels = node.attr("classlabels_int64s") or node.attr("classlabels_strings")
        if not labels:
            raise ModelError("classlabels_int64s or classlabels_strings is required",
                             where=node)
        n_targets = len(labels)
    else:
        n_targets = int(node.attr("n_targets", 1))
    e_tree = _attr_list(node, f"{p}_treeids", np.int64)
    e_node = _attr_list(node, f"{p}_nodeids", np.int64)
    e_id = _attr_list(node, f"{p}_ids", np.int64)
    e_w, _ = _values(node, f"{p}_weights")
    if e_tree is None or e_node is None or e_id is None or e_w is None or not (
            len(e_tree) == len(e_node) == len(e_id) == len(e_w)):
        raise ModelError(f"attributes {p}_treeids/nodeids/ids/weights must be given with one "
                         "entry per leaf value", where=node)
    agg = "SUM" if classifier else str(node.attr("aggregate_function", "SUM"))
    if agg not in AGGREGATES:
        raise ModelError(f"aggregate_function {agg!r} is not one of {AGGREGATES}", where=node)
    if n == 0:
        raise ModelError("a tree ensemble needs at least one node", where=node)
    keys = (treeids << 32) + nodeids
    leaf = code == LEAF
    tc = np.where(leaf, 0, tids)
    fc = np.where(leaf, 0, fids)
    tci = _lookup(node, keys, treeids, tc, "a true child")
    fci = _lookup(node, keys, treeids, fc, "a false child")
    em = _lookup(node, keys, e_tree, e_node, f"a {p} weight")
    nd = _Nodes(code, feats, thr, mtt, tci, fci, (em, e_id, e_w), [])
    tree_ids, first = np.unique(treeids, return_index=True)
    bv, _ = _values(node, "base_values")
    forest = _assemble(node, nd, first.astype(np.int64), n_targets, agg, bv,
                       np.float64 if double else np.float32, len(tree_ids))
    used = np.unique(e_id) if len(e_id) else np.zeros(1, np.int64)
    return forest, used


def from_v5(node: Node) -> Forest:
    """A Forest from the ml-opset-5 TreeEnsemble (leaves become nodes after the branches)."""
    def req(name: str, dtype=None) -> np.ndarray:
        v = _attr_list(node, name, dtype)
        if v is None:
            raise ModelError(f"missing required attribute '{name}'", where=node)
        return v
    splits = node.attr("nodes_splits")
    if splits is None:
        raise ModelError("missing required attribute 'nodes_splits'", where=node)
    thr_dtype = np.float64 if np.asarray(splits).dtype == np.float64 else np.float32
    splits = np.asarray(splits, dtype=np.float64).reshape(-1)
    feats = req("nodes_featureids", np.int64)
    modes = req("nodes_modes", np.int64)
    tids, tleaf = req("nodes_truenodeids", np.int64), req("nodes_trueleafs", np.int64)
    fids, fleaf = req("nodes_falsenodeids", np.int64), req("nodes_falseleafs", np.int64)
    ltarget, lweight = req("leaf_targetids", np.int64), req("leaf_weights", np.float64)
    roots = req("tree_roots", np.int64)
    n, nl = len(splits), len(ltarget)
    if not all(len(a) == n for a in (feats, modes, tids, tleaf, fids, fleaf)):
        raise ModelError("the nodes_* attributes must all have one entry per node", where=node)
    if len(lweight) != nl:
        raise ModelError("leaf_targetids and leaf_weights must have one entry per leaf",
                         where=node)
    if ((modes < 0) | (modes > MEMBER)).any():
        raise ModelError("a node mode is not in [0, 6]", where=node)
    mtt = _attr_list(node, "nodes_missing_value_tracks_true", np.int64)
    if mtt is None or len(mtt) == 0:
        mtt = np.zeros(n, dtype=np.int64)
    agg_code = int(node.attr("aggregate_function", 1))
    if not 0 <= agg_code < 4:
        raise ModelError(f"aggregate_function {agg_code} is not in [0, 4)", where=node)
    n_targets = node.attr("n_targets")
    if n_targets is None:
        raise ModelError("missing required attribute 'n_targets'", where=node)
    for ids, lf in ((tids, tleaf), (fids, fleaf), (roots, np.zeros_like(roots))):
        bound = np.where(lf != 0, nl, n)
        if ((ids < 0) | (ids >= bound)).any():
            raise ModelError("a node, leaf or root index is out of range", where=node)
    # nodes 0..n-1 are the branches, n..n+nl-1 the leaves
    code = np.concatenate([modes, np.full(nl, LEAF)])
    pad = np.zeros(nl, dtype=np.int64)
    nd = _Nodes(code, np.concatenate([feats, pad]), np.concatenate([splits, pad * 0.0]),
                np.concatenate([mtt, pad]),
                np.concatenate([np.where(tleaf != 0, tids + n, tids), pad]),
                np.concatenate([np.where(fleaf != 0, fids + n, fids), pad]),
                (np.arange(nl) + n, ltarget, lweight),
                _member_sets(node, _attr_list(node, "membership_values", np.float64), modes))
    # a tree that is one leaf: both branches of its root name the same leaf
    single = (tleaf[roots] != 0) & (fleaf[roots] != 0) & (tids[roots] == fids[roots])
    root_nodes = np.where(single, tids[roots] + n, roots).astype(np.int64)
    return _assemble(node, nd, root_nodes, int(n_targets), AGGREGATES[agg_code], None,
                     thr_dtype, len(roots))


def _member_sets(node: Node, members: np.ndarray | None, modes: np.ndarray) -> list[list]:
    """The member list of each BRANCH_MEMBER node, in node order (NaN-separated)."""
    n_member = int((modes == MEMBER).sum())
    if n_member == 0:
        return []
    if members is None:
        raise ModelError("BRANCH_MEMBER nodes need attribute 'membership_values'", where=node)
    sets: list[list] = [[]]
    for v in members:
        if np.isnan(v):
            sets.append([])
        else:
            sets[-1].append(float(v))
    if sets and not sets[-1]:
        sets.pop()
    return sets
