"""Classical models (ai.onnx.ml) built here with scikit-learn + skl2onnx and lightgbm /
xgboost + onnxmltools compile and match onnxruntime.

HistGradientBoosting: skl2onnx 1.20 fails to convert it (it hands numpy bools to an ints
attribute, `nodes_missing_value_tracks_true`), so its test converts with those bools made ints
(`_ints_not_bools`). Training sets are tiny (tens of rows, a few trees) so the whole file
stays fast; the inputs hold NaNs where the model handles missing values. Probabilities agree
to 1e-5 (both sides sum the same leaf values in float32/float64 in different orders); labels
match exactly.
"""

from __future__ import annotations

import gc
import re
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxjit

sklearn = pytest.importorskip("sklearn", reason="scikit-learn (test extra) is not installed")
skl2onnx = pytest.importorskip("skl2onnx", reason="skl2onnx (test extra) is not installed")

from sklearn import ensemble, linear_model, pipeline, preprocessing, svm, tree  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)

RS = np.random.RandomState(0)
X = RS.rand(80, 5).astype(np.float32)
Y_BIN = (X[:, 0] + X[:, 1] > 1).astype(np.int64)
Y_MULTI = np.minimum((X[:, 0] * 3).astype(np.int64), 2)
Y_REG = (X @ np.arange(1, 6) + np.sin(6 * X[:, 2])).astype(np.float32)
XT = RS.rand(33, 5).astype(np.float32)  # test rows
XT_NAN = XT.copy()
XT_NAN[::3, 1] = np.nan
XT_NAN[::4, 3] = np.nan


def _compare(model: onnx.ModelProto, x: np.ndarray, rtol: float = 1e-5) -> None:
    model.ir_version = min(model.ir_version, 9)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    want = sess.run(None, {name: x})
    fn = onnxjit.compile(model, cache_dir=False)
    got = fn.run(None, {name: x})
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape
        if w.dtype.kind in "OUi":
            np.testing.assert_array_equal(g.astype(w.dtype), w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, np.abs(w).max()))


def _skl(est, x=X, opset=None, **fit):
    from skl2onnx import to_onnx

    options = {id(est): {"zipmap": False}} if hasattr(est, "predict_proba") or hasattr(
        est, "classes_") else None
    return to_onnx(est, x[:1], options=options,
                   target_opset=opset or {"": 17, "ai.onnx.ml": 3})


CLASSIFIERS = [
    ("rf_binary", lambda: ensemble.RandomForestClassifier(4, max_depth=4, random_state=0),
     Y_BIN),
    ("rf_multi", lambda: ensemble.RandomForestClassifier(4, max_depth=4, random_state=0),
     Y_MULTI),
    ("extra_trees", lambda: ensemble.ExtraTreesClassifier(3, max_depth=3, random_state=0),
     Y_MULTI),
    ("gb_binary", lambda: ensemble.GradientBoostingClassifier(n_estimators=4, max_depth=2),
     Y_BIN),
    ("gb_multi", lambda: ensemble.GradientBoostingClassifier(n_estimators=3, max_depth=2),
     Y_MULTI),
    ("logistic_binary", lambda: linear_model.LogisticRegression(), Y_BIN),
    ("logistic_multi", lambda: linear_model.LogisticRegression(), Y_MULTI),
]


@pytest.mark.parametrize("name,make,y", CLASSIFIERS, ids=[c[0] for c in CLASSIFIERS])
def test_sklearn_classifiers(name, make, y):
    _compare(_skl(make().fit(X, y)), XT)


REGRESSORS = [
    ("rf", lambda: ensemble.RandomForestRegressor(4, max_depth=4, random_state=0)),
    ("gb", lambda: ensemble.GradientBoostingRegressor(n_estimators=5, max_depth=3)),
    ("linear", lambda: linear_model.LinearRegression()),
    ("svr_rbf", lambda: svm.SVR()),
    ("svr_poly", lambda: svm.SVR(kernel="poly", degree=2)),
]


@pytest.mark.parametrize("name,make", REGRESSORS, ids=[r[0] for r in REGRESSORS])
def test_sklearn_regressors(name, make):
    _compare(_skl(make().fit(X, Y_REG)), XT)


