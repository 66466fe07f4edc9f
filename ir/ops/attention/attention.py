"""Attention (opsets 23, 24, 25): scaled dot-product attention with masks, GQA and a KV cache.

Shapes: Q is (B, Hq, Sq, Dh) or 3-D (B, Sq, Hq*Dh) with `q_num_heads`/`kv_num_heads`; K and V
likewise with Hkv heads (V's head size Dv may differ). With past_key/past_value (B, Hkv, P, .)
the keys are present_key = concat(past_key, K) along the sequence (T = P + Skv keys), also
returned as outputs. Query head h reads key/value head h // (Hq / Hkv) (GQA/MQA).

Per (b, h) the algorithm (matching the ONNX reference) is:
1) S = (scale * Q) K^T (Q scaled into scratch, then one `loops.Matmul` with B transposed; scale
   defaults to 1/sqrt(Dh); scaling Q first overflows where the reference's (sqrt(scale) Q)
   (sqrt(scale) K)^T does);
2) per row i, per key j: v = softcap * tanh(v / softcap) when softcap > 0; the bias is the mask
   value (bool: 0 / -inf; float: added; keys past the mask's last dim: -inf) plus -inf where
   the causal rule (j <= i + offset), the sliding window (opset 25) or nonpad_kv_seqlen (j <
   nonpad[b], opset 24+) forbids the key (added as the references add it: a float mask's +inf
   there is NaN); offset = P with a cache, nonpad[b] - Sq with nonpad_kv_seqlen, else 0;
3) a numerically stable softmax over the row (computed in f64 when softmax_precision asks for
   it); a row whose bias is -inf everywhere (fully masked) becomes zeros, not NaN (a NaN bias
   is not masked: its row is NaN, as in the references);
4) Y = P V (a second Matmul), written straight into the 3-D or 4-D output layout: Matmul windows
   take a leading dimension, so 3-D inputs/outputs need no transposes.
qk_matmul_output (4th output) is S before softcap (mode 0), after softcap (1), after the bias
(2) or after the softmax (3). Steps 1-4 run inside one loop over B*Hq marked parallel.
For float16/bfloat16, steps 1 and 3 follow the reference's rounding order exactly instead
(Q and K each pre-scaled by sqrt(scale), a true division in the softmax): see
`attention.narrow_floats`.
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, broadcast_strides, const
from onnxjit.ir.loops import Buffer, Matmul, Operand, Var, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.attention.narrow_floats import prescaled, scale_root, softmax_row, softmax_type
from onnxjit.ir.ops.attention.reference import attention_reference
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, Types, accept, float_attr, int_attr
from onnxjit.ir.ops.reductions.lowering import Lanes
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import NARROW_FLOATS, Dim, DType, TensorType

_TYPES: Types = ((23, FLOATS | BF16),)


def _add(a: Dim, b: Dim) -> Dim:
    return None if a is None or b is None else a + b


class Attrs:
    """The node's attributes, checked."""

    def __init__(self, node: Node):
        self.causal = int_attr(node, "is_causal", 0, (0, 1)) == 1
        self.hq = int_attr(node, "q_num_heads", 0)
        self.hkv = int_attr(node, "kv_num_heads", 0)
        self.mode = int_attr(node, "qk_matmul_output_mode", 0, (0, 1, 2, 3))
        self.scale = float_attr(node, "scale", 0.0) if "scale" in node.attrs else None
        self.softcap = float_attr(node, "softcap", 0.0)
        self.precision = int_attr(node, "softmax_precision", 0)
        self.left = int_attr(node, "left_window_size", -1) if node.version >= 25 else -1
        self.right = int_attr(node, "right_window_size", -1) if node.version >= 25 else -1
        if self.left < -1 or self.right < -1:
            raise ModelError("window sizes must be -1 or non-negative", where=node)


