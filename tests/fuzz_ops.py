"""The fuzzer's op catalogue, part 1: the registry, constants, elementwise ops, reductions.

Each entry is a function `entry(b: Builder)` that picks operands with `b.pick` (raising
`Skip` when none fits), adds its nodes and registers its outputs' dims (one size tuple per
dim, see `fuzz_graphs`), dtype and value class. `CATALOGUE` maps entry names to functions and
`WEIGHTS` holds their draw weights; `fuzz_ops_nn` (linear algebra, conv, pools, norms) and
`fuzz_ops_shape` (shape, indexing and layout ops) add their entries through `entry()`.

Value classes (see `fuzz_graphs`): an op keeps "tame" (finite, |x| <= 1e4) only when its
result is bounded by its tame operands; accumulating ops and casts to ints take tame operands.
"""

from __future__ import annotations

import numpy as np
from fuzz_graphs import (
    BOOL,
    F16,
    F32,
    F64,
    FLOATS,
    I32,
    I64,
    INTS,
    NP,
    Builder,
    Skip,
    make_array,
    static,
)

CATALOGUE: dict = {}
WEIGHTS: list = []


def entry(weight: float = 1.0):
    def register(fn):
        CATALOGUE[fn.__name__] = fn
        WEIGHTS.append(weight)
        return fn
    return register


def need(v):
    if v is None:
        raise Skip
    return v


def bcast(a: list, b: list) -> list | None:
    """Numpy broadcasting of two dims lists (size tuples), or None if they do not fit."""
    n = max(len(a), len(b))
    ones = None
    out = []
    for k in range(n):
        x = a[k - n + len(a)] if k >= n - len(a) else None
        y = b[k - n + len(b)] if k >= n - len(b) else None
        if x is None or y is None:
            out.append(x or y)
        elif x == y:
            out.append(x)
        elif set(x) == {1}:
            out.append(y)
        elif set(y) == {1}:
            out.append(x)
        else:
            return ones
    return out


def out_kind(*vals, bounded: bool = True) -> str:
    return "tame" if bounded and all(v.kind in ("tame", "index") for v in vals) else "wild"


# sources ----------------------------------------------------------------------------------
@entry(1.0)
def constant_source(b: Builder):
    """A constant tensor (initializer, Constant node or overridable initializer) that later
    ops use, so folding meets every op, empty constants included."""
    dtype = b.rng.choice([F32, F32, F16, F64, I64, I32])
    shape = tuple(b.rng.choice([0, 1, 2, 3, 4]) for _ in range(b.rng.randint(0, 4)))
    kind = "wild" if b.rng.random() < 0.3 else "tame"
    mode = b.rng.choice(["init", "node", "override"])
    name = b.const(make_array(b.nrng, dtype, shape, kind), "k", mode)
    b.add_value(name, dtype, [(s,) * b.calls for s in shape], "wild" if mode == "override"
                else kind)


# elementwise ------------------------------------------------------------------------------
# (Asin, Acos, Atanh, Acosh are nan outside their domain: not tame)
BOUNDED = {"Tanh", "Sigmoid", "Erf", "Atan", "Softsign", "Sign", "Sin", "Cos", "HardSigmoid",
           "Asinh"}
KEEPS = {"Abs", "Neg", "Relu", "Floor", "Ceil", "Round", "LeakyRelu", "Elu", "Selu",
         "Celu", "ThresholdedRelu", "HardSwish", "Shrink", "Mish", "Softplus", "Gelu"}
UNARY_F = ["Abs", "Neg", "Relu", "Floor", "Ceil", "Round", "Sign", "Tanh", "Sigmoid", "Exp",
           "Log", "Sqrt", "Reciprocal", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan",
           "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Softplus", "Softsign", "Elu", "Selu",
           "Celu", "LeakyRelu", "ThresholdedRelu", "HardSigmoid", "HardSwish", "Shrink",
           "Mish", "Gelu"]


def _unary_attrs(b: Builder, op: str) -> dict:
    r = b.rng
    if op in ("Elu", "Celu", "ThresholdedRelu", "LeakyRelu") and r.random() < 0.7:
        return {"alpha": r.choice([0.1, 0.5, 1.0, 2.0])}
    if op == "Selu" and r.random() < 0.5:
        return {"alpha": 1.5, "gamma": 1.1}
    if op == "HardSigmoid" and r.random() < 0.5:
        return {"alpha": 0.3, "beta": 0.4}
    if op == "Shrink" and r.random() < 0.7:
        return {"lambd": r.choice([0.5, 1.0]), "bias": r.choice([0.0, 0.2])}
    if op == "Gelu" and r.random() < 0.5:
        return {"approximate": "tanh"}
    return {}