def test_string_labels_and_single_leaf_tree():
    labels = np.array(["cat", "dog", "eel"])[Y_MULTI]
    _compare(_skl(ensemble.RandomForestClassifier(3, max_depth=3, random_state=0).fit(
        X, labels)), XT)
    # skl2onnx's default ZipMap: a sequence of {label: probability} maps
    from skl2onnx import to_onnx

    m = to_onnx(ensemble.RandomForestClassifier(3, max_depth=3, random_state=0).fit(
        X, labels), X[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    m.ir_version = 9
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"X": XT})
    got = onnxjit.compile(m, cache_dir=False).run(None, {"X": XT})
    np.testing.assert_array_equal(np.asarray(got[0]), want[0])
    assert type(got[1]) is type(want[1]) is list  # a list of dicts, as onnxruntime's
    assert len(got[1]) == len(want[1])
    for g, w in zip(got[1], want[1]):
        assert g.keys() == w.keys()
        np.testing.assert_allclose([g[k] for k in w], [w[k] for k in w], rtol=1e-6)
    one_leaf = tree.DecisionTreeRegressor().fit(X, np.full(len(X), 2.5, np.float32))
    _compare(_skl(one_leaf), XT)


def test_pipeline_imputer_scaler_logistic():
    xn = X.copy()
    xn[::6, 2] = np.nan
    pipe = pipeline.make_pipeline(SimpleImputer(), preprocessing.StandardScaler(),
                                  linear_model.LogisticRegression())
    _compare(_skl(pipe.fit(xn, Y_MULTI), xn), XT_NAN)
    pipe = pipeline.make_pipeline(preprocessing.MinMaxScaler(), preprocessing.Normalizer(),
                                  linear_model.LinearRegression())
    _compare(_skl(pipe.fit(X, Y_REG)), XT)


def test_pipeline_scaler_mlp():
    # a scaler in front of an MLP: Scaler, then MatMul/Add/Relu layers, Softmax, ArgMax and
    # the label lookup (ArrayFeatureExtractor) in one graph
    from sklearn.neural_network import MLPClassifier

    pipe = pipeline.make_pipeline(preprocessing.StandardScaler(),
                                  MLPClassifier((16,), max_iter=300, random_state=0))
    _compare(_skl(pipe.fit(X, Y_MULTI)), XT)


def test_pipeline_one_hot_encoder():
    xi = (X * 4).astype(np.int64)
    pipe = pipeline.make_pipeline(preprocessing.OneHotEncoder(handle_unknown="ignore"),
                                  linear_model.LogisticRegression())
    _compare(_skl(pipe.fit(xi, Y_BIN), xi), (XT * 4).astype(np.int64))


def test_lightgbm_and_xgboost():
    lightgbm = pytest.importorskip("lightgbm", reason="lightgbm (test extra) is not installed")
    xgboost = pytest.importorskip("xgboost", reason="xgboost (test extra) is not installed")
    from onnxmltools import convert_lightgbm, convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    xn = X.copy()
    xn[::5, 1] = np.nan
    types = [("X", FloatTensorType([None, 5]))]
    for est, y in ((lightgbm.LGBMRegressor(n_estimators=5, num_leaves=6, min_child_samples=3,
                                           verbose=-1), Y_REG),
                   (lightgbm.LGBMClassifier(n_estimators=3, num_leaves=5, min_child_samples=3,
                                            verbose=-1), Y_BIN),
                   (lightgbm.LGBMClassifier(n_estimators=3, num_leaves=5, min_child_samples=3,
                                            verbose=-1), Y_MULTI)):
        est.set_params(n_jobs=1)
        m = convert_lightgbm(est.fit(xn, y), initial_types=types, target_opset=15,
                             zipmap=False)
        _compare(m, XT_NAN)
    for est, y in ((xgboost.XGBRegressor(n_estimators=4, max_depth=3, n_jobs=1), Y_REG),
                   (xgboost.XGBClassifier(n_estimators=3, max_depth=2, n_jobs=1), Y_MULTI)):
        m = convert_xgboost(est.fit(xn, y), initial_types=types, target_opset=15)
        _compare(m, XT_NAN)


def _ints_not_bools(monkeypatch) -> None:
    """skl2onnx 1.20's node builder, with bools in list attributes turned into ints."""
    from skl2onnx.common import _container

    make = _container.make_node

    def make_node(*args, **attrs):
        for k, v in attrs.items():
            if isinstance(v, list) and any(isinstance(e, (bool, np.bool_)) for e in v):
                attrs[k] = [int(e) if isinstance(e, (bool, np.bool_)) else e for e in v]
        return make(*args, **attrs)

    monkeypatch.setattr(_container, "make_node", make_node)


def test_hist_gradient_boosting(monkeypatch):
    from threadpoolctl import threadpool_limits

    _ints_not_bools(monkeypatch)
    xn = X.copy()
    xn[::7, 1] = np.nan  # NaN gets its own bin: the missing-value tracks are taken
    for est, y in ((ensemble.HistGradientBoostingRegressor(max_iter=3), Y_REG),
                   (ensemble.HistGradientBoostingClassifier(max_iter=3), Y_BIN),
                   (ensemble.HistGradientBoostingClassifier(max_iter=2), Y_MULTI)):
        with threadpool_limits(1):  # OpenMP threads on a busy machine: seconds for 80 rows
            est.fit(xn, y)
        _compare(_skl(est), XT_NAN)


