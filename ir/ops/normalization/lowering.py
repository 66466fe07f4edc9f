"""Loop nests of the normalization ops (the lowering half of `normalization.semantics`).

Row normalizers (LayerNorm, RMSNorm, InstanceNorm, GroupNorm) share `normalize_rows`, one
kernel per node: a parallel loop over rows, and per row of n contiguous elements
1) a mean pass (sum folded by `Lanes`, several partial sums so it vectorizes without
   fast-math) - skipped by RMSNorm;
2) a variance pass over (x - mean)^2 (two passes: exact for rows with a large mean, where
   E[x^2] - E[x]^2 cancels), or the mean of x^2 for RMSNorm; inv = 1 / sqrt(var + eps).
   GroupNorm (`spec_var`) takes its spec body's formula instead, as onnxruntime and
   onnx.reference do: a pass over x^2, var = E[x^2] - E[x]^2 in the stash type. It is what
   both references give where it cancels (a group whose spread is tiny next to its mean:
   fuzz seed 10210409, 2.7e-4 apart from the exact value) and past float max (inf - E[x]^2,
   NaN when E[x]^2 overflows too: fuzz seed 9452609);
3) a normalize-scale-shift pass y = (x - mean) * inv * scale + bias: a nest over the row's
   dims (merged where contiguous) so that scale/bias are read with their broadcast strides; in
   the common case (a full-row scale) it is one contiguous loop.
Statistics run in the stash type (f32, or f64 for f64 data); the scale and bias of double
data apply in double to the normalized value rounded to the stash type (the spec's bodies).

BatchNormalization (inference): a parallel loop over (n, c) computing a = scale / sqrt(var +
eps) and b = B - mean * a for the channel, then one contiguous loop y = x * a + b over the
spatial dims. Training mode: a parallel loop over channels, each folding its batch mean and
variance over (n, spatial), writing the running statistics, then normalizing its channel.
LRN: per (n, c) (parallel), the channel window's sum of squares accumulates into the output row
(contiguous spatial loops), then y = x / (bias + alpha/size * sum)^beta in place.
MeanVarianceNormalization: the reduction nests of `reductions.lowering` (mean, then the mean of
the squared deviation) into scratch buffers, with broadcast elementwise passes between them
(two passes, as onnxruntime's kernel: past float max it disagrees with onnx.reference's spec
body E[x^2] - E[x]^2, which GroupNorm follows because both references do).
LpNormalization: along a contiguous last axis, a `Lanes` fold per row then y = x / norm
(the norm of float16/bfloat16 in f32; a division, as the references round);
otherwise per (outer) block the norms of the `inner` columns accumulate in a scratch row
(contiguous over inner), then y = x / norm; 0 wherever the norm is 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import (
    Builder,
    broadcast_strides,
    coalesce,
    const,
    elementwise,
    row_major_strides,
)
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.narrow import accumulator
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import float_attr, int_attr
from onnxjit.ir.ops.normalization.semantics import (
    bn_evaluate,
    bn_infer,
    bn_per_activation,
    bn_training,
    groups,
    instance_evaluate,
    instance_infer,
    layer_evaluate,
    layer_infer,
    lrn_size,
    mvn_axes,
    norm_axis,
    stash_dtype,
    unary_evaluate,
    unary_infer,
)
from onnxjit.ir.ops.reductions.lowering import Lanes, emit_reduce, size_value
from onnxjit.ir.types import NARROW_FLOATS, DType


@dataclass
class Param:
    """A scale/bias buffer read at `base(row) + sum(idx * strides)` over the row's dims."""

    buf: Buffer
    strides: list[int]
    base: Callable[[Builder, Operand], Operand]


def _zero(b: Builder, r: Operand) -> Operand:
    return i64(0)


def _out(node: Node, i: int) -> object:
    return node.outputs[i] if i < len(node.outputs) and node.outputs[i] is not None else None