class Geom:
    """Sizes of one Attention node: B, Hq, Hkv, Sq, Skv, P (past), T = P + Skv, Dh, Dv."""

    def __init__(self, node: Node, q: tuple, k: tuple, v: tuple, past: tuple | None,
                 at: Attrs):
        if not len(q) == len(k) == len(v) or len(q) not in (3, 4):
            raise ModelError(f"Q, K, V must all be 3-D or all 4-D, got shapes {list(q)}, "
                             f"{list(k)}, {list(v)}", where=node)
        self.rank = len(q)
        self.b, self.sq, self.skv = q[0], q[-2] if len(q) == 4 else q[1], k[-2] if len(
            q) == 4 else k[1]
        if self.rank == 3:
            if at.hq <= 0 or at.hkv <= 0:
                raise ModelError("3-D Q/K/V need the q_num_heads and kv_num_heads attributes",
                                 where=node)
            self.hq, self.hkv = at.hq, at.hkv
            self.dh = _div(node, q[2], self.hq, "Q hidden size", "q_num_heads")
            _div(node, k[2], self.hkv, "K hidden size", "kv_num_heads")
            self.dv = _div(node, v[2], self.hkv, "V hidden size", "kv_num_heads")
        else:
            if node.version >= 25 and (at.hq or at.hkv):
                raise ModelError("q_num_heads/kv_num_heads must not be given for 4-D inputs",
                                 where=node)
            self.hq, self.hkv, self.dh, self.dv = q[1], k[1], q[3], v[3]
        if isinstance(self.hq, int) and isinstance(self.hkv, int) and (
                self.hkv <= 0 or self.hq % self.hkv):
            raise ModelError(f"q heads ({self.hq}) must be a multiple of kv heads ({self.hkv})",
                             where=node)
        self.p = past[2] if past is not None else 0
        self.t = _add(self.p, self.skv)

    def y_shape(self) -> tuple:
        if self.rank == 3:
            return (self.b, self.sq, None if self.dv is None or self.hq is None
                    else self.hq * self.dv)
        return (self.b, self.hq, self.sq, self.dv)


def _div(node: Node, n: Dim, h: int, what: str, attr: str) -> Dim:
    if not isinstance(n, int):
        return None
    if n % h:
        raise ModelError(f"{what} {n} is not a multiple of {attr} {h}", where=node)
    return n // h


def _infer(node: Node) -> list:
    n_in = len(node.inputs)
    if n_in < 3 or any(node.input(i) is None for i in range(3)):
        raise ModelError("Attention needs Q, K and V", where=node)
    if n_in > (7 if node.version >= 24 else 6):
        raise ModelError(f"Attention takes at most {7 if node.version >= 24 else 6} inputs",
                         where=node)
    dt = accept(node, 0, _TYPES)
    for i in (1, 2, 4, 5):
        if node.input(i) is not None and accept(node, i, _TYPES) != dt:
            raise ModelError(f"input {i} must be {dt.short} like Q", where=node)
    if (node.input(4) is None) != (node.input(5) is None):
        raise ModelError("past_key and past_value must be given together", where=node)
    if node.input(6) is not None:
        if node.input(4) is not None:
            raise ModelError("nonpad_kv_seqlen cannot be combined with past_key/past_value",
                             where=node)
        if tensor_input(node, 6).dtype != DType.INT64:
            raise ModelError("nonpad_kv_seqlen must be int64", where=node)
    if node.input(3) is not None:
        mt = tensor_input(node, 3).dtype
        if mt != DType.BOOL and mt != dt:
            if mt.is_float or mt.is_int:
                raise UnsupportedError(f"Attention with an attn_mask of element type "
                                       f"{mt.short} (Q is {dt.short}) is not supported",
                                       where=node)
            raise ModelError(f"attn_mask of element type {mt.short}", where=node)
    at = Attrs(node)
    shapes = [tensor_input(node, i).shape for i in range(3)]
    past = tensor_input(node, 4).shape if node.input(4) is not None else None
    outs: list[TensorType | None] = []
    if any(s is None for s in shapes):
        g = None
    else:
        g = Geom(node, shapes[0], shapes[1], shapes[2], past, at)  # type: ignore[arg-type]
    if g is not None and node.input(3) is not None:
        _check_mask(node, tensor_input(node, 3).shape, g)
    outs.append(TensorType(dt, g.y_shape() if g else None))
    if len(node.outputs) > 1:
        outs.append(TensorType(dt, (g.b, g.hkv, g.t, g.dh) if g else None))
    if len(node.outputs) > 2:
        outs.append(TensorType(dt, (g.b, g.hkv, g.t, g.dv) if g else None))
    if len(node.outputs) > 3:
        outs.append(TensorType(dt, (g.b, g.hq, g.sq, g.t) if g else None))
    return outs