# ----------------------------------------------------------- hand-built forests: every rule


def _forest(modes, post="NONE", agg="SUM", mtt=(0, 0, 0), classifier=False, double=False):
    """One 3-node tree per mode set: root splits feature 0, its false child feature 1."""
    attrs = dict(nodes_treeids=[0] * 5, nodes_nodeids=[0, 1, 2, 3, 4],
                 nodes_featureids=[0, 1, 0, 0, 0], nodes_modes=[modes[0], modes[1], "LEAF",
                                                                "LEAF", "LEAF"],
                 nodes_truenodeids=[2, 3, 0, 0, 0], nodes_falsenodeids=[1, 4, 0, 0, 0],
                 nodes_missing_value_tracks_true=[mtt[0], mtt[1], 0, 0, 0], post_transform=post)
    if double:
        attrs["nodes_values_as_tensor"] = helper.make_tensor(
            "v", TensorProto.DOUBLE, [5], [0.5, 0.25, 0, 0, 0])
    else:
        attrs["nodes_values"] = [0.5, 0.25, 0.0, 0.0, 0.0]
    leaves = [2, 3, 4]
    if classifier:
        attrs.update(class_treeids=[0] * 9, class_nodeids=[n for n in leaves for _ in range(3)],
                     class_ids=[0, 1, 2] * 3, classlabels_int64s=[7, 8, 9],
                     class_weights=[0.1, 0.5, 0.2, -0.3, 0.0, 0.4, 0.9, 0.05, 0.05])
        node = helper.make_node("TreeEnsembleClassifier", ["X"], ["L", "Y"],
                                domain="ai.onnx.ml", **attrs)
        outs = [helper.make_tensor_value_info("L", TensorProto.INT64, None),
                helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]
    else:
        # a second tree (one leaf) so that AVERAGE/MIN/MAX see two trees
        for k, v in (("nodes_treeids", 1), ("nodes_nodeids", 0), ("nodes_featureids", 0),
                     ("nodes_modes", "LEAF"), ("nodes_truenodeids", 0),
                     ("nodes_falsenodeids", 0), ("nodes_missing_value_tracks_true", 0)):
            attrs[k] = list(attrs[k]) + [v]
        if double:
            attrs["nodes_values_as_tensor"] = helper.make_tensor(
                "v", TensorProto.DOUBLE, [6], [0.5, 0.25, 0, 0, 0, 0])
        else:
            attrs["nodes_values"] = list(attrs["nodes_values"]) + [0.0]
        attrs.update(target_treeids=[0, 0, 0, 0, 1], target_nodeids=[2, 3, 4, 4, 0],
                     target_ids=[0, 0, 0, 1, 1], target_weights=[1.5, -2.0, 3.0, 0.5, 0.25],
                     n_targets=2, aggregate_function=agg, base_values=[0.1, -0.2])
        node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml",
                                **attrs)
        outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]
    xtype = TensorProto.DOUBLE if double else TensorProto.FLOAT
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "X", xtype, [None, 2])], outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ai.onnx.ml", 3)])


GRID = np.array([[a, b] for a in (0.25, 0.5, 0.75, np.nan) for b in (0.0, 0.25, 0.5, np.nan)],
                dtype=np.float32)


@pytest.mark.parametrize("modes,mtt", [
    (("BRANCH_LEQ", "BRANCH_LT"), (1, 0, 0)), (("BRANCH_GTE", "BRANCH_GT"), (0, 1, 0)),
    (("BRANCH_EQ", "BRANCH_NEQ"), (0, 0, 0)), (("BRANCH_NEQ", "BRANCH_EQ"), (1, 1, 0))])
def test_node_modes_and_missing_tracks(modes, mtt):
    _compare(_forest(modes, mtt=mtt), GRID)


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_aggregates(agg):
    double = agg in ("SUM", "MIN")  # thresholds as doubles: X must be double for onnxruntime
    _compare(_forest(("BRANCH_LEQ", "BRANCH_GT"), agg=agg, double=double),
             GRID.astype(np.float64) if double else GRID)


