"""The ai.onnx.ml family: classical machine-learning operators (scikit-learn, LightGBM,
XGBoost models exported by skl2onnx and onnxmltools).

    forest.py       tree ensembles in one flat form (all three tree ops)
    forest_eval.py  their numpy semantics (folding, host path) and the post transforms
    tree_layout.py  the node records the native walk reads (preorder, 8 or 16 bytes a node)
    tree_ops.py     TreeEnsembleRegressor/Classifier (ml 1, 3), TreeEnsemble (ml 5): OpDefs
    tree_lower.py   native tree walk: node arrays, lanes of (row, tree) pairs, rows in parallel
    post.py         the post transforms (SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT) as loop IR
    simple.py       Binarizer, Scaler, Normalizer, Imputer, ArrayFeatureExtractor,
                    FeatureVectorizer, LinearRegressor, LinearClassifier
    encoders.py     LabelEncoder, CategoryMapper, OneHotEncoder, ZipMap, DictVectorizer
    svm.py          SVMRegressor (all kernels)
    svm_classifier.py  SVMClassifier (one-vs-one votes, Platt probabilities, linear mode)

Ops whose inputs or outputs are strings or maps run on the host (numpy `evaluate`), like every
string op; the numeric ones have loop-IR lowerings or scalar rules.
"""