def _check_mask(node: Node, m: tuple | None, g: Geom) -> None:
    """attn_mask broadcasts to (B, Hq, Sq, L) with L <= T (shorter rows are padded)."""
    if m is None:
        return
    if not 1 <= len(m) <= 4:
        raise ModelError(f"attn_mask must have rank 1 to 4, got shape {list(m)}", where=node)
    for d, want in zip(m[-2::-1], (g.sq, g.hq, g.b)):
        if isinstance(d, int) and d != 1 and isinstance(want, int) and d != want:
            raise ModelError(f"attn_mask shape {list(m)} does not broadcast to (batch, "
                             f"q_heads, q_len, keys) = ({g.b}, {g.hq}, {g.sq}, {g.t})",
                             where=node)
    if isinstance(m[-1], int) and isinstance(g.t, int) and m[-1] > g.t:
        raise ModelError(f"attn_mask has {m[-1]} keys but there are only {g.t}", where=node)


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    at = Attrs(node)
    ins = list(inputs) + [None] * (7 - len(inputs))
    outs = attention_reference(*ins, at=at)
    return [np.ascontiguousarray(o, dtype=inputs[0].dtype) for o in outs][:len(node.outputs)]


# --------------------------------------------------------------------------- lowering


class _Src:
    """A (B, H, S, D) operand read through a window: element (b, h, s, d) is at
    b * sb + h * sh + s * ld + d."""

    def __init__(self, buf: Buffer, rank: int, h: int, s: int, d: int):
        self.buf = buf
        if rank == 4:
            self.sb, self.sh, self.ld = h * s * d, s * d, d
        else:
            self.sb, self.sh, self.ld = s * h * d, d, h * d

    def off(self, b: Builder, bi: Operand, hi: Operand) -> Operand:
        return b.iadd(b.imul(bi, self.sb), b.imul(hi, self.sh))


def _present(ctx: LowerContext, b: Builder, node: Node, g: Geom, i: int, d: int) -> _Src:
    """The keys (i=1) or values (i=2) as one (B, Hkv, T, d) operand: the input itself when
    there is no cache, else present = concat(past, new) in the present output (or scratch)."""
    x = ctx.buf(node.inputs[i])
    new = _Src(x, g.rank, g.hkv, g.skv, d)
    want_out = len(node.outputs) > i
    if node.input(4) is None and not want_out:
        return new
    out = ctx.buf(node.outputs[i]) if want_out else \
        ctx.scratch("present", x.dtype, (g.b, g.hkv, g.t, d))
    past = ctx.buf(node.inputs[i + 3]) if node.input(4) is not None else None
    with b.loop(0, g.b, parallel=True, hint="b") as bi:
        with b.loop(0, g.hkv, hint="h") as hi:
            dst = b.imul(b.iadd(b.imul(bi, g.hkv), hi), g.t * d)
            if past is not None and g.p:
                src = b.imul(b.iadd(b.imul(bi, g.hkv), hi), g.p * d)
                with b.loop(0, g.p * d, hint="e") as e:
                    b.store(out, b.iadd(dst, e), b.load(past, b.iadd(src, e)))
            base = new.off(b, bi, hi)
            with b.loop(0, g.skv, hint="s") as si:
                row = b.iadd(dst, b.imul(b.iadd(si, i64(g.p)), d))
                srow = b.iadd(base, b.imul(si, new.ld))
                with b.loop(0, d, hint="d") as di:
                    b.store(out, b.iadd(row, di), b.load(x, b.iadd(srow, di)))
    return _Src(out, 4, g.hkv, g.t, d)