def normalize_rows(b: Builder, x: Buffer, y: Buffer, rows: int, dims: Sequence[int],
                   eps: float, cdt: DType, rms: bool, scale: Param | None,
                   bias: Param | None, mean_out: Buffer | None = None,
                   inv_out: Buffer | None = None, spec_var: bool = False) -> None:
    """Emit the row-normalizer kernel body (see module docstring)."""
    n = math.prod(dims)
    with b.loop(0, rows, parallel=True, hint="r") as r:
        base = b.imul(r, n)

        def xv(j: Operand) -> Operand:
            return b.cast(b.load(x, b.iadd(base, j)), cdt)

        mean: Operand | None = None
        if not rms:
            s = Lanes(b, const(0, cdt), "add", n, hint="sum")
            s.run(n, xv)
            mean = b.op("div", s.result(), size_value(b, n, cdt))

        def sq(j: Operand) -> Operand:
            v = xv(j) if mean is None or spec_var else b.op("sub", xv(j), mean)
            return b.op("mul", v, v)

        v = Lanes(b, const(0, cdt), "add", n, hint="var")
        v.run(n, sq)
        total, count = v.result(), size_value(b, n, cdt)
        var = b.op("div", total, count)
        if spec_var and mean is not None:  # E[x^2] - E[x]^2, the spec body's
            var = b.op("sub", var, b.op("mul", mean, mean))
        inv = b.op("div", const(1, cdt), b.op("sqrt", b.op("add", var, const(eps, cdt))))
        if mean_out is not None and mean is not None:
            b.store(mean_out, r, b.cast(mean, mean_out.dtype))
        if inv_out is not None:
            b.store(inv_out, r, b.cast(inv, inv_out.dtype))
        params = [p for p in (scale, bias) if p is not None]
        cshape, cstr = coalesce(list(dims), [row_major_strides(dims)] + [p.strides for p in params])
        pbase = [p.base(b, r) for p in params]
        # The spec's function bodies round the normalized value to the data type before the
        # scale and bias: double data with a float32 stash scales in double, as onnxruntime;
        # float16 data keeps float32 to the end, as onnxruntime's kernels do.
        adt = y.dtype if y.dtype == DType.DOUBLE else cdt
        with b.nest(cshape) as idx:
            j = b.linear(idx, cstr[0])
            val = xv(j) if mean is None else b.op("sub", xv(j), mean)
            val = b.cast(b.op("mul", val, inv), adt)
            for k, p in enumerate(params):
                pv = b.cast(b.load(p.buf, b.iadd(pbase[k], b.linear(idx, cstr[k + 1]))), adt)
                val = b.op("mul" if p is scale else "add", val, pv)
            b.store(y, b.iadd(base, j), b.cast(val, y.dtype))


def layer_lower(ctx: LowerContext, node: Node) -> None:
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    axis = norm_axis(node, len(x.shape))
    dims = x.shape[axis:]
    rows = math.prod(x.shape[:axis])
    mo, io = _out(node, 1), _out(node, 2)
    # Rows over an empty normalized axis still have a Mean and InvStdDev (NaN: 0 / 0).
    if y.numel == 0 and (rows == 0 or mo is None and io is None):
        return
    cdt = stash_dtype(node, x.dtype)
    rms = node.op == "RMSNormalization"

    def param(i: int) -> Param | None:
        v = node.input(i)
        if v is None:
            return None
        buf = ctx.buf(v)
        shape = buf.shape[max(0, len(buf.shape) - len(dims)):]
        return Param(buf, broadcast_strides(shape, dims), _zero)

    b = Builder()
    normalize_rows(b, x, y, rows, dims, float_attr(node, "epsilon", 1e-5), cdt, rms,
                   param(1), None if rms else param(2),
                   ctx.buf(mo) if mo is not None else None,
                   ctx.buf(io) if io is not None else None)
    ctx.kernel(node.op.lower(), b.body)


def instance_lower(ctx: LowerContext, node: Node) -> None:
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    if y.numel == 0:
        return
    c = x.shape[1]
    inner = math.prod(x.shape[2:])
    g = groups(node) if node.op == "GroupNormalization" else c
    cpg = c // g
    per_group = node.op == "GroupNormalization" and node.version < 21

    def base(b: Builder, r: Operand) -> Operand:
        grp = b.op("rem", r, i64(g))
        return grp if per_group else b.imul(grp, cpg)

    strides = [0, 0] if per_group else [1, 0]
    scale = Param(ctx.buf(node.inputs[1]), strides, base)
    bias = Param(ctx.buf(node.inputs[2]), strides, base)
    cdt = stash_dtype(node, x.dtype) if node.op == "GroupNormalization" else (
        DType.DOUBLE if x.dtype == DType.DOUBLE else DType.FLOAT)
    b = Builder()
    normalize_rows(b, x, y, x.shape[0] * g, [cpg, inner], float_attr(node, "epsilon", 1e-5),
                   cdt, False, scale, bias, spec_var=node.op == "GroupNormalization")
    ctx.kernel(node.op.lower(), b.body)


# --------------------------------------------------------------------------- BatchNormalization


