"""Audit: every opset-version form of every registered op matches onnx.reference.

For each op and each opset version `v` onnxjit registers for it (the since-versions of the
op's schemas), the cases are:

1) derived: the backend suite's node cases rewritten into the form `schema(op, v)` defines
   (`audit_version_forms.derive`: inputs that were attributes become attributes again, unknown
   attributes at their default are dropped, the checker rejects what `v` does not allow);
   at most `PER_VERSION` per (op, v), taken in the suite's order;
2) new dtype: when `schema(op, v)` allows a float type (float16, bfloat16, double) the
   previous registered version did not, the first derived case retyped to it;
3) hand-written (`audit_version_cases.HAND`) where no backend case survives the rewrite or
   the seed is not deterministic.

The oracle is `onnx.reference` at the model's opset, which implements the historical
versions; `BACKEND_ORACLE` lists the (op, v) whose reference implementation is missing or
wrong, where the backend case's own expected outputs are used instead (valid because the
rewrite there does not change the case's meaning -- each entry says why).

The completeness test checks every registered (op, v) has a case or an `EXEMPT` reason.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from audit_version_cases import HAND
from audit_version_forms import derive, dtype_variant, new_float_dtypes
from op_audit import assert_same, node_cases, reference, registered_ops

import onnxjit

PER_VERSION = 1

# (op, v) -> why onnx.reference cannot be the oracle for the derived case; the backend case's
# expected outputs are used instead.
BACKEND_ORACLE = {
    ("Clip", 1): "reference has no Clip-1; min/max attributes clip exactly as the inputs do",
    ("Dropout", 1): "reference has no Dropout-1; inference output is the input",
    ("Dropout", 6): "reference has no Dropout-6; inference output is the input",
    ("Gemm", 1): "reference has no Gemm-1; with broadcast=1 it computes as Gemm-13",
    ("Reshape", 1): "reference has no Reshape-1; the shape attribute reshapes as the input",
    ("Split", 1): "reference has no Split-1; its split attribute splits as Split-13's input",
    ("RNN", 1): "reference has no RNN-1; the defaults case uses no v1-only attribute",
    ("DequantizeLinear", 10): "reference has no DequantizeLinear-10; per-tensor as in v13+",
    ("DequantizeLinear", 13): "reference has no DequantizeLinear-13; per-tensor as in v19+",
    ("Scatter", 9): "reference has no Scatter at all; Scatter-9 is ScatterElements-11",
    ("Upsample", 7): "reference's Upsample takes scales only as an input (v9+), not the "
                     "v7 attribute; nearest upsampling by integer scales is unchanged",
    ("AveragePool", 1): "reference's AveragePool-1 counts pads in the divisor; the v1 spec "
                        "excludes them, as count_include_pad=0 does in the case's opset",
    ("BatchNormalization", 1): "reference has no BatchNormalization-1; is_test=1 inference",
    ("BatchNormalization", 6): "reference's BatchNormalization-6 returns a tuple for the "
                               "one-output form; is_test=1 inference as in v15",
    ("BatchNormalization", 7): "reference's BatchNormalization-6/7 returns a tuple for the "
                               "one-output (inference) form, the same computation as v15",
    ("BatchNormalization", 9): "reference's BatchNormalization-9 normalizes with batch "
                               "statistics; one output is the inference form, as in v15",
    ("GridSample", 16): "reference's GridSample ignores the version: it rejects v16's mode "
                        "name bilinear (v20's linear, the seed's mode)",
    ("RoiAlign", 10): "reference applies v16's default half_pixel at v10, whose behaviour is "
                      "output_half_pixel: the seed (aligned_false) sets exactly that",
    ("Resize", 10): "reference's Resize-10 reads scales from input 2 (the v11 layout); the "
                    "nearest integer-scale upsample is the same under v10's asymmetric/floor "
                    "rule and the case's half_pixel/round_prefer_floor",
}

# Backend seeds not usable as derived cases, with why (they get hand-written cases instead).
SEED_EXCLUDED = {
    "Bernoulli": "random output: onnxjit and the reference draw different numbers",
}


# Derived cases onnxjit declines with UnsupportedError (a documented limitation, reported to
# the lead): the test checks the error is the clean, named one.
UNSUPPORTED: dict[str, str] = {}


def run_case(model: onnx.ModelProto, feeds: dict, expected=None, loose: bool = False) -> None:
    """Compile `model`, run it on `feeds`, compare with `expected` (default: the reference).
    `loose`: the backend suite's own tolerance (some of its expected values are printed
    with 4 decimals)."""
    if expected is None:
        expected = reference(model, feeds)
    got = onnxjit.compile(model, cache_dir=False).run(None, feeds)
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        if loose and np.asarray(e).dtype == np.float32:
            np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-4, err_msg=f"output {k}")
        else:
            assert_same(g, e, f"output {k}")


def _narrow_oracle(model: onnx.ModelProto, feeds: dict, elem: int):
    """For a float16/bfloat16 variant, an oracle computing the float32 `model` on the
    variant's (rounded) inputs and rounding its float32 outputs to `elem`: onnx.reference's
    narrow-float kernels are missing or wrong for several ops (Det-22 returns float64,
    MeanVarianceNormalization-13 rejects bfloat16), and onnxjit, like onnxruntime, computes
    narrow floats in float32. None (the reference itself) for other types."""
    if elem not in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16):
        return None
    np_type = onnx.helper.tensor_dtype_to_np_dtype(elem)

    def oracle() -> list:
        wide = {k: x.astype(np.float32) if x.dtype == np_type else x for k, x in feeds.items()}
        outs = reference(model, wide)
        return [o.astype(np_type) if np.asarray(o).dtype == np.float32 else o for o in outs]
    return oracle


@functools.cache
def derived_cases() -> dict[str, tuple]:
    """id -> (op, v, model, feeds, oracle) of the derived cases; the oracle is None (the
    reference), the backend case's expected outputs, or a function computing them."""
    out: dict[str, tuple] = {}
    for op, versions in sorted(registered_ops().items()):
        if op in SEED_EXCLUDED:
            continue
        previous = None
        for v in versions:
            found = []
            for case in node_cases(op):
                got = derive(case, v)
                if got is not None:
                    found.append((case, got))
                if len(found) >= PER_VERSION:
                    break
            for case, (model, feeds) in found:
                expected = case.data_sets[0][1] if (op, v) in BACKEND_ORACLE else None
                out[f"{op}-v{v}-{case.name.removeprefix('test_')}"] = (
                    op, v, model, feeds, expected)
            for elem in new_float_dtypes(op, v, previous):
                for case, (model, feeds) in found:
                    variant = dtype_variant(model, feeds, elem)
                    if variant is not None:
                        name = onnx.helper.tensor_dtype_to_np_dtype(elem).name
                        out[f"{op}-v{v}-{name}-{case.name.removeprefix('test_')}"] = (
                            op, v, *variant, _narrow_oracle(model, variant[1], elem))
                        break
            previous = v
    return out