def _lower(ctx: LowerContext, node: Node) -> None:
    at = Attrs(node)
    q, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    past = ctx.buf(node.inputs[4]).shape if node.input(4) is not None else None
    g = Geom(node, q.shape, ctx.buf(node.inputs[1]).shape, ctx.buf(node.inputs[2]).shape,
             past, at)
    dt = q.dtype
    b = Builder()
    ks = _present(ctx, b, node, g, 1, g.dh)
    vs = _present(ctx, b, node, g, 2, g.dv)
    if b.body:
        ctx.kernel("attention_cache", b.body)
    qk = ctx.buf(node.outputs[3]) if len(node.outputs) > 3 and node.outputs[3] is not None \
        else None
    if y.numel == 0 and (qk is None or qk.numel == 0):  # (V's head size 0 still has scores)
        return
    qs = _Src(q, g.rank, g.hq, g.sq, g.dh)
    ys = _Src(y, g.rank, g.hq, g.sq, g.dv)
    T, sq = g.t, g.sq
    s = ctx.scratch("scores", dt, (g.b * g.hq, sq, max(T, 1)))
    mask = ctx.buf(node.inputs[3]) if node.input(3) is not None else None
    nonpad = ctx.buf(node.inputs[6]) if node.input(6) is not None else None
    scale = at.scale if at.scale is not None else 1.0 / math.sqrt(g.dh) if g.dh else 1.0
    groups = g.hq // g.hkv
    if dt in NARROW_FLOATS and T and g.dh:  # the reference's rounding order (narrow_floats)
        qs, ks = prescaled(ctx, (qs, ks), scale_root(at.scale, g.dh))
        scale = 1.0
    elif T and g.dh and scale != 1.0 and q.numel:
        # scale Q before the product, not the sums after it: the reference's (Q sqrt(s)) .
        # (K sqrt(s)) overflows where q . k * s does, while q . k alone overflows sooner (a
        # key near float max gave inf - inf = NaN where the references have a finite score)
        (qs,) = prescaled(ctx, (qs,), scale)
        scale = 1.0
    b = Builder()
    with b.loop(0, g.b * g.hq, parallel=True, hint="bh") as bh:
        bi, hi = b.op("div", bh, i64(g.hq)), b.op("rem", bh, i64(g.hq))
        kh = b.op("div", hi, i64(groups)) if groups > 1 else hi
        s_off = b.imul(bh, sq * T)
        if T and g.dh:
            b.emit(Matmul(s, s_off, T, qs.buf, qs.off(b, bi, hi), qs.ld, ks.buf, ks.off(b, bi, kh),
                          ks.ld, sq, T, g.dh, b_trans=True, alpha=scale))
        elif T:
            with b.loop(0, sq * T) as e:
                b.store(s, b.iadd(s_off, e), const(0, dt))
        with b.loop(0, sq, hint="i") as i:
            _row(b, node, at, g, s, b.iadd(s_off, b.imul(i, T)), bi, hi, i, mask, nonpad, qk)
        y_off = ys.off(b, bi, hi)
        if T and g.dv:
            b.emit(Matmul(y, y_off, ys.ld, s, s_off, T, vs.buf, vs.off(b, bi, kh), vs.ld,
                          sq, g.dv, T))
        elif not T:
            with b.loop(0, sq, hint="i") as i:
                with b.loop(0, g.dv, hint="d") as d:
                    b.store(y, b.iadd(y_off, b.iadd(b.imul(i, ys.ld), d)), const(0, dt))
    ctx.kernel("attention", b.body)


