"""The fuzzer's op catalogue, part 2: MatMul/Gemm, Conv/ConvTranspose, pools, normalizations.

Entries as in `fuzz_ops`. Spatial output sizes are computed per call from the ONNX formulas
(pads, strides, dilations, auto_pad SAME_UPPER/SAME_LOWER/VALID, ceil_mode); an entry skips
when some call would make a window larger than its padded input. Weights are constants (a
random mode: initializer, Constant node, overridable initializer); channel dims are static.
"""

from __future__ import annotations

import math

import numpy as np
from fuzz_graphs import F16, F32, F64, FLOATS, Builder, Skip, make_array, static
from fuzz_ops import entry, need


def _weight(b: Builder, dtype: int, shape: tuple, kind: str = "tame", hint: str = "w",
            positive: bool = False, nonfinite: bool = False) -> str:
    """A constant weight; `nonfinite`: sometimes with a few infinities and NaNs (next to
    padding a tap adds 0 * w, NaN for those: `conv.pad_nan`), and overridden by extremes."""
    arr = make_array(b.nrng, dtype, shape, "positive" if positive else kind)
    mode = b.rng.choice(["init", "init", "node", "override"]) if not positive else "init"
    wild = nonfinite and arr.size > 0 and b.rng.random() < 0.3
    if wild:
        pick = b.nrng.random(arr.shape) < 0.15
        arr[pick] = b.nrng.choice(np.array([np.inf, -np.inf, np.nan], arr.dtype),
                                  int(pick.sum()))
    return b.const(arr, hint, mode, wild=wild)


@entry(3.0)
def matmul(b: Builder):
    a = need(b.pick(FLOATS, rank=(1, 4), kinds=("tame",)))
    k = a.dims[-1]
    n = b.dim(1, 4, sym=0.3)
    if a.rank == 1 or b.rng.random() < 0.6:
        wdims = [k, n]
    else:
        wdims = list(a.dims[:-2]) + [k, n]
    if b.rng.random() < 0.5 and all(static(d) for d in wdims):
        w = b.add_value(_weight(b, a.dtype, tuple(d[0] for d in wdims)), a.dtype, wdims)
    else:
        w = b.graph_input(a.dtype, wdims)
    args = [a.name, w.name]
    (y,) = b.node("MatMul", args)
    dims = list(a.dims[:-1]) + [n] if a.rank > 1 else [n]
    if len(wdims) > 2 and a.rank < len(wdims):
        dims = list(wdims[:-2]) + dims[-2:]
    b.add_value(y, a.dtype, dims, "wild")


@entry(2.0)
def gemm(b: Builder):
    a = need(b.pick((F32, F64, F16), rank=(2, 2), kinds=("tame",)))
    ta, tb = b.rng.choice([0, 1]), b.rng.choice([0, 1])
    m, k = (a.dims[1], a.dims[0]) if ta else (a.dims[0], a.dims[1])
    if not static(k):
        raise Skip
    n = b.rng.randint(1, 4)
    bshape = (n, k[0]) if tb else (k[0], n)
    args = [a.name, _weight(b, a.dtype, bshape)]
    if b.rng.random() < 0.7:
        cshape = b.rng.choice([(n,), (1, n), (), (1, 1)] + ([(m[0], n)] if static(m) else []))
        args.append(_weight(b, a.dtype, cshape, hint="bias"))
    attrs = {"transA": ta, "transB": tb}
    if b.rng.random() < 0.4:
        attrs.update(alpha=b.rng.choice([0.5, 2.0]), beta=b.rng.choice([0.0, 1.5]))
    (y,) = b.node("Gemm", args, **attrs)
    b.add_value(y, a.dtype, [m, (n,) * b.calls], "wild")


def _spatial(b: Builder, rank=(3, 4), min_size=1, kinds=("tame",)):
    """An N, C, spatial... operand with a static channel count."""
    return need(b.pick(FLOATS, rank=rank, kinds=kinds,
                       cond=lambda v: static(v.dims[1]) and v.dims[1][0] >= 1 and
                       all(min(d) >= min_size for d in v.dims[2:])))


