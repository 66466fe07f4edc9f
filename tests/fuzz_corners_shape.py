"""Corners generator entries, part 3: shape, indexing and layout ops at their corners, and
ops the chain generator does not emit (registered into `fuzz_corners_ops.CORNERS`)."""

from __future__ import annotations

import numpy as np
from fuzz_corners import Spec
from fuzz_corners_ops import FLOATS, INTS, _two_calls, arr, corner, node, shape

ANY = FLOATS + INTS + [np.bool_]
I64 = np.int64


@corner
def slice_pad(rng, nrng):
    dt = rng.choice(ANY)
    rank = rng.randint(1, 3)
    shp = shape(rng, rank, 0 if rng.random() < 0.1 else 1, 5)
    x = arr(nrng, shp, dt)
    if rng.random() < 0.5:
        axes = sorted(rng.sample(range(rank), rng.randint(1, rank)))
        ext = [0, -1, 2**62, -(2**62), 2**63 - 1, -(2**63)]
        st = [rng.choice([rng.randint(-6, 6)] * 3 + ext) for _ in axes]
        en = [rng.choice([rng.randint(-6, 6)] * 3 + ext) for _ in axes]
        sp = [rng.choice([1, 1, 2, -1, -2, 3]) for _ in axes]
        ax = [a - rank if rng.random() < 0.5 else a for a in axes]
        inputs = {"x": [x], "s": [np.array(st, I64)], "e": [np.array(en, I64)],
                  "a": [np.array(ax, I64)], "p": [np.array(sp, I64)]}
        spec = Spec([node("Slice", ["x", "s", "e", "a", "p"], ["y"])], inputs, ["y"], 13,
                    {"x", "s", "e", "a", "p"})
    else:
        mode = rng.choice(["constant", "reflect", "edge", "wrap"])
        axes = sorted(rng.sample(range(rank), rng.randint(1, rank)))
        lo = 0 if mode == "reflect" else -2
        pads = [rng.randint(lo, 2) for _ in axes] * 2
        if mode == "reflect" and min(shp[a] for a in axes) < 3:
            mode = "edge"
        if mode in ("edge", "wrap") and 0 in shp:
            mode = "constant"
        inputs = {"x": [x], "p": [np.array(pads, I64)]}
        ins = ["x", "p"]
        if mode == "constant" and rng.random() < 0.5:
            inputs["v"] = [arr(nrng, (), dt)]
            ins.append("v")
        opset = rng.choice([18, 19])
        if rng.random() < 0.6:
            inputs["a"] = [np.array([a - rank if rng.random() < 0.5 else a for a in axes], I64)]
            ins += [""] * (3 - len(ins)) + ["a"]
        else:
            full = [0] * (2 * rank)
            for j, a in enumerate(axes):
                full[a], full[a + rank] = pads[j], pads[j + len(axes)]
            inputs["p"] = [np.array(full, I64)]
        if mode == "wrap":
            opset = 19
        spec = Spec([node("Pad", ins, ["y"], mode=mode)], inputs, ["y"], opset,
                    {"x", "p", "v", "a"})
    return spec