@pytest.mark.parametrize("case_id", sorted(derived_cases()))
def test_derived_version_form(case_id: str) -> None:
    op, v, model, feeds, expected = derived_cases()[case_id]
    if case_id in UNSUPPORTED:
        with pytest.raises(onnxjit.UnsupportedError, match=op):
            onnxjit.compile(model, cache_dir=False).run(None, feeds)
        return
    run_case(model, feeds, expected() if callable(expected) else expected,
             loose=(op, v) in BACKEND_ORACLE)


def _hand_ids() -> list[str]:
    return sorted(f"{op}-v{v}-{name}" for (op, v), cases in HAND.items() for name in cases)


@pytest.mark.parametrize("case_id", _hand_ids())
def test_hand_written_version_form(case_id: str) -> None:
    op, v, name = case_id.split("-", 2)
    model, feeds, expected = HAND[(op, int(v[1:]))][name]()
    if isinstance(expected, type) and issubclass(expected, onnxjit.OnnxJitError):
        with pytest.raises(expected, match=op):
            onnxjit.compile(model, cache_dir=False).run(None, feeds)
        return
    run_case(model, feeds, expected)


# (op, v) -> why no case can test it.
EXEMPT: dict[tuple[str, int], str] = {}


def test_every_version_form_is_audited() -> None:
    covered = {(op, v) for op, v, *_ in derived_cases().values()} | set(HAND)
    missing = [(op, v) for op, versions in registered_ops().items() for v in versions
               if (op, v) not in covered and (op, v) not in EXEMPT]
    assert not missing, f"(op, version) pairs with no case and no EXEMPT reason: {missing}"
    stale = [k for k in EXEMPT if k in covered or k[1] not in registered_ops().get(k[0], ())]
    assert not stale, f"EXEMPT entries that are covered or not registered: {stale}"
