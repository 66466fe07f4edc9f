"""Audit: empty tensors (a zero-size dimension) through every registered ai.onnx op.

Algorithm:
1. Derived cases ("zero batch"): the backend node cases of an op, two per (op, opset), are
   rewritten so their data input has 0 rows: input 0 is cut to `x[:0]`, and so is every other
   input of the same rank and the same leading size (its broadcast partners, e.g. both
   operands of Add, or Q/K/V of Attention). The graph input says 0 (static) or a symbolic `N`
   bound to 0 at call time (newest version of each op), the output dims become unknown. The
   oracle is onnx.reference on the rewritten model, or onnxruntime where the reference crashes
   on empty input (`ORT_ORACLE`). Cases whose other inputs depend on the cut dim (a shape
   input that names it, indices into it, a scale of its size) cannot be rewritten blindly and
   are listed in `NOT_DERIVED` with the reason; `HAND` covers those ops.
2. Hand-written cases (`HAND`, in tests/audit_empty_cases.py) put the zero on the dim the op
   works along (reduce over an empty axis, Concat with an empty piece, Gather with no
   indices, TopK with k=0, MatMul with K=0, an empty operand broadcast against a full one,
   Range/ConstantOfShape/random generators with an empty output, a Loop of 0 trips, a
   recurrence over 0 steps...), and reach the ops without backend cases (sequences,
   optionals, random generators). Each names its oracle: onnx.reference by default,
   onnxruntime or numpy where the reference is wrong or missing (a comment says why). Cases
   marked `sym` also run with every zero dim of the graph inputs symbolic.
3. Error cases (`ERRORS`): where the spec makes an empty input invalid (ArgMax over an empty
   axis, TopK with k larger than an empty axis, an index into an empty axis), onnxjit raises
   ModelError or InputError naming the node, instead of crashing or answering.
4. Completeness: every registered op has a derived, hand-written or error case (or one in
   tests/test_ops_empty_cnn.py), or is in `EXEMPT` with the reason no input or output can be
   empty.
5. Folding: the static form of each derived and hand-written case also runs with its inputs
   as initializers, and constant folding must give the outputs just checked
   (tests/fold_compare.py).
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from audit_empty_cases import ERRORS, HAND, Hand
from fold_compare import folded_like_lowered
from op_audit import feeds_of, node_cases, reference, registered_ops

import onnxjit
from onnxjit.errors import InputError, ModelError

# --------------------------------------------------------------------------- oracles


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """onnxruntime's outputs (IR version capped at 10, which it accepts)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.ir_version = min(m.ir_version, 10)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _same(got: object, want: object, where: str) -> None:
    """Equal dtype, shape and values; sequences element by element; strings as text."""
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for k, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{k}]")
        return
    want = np.asarray(want)
    assert got.shape == want.shape, f"{where}: shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "OU":
        assert got.dtype == object, f"{where}: dtype {got.dtype}, expected strings"
        assert got.tolist() == want.astype(object).tolist(), where
        return
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=1e-5, atol=1e-6, err_msg=where)
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


def _check(model: onnx.ModelProto, feeds: dict, expected: list, fold: bool = False) -> None:
    """Compile `model` (no disk cache), run it on `feeds`, compare with `expected`; `fold`:
    then constant folding against those outputs (`fold_compare`)."""
    got = onnxjit.compile(model, cache_dir=False).run(None, feeds)
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        _same(g, e, f"output {k}")
    if fold:
        folded_like_lowered(model, feeds, got)


# --------------------------------------------------------------------------- derived cases

# op -> why onnx.reference cannot judge the zero-batch variant, so onnxruntime is the oracle.
ORT_ORACLE = {
    "Col2Im": "the reference's Col2Im returns a result of the wrong type for an empty batch",
    "Flatten": "the reference reshapes with -1, which numpy cannot infer for 0 elements",
    "GlobalAveragePool": "the reference's GlobalAveragePool divides by zero on an empty batch",
    "GridSample": "the reference's empty-batch path returns a bare array, not a tuple",
}

