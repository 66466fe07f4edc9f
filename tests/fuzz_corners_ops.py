"""The entries of the corners generator (`fuzz_corners`): one op per entry at its corners.

Each entry `(rng, nrng) -> Spec` draws an element type, shapes, attributes at their edges and
valid input values, and returns the nodes and the arrays of each call. `_calls` gives an
input a second call of other sizes where the op allows it (its dims become symbolic).
Values stay where the two references may not legitimately differ: ints in range of their
type's arithmetic, float sums of moderate values.
"""

from __future__ import annotations

import numpy as np
from fuzz_corners import Spec
from onnx import helper

CORNERS: dict = {}
INTS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.int64, np.uint32, np.uint64]
FLOATS = [np.float32, np.float32, np.float16, np.float64]


def corner(fn):
    CORNERS[fn.__name__] = fn
    return fn


def arr(nrng, shape, dt, lo=-8, hi=8):
    """Values of type dt: small ints (clipped into the type), normal floats, bools."""
    dt = np.dtype(dt)
    if dt == np.bool_:
        return nrng.random(shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return nrng.integers(max(lo, info.min), min(hi, info.max) + 1, shape).astype(dt)
    return np.asarray(nrng.standard_normal(shape) * 3).astype(dt)


def shape(rng, rank, lo=1, hi=4):
    return tuple(rng.randint(lo, hi) for _ in range(rank))


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **{k: v for k, v in attrs.items() if v is not None})


def _one(rng, nrng, op, dt, shp, n_in=1, opset=18, fixed=(), **attrs):
    names = [f"x{i}" for i in range(n_in)]
    return Spec([node(op, names, ["y"], **attrs)], {n: [arr(nrng, shp, dt)] for n in names},
                ["y"], opset, set(fixed))


def _two_calls(rng, nrng, spec: Spec, name: str, axes_free: list[int]) -> Spec:
    """A second call where the dims in axes_free take other sizes."""
    a = spec.inputs[name][0]
    s = list(a.shape)
    for k in axes_free:
        s[k] = rng.randint(0, 5)
    b = arr(nrng, tuple(s), a.dtype)
    spec.inputs[name].append(b)
    for other in spec.inputs:
        if other != name:
            spec.inputs[other].append(spec.inputs[other][0])
    return spec


# elementwise on every int type ---------------------------------------------------------------
@corner
def int_binary(rng, nrng):
    dt = rng.choice(INTS)
    op = rng.choice(["Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "BitwiseAnd",
                     "BitwiseOr", "BitwiseXor", "Equal", "Less", "Greater", "LessOrEqual",
                     "GreaterOrEqual", "BitShift", "Pow"])
    a, b = shape(rng, rng.randint(0, 3)), None
    b = a[rng.randint(0, len(a)):] if a else a
    b = tuple(1 if rng.random() < 0.3 else d for d in b)
    x = arr(nrng, a, dt, -20, 20)
    y = arr(nrng, b, dt, -6, 6)
    attrs = {}
    if op in ("Div", "Mod"):
        y[y == 0] = 3
        if op == "Mod":
            attrs["fmod"] = rng.choice([0, 1])
    if op == "BitShift":
        if np.dtype(dt).kind != "u":
            dt = rng.choice([np.uint8, np.uint16, np.uint32, np.uint64])
            x, y = arr(nrng, a, dt, 0, 40), arr(nrng, b, dt, 0, 7)
        attrs["direction"] = rng.choice(["LEFT", "RIGHT"])
    if op == "Pow":  # int32/int64 only (the spec's T for Pow)
        dt = rng.choice([np.int32, np.int64])
        x, y = arr(nrng, a, dt, -5, 5), arr(nrng, b, dt, 0, 3)
    if op == "Mod" and attrs["fmod"] == 0 and np.dtype(dt).kind == "u":
        pass
    spec = Spec([node(op, ["x", "w"], ["y"], **attrs)], {"x": [x], "w": [y]}, ["y"],
                18, {"w"})
    return spec


@corner
def int_unary(rng, nrng):
    dt = rng.choice([np.int8, np.int16, np.int32, np.int64])
    op = rng.choice(["Abs", "Neg", "Sign", "BitwiseNot", "Relu", "Clip", "Identity"])
    if op == "Relu":
        dt = rng.choice([np.int8, np.int32, np.int64])
    x = arr(nrng, shape(rng, rng.randint(0, 3)), dt, -30, 30)
    ins = ["x"]
    spec = Spec([], {"x": [x]}, ["y"], 18)
    if op == "Clip":
        lo, hi = sorted(int(v) for v in nrng.integers(-10, 10, 2))
        spec.inputs["lo"] = [np.array(lo, dt)]
        spec.inputs["hi"] = [np.array(hi, dt)]
        spec.fixed = {"lo", "hi"}
        ins = ["x", rng.choice(["lo", ""]), "hi"]
    spec.nodes = [node(op, ins, ["y"])]
    if op not in ("Clip",) and x.ndim and rng.random() < 0.5:
        _two_calls(rng, nrng, spec, "x", list(range(x.ndim)))
    return spec


