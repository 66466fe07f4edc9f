"""The fuzzer's op catalogue, part 4: data-dependent shapes and the remaining common ops.

Entries as in `fuzz_ops`. NonZero and Compress make shapes that depend on values: their data
is a graph input whose value in each call is fixed when the graph is built
(`Builder.preset_input`), so the output sizes are known per call, and onnxjit must run the
graph in stages. Also: Einsum (matmul, transpose, reduction equations), Identity, Dropout in
inference, ScatterND with distinct indices, EyeLike, variadic Sum/Mean/Max/Min, shapes computed
from Shape/Size (Reshape targets, Range limits, ConstantOfShape), Reshape with allowzero,
Pow with an integer exponent, Shape (with start), Size and ConstantOfShape.
"""

from __future__ import annotations

import numpy as np
from fuzz_graphs import BOOL, F16, F32, FLOATS, I64, INTS, NP, Builder, Skip, static
from fuzz_ops import bcast, entry, need


@entry(1.0)
def nonzero(b: Builder):
    rank = b.rng.randint(1, 3)
    dims = [b.dim(0, 4) for _ in range(rank)]
    dt = b.rng.choice([BOOL, F32, I64])
    arrays = []
    for k in range(b.calls):
        shape = tuple(d[k] for d in dims)
        a = b.nrng.random(shape) < 0.5
        arrays.append(a if dt == BOOL else (a * b.nrng.integers(1, 5, shape)).astype(NP[dt]))
    x = b.preset_input(dims, arrays)
    (y,) = b.node("NonZero", [x.name])
    b.add_value(y, I64, [(rank,) * b.calls, tuple(int(np.count_nonzero(a)) for a in arrays)],
                "index")


@entry(1.0)
def compress(b: Builder):
    x = need(b.pick(FLOATS + INTS + (BOOL,), rank=(1, 3)))
    axis = b.rng.choice([None] + list(range(x.rank)))
    if axis is None:
        n = [int(np.prod([d[k] for d in x.dims])) for k in range(b.calls)]
    else:
        n = [d for d in x.dims[axis]]
    conds = [b.nrng.random(m) < 0.5 for m in n]
    c = b.preset_input([tuple(n)], conds, "cond")
    attrs = {} if axis is None else {"axis": axis - x.rank if b.rng.random() < 0.3 else axis}
    (y,) = b.node("Compress", [x.name, c.name], **attrs)
    count = tuple(int(a.sum()) for a in conds)
    dims = [count] if axis is None else [count if k == axis else d
                                          for k, d in enumerate(x.dims)]
    b.add_value(y, x.dtype, dims, x.kind)


@entry(1.5)
def einsum(b: Builder):
    x = need(b.pick(FLOATS, rank=(1, 3), kinds=("tame",)))
    letters = "abc"[:x.rank]
    form = b.rng.choice(["transpose", "reduce", "matmul"])
    if form == "transpose":
        out = "".join(b.rng.sample(letters, len(letters)))
        (y,) = b.node("Einsum", [x.name], equation=f"{letters}->{out}")
        dims = [x.dims[letters.index(c)] for c in out]
    elif form == "reduce":
        keep = sorted(b.rng.sample(range(x.rank), b.rng.randint(0, x.rank - 1)))
        out = "".join(letters[k] for k in keep)
        (y,) = b.node("Einsum", [x.name], equation=f"{letters}->{out}")
        dims = [x.dims[k] for k in keep]
    else:
        n = b.dim(1, 3, sym=0.3)
        wdims = [x.dims[-1], n]
        w = b.operand(x.dtype, wdims, "tame", broadcast=False)
        (y,) = b.node("Einsum", [x.name, w.name],
                      equation=f"{letters},{letters[-1]}z->{letters[:-1]}z")
        dims = list(x.dims[:-1]) + [n]
    b.add_value(y, x.dtype, dims, "wild")


@entry(0.7)
def identity(b: Builder):
    x = need(b.pick())
    if b.rng.random() < 0.5 and x.dtype in FLOATS:
        args = [x.name]
        if b.opset >= 12 and b.rng.random() < 0.5:
            args.append(b.const(np.array(0.3, np.float32), "ratio"))
        outs = b.node("Dropout", args, b.rng.choice([1, 2]))
        b.add_value(outs[0], x.dtype, x.dims, x.kind)
        if len(outs) == 2:
            b.add_value(outs[1], BOOL, x.dims, "mask")
        return
    (y,) = b.node("Identity", [x.name])
    b.add_value(y, x.dtype, x.dims, x.kind)


@entry(1.0)
def scatter_nd(b: Builder):
    x = need(b.pick(FLOATS + INTS, rank=(1, 3), cond=lambda v: static(v.dims[0]) and
                    v.dims[0][0] > 0))
    n = x.dims[0][0]
    rows = b.nrng.permutation(n)[:b.rng.randint(1, n)]  # distinct: no write order to depend on
    idx = b.ints(rows.reshape(-1, 1), "idx")
    udims = [(len(rows),) * b.calls] + list(x.dims[1:])
    upd = b.operand(x.dtype, udims, "tame", broadcast=False)
    attrs = {}
    if b.opset >= 18 and b.rng.random() < 0.3:
        attrs["reduction"] = b.rng.choice(["add", "mul", "max", "min"])
    (y,) = b.node("ScatterND", [x.name, idx, upd.name], **attrs)
    b.add_value(y, x.dtype, x.dims, "wild" if attrs else x.kind)