# op or backend case name -> why the leading-dim rewrite is not used for it.
NOT_DERIVED = {
    # Other inputs depend on the cut dim; HAND has a consistent empty case.
    "AffineGrid": "the `size` input names the batch",
    "Compress": "the condition indexes input 0's leading axis (HAND: empty selections)",
    "ConvTranspose": "the weights share the batch's rank and leading size 1, so the rewrite "
                     "would cut them; tests/test_ops_empty_cnn.py has its empty batch",
    "Det": "a 2-D input's leading dim is a matrix side (HAND: batch 0 and 0x0)",
    "Gather": "indices point into the cut axis 0 (HAND: empty indices, empty data)",
    "GatherElements": "indices must match input 0's dims (HAND: empty indices)",
    "GatherND": "indices address the cut axis (HAND: empty indices)",
    "ImageDecoder": "input 0 is an encoded byte stream: cut, it no longer decodes (HAND: the "
                    "empty stream)",
    "NegativeLogLikelihoodLoss": "the target (a lower rank) keeps its batch rows",
    "Reshape": "the backend cases' shape inputs name the cut dim (HAND: empty reshapes)",
    "ReverseSequence": "sequence_lens has one entry per batch row, or lengths up to the "
                       "cut time axis",
    "RoiAlign": "batch_indices point into the cut batch (HAND: no rois)",
    "RotaryEmbedding": "position_ids (a different rank) keep their batch rows",
    "Scan": "input 0 is the batch of sequences (v8) or the initial state (v9+), which the "
            "body's shapes depend on (HAND: an empty sequence)",
    "Scatter": "indices point into the cut axis (HAND: empty updates)",
    "ScatterElements": "indices point into the cut axis (HAND: empty updates)",
    "ScatterND": "indices point into the cut axis (HAND: empty updates)",
    "SoftmaxCrossEntropyLoss": "the labels (a lower rank) keep their batch rows",
    "test_expand_dim_unchanged": "the target shape names the cut dim",
    "test_layer_normalization_4d_axis0": "scale covers the cut axis 0",
    "test_layer_normalization_4d_axis_negative_4": "scale covers the cut axis 0",
    "test_split_to_sequence_2": "the split sizes add up to the cut axis",
    "test_split_variable_parts_1d_opset13": "the split sizes add up to the cut axis",
    "test_split_variable_parts_1d_opset18": "the split sizes add up to the cut axis",
    "test_squeeze": "squeezes the leading axis, which must have size 1",
    # Valid rewrites that no oracle can judge; HAND states the answer with numpy.
    "DynamicQuantizeLinear": "the scale of an empty (zero-range) input is a convention",
    "GroupNormalization": "the reference and onnxruntime both reshape the empty batch with "
                          "-1 and fail",
    "GRU": "input 0's leading dim is the sequence length: 0 steps crash the reference, "
           "and abort onnxruntime",
    "LSTM": "input 0's leading dim is the sequence length: 0 steps crash the reference",
    "RNN": "input 0's leading dim is the sequence length: 0 steps crash the reference",
    "test_tfidfvectorizer_tf_batch_onlybigrams_skip0": "the reference and onnxruntime refuse "
                                                       "[B, C] with B = 0 (the spec does "
                                                       "not)",
}


def _zero_batch(case, symbolic: bool) -> tuple[onnx.ModelProto, dict]:
    """The case's model and inputs with input 0 and its same-rank, same-leading-size
    partners cut to 0 rows (see the module docstring)."""
    inputs = case.data_sets[0][0]
    lead, rank = inputs[0].shape[0], inputs[0].ndim
    cut = [i for i, a in enumerate(inputs)
           if isinstance(a, np.ndarray) and a.ndim == rank and a.shape[0] == lead]
    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    new = list(inputs)
    for i in cut:
        new[i] = inputs[i][:0]
        dim = m.graph.input[i].type.tensor_type.shape.dim[0]
        dim.Clear()
        if symbolic:
            dim.dim_param = "N"
        else:
            dim.dim_value = 0
    for o in m.graph.output:
        for d in o.type.tensor_type.shape.dim:
            d.Clear()
    return m, feeds_of(m, new)


def _derivable(case) -> bool:
    """Input 0 is a tensor with rows, declared with its rank (so the rewrite can say 0)."""
    inputs = case.data_sets[0][0] if case.data_sets else []
    if not (inputs and isinstance(inputs[0], np.ndarray) and inputs[0].ndim > 0
            and inputs[0].shape[0] > 0):
        return False
    t = case.model.graph.input[0].type
    # Attention's nonpad_kv_seqlen holds one length per batch row, in a lower rank.
    per_row = any(i.name == "nonpad_kv_seqlen" for i in case.model.graph.input)
    return (not per_row and t.HasField("tensor_type")
            and len(t.tensor_type.shape.dim) == inputs[0].ndim)


_PER_VERSION = 2  # derived cases per (op, opset): enough variety, a modest run time