def _window(b: Builder, x, transposed: bool = False):
    """Kernel, strides, dilations and padding attrs for the spatial dims of x; returns
    (attrs, kernel, per-call output sizes per spatial dim) or raises Skip."""
    nsp = x.rank - 2
    ks = [b.rng.randint(1, 3) for _ in range(nsp)]
    ss = [b.rng.choice([1, 1, 2]) for _ in range(nsp)]
    ds = [b.rng.choice([1, 1, 2]) for _ in range(nsp)]
    pad = b.rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
    if pad.startswith("SAME"):  # onnxruntime rejects or mis-sizes SAME with dilations
        ds = [1] * nsp
    eff = [(k - 1) * d + 1 for k, d in zip(ks, ds)]
    attrs = {"kernel_shape": ks, "strides": ss}
    if any(d != 1 for d in ds):
        attrs["dilations"] = ds
    if pad != "NOTSET":
        attrs["auto_pad"] = pad
    pads = [b.rng.randint(0, k - 1) for k in ks] + [b.rng.randint(0, k - 1) for k in ks]
    if pad == "NOTSET" and any(pads):
        attrs["pads"] = pads
    elif pad != "NOTSET" or b.rng.random() < 0.5:
        pads = [0] * (2 * nsp)
    outs = []
    ops = [1 if transposed and s > 1 and b.rng.random() < 0.3 else 0 for s in ss]
    for i in range(nsp):
        sizes = []
        for n in x.dims[2 + i]:
            if transposed:
                o = ops[i]
                if pad.startswith("SAME"):
                    if eff[i] + o < ss[i]:
                        raise Skip
                    out = n * ss[i]
                else:
                    out = ss[i] * (n - 1) + o + eff[i] - pads[i] - pads[i + nsp]
            elif pad.startswith("SAME"):
                out = math.ceil(n / ss[i])
            else:
                span = n + pads[i] + pads[i + nsp] - eff[i]
                if span < 0:
                    raise Skip
                out = span // ss[i] + 1
            if out < 1:
                raise Skip
            sizes.append(out)
        outs.append(tuple(sizes))
    if transposed and any(ops):
        attrs["output_padding"] = ops
    return attrs, ks, outs


