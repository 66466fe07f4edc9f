"""Corners generator entries, part 4: float elementwise ops on extreme values of every float
type, Resize at its corners, and rarer ops (registered into `fuzz_corners_ops.CORNERS`)."""

from __future__ import annotations

import numpy as np
from fuzz_corners import Spec
from fuzz_corners_ops import FLOATS, _two_calls, arr, corner, node, shape

EXTREMES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 6e-8, 65504.0, 70000.0,
            1e20, -1e20, 1e308, 0.5, -0.5, 1.5, 2.5, -2.5, 88.8, -88.8, 710.0, 11.1]


def wild(nrng, shp, dt):
    x = arr(nrng, shp, np.float64)
    if x.size:
        pick = nrng.random(shp) < 0.5
        x[pick] = nrng.choice(np.array(EXTREMES), int(pick.sum()))
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(dt)


@corner
def float_unary(rng, nrng):
    op = rng.choice(["Abs", "Neg", "Floor", "Ceil", "Round", "Reciprocal", "Sqrt", "Exp",
                     "Log", "Tanh", "Sigmoid", "Relu", "Sign", "Erf", "Softplus", "Softsign",
                     "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "LeakyRelu",
                     "ThresholdedRelu", "Shrink", "Mish", "Gelu", "Atan", "Asinh", "Sinh",
                     "Cosh", "Sin", "Cos", "Tan", "Asin", "Acos", "Atanh", "Acosh", "IsNaN"])
    dt = np.float32 if op == "Celu" else rng.choice(FLOATS)  # Celu-12: float only
    x = wild(nrng, shape(rng, rng.randint(0, 2), 1, 6), dt)
    a = {}
    if op in ("Elu", "Celu", "LeakyRelu", "ThresholdedRelu", "HardSigmoid", "Selu"):
        a["alpha"] = rng.choice([None, 0.5, 2.0])
    if op == "Shrink":
        a = {"lambd": rng.choice([None, 0.5, 2.0]), "bias": rng.choice([None, 0.0, 1.5])}
    if op == "Gelu":
        a["approximate"] = rng.choice(["none", "tanh", None])
    spec = Spec([node(op, ["x"], ["y"], **a)], {"x": [x]}, ["y"], 20 if op == "Gelu" else 18,
                {"x"} if rng.random() < 0.3 else set())
    if x.ndim and rng.random() < 0.3:
        _two_calls(rng, nrng, spec, "x", [0])
    return spec


@corner
def float_binary(rng, nrng):
    op = rng.choice(["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "PRelu",
                     "Equal", "Less", "Greater", "Mean", "Sum"])
    dt = rng.choice(FLOATS)
    s = shape(rng, rng.randint(0, 3), 1, 4)
    s2 = tuple(1 if rng.random() < 0.4 else d for d in s[rng.randint(0, len(s)):]) if s else s
    x, w = wild(nrng, s, dt), wild(nrng, s2, dt)
    a = {"fmod": 1} if op == "Mod" else {}
    return Spec([node(op, ["x", "w"], ["y"], **a)], {"x": [x], "w": [w]}, ["y"], 18,
                {"w"} if rng.random() < 0.5 else {"x", "w"})


@corner
def resize(rng, nrng):
    rank = rng.randint(1, 5)
    mode = rng.choice(["nearest", "linear", "cubic"])
    dt = rng.choice([np.float32, np.float32, np.float16, np.float64, np.int8, np.uint8,
                     np.int32]) if mode == "nearest" else rng.choice(
        [np.float32, np.float32, np.float16, np.uint8])
    shp = shape(rng, rank, 1, 5)
    x = arr(nrng, shp, dt, -50, 50)
    coord = rng.choice(["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
                        "half_pixel_symmetric", "tf_crop_and_resize"])
    opset = rng.choice([13, 18, 19])
    if coord == "half_pixel_symmetric":
        opset = 19
    a = {"mode": mode, "coordinate_transformation_mode": coord}
    if mode == "nearest":
        a["nearest_mode"] = rng.choice(["round_prefer_floor", "round_prefer_ceil", "floor",
                                        "ceil", None])
    if mode == "cubic":
        a["cubic_coeff_a"] = rng.choice([None, -0.5])
        a["exclude_outside"] = rng.choice([0, 1, None])
    lead = rank - min(rank, rng.choice([1, 2, 2, 3]))
    axes = list(range(lead, rank))
    if opset >= 18 and rng.random() < 0.3:
        a["axes"] = [k - rank if rng.random() < 0.5 else k for k in axes]
        if mode != "nearest" and rng.random() < 0.3:
            a["antialias"] = 1
    full = "axes" not in a
    inputs = {"x": [x]}
    ins = ["x", "", ""]
    if coord == "tf_crop_and_resize":
        n = rank if full else len(axes)
        inputs["r"] = [np.concatenate([nrng.uniform(-0.3, 0.4, n), nrng.uniform(0.6, 1.3, n)])
                       .astype(np.float32)]
        ins[1] = "r"
        a["extrapolation_value"] = rng.choice([None, 7.0])
    if rng.random() < 0.5:
        sc = [rng.choice([0.5, 0.6, 1.0, 1.5, 2.0, 3.0, 0.75, 1.25, 2.5]) for _ in axes]
        sc = ([1.0] * lead if full else []) + sc
        inputs["s"] = [np.array(sc, np.float32)]
        ins[2] = "s"
    else:
        sz = [rng.randint(1, 7) for _ in axes]
        sz = (list(shp[:lead]) if full else []) + sz
        inputs["z"] = [np.array(sz, np.int64)]
        ins.append("z")
        if opset >= 18 and rng.random() < 0.3:
            a["keep_aspect_ratio_policy"] = rng.choice(["not_larger", "not_smaller"])
    return Spec([node("Resize", ins, ["y"], **a)], inputs, ["y"], opset,
                {"r", "s", "z"} | ({"x"} if rng.random() < 0.3 else set()))