def bn_lower(ctx: LowerContext, node: Node) -> None:
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    scale, bias, mean, var = (ctx.buf(node.inputs[i]) for i in range(1, 5))
    if y.numel == 0 and not bn_training(node):  # training: the running outputs are not empty
        return
    n, c = x.shape[0], x.shape[1]
    inner = math.prod(x.shape[2:])
    # float16 inference computes in f32 and rounds once: b = B - mean * a and x * a overflow
    # float16 long before y does, and inf - inf made NaN where the references have +-inf
    xt = x.dtype
    dt = accumulator(xt) if not bn_training(node) else xt
    eps = const(float_attr(node, "epsilon", 1e-5), dt)
    b = Builder()

    def affine(at: Operand, a: Operand, sh: Operand) -> None:
        b.store(y, at, b.cast(b.op("add", b.op("mul", b.cast(b.load(x, at), dt), a), sh), xt))

    def coeffs(p: Operand, m: Operand, v: Operand) -> tuple[Operand, Operand]:
        """a = scale / sqrt(var + eps), b = B - mean * a at parameter index p."""
        def ld(buf: Buffer) -> Operand:
            return b.cast(b.load(buf, p), dt)

        a = b.op("div", ld(scale), b.op("sqrt", b.op("add", v, eps)))
        return a, b.op("sub", ld(bias), b.op("mul", m, a))

    if bn_training(node):
        _bn_train(ctx, node, b, x, y, (scale, bias, mean, var), coeffs)
        ctx.kernel("batchnorm_train", b.body)
        return
    per_act = bn_per_activation(node, x.shape)
    with b.loop(0, n * c, parallel=True, hint="nc") as nc:
        ch = b.op("rem", nc, i64(c))
        row = b.imul(nc, inner)
        if per_act:
            with b.loop(0, inner, hint="i") as i:
                p = b.iadd(b.imul(ch, inner), i)
                a, sh = coeffs(p, b.cast(b.load(mean, p), dt), b.cast(b.load(var, p), dt))
                affine(b.iadd(row, i), a, sh)
        else:
            a, sh = coeffs(ch, b.cast(b.load(mean, ch), dt), b.cast(b.load(var, ch), dt))
            with b.loop(0, inner, hint="i") as i:
                affine(b.iadd(row, i), a, sh)
    ctx.kernel("batchnorm", b.body)


def _bn_train(ctx: LowerContext, node: Node, b: Builder, x: Buffer, y: Buffer,
              params: tuple, coeffs: Callable) -> None:
    _, _, mean, var = params
    n, c = x.shape[0], x.shape[1]
    inner = math.prod(x.shape[2:])
    dt = x.dtype
    mom = float_attr(node, "momentum", 0.9)
    outs = [ctx.buf(o) if o is not None else None for o in (_out(node, 1), _out(node, 2))]
    cnt = const(n * inner, dt)
    with b.loop(0, c, parallel=True, hint="c") as ch:
        def fold(fn: Callable[[Operand], Operand]) -> Operand:
            # each image's plane summed on its own, then the images in order (the references'
            # order: 3.4e38 + 3.4e38 - inf in one image is NaN there, whatever the others hold)
            total = b.var(const(0, dt), hint="sum")
            with b.loop(0, n, hint="n") as k:
                row = b.imul(b.iadd(b.imul(k, c), ch), inner)
                acc = Lanes(b, const(0, dt), "add", inner, hint="part", numpy_order=True)
                acc.run(inner, lambda j: fn(b.load(x, b.iadd(row, j))))
                b.assign(total, "add", total, acc.result())
            return b.op("div", total, cnt)

        bm = fold(lambda v: v)
        bv = fold(lambda v: b.op("mul", b.op("sub", v, bm), b.op("sub", v, bm)))
        for o, src, batch in zip(outs, (mean, var), (bm, bv)):
            if o is not None:
                old = b.cast(b.load(src, ch), dt)
                new = b.op("add", b.op("mul", old, const(mom, dt)),
                           b.op("mul", batch, const(1 - mom, dt)))
                b.store(o, ch, b.cast(new, o.dtype))
        a, sh = coeffs(ch, bm, bv)
        with b.loop(0, n, hint="n") as k:
            row = b.imul(b.iadd(b.imul(k, c), ch), inner)
            with b.loop(0, inner, hint="i") as i:
                at = b.iadd(row, i)
                b.store(y, at, b.op("add", b.op("mul", b.load(x, at), a), sh))


# --------------------------------------------------------------------------- LRN / MVN / Lp


