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

`predict_raw` walks every row at once with numpy (constant folding and the host path), the
native lowering (`tree_lower`) walks the same arrays; `post_transform` applies the ONNX
post transforms to scores. Thresholds compare in `thr_dtype` (float64 when the model stores
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


class _Builder:
    """Accumulates flat nodes; `leaf()` and `branch()` return node indexes."""

    def __init__(self, node: Node, n_targets: int, aggregate: str):
        self.node = node
        self.rows: list[list] = []  # [feature, threshold, mode, nan_true, true, false]
        self.leaf_entries: dict[int, list[tuple[int, float]]] = {}
        self.n_targets = n_targets
        self.aggregate = aggregate

    def new(self) -> int:
        self.rows.append([0, 0.0, LE, False, -1, -1])
        return len(self.rows) - 1

    def set_leaf(self, m: int, entries: list[tuple[int, float]]) -> None:
        self.rows[m][4] = self.rows[m][5] = m
        for t, _ in entries:
            if not 0 <= t < self.n_targets:
                raise ModelError(f"leaf target id {t} is out of range [0, {self.n_targets})",
                                 where=self.node)
        self.leaf_entries[m] = entries

    def set_branch(self, m: int, mode: str, feature: int, thr: float, nan_true: bool,
                   t: int, f: int) -> None:
        if mode not in _MODES:
            raise ModelError(f"node mode {mode!r} is not a branch mode", where=self.node)
        if feature < 0:
            raise ModelError(f"node feature id {feature} is negative", where=self.node)
        reduced, swap = _MODES[mode]
        nan_true = nan_true or mode == "BRANCH_NEQ"
        if swap:
            t, f, nan_true = f, t, not nan_true
        self.rows[m] = [feature, thr, reduced, nan_true, t, f]

    def set_member(self, m: int, feature: int, members: list[float], nan_true: bool,
                   t: int, f: int) -> None:
        """x in members: a chain of EQ nodes, the first at `m` (NaN decided there)."""
        if not members:
            self.set_branch(m, "BRANCH_EQ", feature, float("nan"), nan_true, t, f)
            return
        cur = m
        for k, v in enumerate(members):
            nxt = f if k == len(members) - 1 else self.new()
            self.rows[cur] = [feature, v, EQ, nan_true, t, nxt]
            cur = nxt

    def finish(self, roots: list[int], base_values, thr_dtype: type) -> Forest:
        a = list(zip(*self.rows)) if self.rows else [[]] * 6
        fill = {"MIN": np.inf, "MAX": -np.inf}.get(self.aggregate, 0.0)
        weights = np.full((len(self.rows), self.n_targets), fill)
        for m, entries in self.leaf_entries.items():
            for t, w in entries:
                weights[m, t] = w if weights[m, t] == fill else weights[m, t] + w
        tc = np.array(a[4], dtype=np.int64)
        fc = np.array(a[5], dtype=np.int64)
        if (tc < 0).any() or (fc < 0).any():
            raise ModelError("a tree node is neither a leaf nor a branch with two children",
                             where=self.node)
        roots_a = np.array(roots, dtype=np.int64)
        bv = None if base_values is None or len(base_values) == 0 else \
            np.asarray(base_values, dtype=np.float64).reshape(-1)
        return Forest(np.array(a[0], dtype=np.int64), np.array(a[1], dtype=thr_dtype),
                      np.array(a[2], dtype=np.int8), np.array(a[3], dtype=bool), tc, fc,
                      weights, roots_a, _depths(self.node, tc, fc, roots_a), self.n_targets,
                      self.aggregate, bv, thr_dtype)


def _depths(node: Node, tc: np.ndarray, fc: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """Steps from each root to its deepest leaf (ModelError on a cycle)."""
    out = np.zeros(len(roots), dtype=np.int64)
    limit = len(tc) + 1
    for k, r in enumerate(roots):
        frontier, d = {int(r)}, 0
        while True:
            nxt = {int(c) for m in frontier for c in (tc[m], fc[m]) if c != m}
            if not nxt:
                break
            d += 1
            if d > limit:
                raise ModelError("a tree has a cycle", where=node)
            frontier = nxt
        out[k] = d
    return out


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


def from_legacy(node: Node) -> tuple[Forest, np.ndarray]:
    """A Forest from TreeEnsembleRegressor/Classifier; also the class column of each target."""
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
    used_cols = np.unique(e_id) if len(e_id) else np.zeros(1, np.int64)
    b = _Builder(node, n_targets, agg)
    index = {}
    for k in range(n):
        index[(int(treeids[k]), int(nodeids[k]))] = b.new()
    entries: dict[int, list[tuple[int, float]]] = {}
    for t, nd, c, w in zip(e_tree, e_node, e_id, e_w):
        m = index.get((int(t), int(nd)))
        if m is None:
            raise ModelError(f"{p} weight names node ({t}, {nd}), which does not exist",
                             where=node)
        entries.setdefault(m, []).append((int(c), float(w)))
    for k in range(n):
        m, tree = k, int(treeids[k])
        mode = str(modes[k])
        if mode == "LEAF":
            b.set_leaf(m, entries.get(m, []))
            continue
        try:
            t, f = index[(tree, int(tids[k]))], index[(tree, int(fids[k]))]
        except KeyError:
            raise ModelError(f"node ({tree}, {nodeids[k]}) has a child that does not exist",
                             where=node) from None
        b.set_branch(m, mode, int(feats[k]), float(thr[k]), bool(mtt[k]), t, f)
    roots: dict[int, int] = {}
    for k in range(n):
        roots.setdefault(int(treeids[k]), k)
    bv, _ = _values(node, "base_values")
    forest = b.finish([roots[t] for t in sorted(roots)], bv,
                      np.float64 if double else np.float32)
    if agg == "AVERAGE":
        forest.weights = forest.weights / max(len(roots), 1)
    return forest, used_cols


def from_v5(node: Node) -> Forest:
    """A Forest from the ml-opset-5 TreeEnsemble."""
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
    mtt = _attr_list(node, "nodes_missing_value_tracks_true", np.int64)
    if mtt is None or len(mtt) == 0:
        mtt = np.zeros(n, dtype=np.int64)
    members = _attr_list(node, "membership_values", np.float64)
    agg_code = int(node.attr("aggregate_function", 1))
    if not 0 <= agg_code < 4:
        raise ModelError(f"aggregate_function {agg_code} is not in [0, 4)", where=node)
    n_targets = node.attr("n_targets")
    if n_targets is None:
        raise ModelError("missing required attribute 'n_targets'", where=node)
    agg = AGGREGATES[agg_code]
    b = _Builder(node, int(n_targets), agg)
    node_at = [b.new() for _ in range(n)]
    leaf_at: dict[int, int] = {}

    def child(idx: int, is_leaf: int) -> int:
        bound = nl if is_leaf else n
        if not 0 <= idx < bound:
            raise ModelError(f"{'leaf' if is_leaf else 'node'} index {idx} is out of range "
                             f"[0, {bound})", where=node)
        if not is_leaf:
            return node_at[idx]
        if idx not in leaf_at:
            leaf_at[idx] = b.new()
            b.set_leaf(leaf_at[idx], [(int(ltarget[idx]), float(lweight[idx]))])
        return leaf_at[idx]

    member_sets = _member_sets(node, members, modes)
    for k in range(n):
        code = int(modes[k])
        if not 0 <= code < len(_MODE_CODES):
            raise ModelError(f"node mode {code} is not in [0, 6]", where=node)
        t, f = child(int(tids[k]), int(tleaf[k])), child(int(fids[k]), int(fleaf[k]))
        if code == 6:
            b.set_member(node_at[k], int(feats[k]), member_sets.pop(0), bool(mtt[k]), t, f)
        else:
            b.set_branch(node_at[k], _MODE_CODES[code], int(feats[k]), float(splits[k]),
                         bool(mtt[k]), t, f)
    root_nodes = []
    for r in roots:
        r = int(r)
        if not 0 <= r < n:
            raise ModelError(f"tree root {r} is out of range [0, {n})", where=node)
        # a tree that is one leaf: both branches name the same leaf
        single = tleaf[r] and fleaf[r] and tids[r] == fids[r]
        root_nodes.append(child(int(tids[r]), 1) if single else node_at[r])
    forest = b.finish(root_nodes, None, thr_dtype)
    if agg == "AVERAGE":
        forest.weights = forest.weights / max(len(roots), 1)
    return forest


def _member_sets(node: Node, members: np.ndarray | None, modes: np.ndarray) -> list[list]:
    """The member list of each BRANCH_MEMBER node, in node order (NaN-separated)."""
    n_member = int((modes == 6).sum())
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
    if len(sets) != n_member:
        raise ModelError(f"membership_values holds {len(sets)} sets for {n_member} "
                         "BRANCH_MEMBER nodes", where=node)
    return sets


# ----------------------------------------------------------------------- numpy semantics


def predict_raw(f: Forest, x: np.ndarray, out_dtype) -> np.ndarray:
    """Aggregated scores [N, n_targets] (base values added, no post transform)."""
    x = np.asarray(x).astype(f.thr_dtype).reshape(len(x), -1)
    n = x.shape[0]
    if f.n_features_used > x.shape[1]:
        raise_missing_features(f, x.shape[1])
    acc = np.full((n, f.n_targets), {"MIN": np.inf, "MAX": -np.inf}.get(f.aggregate, 0.0))
    rows = np.arange(n)
    for r, d in zip(f.roots, f.depth):
        idx = np.full(n, r, dtype=np.int64)
        for _ in range(int(d)):
            v = x[rows, f.feature[idx]]
            t = f.threshold[idx]
            mode = f.mode[idx]
            with np.errstate(invalid="ignore"):
                cond = np.where(mode == LE, v <= t, np.where(mode == LT, v < t, v == t))
            cond = np.where(np.isnan(v), f.nan_true[idx], cond)
            idx = np.where(cond, f.true_child[idx], f.false_child[idx])
        w = f.weights[idx]
        if f.aggregate == "MIN":
            acc = np.minimum(acc, w)
        elif f.aggregate == "MAX":
            acc = np.maximum(acc, w)
        else:
            acc += w
    acc[np.isinf(acc)] = 0.0  # MIN/MAX of a target no leaf names
    if f.base_values is not None:
        acc += f.base_values.reshape(1, -1)[:, :f.n_targets]
    return acc.astype(out_dtype)


def raise_missing_features(f: Forest, have: int) -> None:
    from onnxjit.errors import InputError

    raise InputError(f"the tree ensemble reads feature {f.n_features_used - 1} but X has "
                     f"{have} features")


def erfinv(x: np.ndarray) -> np.ndarray:
    """onnxruntime's approximation of erf^-1 (Winitzki), used by PROBIT."""
    sgn = np.where(x < 0, -1.0, 1.0)
    y = (1.0 - x) * (1.0 + x)
    with np.errstate(divide="ignore", invalid="ignore"):
        lg = np.log(y)
        v = 2.0 / (np.pi * 0.147) + 0.5 * lg
        v2 = lg / 0.147
        r = sgn * np.sqrt(-v + np.sqrt(v * v - v2))
    return np.where(y == 0, 0.0, r)


def post_transform(s: np.ndarray, how: str) -> np.ndarray:
    """The ONNX-ML post transforms on scores [N, C] (float64 math)."""
    s = s.astype(np.float64)
    if how == "NONE":
        return s
    if how == "LOGISTIC":
        return 1.0 / (1.0 + np.exp(-s))
    if how == "SOFTMAX":
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if how == "SOFTMAX_ZERO":
        mx = s.max(axis=1, keepdims=True)
        e = np.where(np.abs(s) > 1e-7, np.exp(s - mx), s * np.exp(-mx))
        tot = e.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(tot == 0, 0.5, e / tot)
    if how == "PROBIT":
        return 1.41421356 * erfinv(s * 2 - 1)
    raise ValueError(how)