@entry(2.5)
def conv(b: Builder):
    x = _spatial(b)
    c = x.dims[1][0]
    group = c if c > 1 and b.rng.random() < 0.3 else 1
    m = group * b.rng.randint(1, 2) if group > 1 else b.rng.randint(1, 4)
    attrs, ks, outs = _window(b, x)
    args = [x.name, _weight(b, x.dtype, (m, c // group, *ks), nonfinite=True)]
    if b.rng.random() < 0.5:
        args.append(_weight(b, x.dtype, (m,), hint="bias"))
    if group > 1:
        attrs["group"] = group
    (y,) = b.node("Conv", args, **attrs)
    b.add_value(y, x.dtype, [x.dims[0], (m,) * b.calls, *outs], "wild")


@entry(1.5)
def conv_transpose(b: Builder):
    x = _spatial(b)
    c = x.dims[1][0]
    m = b.rng.randint(1, 3)
    attrs, ks, outs = _window(b, x, transposed=True)
    args = [x.name, _weight(b, x.dtype, (c, m, *ks))]
    if b.rng.random() < 0.5:
        args.append(_weight(b, x.dtype, (m,), hint="bias"))
    (y,) = b.node("ConvTranspose", args, **attrs)
    b.add_value(y, x.dtype, [x.dims[0], (m,) * b.calls, *outs], "wild")


@entry(2.5)
def pool(b: Builder):
    op = b.rng.choice(["MaxPool", "MaxPool", "AveragePool", "LpPool"])
    # MaxPool takes NaNs too (`pooling.max_rule`: onnx.reference's rule for NaN taps)
    x = _spatial(b, kinds=("tame", "wild") if op == "MaxPool" else ("tame",))
    attrs, ks, outs = _window(b, x)
    if op != "MaxPool" and "dilations" in attrs and (op == "LpPool" or b.opset < 19):
        raise Skip
    if op == "AveragePool" and b.rng.random() < 0.5:
        attrs["count_include_pad"] = 1
    if op == "LpPool":
        attrs["p"] = b.rng.choice([1, 2])
    if op != "LpPool" and b.rng.random() < 0.3 and attrs.get("auto_pad", "NOTSET") == "NOTSET":
        attrs["ceil_mode"] = 1
        pads = attrs.get("pads", [0] * (2 * (x.rank - 2)))
        dil = attrs.get("dilations", [1] * (x.rank - 2))
        outs = []
        for i in range(x.rank - 2):
            eff, s = (ks[i] - 1) * dil[i] + 1, attrs["strides"][i]
            sizes = []
            for n in x.dims[2 + i]:
                span = n + pads[i] + pads[i + x.rank - 2] - eff
                out = -(-span // s) + 1
                if (out - 1) * s >= n + pads[i]:  # the last window starts in the padding
                    out -= 1
                sizes.append(out)
            outs.append(tuple(sizes))
    (y,) = b.node(op, [x.name], **attrs)
    b.add_value(y, x.dtype, [x.dims[0], x.dims[1], *outs], x.kind if op == "MaxPool" else
                "wild" if op == "LpPool" else "tame")


@entry(1.0)
def global_pool(b: Builder):
    op = b.rng.choice(["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
    x = _spatial(b, rank=(3, 5))
    attrs = {"p": 2} if op == "GlobalLpPool" and b.rng.random() < 0.5 else {}
    (y,) = b.node(op, [x.name], **attrs)
    b.add_value(y, x.dtype, [x.dims[0], x.dims[1]] + [(1,) * b.calls] * (x.rank - 2),
                "tame" if op != "GlobalLpPool" else "wild")


@entry(2.0)
def norm(b: Builder):
    op = b.rng.choice(["BatchNormalization", "InstanceNormalization", "LayerNormalization",
                       "LpNormalization", "MeanVarianceNormalization", "GroupNormalization",
                       "LRN"])
    if op == "LayerNormalization" and b.opset < 17 or op == "GroupNormalization" and \
            b.opset < 21:
        op = "BatchNormalization"
    rank = {"LpNormalization": (1, 4), "LayerNormalization": (1, 4), "LRN": (4, 4),
            "MeanVarianceNormalization": (4, 4), "InstanceNormalization": (3, 4)}.get(op, (2, 4))
    # no empty operands: onnxruntime 1.32 crashes (SIGSEGV) on some empty normalizations
    x = need(b.pick(FLOATS, rank=rank, kinds=("tame",),
                    cond=lambda v: (v.rank < 2 or static(v.dims[1])) and
                    all(min(d) >= 1 for d in v.dims)))
    eps = {"epsilon": b.rng.choice([1e-5, 1e-3])} if b.rng.random() < 0.5 else {}
    dt = x.dtype
    if op in ("BatchNormalization", "InstanceNormalization", "GroupNormalization"):
        if x.rank < 2 or op == "InstanceNormalization" and x.rank < 3:
            raise Skip
        c = x.dims[1][0]
        args = [x.name, _weight(b, dt, (c,)), _weight(b, dt, (c,), hint="bias")]
        if op == "BatchNormalization":
            args += [_weight(b, dt, (c,), hint="mean"), _weight(b, dt, (c,), positive=True)]
        if op == "GroupNormalization":
            groups = b.rng.choice([g for g in (1, 2, 3, 4) if c % g == 0])
            eps["num_groups"] = groups
        (y,) = b.node(op, args, **eps)
    elif op == "LayerNormalization":
        axis = b.rng.randrange(-x.rank, x.rank)
        nd = x.dims[axis:]
        if all(static(d) for d in nd):
            scale = _weight(b, dt, tuple(d[0] for d in nd))
        else:
            scale = b.graph_input(dt, nd).name
        args = [x.name, scale] + ([_weight(b, dt, (nd[-1][0],), hint="bias")]
                                  if static(nd[-1]) and b.rng.random() < 0.5 else [])
        (y,) = b.node(op, args, axis=axis, **eps)
    elif op == "LpNormalization":
        (y,) = b.node(op, [x.name], axis=b.rng.randrange(-x.rank, x.rank),
                      p=b.rng.choice([1, 2]))
    elif op == "LRN":
        (y,) = b.node(op, [x.name], size=b.rng.choice([1, 3, 5]),
                      alpha=b.rng.choice([1e-4, 0.1]), beta=0.75, bias=1.0)
    else:
        (y,) = b.node(op, [x.name])
    b.add_value(y, dt, x.dims, "wild")