@pytest.mark.parametrize("post", ["LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])  # SOFTMAX: gb_multi
def test_classifier_post_transforms(post):
    _compare(_forest(("BRANCH_LEQ", "BRANCH_LT"), post=post, classifier=True), GRID, rtol=1e-4)


def test_wrong_feature_count_is_an_input_error():
    m = _skl(ensemble.RandomForestRegressor(2, max_depth=2, random_state=0).fit(X, Y_REG))
    fn = onnxjit.compile(m, cache_dir=False)
    with pytest.raises(onnxjit.InputError):
        fn(XT[:, :2])


def test_one_program_serves_every_row_count():
    """Rows are symbolic in the tree walk: blocks of rows plus the rows left over one by one,
    so row counts that are not multiples of the block (and a single row) are all right."""
    m = _skl(ensemble.GradientBoostingClassifier(n_estimators=3, max_depth=3).fit(X, Y_MULTI))
    m.ir_version = 9
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = onnxjit.compile(m, cache_dir=False, specialize="dynamic")
    before = fn.cache_info()["misses"]
    for rows in (1, 6, 33, 0):
        got, want = fn.run(None, {"X": XT[:rows]}), sess.run(None, {"X": XT[:rows]})
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    assert fn.cache_info()["misses"] - before == 1
    assert fn._symbolic.reasons() == []


def test_leafwise_trees_two_phase_walk():
    """Unbalanced (leaf-wise) trees take the walk's second phase: the lanes still inside
    their trees after the group's mean leaf depth, gathered and walked alone."""
    from onnxjit.bench.trees import _feeds, _model

    m = _model(40, 24, 20, True, "SUM", 3)  # 40 trees of 24 leaves: depths ~6-14
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = onnxjit.compile(m, cache_dir=False, specialize="dynamic")
    x = _feeds(45, 20)["X"]
    for rows in (1, 45):
        np.testing.assert_allclose(fn(x[:rows])[0], sess.run(None, {"X": x[:rows]})[0],
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_tree_parts_combine_with_the_aggregate(monkeypatch, agg):
    """Forests of many groups walk in two tree parts (parallel tasks, a single row too), each
    with its own accumulators: `tree_finish` combines them with the aggregate (min/max for
    MIN/MAX, where a part's neutral element must not leak into the result)."""
    from onnxjit.bench.trees import _feeds, _model
    from onnxjit.ir.ops.ml import tree_lower

    monkeypatch.setattr(tree_lower, "PART_GROUPS", 2)
    monkeypatch.setattr(tree_lower, "GROUP", 8)
    m = _model(37, 12, 20, True, agg, 4)  # 5 groups of 8: parts of 2 and 3 groups
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = onnxjit.compile(m, cache_dir=False, specialize="dynamic")
    x = _feeds(300, 20)["X"]
    for rows in (1, 3, 300):
        np.testing.assert_allclose(fn(x[:rows])[0], sess.run(None, {"X": x[:rows]})[0],
                                   rtol=1e-5, atol=1e-5)
    assert re.search(r"buffer %tree_acc: f64\[2,", fn.ir("loops"))


@pytest.mark.parametrize("compact_bits", [28, 0])
def test_chunks_of_rows_and_both_record_forms(monkeypatch, compact_bits):
    """Row counts past one chunk (a last chunk of whole blocks and one single row), for one
    symbolic program, with the compact 8-byte records and (no bits left for them) the wide
    ones; a NaN column takes the missing-value tracks."""
    from onnxjit.bench.trees import _feeds, _model
    from onnxjit.ir.ops.ml import tree_layout, tree_lower

    monkeypatch.setattr(tree_layout, "COMPACT_BITS", compact_bits)
    m = _model(40, 24, 20, True, "SUM", 5)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = onnxjit.compile(m, cache_dir=False, specialize="dynamic")
    c = tree_lower._chunk_rows(20)
    x = _feeds(2 * c + 4 * 7 + 1, 20)["X"]
    for rows in (len(x), c, 3):
        np.testing.assert_allclose(fn(x[:rows])[0], sess.run(None, {"X": x[:rows]})[0],
                                   rtol=1e-5, atol=1e-5)
    attrs = {a.name: a for a in m.graph.node[0].attribute}
    nodes = len(attrs["nodes_treeids"].ints) + 1  # and the padding trees' leaf
    words = 2 if compact_bits else 4
    assert re.search(rf"buffer %tree_nodes: i32\[{words * nodes}\]", fn.ir("loops"))


@pytest.mark.parametrize("labels", [[0, 1, 2], [7], ["a", 'b"c', "d'e", "\\n"], [3, 3, 1],
                                    list(range(70))])
def test_zipmap_row_maps_are_dict_zip(labels):
    # ZipMap's maps come from a dict display generated for the labels (bound as names, not
    # written into the source): the same dicts as dict(zip(labels, row)), duplicates included
    from onnxjit.ir.ops.ml.encoders import _row_maps

    x = np.random.default_rng(1).random((5, len(labels)))
    rows = x.tolist()
    got = _row_maps(labels)(rows)
    assert got == [dict(zip(labels, row)) for row in rows]
    assert [list(m) for m in got] == [list(dict(zip(labels, row))) for row in rows]
    # many rows come as the columns zipped (no list per row for the collector to track), and
    # the maps, holding only floats, are not tracked either
    zipped = _row_maps(labels)(zip(*x.T.tolist()))
    assert zipped == got and not any(gc.is_tracked(m) for m in zipped)