def lrn_lower(ctx: LowerContext, node: Node) -> None:
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    if y.numel == 0:
        return
    n, c = x.shape[0], x.shape[1]
    inner = math.prod(x.shape[2:])
    dt = x.dtype
    # float16/bfloat16: the squares and their sum in f32 (300**2 overflows float16), the
    # result rounded once
    ct = DType.FLOAT if dt in NARROW_FLOATS else dt
    acc = ctx.scratch("lrn_acc", ct, x.shape) if ct != dt else y
    size = lrn_size(node)
    alpha = float_attr(node, "alpha", 1e-4) / size
    beta, bias = float_attr(node, "beta", 0.75), float_attr(node, "bias", 1.0)
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)

    def load(b: Builder, at: Operand) -> Operand:
        v = b.load(x, at)
        return b.cast(v, ct) if ct != dt else v

    b = Builder()
    with b.loop(0, n * c, parallel=True, hint="nc") as nc:
        ch = b.op("rem", nc, i64(c))
        plane = b.op("sub", nc, ch)  # n * c: the first channel of this image
        row = b.imul(nc, inner)
        lo = b.op("max", i64(0), b.op("sub", ch, i64(before)))
        hi = b.op("min", i64(c), b.iadd(ch, i64(after + 1)))
        with b.loop(0, inner, hint="i") as i:
            b.store(acc, b.iadd(row, i), const(0, ct))
        with b.loop(lo, hi, hint="k") as k:
            src = b.imul(b.iadd(plane, k), inner)
            with b.loop(0, inner, hint="i") as i:
                v = load(b, b.iadd(src, i))
                at = b.iadd(row, i)
                b.store(acc, at, b.op("add", b.load(acc, at), b.op("mul", v, v)))
        with b.loop(0, inner, hint="i") as i:
            at = b.iadd(row, i)
            d = b.op("add", const(bias, ct), b.op("mul", const(alpha, ct), b.load(acc, at)))
            # d^beta as exp(beta * log d): both are vectorizable polynomials, pow is a libm
            # call per element; d = 0 still gives 0 (exp(-inf)).
            pw = b.op("exp", b.op("mul", const(beta, ct), b.op("log", d)))
            r = b.op("div", load(b, at), pw)
            b.store(y, at, b.cast(r, dt) if ct != dt else r)
    ctx.kernel("lrn", b.body)


def mvn_lower(ctx: LowerContext, node: Node) -> None:
    x, out = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    if out.numel == 0:
        return
    y = out
    if x.dtype in NARROW_FLOATS:  # in f32, rounded once: (x - mean)**2 overflows float16
        wide = ctx.scratch("mvn_x", DType.FLOAT, x.shape)
        b = Builder()
        elementwise(b, wide, [x], lambda b, a: b.cast(a[0], DType.FLOAT))
        ctx.kernel("mvn_widen", b.body)
        x, y = wide, ctx.scratch("mvn_y", DType.FLOAT, out.shape)
    axes = mvn_axes(node, len(x.shape))
    kshape = tuple(1 if k in axes else d for k, d in enumerate(x.shape))
    count = math.prod(x.shape[k] for k in axes)
    dt = x.dtype
    mean = ctx.scratch("mvn_mean", dt, kshape)
    var = ctx.scratch("mvn_var", dt, kshape)
    b = Builder()
    emit_reduce(b, "ReduceMean", x, mean, axes)
    ctx.kernel("mvn_mean", b.body)
    b = Builder()
    elementwise(b, y, [x, mean], lambda b, a: b.op("sub", a[0], a[1]))
    ctx.kernel("mvn_center", b.body)
    b = Builder()
    emit_reduce(b, "ReduceSumSquare", y, var, axes)
    ctx.kernel("mvn_var", b.body)
    b = Builder()

    def scale(b: Builder, a: list[Operand]) -> Operand:
        std = b.op("sqrt", b.op("div", a[1], const(count, dt)))
        return b.op("div", a[0], b.op("add", std, const(1e-9, dt)))

    elementwise(b, y, [y, var], scale)
    ctx.kernel("mvn_scale", b.body)
    if y is not out:
        b = Builder()
        elementwise(b, out, [y], lambda b, a: b.cast(a[0], out.dtype))
        ctx.kernel("mvn_round", b.body)