@entry(0.5)
def eye_like(b: Builder):
    x = need(b.pick(FLOATS + INTS, rank=(2, 2)))
    attrs = {"k": b.rng.randint(-2, 2)} if b.rng.random() < 0.5 else {}
    if b.rng.random() < 0.3:
        attrs["dtype"] = b.rng.choice([F32, I64])
    (y,) = b.node("EyeLike", [x.name], **attrs)
    b.add_value(y, attrs.get("dtype", x.dtype), x.dims, "tame")


@entry(1.0)
def variadic(b: Builder):
    x = need(b.pick(FLOATS))
    op = b.rng.choice(["Sum", "Mean", "Max", "Min"])
    parts = [x]
    for _ in range(b.rng.randint(2, 3)):
        dims = [d if b.rng.random() < 0.8 else (1,) * b.calls for d in x.dims]
        parts.append(b.operand(x.dtype, dims, "tame"))
    dims = x.dims
    for p in parts[1:]:
        dims = bcast(dims, p.dims)
        if dims is None:
            raise Skip
    b.rng.shuffle(parts)
    (y,) = b.node(op, [p.name for p in parts])
    wild = any(p.kind == "wild" for p in parts)
    b.add_value(y, x.dtype, dims, "wild" if wild or op == "Sum" else "tame")




@entry(1.5)
def computed_shape(b: Builder):
    """Shape arithmetic as exporters write it: a Reshape target, a Range limit or a
    ConstantOfShape shape computed from Shape/Size of a value with symbolic dims."""
    x = need(b.pick(rank=(1, 4)))
    form = b.rng.choice(["reshape", "reshape", "range", "fill"])
    (shape,) = b.node("Shape", [x.name])
    if form == "range":
        (n,) = b.node("Size", [x.name])
        first = b.rng.choice([0, 1])
        start = b.const(np.array(first, np.int64), "r", b.rng.choice(["init", "node"]))
        (y,) = b.node("Range", [start, n, b.const(np.array(1, np.int64), "r", "init")])
        size = [max(0, int(np.prod([d[k] for d in x.dims])) - first) for k in range(b.calls)]
        b.add_value(y, I64, [tuple(size)], "index")
        return
    k = b.rng.randint(1, x.rank)
    (head,) = b.node("Slice", [shape, b.ints([0], "starts"), b.ints([k], "ends")])
    if form == "fill":
        (y,) = b.node("ConstantOfShape", [head])
        b.add_value(y, F32, list(x.dims[:k]), "tame")
        return
    if any(np.prod([d[c] for d in x.dims[:k]]) == 0 for c in range(b.calls)):
        raise Skip  # -1 beside a 0-size dim is ambiguous
    (target,) = b.node("Concat", [head, b.ints([-1], "rest")], axis=0)
    (y,) = b.node("Reshape", [x.name, target])
    rest = tuple(int(np.prod([d[c] for d in x.dims[k:]])) for c in range(b.calls))
    b.add_value(y, x.dtype, list(x.dims[:k]) + [rest], x.kind)


@entry(0.5)
def reshape_allowzero(b: Builder):
    x = need(b.pick(rank=(1, 3), cond=lambda v: all(static(d) for d in v.dims)))
    if b.opset < 14:
        raise Skip
    shape = [d[0] for d in x.dims]
    if 0 in shape:  # a 0 in the target is a 0-size dim, not a copy
        target = list(shape)
        b.rng.shuffle(target)
    else:
        target = [int(np.prod(shape))]
    (y,) = b.node("Reshape", [x.name, b.ints(target, "shape")], allowzero=1)
    b.add_value(y, x.dtype, [(t,) * b.calls for t in target], x.kind)


@entry(0.7)
def pow_int_exponent(b: Builder):
    x = need(b.pick(FLOATS))
    # small exponents and some past float32's 2**24, odd and even (whose parity gives the
    # sign of a negative base: float ** int computes in f64)
    shape = tuple(d[0] if static(d) else 1 for d in x.dims)
    exps = b.nrng.integers(-4, 5, shape)
    big = b.nrng.random(shape) < 0.3
    exps[big] = b.nrng.choice([2**24 + 1, -(2**24 + 1), 2**25, 2**31 - 1, -(2**31) - 1,
                               2**53 + 1], int(big.sum()))
    e = b.add_value(b.const(exps, "e", None), I64, [(n,) * b.calls for n in shape])
    (y,) = b.node("Pow", [x.name, e.name])
    b.add_value(y, x.dtype, bcast(x.dims, e.dims), "wild")


@entry(1.0)
def shape_of(b: Builder):
    x = need(b.pick())
    attrs = {}
    if b.opset >= 15 and b.rng.random() < 0.4 and x.rank:
        attrs = {"start": b.rng.randint(-x.rank - 1, x.rank)}
    if b.rng.random() < 0.3:
        (y,) = b.node("Size", [x.name])
        b.add_value(y, I64, [], "tame")
        return
    (y,) = b.node("Shape", [x.name], **attrs)
    s = attrs.get("start", 0)
    s = max(0, s + x.rank if s < 0 else s)
    b.add_value(y, I64, [(max(0, x.rank - min(s, x.rank)),) * b.calls], "tame")
    if b.rng.random() < 0.5 and not attrs:  # a tensor of x's (maybe symbolic) dims
        dt = b.rng.choice([F32, I64, F16])
        from onnx import numpy_helper
        value = numpy_helper.from_array(np.array([b.rng.choice([0, 1, 2.5])],
                                                 {F32: np.float32, I64: np.int64,
                                                  F16: np.float16}[dt]))
        (z,) = b.node("ConstantOfShape", [y], value=value)
        b.add_value(z, dt, x.dims, "tame")