@corner
def cast(rng, nrng):
    src = rng.choice(INTS + FLOATS + [np.bool_])
    dst = rng.choice(INTS + FLOATS + [np.bool_])
    x = arr(nrng, shape(rng, rng.randint(0, 3)), src, 0, 100)
    if np.dtype(src).kind == "f":
        x = np.abs(x).astype(src) * 10  # in range of every int type
        x = np.minimum(x, 100).astype(src)
        if np.dtype(dst).kind in "iu":
            x = np.trunc(x).astype(src)  # rounding toward zero is not what's checked here
    op = rng.choice(["Cast", "Cast", "CastLike"])
    spec = Spec([], {"x": [x]}, ["y"], rng.choice([13, 19, 21] if op == "Cast" else [15, 21]))
    if op == "Cast":
        spec.nodes = [node("Cast", ["x"], ["y"], to=helper.np_dtype_to_tensor_dtype(
            np.dtype(dst)))]
    else:
        spec.inputs["t"] = [np.zeros(1, dst)]
        spec.fixed = {"t"}
        spec.nodes = [node("CastLike", ["x", "t"], ["y"])]
    return spec


# reductions and arg/top -------------------------------------------------------------------
@corner
def reduce(rng, nrng):
    op = rng.choice(["ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd",
                     "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                     "ReduceSumSquare"])
    ints_ok = op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                     "ReduceSumSquare", "ReduceMean")
    small = op in ("ReduceMax", "ReduceMin") and rng.random() < 0.5
    dt = rng.choice(FLOATS + ([np.int32, np.int64] if ints_ok else []) +
                    ([np.int8, np.uint8] if small else []))
    if op in ("ReduceProd",) and np.dtype(dt).kind in "iu":
        dt = np.int64
    rank = rng.randint(0, 4)
    shp = shape(rng, rank, 0 if rng.random() < 0.15 else 1, 4)
    x = arr(nrng, shp, dt, 0 if op in ("ReduceLogSum",) else -4, 5)
    if op == "ReduceLogSum":
        x = np.abs(x) + np.array(1, dt)
    opset = rng.choice([13, 18, 18])
    picked = rng.sample(range(rank), rng.randint(0, rank)) if rank else []
    axes = [a - rank if rng.random() < 0.5 else a for a in picked]
    keep = rng.choice([0, 1, None])
    noop = rng.choice([0, 1, None])
    spec = Spec([], {"x": [x]}, ["y"], opset)
    ins = ["x"]
    attrs = {"keepdims": keep}
    if opset >= 18 or op == "ReduceSum":
        if opset < 13:
            attrs["axes"] = axes or None
        elif axes or rng.random() < 0.5:
            spec.inputs["axes"] = [np.array(axes, np.int64)]
            spec.fixed = {"axes"}
            ins.append("axes")
        attrs["noop_with_empty_axes"] = noop
    else:
        attrs["axes"] = axes or None
    spec.nodes = [node(op, ins, ["y"], **attrs)]
    if rank and "axes" not in spec.inputs or (spec.inputs.get("axes") and rng.random() < 0.3):
        if rng.random() < 0.4:
            _two_calls(rng, nrng, spec, "x", list(range(rank)))
    return spec


@corner
def arg(rng, nrng):
    op = rng.choice(["ArgMax", "ArgMin"])
    dt = rng.choice(FLOATS + [np.int32, np.int64, np.int8, np.uint8])
    rank = rng.randint(1, 4)
    x = arr(nrng, shape(rng, rank), dt, 0, 3)  # ties
    if np.dtype(dt).kind == "f":
        x = np.round(x).astype(dt)
    spec = Spec([node(op, ["x"], ["y"], axis=rng.randint(-rank, rank - 1),
                      keepdims=rng.choice([0, 1, None]),
                      select_last_index=rng.choice([0, 1, None]))], {"x": [x]}, ["y"],
                rng.choice([13, 18]))
    if rng.random() < 0.4:
        _two_calls(rng, nrng, spec, "x", list(range(rank)))
        spec.inputs["x"][1] = np.round(spec.inputs["x"][1]).astype(dt) if spec.inputs["x"][
            1].size else spec.inputs["x"][1]
        if min(spec.inputs["x"][1].shape) == 0:
            spec.inputs["x"].pop()
            spec.inputs["x"].append(spec.inputs["x"][0])
    return spec


@corner
def topk(rng, nrng):
    dt = rng.choice([np.float32, np.float64, np.int32, np.int64, np.float16])
    rank = rng.randint(1, 3)
    shp = shape(rng, rank, 1, 5)
    axis = rng.randint(-rank, rank - 1)
    x = arr(nrng, shp, dt, -50, 50)  # distinct enough; ties of ints are sorted by index
    k = rng.randint(0, shp[axis])
    spec = Spec([node("TopK", ["x", "k"], ["v", "i"], axis=axis,
                      largest=rng.choice([0, 1, None]), sorted=1)],
                {"x": [x], "k": [np.array([k], np.int64)]}, ["v", "i"], rng.choice([11, 18]),
                {"k"})
    return spec


@corner
def cumsum(rng, nrng):
    dt = rng.choice([np.float32, np.float64, np.int32, np.int64, np.float16])
    rank = rng.randint(1, 3)
    x = arr(nrng, shape(rng, rank, 0 if rng.random() < 0.1 else 1), dt)
    spec = Spec([node("CumSum", ["x", "a"], ["y"], exclusive=rng.choice([0, 1]),
                      reverse=rng.choice([0, 1]))],
                {"x": [x], "a": [np.array(rng.randint(-rank, rank - 1),
                                          rng.choice([np.int32, np.int64]))]},
                ["y"], 14, {"x", "a"})
    return spec