@corner
def rare(rng, nrng):
    op = rng.choice(["Det", "DFT", "HannWindow", "HammingWindow", "BlackmanWindow",
                     "MaxUnpool", "RoiAlign", "GridSample", "AffineGrid", "Col2Im",
                     "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "Swish",
                     "CumProd", "Compress", "Hardmax"])
    dt = rng.choice([np.float32, np.float64])
    inputs, ins, a, opset, outs = {}, [], {}, 20, ["y"]
    if op == "Det":
        inputs = {"x": [arr(nrng, shape(rng, rng.randint(0, 1)) + (3, 3), dt)]}
    elif op == "DFT":
        n = rng.randint(1, 6)
        inputs = {"x": [arr(nrng, (1, n, rng.choice([1, 2])), dt)]}
        a = {"inverse": rng.choice([0, 1]), "onesided": rng.choice([0, 0, 1])}
        if inputs["x"][0].shape[-1] == 2 and a["onesided"]:
            a["onesided"] = 0
        if a["inverse"]:
            a["onesided"] = 0
        if rng.random() < 0.5:
            inputs["n"] = [np.array(rng.randint(1, 7), np.int64)]
            ins = ["x", "n"]
    elif op.endswith("Window"):
        inputs = {"x": [np.array(rng.randint(0, 7), rng.choice([np.int32, np.int64]))]}
        a = {"periodic": rng.choice([0, 1]), "output_datatype": rng.choice([1, 11, None])}
        opset = 17
    elif op == "MaxUnpool":
        xs = (1, 1, rng.randint(1, 3), rng.randint(1, 3))
        n = int(np.prod(xs))
        inputs = {"x": [arr(nrng, xs, dt)],
                  "i": [nrng.permutation(4 * n)[:n].reshape(xs).astype(np.int64)]}
        a = {"kernel_shape": [2, 2], "strides": [2, 2]}
        opset = 11
    elif op == "GridSample":
        inputs = {"x": [arr(nrng, (1, 2, 3, 4), dt)],
                  "g": [nrng.uniform(-1.2, 1.2, (1, 2, 3, 2)).astype(dt)]}
        a = {"mode": rng.choice(["linear", "nearest", "cubic"]),
             "padding_mode": rng.choice(["zeros", "border", "reflection"]),
             "align_corners": rng.choice([0, 1])}
    elif op == "AffineGrid":
        inputs = {"t": [arr(nrng, (2, 2, 3), dt)], "z": [np.array([2, 1, 3, 4], np.int64)]}
        a = {"align_corners": rng.choice([0, 1])}
    elif op == "Col2Im":
        inputs = {"x": [arr(nrng, (1, 4, 6), dt)], "s": [np.array([3, 4], np.int64)],
                  "b": [np.array([2, 2], np.int64)]}
    elif op in ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"):
        n, c = rng.randint(1, 3), rng.randint(2, 4)
        inputs = {"x": [arr(nrng, (n, c, 2), dt)],
                  "t": [nrng.integers(0, c, (n, 2)).astype(np.int64)]}
        a = {"reduction": rng.choice(["none", "sum", "mean"]),
             "ignore_index": rng.choice([None, 0])}
        if rng.random() < 0.4:
            inputs["w"] = [np.abs(arr(nrng, (c,), dt)) + 0.5]
        opset = 13
    elif op == "Swish":
        inputs = {"x": [wild(nrng, shape(rng, 2), dt)]}
        a = {"alpha": rng.choice([None, 0.5])}
        opset = 26
    elif op == "CumProd":
        inputs = {"x": [arr(nrng, shape(rng, 2), dt)], "a": [np.array(rng.randint(-2, 1))]}
        a = {"exclusive": rng.choice([0, 1]), "reverse": rng.choice([0, 1])}
        opset = 26
    elif op == "Compress":
        x = arr(nrng, shape(rng, 2), dt)
        ax = rng.choice([None, 0, -1])
        n = x.size if ax is None else x.shape[ax]
        inputs = {"x": [x], "c": [nrng.random(rng.randint(0, n)) < 0.5]}
        a = {"axis": ax}
        opset = 11
    elif op == "Hardmax":
        inputs = {"x": [np.round(arr(nrng, shape(rng, 3), dt))]}
        a = {"axis": rng.randint(-3, 2)}
        opset = rng.choice([11, 13])
    else:  # RoiAlign
        inputs = {"x": [arr(nrng, (1, 2, 5, 5), dt)],
                  "r": [np.abs(arr(nrng, (2, 4), dt)) % 4],
                  "b": [np.zeros(2, np.int64)]}
        inputs["r"][0][:, 2:] += inputs["r"][0][:, :2]
        a = {"mode": rng.choice(["avg", "max"]), "output_height": 2, "output_width": 3,
             "sampling_ratio": rng.choice([0, 2]),
             "coordinate_transformation_mode": rng.choice(["half_pixel", "output_half_pixel"])}
        opset = 16
    ins = ins or list(inputs)
    return Spec([node(op, ins, outs, **a)], inputs, outs, opset,
                set(list(inputs)[1:]) | ({"x"} if rng.random() < 0.3 else set()))
