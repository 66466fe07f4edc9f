"""The differential fuzzer's oracle: run a generated case on onnxjit and the references, and
decide a verdict.

Algorithm, per case (`judge`):
1. Compile with onnxjit: `specialize="auto"` always, and `"dynamic"` too when the model has
   symbolic dims; each compiled model is called once per feeds dict (2-3 shapes for symbolic
   models). `UnsupportedError` at any point makes the case "unsupported"; any other exception
   is an "error".
2. Reference results per call: onnxruntime (CPU) and `onnx.reference.ReferenceEvaluator`.
   A reference that raises is left out.
3. Per output, `close` compares with a dtype-scaled tolerance (rtol 1e-2 / 1e-4 / 1e-7 for
   float16 / 32 / 64, 1e-2 for every float or int output of a model holding float16, atol =
   rtol * max(1, max |finite expected|), other ints and bools exact),
   equal shapes and dtypes, NaN at the same places, infinities equal.
4. If both references ran and agree: onnxjit must match them ("pass"), else "mismatch" -
   unless, in a model without float16, onnxjit matches onnx.reference's float64 run and the
   references do not, every value finite ("precision": a formula of theirs cancels where
   onnxjit's is exact; GroupNorm's spec body E[x^2] - E[x]^2 was such a case, fuzz seed
   10210409, until onnxjit followed the body).
   Otherwise, first the output shapes the generator computed by the spec decide: a reference
   with other shapes is dropped (onnx.reference's Slice clamping, its MaxPool SAME_LOWER), and
   onnxjit with other shapes is a "mismatch". Then more votes join: onnx.reference on the model
   converted to float64 (`convert`), and, where onnxruntime cannot run the model (no float16 or
   float64 kernel), onnxruntime on the model converted to float32, outputs cast back.
   onnxjit fails ("mismatch") when two votes of different implementations (onnxruntime vs
   onnx.reference: a float64 run shares the reference's mistakes) agree and both differ from
   it. When onnxjit matches a reference at the model's own precision and the votes against it
   include a converted run, it fails only where it is inf/nan and onnxruntime is finite (an
   overflow, checked to be no upstream divergence; not in float16 models, whose op chains
   onnxruntime runs in f32, so that there a majority needs onnx.reference); otherwise the case
   is "disagree", or
   "precision" when both votes against are converted runs. No two implementations at all:
   "unconfirmed" if onnxjit differs from the one, "noref" if none ran.
The worst verdict over calls and specialize modes is the case's.
"""

from __future__ import annotations

import copy
import traceback
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tier0_ref import Tier0

import onnxjit

#: verdicts, from best to worst; CI fails on "mismatch" and "error" only
ORDER = ["pass", "unsupported", "precision", "noref", "disagree", "unconfirmed", "mismatch",
         "error"]
#: float16 anywhere in a model: every float or int output is only as exact as float16 (a Cast
#: to f32 or int64 after an f16 op keeps the f16 rounding, which onnxruntime's f32 chains of
#: f16 ops do not have)
NARROW_RTOL = 1e-2
RTOL = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-7}


@dataclass
class Verdict:
    status: str
    detail: str = ""
    refs_agree: bool | None = None
    notes: list = field(default_factory=list)