@corner
def gather_scatter(rng, nrng):
    op = rng.choice(["Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND"])
    dt = rng.choice(ANY)
    rank = rng.randint(1, 3)
    shp = shape(rng, rank, 1, 4)
    x = arr(nrng, shp, dt)
    axis = rng.randint(-rank, rank - 1)
    d = shp[axis]
    ist = rng.choice([np.int64, np.int32])
    if op == "Gather":
        ishape = shape(rng, rng.randint(0, 2))
        idx = nrng.integers(-d, d, ishape).astype(ist)
        return Spec([node(op, ["x", "i"], ["y"], axis=axis)], {"x": [x], "i": [idx]}, ["y"],
                    13, {"x", "i"})
    if op in ("GatherElements", "ScatterElements"):
        ishape = tuple(rng.randint(1, s) for s in shp)
        if op == "ScatterElements":  # distinct positions along the axis: no order question
            idx = np.zeros(ishape, ist)
            for pos in np.ndindex(*[s for k, s in enumerate(ishape) if k != axis % rank]):
                perm = nrng.permutation(d)[:ishape[axis]] - (d if rng.random() < 0.3 else 0)
                sl = list(pos)
                sl.insert(axis % rank, slice(None))
                idx[tuple(sl)] = perm
            red = rng.choice(["none", "add", "mul", "max", "min", None])
            upd = arr(nrng, ishape, dt)
            return Spec([node(op, ["x", "i", "u"], ["y"], axis=axis, reduction=red)],
                        {"x": [x], "i": [idx], "u": [upd]}, ["y"], 18, {"x", "i", "u"})
        idx = nrng.integers(-d, d, ishape).astype(I64)
        return Spec([node(op, ["x", "i"], ["y"], axis=axis)], {"x": [x], "i": [idx]}, ["y"],
                    13, {"x", "i"})
    bd = rng.randint(0, rank - 1) if op == "GatherND" else 0
    q = rng.randint(1, rank - bd)
    nlead = rng.randint(0, 2)
    ishape = tuple(shp[:bd]) + shape(rng, nlead) + (q,)
    idx = np.stack([nrng.integers(-shp[bd + j], shp[bd + j], ishape[:-1])
                    for j in range(q)], -1).astype(I64)
    if op == "GatherND":
        return Spec([node(op, ["x", "i"], ["y"], batch_dims=bd or None)],
                    {"x": [x], "i": [idx]}, ["y"], 13, {"x", "i"})
    flat = {tuple(int(v) % shp[j] for j, v in enumerate(r)) for r in idx.reshape(-1, q)}
    if len(flat) != int(np.prod(idx.shape[:-1])):
        idx = idx[..., :0, :] if idx.ndim > 1 else idx
    upd = arr(nrng, idx.shape[:-1] + shp[q:], dt)
    red = rng.choice(["none", "add", "mul", "max", "min", None])
    return Spec([node(op, ["x", "i", "u"], ["y"], reduction=red)],
                {"x": [x], "i": [idx], "u": [upd]}, ["y"], 18, {"x", "i", "u"})


