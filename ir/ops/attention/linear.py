"""LinearAttention (opset 27): recurrent linear attention with a (d_k x d_v) state per KV head.

Shapes: query (B, T, Hq*dk), key (B, T, Hkv*dk), value (B, T, Hkv*dv), past_state and
present_state (B, Hkv, dk, dv); decay (B, T, Hkv*dk) per key dim or (B, T, Hkv) per head;
beta (B, T, Hkv) or (B, T, 1); output (B, T, Hq*dv). Query head h reads the state of KV head
h // G (G = Hq / Hkv; GQA, MQA when Hkv = 1). Per step t with e = exp(decay_t) (1 when not
gated) and u = v_t (linear/gated) or beta_t * (v_t - (e * S)^T k_t) (delta/gated_delta):
S <- e * S + k_t (x) u, then o_t = scale * q_t^T S (scale defaults to 1/sqrt(dk)).
Everything is computed in f32 (f16/bf16 inputs widened, results rounded once at the store).

Lowering: one kernel, a parallel loop over the B*Hkv independent states; inside it
1) the f32 state (the present_state buffer itself when it is f32, else scratch) is set from
   past_state or zeros;
2) a serial loop over the T steps, each:
   - delta rules: S <- e * S in place when gated (formed, not folded into k as
     S^T (e*k): the spec's order, whose rounding and overflow the references share), then
     u = k^T S (`_times_state`), then u <- beta * (v - u) in place;
   - the rank-1 update S[i, j] = e_i * S[i, j] + k_i * u_j (delta rules: S[i, j] + k_i * u_j)
     as one (dk x dv) loop nest (the innermost loop runs along a contiguous row of S, so it
     vectorizes);
   - the G query heads sharing this state read it (`_times_state`, (G x dk) x (dk x dv))
     straight from the packed 3-D query into the packed 3-D output (the heads of a group
     are adjacent in the last dim; narrow types through an f32 scratch row), then scale
     times that (the spec's order: q^T S near float max overflows as the references' does,
     where alpha = scale folded into q did not). `_times_state` adds products rounded one by
     one, as the references do, not the GEMM microkernels' fused multiply-adds: a head whose
     query holds inf and 3.4e38 has an infinite product and one that overflows, +inf and
     -inf, NaN there, where the fused 3.4e38 * s + (-inf) stayed -inf (fuzz seeds 9340315,
     9340747);
3) present_state is written from the state when it is not the state itself.
`evaluate` runs the same recurrence in numpy (constant folding and the host interpreter).
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.narrow import narrow, widen
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import BF16, Types, accept, float_attr, int_attr
from onnxjit.ir.ops.shape_utils import require_attr, tensor_input
from onnxjit.ir.types import NARROW_FLOATS, Dim, DType, TensorType, sym_floordiv, sym_mul

_TYPES: Types = ((27, frozenset({DType.FLOAT16, DType.FLOAT}) | BF16),)
_RULES = ("linear", "gated", "delta", "gated_delta")
_F = DType.FLOAT
#: input positions
_Q, _K, _V, _PAST, _DECAY, _BETA = range(6)


class Attrs:
    """The node's attributes, checked."""

    def __init__(self, node: Node):
        require_attr(node, "q_num_heads")
        require_attr(node, "kv_num_heads")
        self.hq = int_attr(node, "q_num_heads", 0)
        self.hkv = int_attr(node, "kv_num_heads", 0)
        if self.hq <= 0 or self.hkv <= 0 or self.hq % self.hkv:
            raise ModelError(f"q_num_heads ({self.hq}) must be a positive multiple of "
                             f"kv_num_heads ({self.hkv})", where=node)
        self.group = self.hq // self.hkv
        rule = node.attr("update_rule", "gated_delta")
        rule = rule.decode() if isinstance(rule, bytes) else rule
        if rule not in _RULES:
            raise ModelError(f"update_rule must be one of {list(_RULES)}, got {rule!r}",
                             where=node)
        self.rule = rule
        self.gating = rule in ("gated", "gated_delta")
        self.delta = rule in ("delta", "gated_delta")
        self.scale = float_attr(node, "scale", 0.0)
        if int_attr(node, "chunk_size", 64) <= 0:
            raise ModelError("chunk_size must be positive", where=node)

    def scale_for(self, dk: int) -> float:
        if self.scale != 0.0:
            return self.scale
        return 1.0 / math.sqrt(dk) if dk > 0 else 1.0


def _same(node: Node, what: str, dims: list[tuple[str, Dim]]) -> Dim:
    """The common value of dims that must agree (concrete ones are compared)."""
    known = [(n, d) for n, d in dims if isinstance(d, int)]
    for n, d in known[1:]:
        if d != known[0][1]:
            raise ModelError(f"{what} of {n} is {d} but {known[0][0]} has {known[0][1]}",
                             where=node)
    if known:
        return known[0][1]
    return next((d for _, d in dims if d is not None), None)