def close(got, want, floor: float = 0.0) -> bool:
    """got matches want (see the module docstring); `floor` raises the relative tolerance."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if want.dtype.kind not in "fc" and not (floor and want.dtype.kind in "iu"):
        return bool(np.array_equal(got, want))  # ints from f16 values: see NARROW_RTOL
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return False
    inf = np.isinf(w) | np.isinf(g)
    if not np.array_equal(g[inf], w[inf]):
        return False
    fin = ~(np.isnan(w) | inf)
    if not fin.any():
        return True
    rtol = max(RTOL.get(want.dtype, 1e-4), floor)
    atol = rtol * max(1.0, float(np.abs(w[fin]).max()))
    return bool(np.all(np.abs(g[fin] - w[fin]) <= atol + rtol * np.abs(w[fin])))


def all_close(got, want, floor: float = 0.0) -> bool:
    return want is not None and len(got) == len(want) and all(
        close(g, w, floor) for g, w in zip(got, want))


def convert(model: onnx.ModelProto, to: int = TensorProto.DOUBLE) -> onnx.ModelProto:
    """The model with every other float type (types, constants, cast targets) made `to`."""
    m = copy.deepcopy(model)
    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE} - {to}
    np_to = helper.tensor_dtype_to_np_dtype(to)

    def tensor(t: onnx.TensorProto) -> None:
        if t.data_type in floats:
            with np.errstate(all="ignore"):
                a = numpy_helper.to_array(t).astype(np_to)
            t.CopyFrom(numpy_helper.from_array(a, t.name))

    g = m.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type in floats:
            vi.type.tensor_type.elem_type = to
    for t in g.initializer:
        tensor(t)
    for n in g.node:
        if n.op_type == "Constant" and n.attribute[0].name == "value_float":
            v = n.attribute[0].f
            del n.attribute[:]
            n.attribute.append(helper.make_attribute("value", numpy_helper.from_array(
                np.array(v, np.float32))))
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                tensor(a.t)
            elif a.name == "to" and a.i in floats:
                a.i = to
    return m


def _cast_feeds(feeds_list, np_to):
    with np.errstate(all="ignore"):
        return [{k: v.astype(np_to) if v.dtype.kind == "f" else v for k, v in f.items()}
                for f in feeds_list]


def _cast_outs(outs, dtypes):
    with np.errstate(all="ignore"):
        return [None if o is None else [np.asarray(x).astype(d) for x, d in zip(o, dtypes)]
                for o in outs]


def _run_ort(model, feeds_list):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    try:
        s = ort.InferenceSession(model.SerializeToString(), so,
                                 providers=["CPUExecutionProvider"])
    except Exception:
        return [None] * len(feeds_list)
    out = []
    for f in feeds_list:
        try:
            out.append(s.run(None, f))
        except Exception:
            out.append(None)
    return out


def _reference_fixes() -> list:
    """onnx.reference ops replaced where the reference itself is wrong. Erf: onnx's computes
    in float32 (`np.vectorize(erf, otypes=["f"])`), so a float64 erf(3.93) = 1 - 2.7e-8 came
    out 1.0 (and its Cast to int64 1, not 0), agreeing with onnxruntime on the float32 copy
    of the model (fuzz seed 9122420); this one computes at the input's precision."""
    import math

    from onnx.reference.ops._op import OpRunUnaryNum

    class Erf(OpRunUnaryNum):
        op_domain = ""

        def _run(self, x):
            return (np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype),)

    return [Erf]


def _run_ref(model, feeds_list):
    from onnx.reference import ReferenceEvaluator

    try:
        ev = ReferenceEvaluator(model, new_ops=_reference_fixes())
    except Exception:
        return [None] * len(feeds_list)
    out = []
    for f in feeds_list:
        try:
            with np.errstate(all="ignore"):
                out.append([np.asarray(x) for x in ev.run(None, f)])
        except Exception:
            out.append(None)
    return out


def _out_dtypes(model):
    from onnx.helper import tensor_dtype_to_np_dtype

    return [tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type) for o in model.graph.output]


def run_onnxjit(model, feeds_list, specialize: str):
    """Per call, its outputs or the exception onnxjit raised for it (a call whose shapes the
    model rejects fails alone); the exception itself when the model does not load.
    `specialize="tier0"`: each call as tiered execution answers it before the native code
    exists (`onnxjit.tiered`: the numpy plan, else the native code)."""
    try:
        fn = onnxjit.compile(model, cache_dir=False,
                             specialize="auto" if specialize == "tier0" else specialize)
        plan = Tier0(model) if specialize == "tier0" else None
    except Exception as e:  # judged by the caller
        e.trace = traceback.format_exc()[-1500:]
        return e
    out = []
    for f in feeds_list:
        try:
            got = None
            if plan is not None and plan.plan is not None:  # as tiering runs it: unchecked
                got = plan.plan.run([np.asarray(f[v.name]) if v.name in f else v.const
                                     for v in plan.inputs])
            out.append(list(got) if got is not None else list(fn.run(None, f)))
        except Exception as e:
            e.trace = traceback.format_exc()[-1500:]
            out.append(e)
    return out


#: what onnxjit raises for a call or model it rejects (a crash is anything else)
REJECTS = (onnxjit.InputError, onnxjit.ModelError)
UPCAST = ("float64", "ort32")  # votes from a converted model
# In a float16 model onnxruntime runs op chains in f32 without rounding between them, like the
# float64 run: there only onnx.reference, which rounds every op to float16, can join a majority.
# Only votes of different implementations can outvote onnxjit together: a float64 run shares
# onnx.reference's mistakes (its Slice clamping, its LpNormalization p=1).
FAMILY = {"ort": "ort", "ort32": "ort", "ref": "ref", "float64": "ref"}