def lp_lower(ctx: LowerContext, node: Node) -> None:
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    if y.numel == 0:
        return
    axis = norm_axis(node, len(x.shape))
    outer, n, inner = (math.prod(x.shape[:axis]), x.shape[axis],
                       math.prod(x.shape[axis + 1:]))
    p = int_attr(node, "p", 2)
    # float16/bfloat16 sum (and square) in f32: 300**2 overflows float16, the norm does not
    dt = DType.FLOAT if x.dtype in NARROW_FLOATS else x.dtype
    zero = const(0, dt)
    b = Builder()

    def elem(v: Operand) -> Operand:
        v = b.cast(v, dt) if v.dtype != dt else v
        return b.op("abs", v) if p == 1 else b.op("mul", v, v)

    if inner == 1:
        _lp_rows(b, x, y, outer, n, elem, p, dt)
        ctx.kernel("lpnormalization", b.body)
        return
    acc = ctx.scratch("lp_norm", dt, (outer, inner))
    with b.loop(0, outer, parallel=True, hint="o") as o:
        base, abase = b.imul(o, n * inner), b.imul(o, inner)
        with b.loop(0, inner, hint="i") as i:
            b.store(acc, b.iadd(abase, i), zero)
        with b.loop(0, n, hint="j") as j:
            row = b.iadd(base, b.imul(j, inner))
            with b.loop(0, inner, hint="i") as i:
                at = b.iadd(abase, i)
                b.store(acc, at, b.op("add", b.load(acc, at), elem(b.load(x, b.iadd(row, i)))))
        if p == 2:
            with b.loop(0, inner, hint="i") as i:
                at = b.iadd(abase, i)
                b.store(acc, at, b.op("sqrt", b.load(acc, at)))
        with b.loop(0, n, hint="j") as j:
            row = b.iadd(base, b.imul(j, inner))
            with b.loop(0, inner, hint="i") as i:
                nrm = b.load(acc, b.iadd(abase, i))
                at = b.iadd(row, i)
                q = b.op("div", _as(b, b.load(x, at), dt), nrm)
                b.store(y, at, _as(b, b.op("select", b.op("eq", nrm, zero), zero, q), y.dtype))
    ctx.kernel("lpnormalization", b.body)


def _as(b: Builder, v: Operand, dt: DType) -> Operand:
    return v if v.dtype == dt else b.cast(v, dt)


def _lp_rows(b: Builder, x: Buffer, y: Buffer, rows: int, n: int,
             elem: Callable[[Operand], Operand], p: int, dt: DType) -> None:
    """LpNormalization along a contiguous last axis: a Lanes fold per row, then one pass
    (the norm in dtype dt)."""
    zero = const(0, dt)
    with b.loop(0, rows, parallel=True, hint="r") as r:
        base = b.imul(r, n)
        acc = Lanes(b, zero, "add", n, hint="norm")
        acc.run(n, lambda j: elem(b.load(x, b.iadd(base, j))))
        nrm = acc.result()
        if p == 2:
            nrm = b.op("sqrt", nrm)
        none = b.op("eq", nrm, zero)
        with b.loop(0, n, hint="j") as j:
            # x / norm, not x * (1 / norm): the references' rounding, bit for bit
            at = b.iadd(base, j)
            q = b.op("div", _as(b, b.load(x, at), dt), nrm)
            b.store(y, at, _as(b, b.op("select", none, zero, q), y.dtype))


# --------------------------------------------------------------------------- registration


op("LayerNormalization", (17,), infer=layer_infer, evaluate=layer_evaluate,
   lower=layer_lower, doc="normalize dims >= axis (optional Mean, InvStdDev)", symbolic=True)
op("RMSNormalization", (23,), infer=layer_infer, evaluate=layer_evaluate,
   lower=layer_lower, doc="x / sqrt(mean(x^2) + epsilon) * scale, dims >= axis", symbolic=True)
op("InstanceNormalization", (1, 6, 22), infer=instance_infer, evaluate=instance_evaluate,
   lower=instance_lower, doc="normalize each (n, c) plane; per-channel affine")
op("GroupNormalization", (18, 21), infer=instance_infer, evaluate=instance_evaluate,
   lower=instance_lower, doc="normalize each (n, group); per-group/channel affine")
op("BatchNormalization", (1, 6, 7, 9, 14, 15), infer=bn_infer, evaluate=bn_evaluate,
   lower=bn_lower, doc="per-channel x * a + b (inference) or batch statistics")
op("LRN", (1, 13), infer=unary_infer, evaluate=unary_evaluate, lower=lrn_lower,
   doc="local response normalization across channels")
op("MeanVarianceNormalization", (9, 13), infer=unary_infer, evaluate=unary_evaluate,
   lower=mvn_lower, doc="(x - mean) / (std + 1e-9) over axes")
op("LpNormalization", (1, 22), infer=unary_infer, evaluate=unary_evaluate,
   lower=lp_lower, doc="x / ||x||_p along axis (p = 1 or 2)")