@corner
def layout(rng, nrng):
    op = rng.choice(["Split", "Concat", "Tile", "Expand", "Squeeze", "Unsqueeze", "Flatten",
                     "Transpose", "Reshape", "DepthToSpace", "SpaceToDepth", "Trilu",
                     "ReverseSequence", "Unique", "CenterCropPad", "Shape", "Size"])
    dt = rng.choice(ANY)
    rank = rng.randint(1, 4)
    shp = shape(rng, rank, 1, 4)
    x = arr(nrng, shp, dt)
    inputs, ins, a, outs, opset = {"x": [x]}, ["x"], {}, ["y"], 18
    free = []
    if op == "Split":
        axis = rng.randint(-rank, rank - 1)
        n = rng.randint(1, 3)
        if rng.random() < 0.5:
            a = {"axis": axis, "num_outputs": n}
            if shp[axis] < n:
                a["num_outputs"] = n = 1
        else:
            parts = [rng.randint(0, shp[axis]) for _ in range(n - 1)]
            parts.append(shp[axis] - sum(parts)) if sum(parts) <= shp[axis] else None
            parts = parts if sum(parts) == shp[axis] and len(parts) == n else [shp[axis]]
            n = len(parts)
            inputs["s"] = [np.array(parts, I64)]
            ins.append("s")
            a = {"axis": axis}
        outs = [f"y{k}" for k in range(n)]
    elif op == "Concat":
        axis = rng.randint(-rank, rank - 1)
        s2 = list(shp)
        s2[axis] = rng.randint(0, 3)
        inputs["w"] = [arr(nrng, tuple(s2), dt)]
        ins.append("w")
        a = {"axis": axis}
        free = [k for k in range(rank) if k != axis % rank][:1]
    elif op in ("Squeeze", "Unsqueeze"):
        if op == "Squeeze":
            shp = tuple(1 if rng.random() < 0.5 else d for d in shp)
            inputs["x"] = [arr(nrng, shp, dt)]
            ones = [k for k, d in enumerate(shp) if d == 1]
            ax = [k - rank if rng.random() < 0.5 else k for k in ones]
        else:
            ax = sorted({rng.randint(-rank - 1, rank) for _ in range(2)})
            if len({a_ % (rank + len(ax)) for a_ in ax}) != len(ax):
                ax = ax[:1]
        if ax or op == "Unsqueeze":
            inputs["a"] = [np.array(ax, I64)]
            ins.append("a")
        opset = 13
    elif op == "Flatten":
        a = {"axis": rng.randint(-rank, rank)}
        free = list(range(rank))
    elif op == "Transpose":
        a = {"perm": list(np.random.default_rng(rng.randint(0, 99)).permutation(rank))}
        free = list(range(rank))
    elif op == "Reshape":
        tgt = [int(np.prod(shp))]
        if rng.random() < 0.5:
            tgt = [-1] + list(shp[1:]) if rank > 1 else [-1]
        if rng.random() < 0.4:
            tgt = [0] * min(rank, 1) + ([-1] if rank > 1 else [])
        inputs["s"] = [np.array(tgt, I64)]
        ins.append("s")
        a = {"allowzero": rng.choice([0, None])}
    elif op in ("DepthToSpace", "SpaceToDepth"):
        bs = rng.choice([1, 2])
        n, c, h, w = rng.randint(1, 2), rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 3)
        s4 = (n, c * bs * bs, h, w) if op == "DepthToSpace" else (n, c, h * bs, w * bs)
        inputs["x"] = [arr(nrng, s4, dt)]
        a = {"blocksize": bs}
        if op == "DepthToSpace":
            a["mode"] = rng.choice(["DCR", "CRD"])
    elif op == "Tile":
        inputs["r"] = [np.array([rng.randint(0, 3) for _ in range(rank)], I64)]
        ins.append("r")
    elif op == "Expand":
        tgt = [rng.choice([d, 1]) if d == 1 else d for d in shp]
        tgt = [rng.randint(1, 3)] * rng.randint(0, 1) + [rng.randint(2, 3) if d == 1 and
                                                          rng.random() < 0.5 else d
                                                          for d in tgt]
        inputs["s"] = [np.array(tgt, I64)]
        ins.append("s")
    elif op == "Trilu":
        if rank < 2:
            inputs["x"] = [arr(nrng, (3, 4), dt)]
        if rng.random() < 0.6:
            inputs["k"] = [np.array(rng.randint(-4, 4), I64)]
            ins.append("k")
        a = {"upper": rng.choice([0, 1, None])}
        opset = 14
    elif op == "ReverseSequence":
        bt, tm = shape(rng, 2, 1, 4)
        inputs["x"] = [arr(nrng, (tm, bt) + shp[:1], dt)]
        inputs["l"] = [nrng.integers(0, tm + 1, bt).astype(I64)]
        ins.append("l")
        a = {"time_axis": 0, "batch_axis": 1}
        if rng.random() < 0.5:
            inputs["x"] = [np.swapaxes(inputs["x"][0], 0, 1).copy()]
            a = {"time_axis": 1, "batch_axis": 0}
        opset = 10
    elif op == "Unique":
        inputs["x"] = [arr(nrng, shp, rng.choice([np.float32, np.int64, np.int32]), 0, 3)]
        if inputs["x"][0].dtype.kind == "f":
            inputs["x"][0] = np.round(inputs["x"][0]).astype(np.float32)
        a = {"sorted": rng.choice([0, 1, None])}
        if rng.random() < 0.4:
            a["axis"] = rng.randint(-rank, rank - 1)
        outs = ["y", "i", "inv", "cnt"]
        opset = 11
    elif op == "CenterCropPad":
        tgt = [rng.randint(1, 5) for _ in range(rank)]
        inputs["s"] = [np.array(tgt, I64)]
        ins.append("s")
        opset = 18
    elif op == "Shape":
        a = {"start": rng.choice([None, -1, 0, 1, -9]), "end": rng.choice([None, -1, 2, 9])}
        opset = 15
        free = list(range(rank))
    else:  # Size
        free = list(range(rank))
    spec = Spec([node(op, ins, outs, **a)], inputs, outs, opset,
                {k for k in inputs if k != "x"} | ({"x"} if rng.random() < 0.5 else set()))
    if free and rng.random() < 0.5:
        _two_calls(rng, nrng, spec, "x", free)
    return spec