@entry(5.0)
def unary_float(b: Builder):
    x = need(b.pick(FLOATS))
    op = b.rng.choice(UNARY_F)
    since = {"Gelu": 20, "Mish": 18, "HardSwish": 14}
    if b.opset < since.get(op, 0):
        op = "Tanh"
    if op == "Celu" and x.dtype != F32:  # Celu is float-only in onnx
        op = "Elu"
    kind = x.kind if op in KEEPS else "tame" if op in BOUNDED and x.kind == "tame" else "wild"
    (y,) = b.node(op, [x.name], **_unary_attrs(b, op))
    b.add_value(y, x.dtype, x.dims, kind)


@entry(1.0)
def unary_int(b: Builder):
    x = need(b.pick(INTS))
    op = b.rng.choice(["Abs", "Neg", "Sign", "Relu", "BitwiseNot"])
    if op == "BitwiseNot" and b.opset < 18:
        op = "Neg"
    if op == "Relu" and b.opset < 14:
        op = "Abs"
    (y,) = b.node(op, [x.name])
    b.add_value(y, x.dtype, x.dims, x.kind if x.kind != "index" else "tame")


@entry(1.0)
def predicate(b: Builder):
    x = need(b.pick(FLOATS))
    op = b.rng.choice(["IsNaN", "IsInf"])
    attrs = {}
    if op == "IsInf" and x.dtype == F16 and b.opset < 20:
        op = "IsNaN"
    if op == "IsInf" and b.rng.random() < 0.5:
        attrs = {b.rng.choice(["detect_negative", "detect_positive"]): 0}
    (y,) = b.node(op, [x.name], **attrs)
    b.add_value(y, BOOL, x.dims, "mask")


def _second(b: Builder, x, kind: str = "wild"):
    """A broadcastable second operand for `x`."""
    for _ in range(3):
        other = b.pick([x.dtype], cond=lambda v: v is not x and bcast(x.dims, v.dims) is not None)
        if other is not None and b.rng.random() < 0.4 and (kind == "wild" or
                                                           other.kind == kind):
            return other
    dims = list(x.dims)
    if dims and b.rng.random() < 0.3:  # a broadcast dim of 1 on either side
        k = b.rng.randrange(len(dims))
        dims[k] = (1,) * b.calls
    return b.operand(x.dtype, dims, "tame" if kind != "nonzero" else "nonzero")


@entry(6.0)
def binary(b: Builder):
    x = need(b.pick(FLOATS + INTS))
    floats = x.dtype in FLOATS
    ops = ["Add", "Sub", "Mul", "Max", "Min", "Div", "Pow", "Mod", "PRelu", "Sum", "Mean"]
    if x.dtype == I32:
        ops = ["Add", "Sub", "Mul", "Max", "Min", "Div", "Mod"]
    elif not floats:
        ops = ["Add", "Sub", "Mul", "Max", "Min", "Div", "Mod", "BitwiseAnd", "BitwiseOr",
               "BitwiseXor"]
    op = b.rng.choice(ops)
    if op.startswith("Bitwise") and b.opset < 18:
        op = "Add"
    divides = op in ("Div", "Mod") and not floats
    if divides:  # ints: no division by 0, no INT64_MIN / -1
        if x.kind == "wild":
            raise Skip
        dims = [d if b.rng.random() < 0.7 else (1,) * b.calls for d in x.dims]
        if b.rng.random() < 0.5 or not all(static(d) for d in dims):
            y = b.graph_input(x.dtype, dims, "nonzero")
        else:
            arr = make_array(b.nrng, x.dtype, tuple(d[0] for d in dims), "nonzero")
            y = b.add_value(b.const(arr, "w", b.rng.choice(["init", "node"])), x.dtype, dims)
    elif op == "Pow":  # moderate exponents: x**y of a huge y hangs on y's last bit
        exps = np.array(b.nrng.choice([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, 1.5],
                                      tuple(d[0] if static(d) else 1 for d in x.dims)))
        mode = b.rng.choice(["init", "node", "override"])
        y = b.add_value(b.const(exps.astype(NP[x.dtype]), "e", mode, wild=False), x.dtype,
                        [(n,) * b.calls for n in exps.shape])
    else:
        y = _second(b, x)
    attrs = {"fmod": 1} if op == "Mod" and floats else {}
    if op == "Mod" and not floats and b.rng.random() < 0.3:
        attrs = {"fmod": 1}
    args = [x.name, y.name]
    dims = bcast(x.dims, y.dims)
    if op == "PRelu" and dims != x.dims:  # slope broadcasts to x only
        op = "Max"
    if op in ("Sub", "Div", "Max", "Min") and not divides and b.rng.random() < 0.5:
        args.reverse()
    if x.kind == "wild" and not floats and op in ("Mul", "Add", "Sub"):
        pass  # ints wrap in every implementation
    bounded = op in ("Add", "Sub", "Max", "Min", "Mean") and floats
    (z,) = b.node(op, args, **attrs)
    b.add_value(z, x.dtype, dims, out_kind(x, y, bounded=bounded) if floats else
                ("tame" if op in ("Max", "Min", "BitwiseAnd") and x.kind != "wild" and
                 y.kind != "wild" else "wild"))


