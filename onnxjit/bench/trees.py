"""Tree-ensemble benchmarks (ai.onnx.ml), built in code: no training, no downloads.

`lgbm_like` is a LightGBM-style regressor: trees grown leaf-wise (the leaf to split is drawn
at random, so depths vary like LightGBM's: 63 leaves reach depth ~8-20), BRANCH_LEQ nodes
whose missing values go left on a third of the nodes, thresholds from the feature range.
`forest_like` is a random-forest-style regressor: depth-wise trees, AVERAGE aggregate.
Both are TreeEnsembleRegressor nodes (ml opset 3, what onnxmltools and skl2onnx write), seeded,
and timed at one row and at 10,000 rows against onnxruntime.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper  # noqa: TID251 - benchmarks build models with the test extra

from onnxjit.bench.builder import BenchModel


def _grow(rs: np.random.RandomState, leaves: int, n_features: int, leafwise: bool,
          max_depth: int = 64) -> list[tuple]:
    """One tree as rows (node id, feature, threshold, true id, false id, is leaf, depth)."""
    nodes = {0: [0, 0.0, -1, -1, True, 0]}
    frontier = [0]
    while len(frontier) < leaves:
        k = rs.randint(len(frontier)) if leafwise else 0
        nid = frontier.pop(k)
        if nodes[nid][5] >= max_depth:
            frontier.append(nid)
            continue
        a, b = len(nodes), len(nodes) + 1
        d = nodes[nid][5] + 1
        nodes[nid][:5] = [rs.randint(n_features), float(rs.rand()), a, b, False]
        nodes[a] = [0, 0.0, -1, -1, True, d]
        nodes[b] = [0, 0.0, -1, -1, True, d]
        frontier += [a, b]
    return [(i, *v) for i, v in sorted(nodes.items())]


def _model(trees: int, leaves: int, n_features: int, leafwise: bool, aggregate: str,
           seed: int) -> object:
    rs = np.random.RandomState(seed)
    cols: dict[str, list] = {k: [] for k in (
        "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
        "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
        "target_treeids", "target_nodeids", "target_ids", "target_weights")}
    for t in range(trees):
        for nid, feat, thr, tid, fid, leaf, _ in _grow(rs, leaves, n_features, leafwise):
            cols["nodes_treeids"].append(t)
            cols["nodes_nodeids"].append(nid)
            cols["nodes_featureids"].append(feat)
            cols["nodes_values"].append(thr)
            cols["nodes_modes"].append("LEAF" if leaf else "BRANCH_LEQ")
            cols["nodes_truenodeids"].append(max(tid, 0))
            cols["nodes_falsenodeids"].append(max(fid, 0))
            cols["nodes_missing_value_tracks_true"].append(int(not leaf and rs.rand() < 0.33))
            if leaf:
                cols["target_treeids"].append(t)
                cols["target_nodeids"].append(nid)
                cols["target_ids"].append(0)
                cols["target_weights"].append(float(rs.randn() * 0.1))
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml",
                            n_targets=1, aggregate_function=aggregate, post_transform="NONE",
                            base_values=[0.5], **cols)
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, ["N", n_features])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    return m


def _feeds(rows: int, n_features: int) -> dict[str, np.ndarray]:
    x = np.random.RandomState(7).rand(rows, n_features).astype(np.float32)
    x[::11, 3] = np.nan  # some missing values, so the NaN tracks are taken
    return {"X": x}


def lgbm_like(rows: int, tiny: bool = False) -> BenchModel:
    trees, leaves = (4, 7) if tiny else (500, 63)
    m = _model(trees, leaves, 20, True, "SUM", 1)
    return BenchModel(f"trees_lgbm500_b{rows}", m, _feeds(rows, 20),
                      f"TreeEnsembleRegressor, {trees} LightGBM-style trees of {leaves} leaves, "
                      f"{rows} rows", rtol=1e-5, atol=1e-4)


def forest_like(rows: int, tiny: bool = False) -> BenchModel:
    trees, leaves = (3, 8) if tiny else (100, 256)
    m = _model(trees, leaves, 20, False, "AVERAGE", 2)
    return BenchModel(f"trees_rf100_b{rows}", m, _feeds(rows, 20),
                      f"TreeEnsembleRegressor, {trees} random-forest-style trees of {leaves} "
                      f"leaves (depth 8), {rows} rows", rtol=1e-5, atol=1e-5)