@functools.cache
def _derived_cases() -> dict[str, object]:
    """id -> backend case: the first `_PER_VERSION` derivable cases of each (op, opset)."""
    out = {}
    for op in sorted(registered_ops()):
        if op in NOT_DERIVED:
            continue
        seen: dict[int, int] = {}
        for case in node_cases(op):
            v = case.model.opset_import[0].version
            if (seen.get(v, 0) == _PER_VERSION or case.name in NOT_DERIVED
                    or not _derivable(case)):
                continue
            seen[v] = seen.get(v, 0) + 1
            out[f"{op}-v{v}-{case.name[5:]}"] = case
    return out


def _derived_params() -> list:
    params, newest = [], {}
    for cid in _derived_cases():
        op, v = cid.split("-")[:2]
        if int(v[1:]) >= newest.get(op, (0, ""))[0]:
            newest[op] = (int(v[1:]), cid)
        params.append(pytest.param(cid, False, id=cid))
    params += [pytest.param(cid, True, id=cid + "-sym") for _, cid in newest.values()]
    return params


@pytest.mark.parametrize("cid, symbolic", _derived_params())
def test_zero_batch_derived(cid: str, symbolic: bool) -> None:
    case = _derived_cases()[cid]
    op = cid.split("-")[0]
    model, feeds = _zero_batch(case, symbolic=False)
    expected = _ort(model, feeds) if op in ORT_ORACLE else reference(model, feeds)
    if symbolic:
        model, feeds = _zero_batch(case, symbolic=True)
    _check(model, feeds, expected, fold=not symbolic)


# --------------------------------------------------------------------------- hand-written cases


def _hand_params() -> list:
    out = []
    for k, case in enumerate(HAND):
        out.append(pytest.param(k, False, id=case.cid))
        if case.sym:
            out.append(pytest.param(k, True, id=case.cid + "-sym"))
    return out


def _expected(case: Hand) -> list:
    feeds = dict(case.inputs)
    if callable(case.oracle):
        return case.oracle(feeds)
    model = case.model(symbolic=False)
    if case.oracle == "ort":
        return _ort(onnx.shape_inference.infer_shapes(model), feeds)
    return reference(model, feeds)


@pytest.mark.parametrize("k, symbolic", _hand_params())
def test_empty_hand(k: int, symbolic: bool) -> None:
    case = HAND[k]
    expected = _expected(case)
    _check(case.model(symbolic, expected), dict(case.inputs), expected, fold=not symbolic)


# --------------------------------------------------------------------------- error cases


def _error_params() -> list:
    out = []
    for k, (case, _) in enumerate(ERRORS):
        out.append(pytest.param(k, False, id=case.cid))
        if case.sym:
            out.append(pytest.param(k, True, id=case.cid + "-sym"))
    return out


@pytest.mark.parametrize("k, symbolic", _error_params())
def test_empty_invalid_raises(k: int, symbolic: bool) -> None:
    case, outs_like = ERRORS[k]
    model = case.model(symbolic, outs_like)
    with pytest.raises((ModelError, InputError)) as info:
        onnxjit.compile(model, cache_dir=False).run(None, dict(case.inputs))
    # Specialisation is lazy (at the first call), so even a static shape is reported by the
    # call; ModelError vs InputError follows where onnxjit detects it (inference vs lowering).
    assert f"({case.nodes[0].op_type})" in str(info.value)


# --------------------------------------------------------------------------- completeness

# op -> why no input or output of it can be empty.
EXEMPT: dict[str, str] = {}


def _cnn_ops() -> set[str]:
    """The ops tests/test_ops_empty_cnn.py runs with an empty batch or channels."""
    import test_ops_empty_cnn as cnn

    mark = cnn.test_empty_batch_or_channels_match_onnxruntime.pytestmark[0]
    return {p[0] for p in mark.args[1]}


def test_every_op_has_an_empty_case() -> None:
    covered = {cid.split("-")[0] for cid in _derived_cases()}
    for case in HAND + [c for c, _ in ERRORS]:
        covered |= case.ops()
    covered |= _cnn_ops()
    ops = set(registered_ops())
    assert not ops - covered - set(EXEMPT), sorted(ops - covered - set(EXEMPT))
    assert not set(EXEMPT) & covered, sorted(set(EXEMPT) & covered)
    assert set(EXEMPT) <= ops


def test_derivation_tables_name_real_ops_and_cases() -> None:
    """Every ORT_ORACLE/NOT_DERIVED key is a registered op or a backend case of one, so a
    stale entry cannot silently widen an exclusion."""
    names = {c.name for op in registered_ops() for c in node_cases(op)}
    for key in [*ORT_ORACLE, *NOT_DERIVED]:
        assert key in registered_ops() or key in names, key
    assert not set(ORT_ORACLE) & set(NOT_DERIVED)