def _overflows(got, want) -> bool:
    """onnxjit has inf or nan where `want` is finite."""
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        if g.dtype.kind == "f" and g.shape == w.shape and np.any(
                ~np.isfinite(g.astype(np.float64)) & np.isfinite(w.astype(np.float64))):
            return True
    return False


def _finite_agree(a, b) -> bool:
    """a and b (when b ran) agree wherever both are finite: they differ only by an overflow,
    not by an earlier divergence of their computations (a large Cos argument upstream)."""
    if b is None:
        return True
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype.kind != "f" or x.shape != y.shape:
            continue
        both = np.isfinite(x.astype(np.float64)) & np.isfinite(y.astype(np.float64))
        if not close(x[both], y[both]):
            return False
    return True


def _vote(got, votes: dict, narrow: bool = False) -> tuple[str, str]:
    """Votes of the references on one call's outputs -> (status, why)."""
    names = [n for n, v in votes.items() if v is not None]
    floor = NARROW_RTOL if narrow else 0.0
    tol = {n: max(floor, 1e-3 if n == "ort32" else 0.0) for n in names}
    agree = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
             if FAMILY[a] != FAMILY[b] and all_close(votes[a], votes[b], max(tol[a], tol[b]))
             and (not narrow or "ref" in (a, b))]
    matches = [n for n in names if all_close(got, votes[n], tol[n])]
    against = [(a, b) for a, b in agree if a not in matches and b not in matches]
    native = [n for n in matches if n not in UPCAST]
    for a, b in against:
        why = f"{a} and {b} agree, onnxjit differs"
        if a not in UPCAST and b not in UPCAST or not native:
            return "mismatch", why
        # onnxjit matches a reference at the model's own precision; a converted run alone
        # is not trusted, except for an inf/nan where the native one agrees on finite values.
        # Not in float16 models: onnxruntime runs f16 chains of ops it has no f16 kernel for
        # in f32 (its inserted casts between them cancel), so an f16 overflow between two ops
        # (Pow then Tan) never happens there.
        if a not in UPCAST and not narrow and _overflows(got, votes[a]) and _finite_agree(
                votes[a], votes.get("ref")):
            return "mismatch", why + " (non-finite where they are finite)"
        return ("precision" if a in UPCAST else "disagree"), why + f"; it matches {native}"
    if matches:
        return "pass", ""
    if len({FAMILY[n] for n in names}) == 1:
        return "unconfirmed", f"only {names} ran and onnxjit differs"
    return ("disagree", f"no two of {names} agree and onnxjit matches none") if names \
        else ("noref", "no reference ran")


def _more_exact(got, refs, exact) -> bool:
    """onnxjit's outputs match the float64 run where the agreeing references' do not, every
    value finite in all three (no overflow semantics): they round what it computes exactly."""
    if exact is None or not all_close(got, exact) or all_close(refs, exact):
        return False
    return all(np.all(np.isfinite(np.asarray(a, np.float64))) for outs in (got, refs, exact)
               for a in outs if np.asarray(a).dtype.kind == "f")


def _types(model):
    return [vi.type.tensor_type for vi in list(model.graph.input) + list(model.graph.output)]


def _shapes(outs) -> list | None:
    return None if outs is None else [np.asarray(o).shape for o in outs]


