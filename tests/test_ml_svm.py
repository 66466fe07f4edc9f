"""SVMClassifier (ai.onnx.ml) against onnxruntime: scikit-learn SVCs exported by skl2onnx
(every kernel, two and more classes, with and without Platt probabilities) and hand-built
nodes for what skl2onnx never writes (the linear mode without support vectors, post
transforms, string labels), plus the errors a malformed node gets.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxjit

sklearn = pytest.importorskip("sklearn", reason="scikit-learn (test extra) is not installed")
skl2onnx = pytest.importorskip("skl2onnx", reason="skl2onnx (test extra) is not installed")

from sklearn import svm  # noqa: E402

# sklearn 1.9 deprecates SVC(probability=True), which skl2onnx still reads
pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

RS = np.random.RandomState(0)
X = RS.rand(60, 4).astype(np.float32)
Y_BIN = (X[:, 0] + X[:, 1] > 1).astype(np.int64)
Y_FOUR = np.minimum((X[:, 0] * 4).astype(np.int64), 3)
XT = RS.rand(25, 4).astype(np.float32)


def _compare(model, x: np.ndarray) -> None:
    model.ir_version = min(model.ir_version, 9)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"X": x})
    got = onnxjit.compile(model, cache_dir=False).run(None, {"X": x})
    assert len(got) == len(want) == 2
    np.testing.assert_array_equal(np.asarray(got[0]).astype(want[0].dtype), want[0])
    assert got[1].shape == want[1].shape and got[1].dtype == np.float32
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=5e-6)


@pytest.mark.parametrize("kernel,y,proba", [
    ("linear", Y_BIN, True), ("poly", Y_FOUR, False), ("rbf", Y_FOUR, True),
    ("sigmoid", Y_BIN, False), ("rbf", Y_BIN, False), ("poly", Y_BIN, True)])
def test_sklearn_svc(kernel, y, proba):
    from skl2onnx import to_onnx

    est = svm.SVC(kernel=kernel, degree=2, probability=proba, random_state=0).fit(X, y)
    m = to_onnx(est, X[:1], options={id(est): {"zipmap": False}},
                target_opset={"": 17, "ai.onnx.ml": 3})
    assert "SVMClassifier" in [n.op_type for n in m.graph.node]
    _compare(m, XT)


def _node_model(labels, **attrs):
    strings = isinstance(labels[0], str)
    key = "classlabels_strings" if strings else "classlabels_ints"
    node = helper.make_node("SVMClassifier", ["X"], ["L", "Z"], domain="ai.onnx.ml",
                            **{key: labels}, **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("L", TensorProto.STRING if strings else
                                       TensorProto.INT64, ["N"]),
         helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ai.onnx.ml", 1)])


R = np.random.RandomState(1)
XN = R.randn(20, 3).astype(np.float32)
SV = R.randn(5, 3).ravel().tolist()
NO_KERNEL = [0.0, 0.0, 1.0]


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_hand_built(post):
    coef = R.randn(6)
    # linear mode (no support vectors): mixed-sign and all-positive weights, three classes
    _compare(_node_model([3, 7], coefficients=coef.tolist(), rho=[0.1],
                         kernel_params=NO_KERNEL, post_transform=post), XN)
    _compare(_node_model([3, 7], coefficients=np.abs(coef).tolist(), rho=[-0.5],
                         kernel_params=NO_KERNEL, post_transform=post), XN)
    _compare(_node_model([1, 2, 5], coefficients=R.randn(9).tolist(), rho=[0.2],
                         kernel_params=NO_KERNEL, post_transform=post), XN)
    # one-vs-one machines, string labels, uneven support vectors per class
    _compare(_node_model(["a", "b"], coefficients=R.randn(5).tolist(), rho=[0.3],
                         support_vectors=SV, vectors_per_class=[2, 3], kernel_type="RBF",
                         kernel_params=[0.5, 0.0, 3.0], post_transform=post), XN)
    _compare(_node_model([0, 1, 2], coefficients=R.randn(10).tolist(), rho=[0.3, -0.1, 0.2],
                         support_vectors=SV, vectors_per_class=[2, 2, 1], kernel_type="POLY",
                         kernel_params=[0.5, 1.0, 2.0], post_transform=post), XN)


def test_malformed_nodes():
    bad = _node_model([0, 1, 2], coefficients=R.randn(10).tolist(), rho=[0.3, 0.1, 0.2],
                      support_vectors=SV, vectors_per_class=[2, 2], kernel_type="RBF",
                      kernel_params=[0.5, 0.0, 3.0])
    with pytest.raises(onnxjit.ModelError, match="vectors_per_class"):
        onnxjit.compile(bad, cache_dir=False)(XN)
    probit = _node_model([0, 1], coefficients=R.randn(5).tolist(), rho=[0.3],
                         support_vectors=SV, vectors_per_class=[2, 3], kernel_type="RBF",
                         kernel_params=[0.5, 0.0, 3.0], post_transform="PROBIT")
    with pytest.raises(onnxjit.UnsupportedError, match="PROBIT"):
        onnxjit.compile(probit, cache_dir=False)(XN)
    fn = onnxjit.compile(_node_model([3, 7], coefficients=R.randn(6).tolist(), rho=[0.1],
                                     kernel_params=NO_KERNEL), cache_dir=False)
    with pytest.raises(onnxjit.InputError):
        fn(XN[:, :2])