@corner
def where_logic(rng, nrng):
    op = rng.choice(["Where", "And", "Or", "Xor", "Not", "IsNaN", "IsInf", "NonZero",
                     "OneHot", "EyeLike", "ConstantOfShape", "Range"])
    rank = rng.randint(0, 3)
    shp = shape(rng, rank, 0 if rng.random() < 0.1 else 1)
    dt = rng.choice(ANY)
    inputs, ins, a, opset = {}, [], {}, 18
    if op == "Where":
        inputs = {"c": [arr(nrng, shp, np.bool_)], "x": [arr(nrng, shp[1:], dt)],
                  "y_": [arr(nrng, tuple(1 for _ in shp), dt)]}
        ins = ["c", "x", "y_"]
    elif op in ("And", "Or", "Xor"):
        inputs = {"x": [arr(nrng, shp, np.bool_)], "w": [arr(nrng, shp[-1:], np.bool_)]}
        ins = ["x", "w"]
    elif op == "Not":
        inputs, ins = {"x": [arr(nrng, shp, np.bool_)]}, ["x"]
    elif op in ("IsNaN", "IsInf"):
        x = arr(nrng, shp, rng.choice(FLOATS))
        if x.size:
            x.flat[0] = np.nan
            x.flat[-1] = -np.inf if rng.random() < 0.5 else np.inf
        inputs, ins = {"x": [x]}, ["x"]
        if op == "IsInf":
            a = {"detect_negative": rng.choice([0, 1, None]),
                 "detect_positive": rng.choice([0, 1, None])}
        opset = 20
    elif op == "NonZero":
        inputs, ins = {"x": [arr(nrng, shp, dt, 0, 2)]}, ["x"]
    elif op == "OneHot":
        depth = rng.randint(1, 4)
        inputs = {"i": [nrng.integers(-depth, depth, shp).astype(rng.choice([I64, np.int32]))],
                  "d": [np.array(depth, I64)], "v": [arr(nrng, (2,), dt)]}
        ins, a = ["i", "d", "v"], {"axis": rng.randint(-rank - 1, rank)}
        opset = 11
    elif op == "EyeLike":
        inputs, ins = {"x": [arr(nrng, shape(rng, 2), dt)]}, ["x"]
        a = {"k": rng.randint(-3, 3), "dtype": rng.choice([None, 1, 7, 9, 3])}
    elif op == "ConstantOfShape":
        inputs, ins = {"s": [np.array(shp, I64)]}, ["s"]
        if rng.random() < 0.7:
            from onnx import numpy_helper
            a = {"value": numpy_helper.from_array(arr(nrng, (1,), dt))}
    else:
        rdt = rng.choice([np.float32, np.float64, np.int32, np.int64, np.int16])
        s, l_, d = rng.randint(-5, 5), rng.randint(-5, 5), rng.choice([1, 2, -1, -3, 3])
        inputs = {"s": [np.array(s, rdt)], "l": [np.array(l_, rdt)], "d": [np.array(d, rdt)]}
        ins = ["s", "l", "d"]
        opset = 11
    return Spec([node(op, ins, ["y"], **a)], inputs, ["y"], opset,
                set(inputs) if rng.random() < 0.5 else set(inputs) - {ins[0]})