def judge(model: onnx.ModelProto, feeds_list: list, symbolic: bool,
          spec_shapes: list | None = None, stage=lambda name: None) -> Verdict:
    """The verdict of one case (see the module docstring); `spec_shapes[k]` lists the output
    shapes of call k by the ONNX spec, as the generator computed them. `stage(name)` is told
    which engine runs next ("onnxruntime", "reference", "onnxjit"): a process that dies says
    whose crash it was."""
    stage("onnxruntime")
    ort_out = _run_ort(model, feeds_list)
    stage("reference")
    ref_out = _run_ref(model, feeds_list)
    stage("onnxjit")
    f64 = ort32 = None
    narrow = any(t.elem_type == TensorProto.FLOAT16 for t in _types(model)) or any(
        t.data_type == TensorProto.FLOAT16 for t in model.graph.initializer) or any(
        a.name == "to" and a.i == TensorProto.FLOAT16 for n in model.graph.node
        for a in n.attribute)
    floor = NARROW_RTOL if narrow else 0.0
    worst = Verdict("pass")
    agree_all = True
    for mode in (["auto", "dynamic", "tier0"] if symbolic else ["auto", "tier0"]):
        got = run_onnxjit(model, feeds_list, mode)
        if isinstance(got, onnxjit.UnsupportedError):
            return Verdict("unsupported", f"{mode}: {got}")
        if isinstance(got, Exception):
            if all(o is None for o in ort_out + ref_out):
                return Verdict("noref", f"no reference ran; onnxjit: {got!r}")
            if isinstance(got, REJECTS) and all(o is None or r is None
                                                for o, r in zip(ort_out, ref_out)):
                return Verdict("unconfirmed", f"{mode}: onnxjit rejects the model, and a "
                               f"reference every call: {got!r}")
            return Verdict("error", f"{mode}: {type(got).__name__}: {got}\n{got.trace}")
        for k, g in enumerate(got):
            if isinstance(g, onnxjit.UnsupportedError):
                return Verdict("unsupported", f"{mode}, call {k}: {g}")
            if isinstance(g, Exception):
                failed = [n for n, o in (("ort", ort_out[k]), ("ref", ref_out[k])) if o is None]
                status = {0: "error", 1: "unconfirmed", 2: "pass"}[
                    len(failed) if isinstance(g, REJECTS) else 0]
                if status == "pass":
                    worst.notes.append(f"call {k}: every implementation rejects it")
                why = f"{type(g).__name__}: {g}" + (f" ({failed[0]} rejects it too)"
                                                     if status == "unconfirmed" else "")
                if ORDER.index(status) > ORDER.index(worst.status):
                    worst.status, worst.detail = status, f"{mode}, call {k}: {why}\n{g.trace}"
                agree_all = False
                continue
            votes = {"ort": ort_out[k], "ref": ref_out[k]}
            both = all(v is not None for v in votes.values())
            agree = both and all_close(votes["ort"], votes["ref"], floor)
            agree_all &= agree
            status, why = "pass", ""
            spec = spec_shapes[k] if spec_shapes else None
            if spec and not agree and any(_shapes(v) == spec for v in votes.values()):
                # a reference that breaks the spec's shapes is out (onnx.reference's Slice)
                for n, v in votes.items():
                    if v is not None and _shapes(v) != spec:
                        worst.notes.append(f"call {k}: {n} output shapes {_shapes(v)} are "
                                           f"not the spec's {spec}")
                        votes[n] = None
                if _shapes(g) != spec:
                    status, why = "mismatch", f"output shapes {_shapes(g)}, spec {spec}"
            if agree and not (all_close(g, votes["ort"], floor) or
                              all_close(g, votes["ref"], floor)):
                status, why = "mismatch", "ort and ref agree, onnxjit differs"
                if not narrow and ref_out[k] is not None:
                    if f64 is None:
                        f64 = _cast_outs(_run_ref(convert(model), _cast_feeds(
                            feeds_list, np.float64)), _out_dtypes(model))
                    if _more_exact(g, votes["ort"], f64[k]):
                        status, why = "precision", (
                            "ort and ref agree, onnxjit differs: it matches the float64 run, "
                            "they do not (a formula of theirs cancels)")
            if not agree and status == "pass":
                if votes["ref"] is not None or ref_out[k] is None:
                    if f64 is None:
                        f64 = _cast_outs(_run_ref(convert(model), _cast_feeds(
                            feeds_list, np.float64)), _out_dtypes(model))
                    votes["float64"] = f64[k]
                if ort_out[k] is None and any(t.elem_type in (TensorProto.FLOAT16,
                                                              TensorProto.DOUBLE)
                                              for t in _types(model)):
                    if ort32 is None:
                        ort32 = _cast_outs(_run_ort(convert(model, TensorProto.FLOAT),
                                                    _cast_feeds(feeds_list, np.float32)),
                                           _out_dtypes(model))
                    votes["ort32"] = ort32[k]
                status, why = _vote(g, votes, narrow)
                if both:
                    worst.notes.append(f"call {k}: references disagree")
            if ORDER.index(status) > ORDER.index(worst.status):
                worst.status, worst.detail = status, f"{mode}, call {k}: {why}"
    worst.refs_agree = agree_all
    return worst
