"""Corners generator entries, part 2: pools, convolutions, normalizations, quantization and
the ops the chain generator does not emit (registered into `fuzz_corners_ops.CORNERS`)."""

from __future__ import annotations

import numpy as np
from fuzz_corners import Spec
from fuzz_corners_ops import FLOATS, _two_calls, arr, corner, node, shape


def _pads_attrs(rng, k: int, auto: bool = True) -> dict:
    mode = rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]) if auto \
        else "NOTSET"
    a = {"auto_pad": mode if mode != "NOTSET" or rng.random() < 0.3 else None}
    if mode == "NOTSET" and rng.random() < 0.7:
        a["pads"] = [rng.randint(0, 2) for _ in range(2 * k)]
    if rng.random() < 0.6:
        a["strides"] = [rng.randint(1, 3) for _ in range(k)]
    return a


@corner
def pool(rng, nrng):
    op = rng.choice(["MaxPool", "AveragePool", "LpPool", "MaxPool"])
    k = rng.randint(1, 2)
    dt = rng.choice(FLOATS + ([np.int8, np.uint8] if op == "MaxPool" else []))
    shp = (rng.randint(1, 2), rng.randint(1, 3)) + shape(rng, k, 3, 7)
    kernel = [rng.randint(1, 3) for _ in range(k)]
    a = _pads_attrs(rng, k)
    for p in range(k):  # pads must be smaller than the kernel
        if a.get("pads"):
            a["pads"][p] = min(a["pads"][p], kernel[p] - 1)
            a["pads"][p + k] = min(a["pads"][p + k], kernel[p] - 1)
    if op != "LpPool":
        a["ceil_mode"] = rng.choice([0, 1, None])
    if op == "MaxPool" and rng.random() < 0.4:
        a["dilations"] = [rng.randint(1, 2) for _ in range(k)]
    if op == "AveragePool":
        a["count_include_pad"] = rng.choice([0, 1, None])
    if op == "LpPool":
        a["p"] = rng.choice([1, 2, 3])
    outs = ["y"] + (["i"] if op == "MaxPool" and np.dtype(dt).kind == "f" and
                    rng.random() < 0.3 else [])
    if len(outs) == 2:
        a["storage_order"] = rng.choice([0, 1])
    x = arr(nrng, shp, dt, -50, 50)
    spec = Spec([node(op, ["x"], outs, kernel_shape=kernel, **a)], {"x": [x]}, outs,
                rng.choice([12, 18, 19, 22]), {"x"})
    if rng.random() < 0.3:
        _two_calls(rng, nrng, spec, "x", [0])
        if 0 in spec.inputs["x"][1].shape:
            spec.inputs["x"][1] = spec.inputs["x"][0]
    return spec