def _div(node: Node, n: Dim, h: int, what: str, attr: str) -> Dim:
    if n is None:
        return None
    if isinstance(n, int) and n % h:
        raise ModelError(f"{what} {n} is not a multiple of {attr} ({h})", where=node)
    return sym_floordiv(n, h)


class Geom:
    """Sizes of one node (module docstring): b, t, dk, dv; decay_per_dim, beta_per_head."""

    def __init__(self, node: Node, at: Attrs, shapes: list[tuple | None]):
        names = ("query", "key", "value", "past_state", "decay", "beta")
        for i, s in enumerate(shapes):
            if s is not None and len(s) != (4 if i == _PAST else 3):
                raise ModelError(f"{names[i]} must be {4 if i == _PAST else 3}-D, got shape "
                                 f"{list(s)}", where=node)
        q, k, v, past, decay, beta = shapes
        seq = [(names[i], s) for i, s in enumerate(shapes) if s is not None and i != _PAST]
        self.b = _same(node, "the batch size", [(n, s[0]) for n, s in seq] +
                       ([("past_state", past[0])] if past is not None else []))
        self.t = _same(node, "the sequence length", [(n, s[1]) for n, s in seq])
        hq, hkv = at.hq, at.hkv
        dk_q = _div(node, q[2], hq, "query hidden size", "q_num_heads") if q else None
        dk_k = _div(node, k[2], hkv, "key hidden size", "kv_num_heads") if k else None
        dv_v = _div(node, v[2], hkv, "value hidden size", "kv_num_heads") if v else None
        self.dk = _same(node, "the key head size", [("query", dk_q), ("key", dk_k)] + (
            [("past_state", past[2])] if past is not None else []))
        self.dv = _same(node, "the value head size", [("value", dv_v)] + (
            [("past_state", past[3])] if past is not None else []))
        if past is not None:
            _same(node, "the number of KV heads", [("kv_num_heads", hkv),
                                                   ("past_state", past[1])])
        self.decay_per_dim = False
        if decay is not None and isinstance(decay[2], int):
            if decay[2] != hkv and not (isinstance(self.dk, int) and decay[2] == hkv * self.dk):
                raise ModelError(f"decay's last dim {decay[2]} must be kv_num_heads ({hkv}) or "
                                 f"kv_num_heads * d_k ({_mul(self.dk, hkv)})", where=node)
            self.decay_per_dim = decay[2] != hkv
        self.beta_per_head = False
        if beta is not None and isinstance(beta[2], int):
            if beta[2] not in (hkv, 1):
                raise ModelError(f"beta's last dim {beta[2]} must be kv_num_heads ({hkv}) or 1",
                                 where=node)
            self.beta_per_head = beta[2] != 1
        self.y_last = _mul(v[2], at.group) if v is not None else _mul(self.dv, hq)
        self.state = (self.b, hkv, self.dk, self.dv)


def _mul(a: Dim, c: int) -> Dim:
    return None if a is None else sym_mul(a, c)


def _shape(node: Node, i: int) -> tuple | None:
    return tensor_input(node, i).shape if node.input(i) is not None else None


def _infer(node: Node) -> list:
    if len(node.inputs) > 6:
        raise ModelError("LinearAttention takes at most 6 inputs", where=node)
    at = Attrs(node)
    dt = accept(node, _Q, _TYPES)
    for i in (_K, _V, _DECAY, _BETA):
        if node.input(i) is not None and accept(node, i, _TYPES) != dt:
            raise ModelError(f"input {i} must be {dt.short} like the query", where=node)
    for i, need, what in ((_DECAY, at.gating, "decay"), (_BETA, at.delta, "beta")):
        if need and node.input(i) is None:
            raise ModelError(f"update_rule '{at.rule}' needs the {what} input", where=node)
        if not need and node.input(i) is not None:
            raise ModelError(f"update_rule '{at.rule}' takes no {what} input", where=node)
    st = accept(node, _PAST, _TYPES) if node.input(_PAST) is not None else dt
    g = Geom(node, at, [_shape(node, i) for i in range(6)])
    outs: list = [TensorType(dt, (g.b, g.t, g.y_last))]
    if len(node.outputs) > 1:
        outs.append(TensorType(st, g.state))
    return outs


# --------------------------------------------------------------------------- numpy