def _row(b: Builder, node: Node, at: Attrs, g: Geom, s: Buffer, row: Operand, bi: Operand,
         hi: Operand, i: Operand, mask: Buffer | None, nonpad: Buffer | None,
         qk: Buffer | None) -> None:
    """Steps 2-3 of the module docstring on one row of scores (in place in `s`)."""
    T = g.t
    dt = s.dtype
    pt = DType.DOUBLE if at.precision == DType.DOUBLE.value else dt
    ninf = const(-math.inf, dt)
    qk_row = b.imul(b.iadd(b.imul(b.iadd(b.imul(bi, g.hq), hi), g.sq), i), T) \
        if qk is not None else None
    offset: Operand | None = None
    if at.causal or at.left >= 0 or at.right >= 0:
        if nonpad is not None:
            offset = b.op("sub", b.load(nonpad, bi), i64(g.sq))
        else:
            offset = i64(g.p)
    mask_base: Operand = i64(0)
    if mask is not None:
        full = (g.b, g.hq, g.sq, mask.shape[-1])
        st = broadcast_strides(mask.shape, full)
        mask_base = b.linear([bi, hi, i], st[:3])
    masked = mask is not None or offset is not None or nonpad is not None
    any_ok: Var | None = b.var(const(False, DType.BOOL), hint="any") if masked else None
    if masked or at.softcap > 0 or (qk is not None and at.mode < 3):
        with b.loop(0, T, hint="j") as j:
            at_j = b.iadd(row, j)
            v: Operand = b.load(s, at_j)
            if qk is not None and at.mode == 0:
                b.store(qk, b.iadd(qk_row, j), v)
            if at.softcap > 0:
                c = const(at.softcap, dt)
                v = b.op("mul", b.op("tanh", b.op("div", v, c)), c)
            if qk is not None and at.mode == 1:
                b.store(qk, b.iadd(qk_row, j), v)
            if masked:
                bias = _bias(b, at, dt, i, j, bi, mask, mask_base, offset, nonpad)
                assert any_ok is not None
                b.assign(any_ok, "or", any_ok, b.op("ne", bias, ninf))  # NaN: not masked
                v = b.op("add", v, bias)
            if qk is not None and at.mode == 2:
                b.store(qk, b.iadd(qk_row, j), v)
            b.store(s, at_j, v)
    if dt in NARROW_FLOATS:
        softmax_row(b, s, row, T, softmax_type(dt, at.precision), any_ok,
                    qk if at.mode == 3 else None, qk_row)
        return
    # Softmax as in reductions.along_axis: Lanes folds for max and sum, exp in a plain loop of its
    # own (so it vectorizes). A row whose max is -inf (all masked) subtracts 0 and divides by 1.
    mx_l = Lanes(b, const(-math.inf, pt), "max", T, hint="max")
    mx_l.run(T, lambda j: b.cast(b.load(s, b.iadd(row, j)), pt))
    mx = mx_l.result()
    safe = b.op("select", b.op("eq", mx, const(-math.inf, pt)), const(0, pt), mx)
    if pt == dt:
        with b.loop(0, T, hint="j") as j:
            at_j = b.iadd(row, j)
            b.store(s, at_j, b.op("exp", b.op("sub", b.load(s, at_j), safe)))
        sm = Lanes(b, const(0, pt), "add", T, hint="sum", terms_signed=False)
        sm.run(T, lambda j: b.load(s, b.iadd(row, j)))
    else:  # a wider softmax precision: keep the exps in pt inside the fold
        sm = Lanes(b, const(0, pt), "add", T, hint="sum", terms_signed=False)

        def exp_at(j: Operand) -> Operand:
            at_j = b.iadd(row, j)
            e = b.op("exp", b.op("sub", b.cast(b.load(s, at_j), pt), safe))
            b.store(s, at_j, b.cast(e, dt))
            return e

        sm.run(T, exp_at)
    total = sm.result()
    inv = b.op("div", const(1, pt), b.op("select", b.op("eq", total, const(0, pt)),
                                         const(1, pt), total))
    inv_dt = b.cast(inv, dt)
    with b.loop(0, T, hint="j") as j:
        at_j = b.iadd(row, j)
        pv = b.op("mul", b.load(s, at_j), inv_dt)
        if any_ok is not None:  # a fully masked row is 0, even where its scores are NaN
            pv = b.op("select", any_ok, pv, const(0, dt))
        b.store(s, at_j, pv)
        if qk is not None and at.mode == 3:
            b.store(qk, b.iadd(qk_row, j), pv)


def _bias(b: Builder, at: Attrs, dt: DType, i: Operand, j: Operand, bi: Operand,
          mask: Buffer | None, mask_base: Operand, offset: Operand | None,
          nonpad: Buffer | None) -> Operand:
    """The additive bias of score (i, j): the float mask value, or -inf where a rule
    forbids the key (module docstring, step 2)."""
    bias: Operand = const(0, dt)
    ok: Operand = const(True, DType.BOOL)
    ninf = const(-math.inf, dt)
    if mask is not None and mask.shape[-1] == 0:
        ok = const(False, DType.BOOL)  # an empty mask row pads to all -inf
    elif mask is not None:
        mlen = mask.shape[-1]
        in_mask = b.op("lt", j, i64(mlen))
        mv = b.load(mask, b.iadd(mask_base, b.op("min", j, i64(mlen - 1))))
        if mask.dtype == DType.BOOL:
            ok = b.op("and", in_mask, mv)
        else:  # the mask's value, -inf past its end; the rules below add their -inf to it
            bias = b.op("select", in_mask, mv, ninf)
    if offset is not None:
        p = b.op("add", i, offset)
        if at.causal:
            ok = b.op("and", ok, b.op("le", j, p))
        if at.left >= 0:
            ok = b.op("and", ok, b.op("le", b.op("sub", p, j), i64(at.left)))
        if at.right >= 0:
            ok = b.op("and", ok, b.op("le", b.op("sub", j, p), i64(at.right)))
    if nonpad is not None:
        ok = b.op("and", ok, b.op("lt", j, b.load(nonpad, bi)))
    # added, not selected: +inf in a float mask where a rule masks is NaN, as in the references
    return b.op("add", bias, b.op("select", ok, const(0, dt), ninf))


op("Attention", (23, 24, 25), infer=_infer, evaluate=_evaluate, lower=_lower,
   doc="scaled dot-product attention (MHA/GQA/MQA, masks, causal, KV cache, softcap)")