@corner
def conv(rng, nrng):
    op = rng.choice(["Conv", "ConvTranspose"])
    k = rng.randint(1, 2)
    dt = rng.choice([np.float32, np.float32, np.float64, np.float16])
    group = rng.choice([1, 1, 2])
    cin = group * rng.randint(1, 2)
    cout = group * rng.randint(1, 2)
    shp = (rng.randint(1, 2), cin) + shape(rng, k, 2, 6)
    kernel = [rng.randint(1, 3) for _ in range(k)]
    wshape = (cout, cin // group, *kernel) if op == "Conv" else (cin, cout // group, *kernel)
    a = _pads_attrs(rng, k)
    a["group"] = group if group > 1 or rng.random() < 0.3 else None
    if rng.random() < 0.4:
        a["dilations"] = [rng.randint(1, 2) for _ in range(k)]
    if op == "ConvTranspose" and rng.random() < 0.4 and a.get("strides"):
        a["output_padding"] = [rng.randint(0, s - 1) for s in a["strides"]]
    ins = ["x", "w"] + (["b"] if rng.random() < 0.5 else [])
    inputs = {"x": [arr(nrng, shp, dt)], "w": [arr(nrng, wshape, dt)]}
    if "b" in ins:
        inputs["b"] = [arr(nrng, (cout,), dt)]
    return Spec([node(op, ins, ["y"], **a)], inputs, ["y"], rng.choice([11, 18, 22]),
                {"w", "b"})


@corner
def norm(rng, nrng):
    op = rng.choice(["LayerNormalization", "GroupNormalization", "InstanceNormalization",
                     "LpNormalization", "MeanVarianceNormalization", "Softmax", "LogSoftmax",
                     "Hardmax", "RMSNormalization"])
    dt = rng.choice(FLOATS)
    rank = rng.randint(3 if op == "InstanceNormalization" else 2, 4)
    shp = shape(rng, rank, 1, 4)
    x = arr(nrng, shp, dt)
    inputs = {"x": [x]}
    ins, a, opset = ["x"], {}, 18
    if op in ("LayerNormalization", "RMSNormalization"):
        axis = rng.randint(-rank, rank - 1)
        a = {"axis": axis, "epsilon": rng.choice([1e-5, 0.1, None])}
        if op == "LayerNormalization":
            a["stash_type"] = rng.choice([1, None])
        opset = 23 if op == "RMSNormalization" else rng.choice([17, 18])
        norm_shape = shp[axis % rank:]
        inputs["s"] = [arr(nrng, norm_shape, dt)]
        ins.append("s")
        if op == "LayerNormalization" and rng.random() < 0.5:
            inputs["b"] = [arr(nrng, norm_shape, dt)]
            ins.append("b")
    elif op == "GroupNormalization":
        groups = rng.choice([g for g in (1, 2, 3) if shp[1] % g == 0])
        a = {"num_groups": groups, "epsilon": rng.choice([1e-5, 0.1])}
        opset = rng.choice([18, 21])
        c = shp[1] if opset >= 21 else groups
        inputs["s"], inputs["b"] = [arr(nrng, (c,), dt)], [arr(nrng, (c,), dt)]
        ins += ["s", "b"]
    elif op == "InstanceNormalization":
        inputs["s"], inputs["b"] = [arr(nrng, (shp[1],), dt)], [arr(nrng, (shp[1],), dt)]
        ins += ["s", "b"]
    elif op == "LpNormalization":
        a = {"axis": rng.randint(-rank, rank - 1), "p": rng.choice([1, 2])}
    elif op == "MeanVarianceNormalization":
        a = {"axes": [k - rank if rng.random() < 0.5 else k
                      for k in rng.sample(range(rank), rng.randint(1, rank))]}
    else:
        a = {"axis": rng.randint(-rank, rank - 1)}
        opset = rng.choice([11, 13])
    return Spec([node(op, ins, ["y"], **a)], inputs, ["y"], opset, {"s", "b"})


@corner
def quant(rng, nrng):
    op = rng.choice(["QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                     "QuantizeLinear"])
    qt = rng.choice([np.int8, np.uint8])
    rank = rng.randint(0, 3)
    shp = shape(rng, rank)
    per_axis = rank and rng.random() < 0.4
    axis = rng.randint(-rank, rank - 1) if per_axis else None
    sshape = (shp[axis],) if per_axis else ()
    scale = (np.abs(arr(nrng, sshape, np.float32)) + 0.05).astype(np.float32)
    zp = arr(nrng, sshape, qt, -5, 5) if np.dtype(qt) == np.int8 else arr(nrng, sshape, qt,
                                                                            0, 10)
    opset = rng.choice([13, 19, 21])
    if op == "DynamicQuantizeLinear":
        return Spec([node(op, ["x"], ["y", "s", "z"])], {"x": [arr(nrng, shp, np.float32)]},
                    ["y", "s", "z"], 11)
    if op == "QuantizeLinear":
        x = (arr(nrng, shp, np.float32) * 20).astype(np.float32)
        x += 0.25  # away from the .5 ties of round half to even in the scaled value
    else:
        x = arr(nrng, shp, qt, -100, 100)
    inputs = {"x": [x], "s": [scale]}
    ins = ["x", "s"]
    if rng.random() < 0.7:
        inputs["z"] = [zp]
        ins.append("z")
    return Spec([node(op, ins, ["y"], axis=axis)], inputs, ["y"], opset, {"s", "z"})


@corner
def matmul_int(rng, nrng):
    op = rng.choice(["MatMulInteger", "MatMul", "Gemm", "Einsum"])
    if op == "MatMulInteger":
        a, b = rng.choice([np.int8, np.uint8]), rng.choice([np.int8, np.uint8])
        m, k, n = rng.randint(1, 4), rng.randint(1, 5), rng.randint(1, 4)
        lead = shape(rng, rng.randint(0, 2))
        inputs = {"a": [arr(nrng, lead + (m, k), a, -20, 20)],
                  "b": [arr(nrng, (k, n), b, -20, 20)]}
        ins = ["a", "b"]
        if rng.random() < 0.5:
            inputs["za"] = [arr(nrng, (), a, 0, 5)]
            inputs["zb"] = [arr(nrng, (), b, 0, 5)]
            ins += ["za", "zb"]
        return Spec([node(op, ins, ["y"])], inputs, ["y"], 10, {"b", "za", "zb"})
    dt = rng.choice([np.float32, np.float64, np.int32, np.int64])
    if op == "Gemm":
        ta, tb = rng.choice([0, 1]), rng.choice([0, 1])
        m, k, n = rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 4)
        dt = rng.choice([np.float32, np.float64])
        inputs = {"a": [arr(nrng, (k, m) if ta else (m, k), dt)],
                  "b": [arr(nrng, (n, k) if tb else (k, n), dt)]}
        ins = ["a", "b"]
        if rng.random() < 0.6:
            inputs["c"] = [arr(nrng, rng.choice([(), (n,), (1, n), (m, 1), (m, n)]), dt)]
            ins.append("c")
        return Spec([node(op, ins, ["y"], transA=ta, transB=tb,
                          alpha=rng.choice([1.0, 0.5, None]), beta=rng.choice([1.0, -2.0, None]))],
                    inputs, ["y"], 13, {"b", "c"})
    if op == "MatMul":
        ra, rb = rng.randint(1, 4), rng.randint(1, 4)
        k = rng.randint(1, 4)
        sa = shape(rng, ra - 1) + (k,)
        sb = ((k,) if rb == 1 else shape(rng, rb - 2) + (k, rng.randint(1, 4)))
        if ra > 2 and rb > 2:
            sb = tuple(1 if rng.random() < 0.3 else d for d in sa[:-2])[-(rb - 2):] + sb[-2:]
        return Spec([node(op, ["a", "b"], ["y"])], {"a": [arr(nrng, sa, dt)],
                                                   "b": [arr(nrng, sb, dt)]}, ["y"], 13, {"b"})
    eq, sa, sb = rng.choice([("ij,jk->ik", (2, 3), (3, 4)), ("bij,bjk->bik", (2, 2, 3), (2, 3, 2)),
                             ("ii->i", (3, 3), None), ("ij->ji", (2, 3), None),
                             ("i,i->", (4,), (4,)), ("...ij,...jk", (2, 2, 3), (3, 2)),
                             ("ij,kj->ik", (2, 3), (4, 3)), ("ijk->", (2, 3, 2), None)])
    inputs = {"a": [arr(nrng, sa, dt)]}
    if sb:
        inputs["b"] = [arr(nrng, sb, dt)]
    return Spec([node("Einsum", list(inputs), ["y"], equation=eq)], inputs, ["y"], 12, {"b"})


@corner
def rnn(rng, nrng):
    op = rng.choice(["RNN", "GRU", "LSTM"])
    dt = rng.choice([np.float32, np.float64])
    g = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    seq, batch, inp, hid = rng.randint(1, 3), rng.randint(1, 2), rng.randint(1, 3), \
        rng.randint(1, 3)
    dirs = rng.choice(["forward", "reverse", "bidirectional"])
    nd = 2 if dirs == "bidirectional" else 1
    layout = rng.choice([0, 1])
    xs = (batch, seq, inp) if layout else (seq, batch, inp)
    inputs = {"x": [arr(nrng, xs, dt) * 0.3], "w": [arr(nrng, (nd, g * hid, inp), dt) * 0.3],
              "r": [arr(nrng, (nd, g * hid, hid), dt) * 0.3]}
    ins = ["x", "w", "r"]
    if rng.random() < 0.5:
        inputs["b"] = [arr(nrng, (nd, 2 * g * hid), dt) * 0.3]
        ins.append("b")
    a = {"hidden_size": hid, "direction": dirs, "layout": layout}
    if op == "GRU":
        a["linear_before_reset"] = rng.choice([0, 1])
    if op == "RNN" and rng.random() < 0.3:
        a["activations"] = [rng.choice(["Relu", "Tanh", "Sigmoid"])] * nd
    outs = ["y", "h"] + (["c"] if op == "LSTM" else [])
    return Spec([node(op, ins, outs, **a)], inputs, outs, 14, {"w", "r", "b"})
