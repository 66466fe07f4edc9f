"""The fuzzer's op catalogue, part 3: shape, layout and indexing ops.

Entries as in `fuzz_ops`. Shape tensors (Reshape targets, Slice starts/ends, pads, repeats,
axes) are constants, chosen so they are valid for every call's sizes (a Reshape keeps symbolic
dims with 0 and folds the rest into -1; Slice bounds may be anything, extremes included, and
the output length follows the ONNX clamping rules per call); indices are constants within the
smallest call's bounds, or graph inputs of class "index".
"""

from __future__ import annotations

import math

import numpy as np
from fuzz_graphs import BOOL, F16, F32, F64, FLOATS, I32, I64, NP, Builder, Skip, static
from fuzz_ops import entry, need

ANY = FLOATS + (I64, I32, BOOL)
BIG = [2**62, -(2**62), 2**63 - 1, -(2**63)]


def slice_len(n: int, start: int, end: int, step: int) -> int:
    """Elements selected by ONNX Slice on a dim of size n."""
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), n), min(max(end, 0), n)
        return max(0, -(-(end - start) // step))
    start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
    return max(0, -(-(start - end) // -step))


@entry(2.0)
def reshape(b: Builder):
    x = need(b.pick(ANY))
    keep = b.rng.randint(0, x.rank)
    rest = x.dims[keep:]
    sizes = [math.prod(d[k] for d in rest) for k in range(b.calls)]
    kept_nonzero = all(math.prod(d[k] for d in x.dims[:keep]) > 0 for k in range(b.calls))
    if b.rng.random() < 0.5 and len(set(sizes)) == 1 and x.rank and all(
            static(d) for d in x.dims):
        total = sizes[0] * math.prod(d[0] for d in x.dims[:keep])
        if total == 0:  # a 0 in the target would copy the input's dim
            raise Skip
        target, dims = [total], [(total,) * b.calls]  # a static factoring
        if total and total % 2 == 0 and b.rng.random() < 0.5:
            target, dims = [2, total // 2], [(2,) * b.calls, (total // 2,) * b.calls]
    elif kept_nonzero:
        extra = [1] if b.rng.random() < 0.3 else []
        target = [0] * keep + extra + [-1]
        dims = list(x.dims[:keep]) + [(1,) * b.calls] * len(extra) + [tuple(sizes)]
    else:
        raise Skip
    (y,) = b.node("Reshape", [x.name, b.ints(target, "shape")])
    b.add_value(y, x.dtype, dims, x.kind)


@entry(2.0)
def transpose(b: Builder):
    x = need(b.pick(ANY, rank=(2, 5)))
    perm = list(range(x.rank))
    b.rng.shuffle(perm)
    (y,) = b.node("Transpose", [x.name], perm=perm)
    b.add_value(y, x.dtype, [x.dims[p] for p in perm], x.kind)


@entry(1.5)
def squeeze_unsqueeze(b: Builder):
    x = need(b.pick(ANY, rank=(0, 4)))
    ones = [k for k, d in enumerate(x.dims) if d == (1,) * b.calls]
    if ones and b.rng.random() < 0.5:
        axes = b.rng.sample(ones, b.rng.randint(1, len(ones)))
        given = [a - x.rank if b.rng.random() < 0.3 else a for a in axes]
        args = [x.name] + ([b.ints(given, "axes")] if b.opset >= 13 else [])
        attrs = {} if b.opset >= 13 else {"axes": given}
        others_above_1 = all(min(d) > 1 for k, d in enumerate(x.dims) if k not in ones)
        if b.rng.random() < 0.2 and len(ones) == len(axes) and others_above_1:
            args, attrs = [x.name], {}  # all dims of size 1, in every call
        (y,) = b.node("Squeeze", args, **attrs)
        b.add_value(y, x.dtype, [d for k, d in enumerate(x.dims) if k not in axes], x.kind)
        return
    n = b.rng.randint(1, 2)
    out_rank = x.rank + n
    axes = sorted(b.rng.sample(range(out_rank), n))
    given = [a - out_rank if b.rng.random() < 0.3 else a for a in axes]
    (y,) = b.node("Unsqueeze", [x.name, b.ints(given, "axes")])
    dims, it = [], iter(x.dims)
    for k in range(out_rank):
        dims.append((1,) * b.calls if k in axes else next(it))
    b.add_value(y, x.dtype, dims, x.kind)


@entry(1.0)
def flatten(b: Builder):
    x = need(b.pick(ANY, rank=(1, 5)))
    axis = b.rng.randint(-x.rank, x.rank)
    a = axis + x.rank if axis < 0 else axis
    (y,) = b.node("Flatten", [x.name], axis=axis)
    prod = [tuple(math.prod(d[k] for d in ds) for k in range(b.calls))
            for ds in (x.dims[:a], x.dims[a:])]
    b.add_value(y, x.dtype, prod, x.kind)


@entry(2.0)
def concat(b: Builder):
    x = need(b.pick(ANY, rank=(1, 4)))
    axis = b.rng.randrange(x.rank)
    parts = [x]
    for _ in range(b.rng.randint(1, 2)):
        dims = list(x.dims)
        if b.rng.random() < 0.6:
            dims[axis] = (b.rng.choice([0, 1, 2, 3]),) * b.calls
        parts.append(b.operand(x.dtype, dims, "tame", broadcast=False))
    b.rng.shuffle(parts)
    (y,) = b.node("Concat", [p.name for p in parts], axis=axis - x.rank
                  if b.rng.random() < 0.3 else axis)
    dims = list(x.dims)
    dims[axis] = tuple(sum(p.dims[axis][k] for p in parts) for k in range(b.calls))
    b.add_value(y, x.dtype, dims, "wild" if any(p.kind == "wild" for p in parts) else x.kind)


@entry(1.5)
def split(b: Builder):
    x = need(b.pick(ANY, rank=(1, 4), cond=lambda v: any(static(d) for d in v.dims)))
    axis = b.rng.choice([k for k, d in enumerate(x.dims) if static(d)])
    n = x.dims[axis][0]
    if b.opset >= 18 and n > 0 and b.rng.random() < 0.4:
        k = b.rng.randint(1, n)
        chunk = -(-n // k)
        sizes = [min(chunk, n - i * chunk) for i in range(k)]
        if sizes[-1] <= 0:
            raise Skip
        outs = b.node("Split", [x.name], len(sizes), axis=axis, num_outputs=k)
    else:
        cuts = sorted(b.rng.randint(0, n) for _ in range(b.rng.randint(1, 2)))
        sizes = [hi - lo for lo, hi in zip([0] + cuts, cuts + [n])]
        outs = b.node("Split", [x.name, b.ints(sizes, "split")] if b.opset >= 13 else
                      [x.name], len(sizes), axis=axis,
                      **({} if b.opset >= 13 else {"split": sizes}))
    for o, s in zip(outs, sizes):
        dims = list(x.dims)
        dims[axis] = (s,) * b.calls
        b.add_value(o, x.dtype, dims, x.kind)


@entry(3.0)
def slice_(b: Builder):
    x = need(b.pick(ANY, rank=(1, 4)))
    axes = b.rng.sample(range(x.rank), b.rng.randint(1, x.rank))
    starts, ends, steps, dims = [], [], [], list(x.dims)
    for a in axes:
        n = min(x.dims[a])
        step = b.rng.choice([1, 1, 2, -1, -1, -2, 3])
        pool = [0, 1, -1, n, -n, n + 2, -n - 3, -n - 1, n - 1] + BIG
        starts.append(b.rng.choice(pool + [b.rng.randint(-n - 2, n + 2)]))
        # onnxruntime reads an end of INT64_MAX/MIN as "to the end" whatever the step
        ends.append(b.rng.choice(pool[:-2] + [b.rng.randint(-n - 2, n + 2)]))
        steps.append(step)
        dims[a] = tuple(slice_len(m, starts[-1], ends[-1], step) for m in x.dims[a])
    args = [x.name, b.ints(starts, "starts"), b.ints(ends, "ends")]
    r = b.rng.random()
    if r < 0.8 or any(s != 1 for s in steps):
        args.append(b.ints([a - x.rank if b.rng.random() < 0.3 else a for a in axes], "axes"))
    elif axes != list(range(len(axes))):
        raise Skip
    if any(s != 1 for s in steps) or b.rng.random() < 0.3:
        if len(args) == 3:
            args.append("")  # default axes
        args.append(b.ints(steps, "steps"))
    (y,) = b.node("Slice", args)
    b.add_value(y, x.dtype, dims, x.kind)


def _indices(b: Builder, n: int, shape: tuple, negative: bool = True) -> str:
    lo = -n if negative and b.rng.random() < 0.5 else 0
    return b.ints(b.nrng.integers(lo, n, shape), "idx")


@entry(2.0)
def gather(b: Builder):
    x = need(b.pick(ANY, rank=(1, 4), cond=lambda v: any(min(d) > 0 for d in v.dims)))
    axis = b.rng.choice([k for k, d in enumerate(x.dims) if min(d) > 0])
    n = min(x.dims[axis])
    shape = tuple(b.rng.randint(0, 3) for _ in range(b.rng.randint(0, 2)))
    idx = _indices(b, n, shape)
    (y,) = b.node("Gather", [x.name, idx], axis=axis - x.rank if b.rng.random() < 0.3
                  else axis)
    dims = list(x.dims[:axis]) + [(s,) * b.calls for s in shape] + list(x.dims[axis + 1:])
    b.add_value(y, x.dtype, dims, x.kind)


@entry(2.0)
def gather_elements(b: Builder):
    x = need(b.pick(ANY, rank=(1, 4), cond=lambda v: any(min(d) > 0 for d in v.dims)))
    axis = b.rng.choice([k for k, d in enumerate(x.dims) if min(d) > 0])
    n = min(x.dims[axis])
    # other dims equal to x's: onnx.reference (take_along_axis) needs it, the spec does not
    dims = [(b.rng.randint(0, 3),) * b.calls if k == axis else d for k, d in enumerate(x.dims)]
    if all(static(d) for d in dims):
        idx = _indices(b, n, tuple(d[0] for d in dims))
    else:
        idx = b.graph_input(I64, dims, "index", high=n).name
    op = "GatherElements"
    if b.rng.random() < 0.4 and x.kind != "wild" and x.dtype != BOOL and dims == x.dims:
        upd = b.operand(x.dtype, dims, "tame", broadcast=False)
        if all(static(d) for d in dims):  # unique indices along the axis
            perm = np.argsort(b.nrng.random(tuple(d[0] for d in dims)), axis=axis)
            idx = b.ints(perm, "idx")
        elif b.opset < 18:
            raise Skip
        red = {"reduction": b.rng.choice(["add", "max", "min"])} if b.opset >= 18 and \
            not all(static(d) for d in dims) else {}
        (y,) = b.node("ScatterElements", [x.name, idx, upd.name], axis=axis, **red)
        b.add_value(y, x.dtype, x.dims, "wild" if red else x.kind)
        return
    (y,) = b.node(op, [x.name, idx], axis=axis)
    b.add_value(y, x.dtype, dims, x.kind)


@entry(1.0)
def gather_nd(b: Builder):
    x = need(b.pick(ANY, rank=(1, 4), cond=lambda v: min(v.dims[0]) > 0))
    k = 1
    while k < x.rank and min(x.dims[k]) > 0 and b.rng.random() < 0.5:
        k += 1
    lead = tuple(b.rng.randint(1, 3) for _ in range(b.rng.randint(0, 2)))
    idx = np.stack([b.nrng.integers(0, min(x.dims[j]), lead) for j in range(k)], -1)
    (y,) = b.node("GatherND", [x.name, b.ints(idx, "idx")])
    b.add_value(y, x.dtype, [(s,) * b.calls for s in lead] + list(x.dims[k:]), x.kind)


@entry(1.5)
def expand_tile(b: Builder):
    x = need(b.pick(ANY, rank=(0, 4)))
    if b.rng.random() < 0.5:
        shape = [b.rng.randint(1, 3) if d == (1,) * b.calls else 1 if not static(d) or
                 b.rng.random() < 0.3 else d[0] for d in x.dims]
        shape = [b.rng.randint(1, 2) for _ in range(b.rng.randint(0, 1))] + shape
        (y,) = b.node("Expand", [x.name, b.ints(shape, "shape")])
        dims = [(s,) * b.calls for s in shape]
        for k in range(1, x.rank + 1):
            if shape[-k] == 1:
                dims[-k] = x.dims[-k]
        b.add_value(y, x.dtype, dims, x.kind)
        return
    if not x.rank:
        raise Skip
    reps = [b.rng.randint(0 if b.rng.random() < 0.1 else 1, 3) for _ in x.dims]
    (y,) = b.node("Tile", [x.name, b.ints(reps, "reps")])
    b.add_value(y, x.dtype, [tuple(s * r for s in d) for d, r in zip(x.dims, reps)], x.kind)


@entry(1.5)
def pad(b: Builder):
    x = need(b.pick(FLOATS + (I64, I32), rank=(1, 4)))
    mode = b.rng.choice(["constant", "constant", "edge", "reflect"])
    axes = list(range(x.rank))
    if b.opset >= 18 and b.rng.random() < 0.3:
        axes = sorted(b.rng.sample(axes, b.rng.randint(1, x.rank)))
    pads = []
    for a in axes + axes:
        n = min(x.dims[a])
        if mode == "constant":
            lo = -1 if n >= 3 else 0
            pads.append(b.rng.randint(lo, 2))
        elif mode == "edge":
            pads.append(b.rng.randint(0, 2) if n >= 1 else 0)
        else:
            pads.append(b.rng.randint(0, min(2, n - 1)) if n >= 2 else 0)
    args = [x.name, b.ints(pads, "pads")]
    if mode == "constant" and b.rng.random() < 0.5:
        args.append(b.const(np.array(b.rng.choice([0, 1, -2]), NP[x.dtype])))
    if axes != list(range(x.rank)):
        args += [""] * (3 - len(args)) + [b.ints(axes, "axes")]
    (y,) = b.node("Pad", args, mode=mode)
    dims = list(x.dims)
    for j, a in enumerate(axes):
        dims[a] = tuple(s + pads[j] + pads[j + len(axes)] for s in x.dims[a])
    b.add_value(y, x.dtype, dims, x.kind)


@entry(1.5)
def resize(b: Builder):
    x = need(b.pick(FLOATS, rank=(3, 4), kinds=("tame",),
                    cond=lambda v: all(min(d) >= 1 for d in v.dims[2:])))
    mode = b.rng.choice(["nearest", "nearest", "linear"] + (["cubic"] if x.rank == 4 else []))
    scales = [1.0, 1.0] + [b.rng.choice([0.5, 1.0, 1.5, 2.0, 3.0]) for _ in x.dims[2:]]
    dims = list(x.dims[:2])
    for s, d in zip(scales[2:], x.dims[2:]):
        out = tuple(int(math.floor(n * s)) for n in d)
        if min(out) < 1:
            raise Skip
        dims.append(out)
    attrs = {"mode": mode, "coordinate_transformation_mode": b.rng.choice(
        ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"])}
    if mode == "nearest":
        attrs["nearest_mode"] = b.rng.choice(["round_prefer_floor", "round_prefer_ceil",
                                              "floor", "ceil"])
    if mode == "cubic" and b.rng.random() < 0.5:
        attrs.update(cubic_coeff_a=-0.5, exclude_outside=1)
    sc = b.const(np.array(scales, np.float32), "scales", "init")
    (y,) = b.node("Resize", [x.name, "", sc], **attrs)
    b.add_value(y, x.dtype, dims, "wild")


@entry(1.0)
def trilu(b: Builder):
    if b.opset < 14:
        raise Skip
    x = need(b.pick(ANY, rank=(2, 4)))
    args = [x.name] + ([b.ints(b.rng.randint(-3, 3), "k")] if b.rng.random() < 0.6 else [])
    (y,) = b.node("Trilu", args, upper=b.rng.choice([0, 1]))
    b.add_value(y, x.dtype, x.dims, x.kind)


@entry(0.7)
def range_(b: Builder):
    dt = b.rng.choice([I64, F32, F64])
    start, delta = b.rng.choice([0, 1, -2, 3]), b.rng.choice([1, 2, -1, -3, 0.5])
    if dt == I64:
        delta = int(delta) if delta != 0.5 else 1
    limit = b.rng.choice([-4, 0, 2, 5, 7])
    n = max(math.ceil((limit - start) / delta), 0)
    vals = [b.const(np.array(v, NP[dt]), "r") for v in (start, limit, delta)]
    (y,) = b.node("Range", vals)
    b.add_value(y, dt, [(n,) * b.calls], "tame")


@entry(1.0)
def one_hot(b: Builder):
    depth = b.rng.randint(1, 4)
    x = b.pick([I64], kinds=("index",), rank=(1, 3))
    if x is None or b.rng.random() < 0.3:
        x = b.graph_input(I64, [b.dim(0, 3) for _ in range(b.rng.randint(1, 2))], "index",
                          high=depth)
    dt = b.rng.choice([F32, I64, F16])
    vals = b.const(np.array([b.rng.choice([0, -1]), b.rng.choice([1, 5])], NP[dt]), "onoff")
    axis = b.rng.randint(-x.rank - 1, x.rank)
    (y,) = b.node("OneHot", [x.name, b.const(np.array(depth, np.int64), "depth"), vals],
                  axis=axis)
    a = axis + x.rank + 1 if axis < 0 else axis
    dims = list(x.dims[:a]) + [(depth,) * b.calls] + list(x.dims[a:])
    b.add_value(y, dt, dims, "tame")


@entry(0.7)
def depth_space(b: Builder):
    x = need(b.pick(ANY, rank=(4, 4), cond=lambda v: static(v.dims[1])))
    c = x.dims[1][0]
    if b.rng.random() < 0.5 and c % 4 == 0 and c:
        mode = b.rng.choice(["DCR", "CRD"])
        (y,) = b.node("DepthToSpace", [x.name], blocksize=2, mode=mode)
        dims = [x.dims[0], (c // 4,) * b.calls] + [tuple(2 * s for s in d) for d in x.dims[2:]]
    elif all(static(d) and d[0] % 2 == 0 for d in x.dims[2:]):
        (y,) = b.node("SpaceToDepth", [x.name], blocksize=2)
        dims = [x.dims[0], (4 * c,) * b.calls] + [tuple(s // 2 for s in d) for d in x.dims[2:]]
    else:
        raise Skip
    b.add_value(y, x.dtype, dims, x.kind)