@entry(2.0)
def compare(b: Builder):
    x = need(b.pick(FLOATS + INTS))
    op = b.rng.choice(["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
    if op == "Equal" and x.dtype == F16 and b.opset < 19:
        op = "Less"
    y = _second(b, x)
    (z,) = b.node(op, [x.name, y.name])
    b.add_value(z, BOOL, bcast(x.dims, y.dims), "mask")


@entry(1.5)
def logical(b: Builder):
    x = need(b.pick([BOOL]))
    op = b.rng.choice(["And", "Or", "Xor", "Not"])
    if op == "Not":
        (z,) = b.node(op, [x.name])
        b.add_value(z, BOOL, x.dims, "mask")
        return
    y = _second(b, x)
    (z,) = b.node(op, [x.name, y.name])
    b.add_value(z, BOOL, bcast(x.dims, y.dims), "mask")


@entry(2.0)
def where(b: Builder):
    c = need(b.pick([BOOL]))
    x = need(b.pick(FLOATS + INTS, cond=lambda v: bcast(c.dims, v.dims) is not None))
    y = _second(b, x)
    dims = bcast(bcast(c.dims, x.dims), y.dims)
    if dims is None:
        raise Skip
    (z,) = b.node("Where", [c.name, x.name, y.name])
    b.add_value(z, x.dtype, dims, out_kind(x, y))


@entry(2.0)
def clip(b: Builder):
    x = need(b.pick(FLOATS + INTS))
    dt = NP[x.dtype]
    lo, hi = sorted(b.rng.sample([-3, -1, 0, 1, 2, 5, 100], 2))
    args = [x.name, "", ""]
    if b.rng.random() < 0.8:
        args[1] = b.const(np.array(lo, dt))
    if b.rng.random() < 0.8:
        args[2] = b.const(np.array(hi, dt))
    while args[-1] == "":
        args.pop()
    (y,) = b.node("Clip", args)
    finite = len(args) == 3 and args[1] and x.kind != "wild"
    b.add_value(y, x.dtype, x.dims, "tame" if finite or x.kind == "tame" else "wild")


@entry(2.0)
def cast(b: Builder):
    x = need(b.pick(FLOATS + INTS + (BOOL,)))
    to = b.rng.choice([F16, F32, F64, I64, I32, BOOL])
    if to == I32 and x.dtype in FLOATS:
        to = I64  # a float chain can leave int32's range even from tame values
    if to in INTS and x.dtype in FLOATS and x.kind != "tame":
        raise Skip  # float -> int is undefined for non-finite or out-of-range values
    if x.dtype in INTS and to == F16 and x.kind == "wild":
        to = F32
    kind = x.kind if x.kind != "mask" else "tame"
    if to == BOOL:
        kind = "mask"
    elif x.dtype == BOOL:
        kind = "tame"
    elif to == F16 and x.dtype != F16:
        kind = "wild" if kind == "wild" or x.dtype in INTS else "tame"
    if b.rng.random() < 0.3 and x.dtype != BOOL and to != BOOL and b.opset >= 15:
        like = b.const(np.zeros((), NP[to]))
        (y,) = b.node("CastLike", [x.name, like])
    else:
        (y,) = b.node("Cast", [x.name], to=to)
    b.add_value(y, to, x.dims, kind)


# reductions -------------------------------------------------------------------------------
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
          "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum"]
NONEMPTY = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceLogSum"}


@entry(4.0)
def reduce(b: Builder):
    op = b.rng.choice(REDUCE)
    wild_ok = op in ("ReduceMax", "ReduceMin")
    x = need(b.pick(FLOATS + INTS if op in ("ReduceSum", "ReduceMax", "ReduceMin",
                                               "ReduceProd") else FLOATS, rank=(1, 5),
                    kinds=None if wild_ok else ("tame", "index")))
    axes = sorted(b.rng.sample(range(x.rank), b.rng.randint(1, x.rank)))
    if op in NONEMPTY and any(min(x.dims[a]) == 0 for a in axes):
        raise Skip
    keep = b.rng.choice([0, 1])
    allaxes = b.rng.random() < 0.15
    given = [a - x.rank if b.rng.random() < 0.3 else a for a in axes]
    attrs = {"keepdims": keep}
    inputs = [x.name]
    as_input = op == "ReduceSum" and b.opset >= 13 or b.opset >= 18
    if allaxes:
        axes = list(range(x.rank))
    elif as_input:
        inputs.append(b.ints(given))
    else:
        attrs["axes"] = given
    (y,) = b.node(op, inputs, **attrs)
    dims = [((1,) * b.calls) if k in axes else d for k, d in enumerate(x.dims) if keep or
            k not in axes]
    kind = "tame" if op in ("ReduceMax", "ReduceMin", "ReduceMean") and x.kind == "tame" \
        else "wild"
    b.add_value(y, x.dtype, dims, kind)


@entry(1.5)
def arg_reduce(b: Builder):
    x = need(b.pick(FLOATS + INTS, rank=(1, 5), kinds=("tame", "index"),
                    cond=lambda v: any(min(d) > 0 for d in v.dims)))
    axis = b.rng.choice([k for k, d in enumerate(x.dims) if min(d) > 0])
    keep = b.rng.choice([0, 1])
    attrs = {"axis": axis - x.rank if b.rng.random() < 0.3 else axis, "keepdims": keep}
    if b.rng.random() < 0.4:
        attrs["select_last_index"] = 1
    (y,) = b.node(b.rng.choice(["ArgMax", "ArgMin"]), [x.name], **attrs)
    dims = [(1,) * b.calls if k == axis else d for k, d in enumerate(x.dims)
            if keep or k != axis]
    b.add_value(y, I64, dims, "index")


@entry(2.0)
def softmax(b: Builder):
    x = need(b.pick(FLOATS, rank=(1, 5), kinds=("tame",)))
    op = b.rng.choice(["Softmax", "LogSoftmax", "Hardmax"])
    axis = b.rng.randrange(-x.rank, x.rank)
    (y,) = b.node(op, [x.name], axis=axis)
    b.add_value(y, x.dtype, x.dims, "tame" if op != "LogSoftmax" else "wild")


@entry(1.5)
def cumsum(b: Builder):
    x = need(b.pick(FLOATS + INTS, rank=(1, 5), kinds=("tame", "index"),
                    cond=lambda v: v.dtype != F16 or b.opset >= 14))
    axis = b.rng.randrange(-x.rank, x.rank)
    attrs = {k: 1 for k in ("exclusive", "reverse") if b.rng.random() < 0.4}
    (y,) = b.node("CumSum", [x.name, b.ints(axis, "ax")], **attrs)
    b.add_value(y, x.dtype, x.dims, "wild")


@entry(1.0)
def topk(b: Builder):
    x = need(b.pick(FLOATS + INTS, rank=(1, 4), kinds=("tame", "index"),
                    cond=lambda v: any(min(d) > 0 for d in v.dims)))
    axis = b.rng.choice([k for k, d in enumerate(x.dims) if min(d) > 0])
    k = b.rng.randint(1, min(x.dims[axis]))
    attrs = {"axis": axis - x.rank if b.rng.random() < 0.3 else axis}
    if b.rng.random() < 0.4:
        attrs["largest"] = 0
    vals, idx = b.node("TopK", [x.name, b.ints([k])], 2, **attrs)
    dims = [(k,) * b.calls if j == axis else d for j, d in enumerate(x.dims)]
    b.add_value(vals, x.dtype, dims, "tame")
    b.add_value(idx, I64, dims, "index")


import fuzz_ops_more  # noqa: E402,F401
import fuzz_ops_nn  # noqa: E402,F401  (registers its entries)
import fuzz_ops_shape  # noqa: E402,F401