def _to(x: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype in NARROW_FLOATS:
        return narrow(x, dtype)
    return np.ascontiguousarray(x, dtype=dtype.numpy)


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    at = Attrs(node)
    ins = list(inputs) + [None] * (6 - len(inputs))
    g = Geom(node, at, [None if x is None else x.shape for x in ins])
    B, T, dk, dv, hkv, G = g.b, g.t, g.dk, g.dv, at.hkv, at.group
    f32 = [None if x is None else widen(np.asarray(x)).astype(np.float32) for x in ins]
    q = f32[_Q].reshape(B, T, hkv, G, dk)
    k = f32[_K].reshape(B, T, hkv, dk)
    v = f32[_V].reshape(B, T, hkv, dv)
    s = np.zeros((B, hkv, dk, dv), np.float32) if f32[_PAST] is None else f32[_PAST].copy()
    decay = None if f32[_DECAY] is None else \
        f32[_DECAY].reshape(B, T, hkv, dk if g.decay_per_dim else 1)
    beta = None if f32[_BETA] is None else f32[_BETA]
    scale = np.float32(at.scale_for(dk))
    y = np.zeros((B, T, hkv, G, dv), np.float32)
    with np.errstate(all="ignore"):
        for t in range(T):
            kt, u = k[:, t], v[:, t]
            if decay is not None:
                s = s * np.exp(decay[:, t])[..., None]
            if beta is not None:
                u = beta[:, t][..., None] * (u - np.einsum("bhd,bhdm->bhm", kt, s))
            s = s + kt[..., :, None] * u[..., None, :]
            y[:, t] = scale * np.einsum("bhgd,bhdm->bhgm", q[:, t], s)
    dt = DType.from_numpy(ins[_Q].dtype)
    outs = [_to(y.reshape(B, T, hkv * G * dv), dt)]
    if len(node.outputs) > 1:
        outs.append(_to(s, DType.from_numpy(ins[_PAST].dtype) if ins[_PAST] is not None
                        else dt))
    return outs


# --------------------------------------------------------------------------- lowering


class _Plan:
    """Buffers of one node's lowering; `state` is f32 (B*Hkv, dk, dv)."""

    def __init__(self, ctx: LowerContext, node: Node):
        self.at = at = Attrs(node)
        self.ins = [None if node.input(i) is None else ctx.buf(node.input(i))  # type: ignore
                    for i in range(6)]
        self.g = Geom(node, at, [None if x is None else x.shape for x in self.ins])
        outs = [v if v.name else None for v in node.outputs] + [None, None]
        self.y, self.pres = (None if v is None else ctx.buf(v) for v in outs[:2])
        g = self.g
        self.nbh = g.b * at.hkv
        self.state = self.pres if self.pres is not None and self.pres.dtype == _F else \
            ctx.scratch("la_state", _F, (self.nbh, g.dk, g.dv))
        self.narrow = self.ins[_Q].dtype != _F  # type: ignore[union-attr]
        G = at.group
        self.yw = ctx.scratch("la_y", _F, (self.nbh, G * g.dv)) if self.narrow else None
        self.u = ctx.scratch("la_u", _F, (self.nbh, g.dv)) if at.delta else None


def _f32(b: Builder, buf: Buffer, index: Operand) -> Operand:
    return b.cast(b.load(buf, index), _F)


def _lower(ctx: LowerContext, node: Node) -> None:
    p = _Plan(ctx, node)
    g, at = p.g, p.at
    if p.nbh == 0:
        return
    b = Builder()
    if g.dk == 0 or g.dv == 0:  # no state: every output value is 0 (an empty sum)
        if p.y is not None:
            with b.loop(0, p.y.numel, hint="e") as e:
                b.store(p.y, e, const(0, p.y.dtype))
        if b.body:
            ctx.kernel("linear_attention", b.body)
        return
    past = p.ins[_PAST]
    sz = g.dk * g.dv
    with b.loop(0, p.nbh, parallel=True, hint="bh") as bh:
        s0 = b.imul(bh, sz)
        with b.loop(0, sz, hint="e") as e:
            at_e = b.iadd(s0, e)
            b.store(p.state, at_e, const(0, _F) if past is None else _f32(b, past, at_e))
        if g.t:
            bi, hi = b.op("div", bh, i64(at.hkv)), b.op("rem", bh, i64(at.hkv))
            with b.loop(0, g.t, hint="t") as t:
                _step(b, p, bh, hi, b.iadd(b.imul(bi, g.t), t), s0)
        if p.pres is not None and p.pres is not p.state:
            with b.loop(0, sz, hint="e") as e:
                at_e = b.iadd(s0, e)
                b.store(p.pres, at_e, b.cast(b.load(p.state, at_e), p.pres.dtype))
    ctx.kernel("linear_attention", b.body)


def _step(b: Builder, p: _Plan, bh: Operand, hi: Operand, row: Operand, s0: Operand) -> None:
    """One time step of one state (module docstring, step 2); `row` = batch * T + t."""
    g, at = p.g, p.at
    hkv, G, dk, dv = at.hkv, at.group, g.dk, g.dv
    q, k, v, decay, beta = (p.ins[i] for i in (_Q, _K, _V, _DECAY, _BETA))
    k_off = b.iadd(b.imul(row, hkv * dk), b.imul(hi, dk))
    v_off = b.iadd(b.imul(row, hkv * dv), b.imul(hi, dv))
    head = b.iadd(b.imul(row, hkv), hi)
    e_head: Operand | None = None
    if decay is not None and not g.decay_per_dim:
        e_head = b.op("exp", _f32(b, decay, head))

    def gate(i: Operand) -> Operand | None:
        if decay is None or e_head is not None:
            return e_head
        return b.op("exp", _f32(b, decay, b.iadd(k_off, i)))

    if at.delta:
        assert p.u is not None and beta is not None
        u0 = b.imul(bh, dv)
        if decay is not None:  # S <- e * S first, rounded as the spec's formula is
            with b.loop(0, dk, hint="i") as i:
                e = gate(i)
                srow = b.iadd(s0, b.imul(i, dv))
                with b.loop(0, dv, hint="j") as j:
                    at_j = b.iadd(srow, j)
                    b.store(p.state, at_j, b.op("mul", b.load(p.state, at_j), e))
        _times_state(b, p, p.u, u0, k, k_off, 1, s0)
        bt = _f32(b, beta, head if g.beta_per_head else row)
        with b.loop(0, dv, hint="j") as j:
            at_j = b.iadd(u0, j)
            diff = b.op("sub", _f32(b, v, b.iadd(v_off, j)), b.load(p.u, at_j))
            b.store(p.u, at_j, b.op("mul", bt, diff))
    with b.loop(0, dk, hint="i") as i:
        ki = _f32(b, k, b.iadd(k_off, i))
        e = None if at.delta else gate(i)  # the delta rules decayed S above
        srow = b.iadd(s0, b.imul(i, dv))
        with b.loop(0, dv, hint="j") as j:
            at_j = b.iadd(srow, j)
            sv: Operand = b.load(p.state, at_j)
            if e is not None:
                sv = b.op("mul", sv, e)
            uj = b.load(p.u, b.iadd(b.imul(bh, dv), j)) if p.u is not None else \
                _f32(b, v, b.iadd(v_off, j))
            b.store(p.state, at_j, b.op("add", sv, b.op("mul", ki, uj)))
    q_off = b.iadd(b.imul(row, at.hq * dk), b.imul(hi, G * dk))
    y_off = b.iadd(b.imul(row, at.hq * dv), b.imul(hi, G * dv))
    scale = const(at.scale_for(dk), DType.FLOAT)
    if p.y is None:
        return
    if not p.narrow:
        _times_state(b, p, p.y, y_off, q, q_off, G, s0)
        with b.loop(0, G * dv, hint="e") as e:
            at_e = b.iadd(y_off, e)
            b.store(p.y, at_e, b.op("mul", scale, b.load(p.y, at_e)))
        return
    assert p.yw is not None and q is not None
    yw0 = b.imul(bh, G * dv)
    _times_state(b, p, p.yw, yw0, q, q_off, G, s0)
    with b.loop(0, G * dv, hint="e") as e:
        yv = b.op("mul", scale, b.load(p.yw, b.iadd(yw0, e)))
        b.store(p.y, b.iadd(y_off, e), b.cast(yv, p.y.dtype))


def _times_state(b: Builder, p: _Plan, out: Buffer, out0: Operand, a: Buffer, a0: Operand,
                 rows: int, s0: Operand) -> None:
    """out[r, :] = sum_d a[r, d] * S[d, :] for r < rows (rows of dk at a0, of dv at out0; out
    is f32), each product rounded before it is added (module docstring)."""
    dk, dv = p.g.dk, p.g.dv
    with b.loop(0, rows, hint="r") as r:
        orow, arow = b.iadd(out0, b.imul(r, dv)), b.iadd(a0, b.imul(r, dk))
        with b.loop(0, dv, hint="j") as j:
            b.store(out, b.iadd(orow, j), const(0, _F))
        with b.loop(0, dk, hint="d") as d:
            ad = _f32(b, a, b.iadd(arow, d))
            srow = b.iadd(s0, b.imul(d, dv))
            with b.loop(0, dv, hint="j") as j:
                at_j = b.iadd(orow, j)
                prod = b.op("mul", ad, b.load(p.state, b.iadd(srow, j)))
                b.store(out, at_j, b.op("add", b.load(out, at_j), prod))


op("LinearAttention", (27,), infer=_infer, evaluate=_evaluate, lower=_lower,
   doc="linear attention recurrence (linear, gated, delta, gated_delta; GQA, past state)")
