"""Lowering of RNN, GRU and LSTM to loop IR, and their registration in the op table.

Per direction d (bidirectional = two passes, the second in reverse), with S steps, batch N,
hidden H and G gates (semantics and shapes: `ops_rnn`):
1) `<op>_proj`: the input projection of ALL steps as one Matmul, xw[S*N, G*H] = X[S*N, I] x
   W[d]^T into a scratch buffer (rows in X's own order: t*N + n, or n*S + t for layout 1);
   it is large, so code generation splits it over threads;
2) `<op>_init`: the state scratch h[N, H] (and c for LSTM) from initial_h/c or zeros; checks
   every sequence_lens entry is in [0, S];
3) `<op>_steps`: a serial Loop over the steps t (t = S-1-s in reverse) holding
   - one Matmul accumulating h x R[d]^T into xw's rows of step t (so xw then holds every
     gate's pre-activation but the biases), and
   - one loop nest over (n, j) adding the biases and running the cell (`ops_rnn.cell_*`
     through `LoopArith`: the same rules numpy evaluation runs); it writes the new state and
     Y; with sequence_lens, entries past their length keep their state and get Y = 0
     (selects, no branches, so the nest stays vectorizable).
   GRU needs r before its h-gate product: z and r first (storing r*h and z in scratch), then
   a second Matmul (r*h) x Rh^T into the h gate's columns, then the output nest. With
   linear_before_reset the whole h x R^T product goes into its own scratch instead, since
   r multiplies the h gate's recurrent part only;
4) `<op>_final`: Y_h (and Y_c) from the state (0 for an entry of sequence length 0).
Omitted outputs (empty names) are not written.
"""

from __future__ import annotations

from typing import Any

from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Matmul, Operand, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops_rnn import (
    Act,
    RnnAttrs,
    attrs_of,
    cell_lstm,
    cell_rnn,
    gru_gates,
    gru_out,
    rnn_infer,
)
from onnxjit.ir.ops_rnn_eval import rnn_evaluate
from onnxjit.ir.types import DType


class LoopArith:
    """`ops_rnn.Arith` emitting loop-IR scalar ops through a Builder."""

    def __init__(self, b: Builder, dtype: DType, clip: float | None):
        self.b, self.dt, self.clip_value = b, dtype, clip

    def add(self, x: Operand, y: Operand) -> Operand:
        return self.b.op("add", x, y)

    def sub(self, x: Operand, y: Operand) -> Operand:
        return self.b.op("sub", x, y)

    def mul(self, x: Operand, y: Operand) -> Operand:
        return self.b.op("mul", x, y)

    def one_minus(self, x: Operand) -> Operand:
        return self.b.op("sub", const(1, self.dt), x)

    def clip(self, x: Operand) -> Operand:
        if self.clip_value is None:
            return x
        c = self.clip_value
        return self.b.op("min", self.b.op("max", x, const(-c, self.dt)), const(c, self.dt))

    def act(self, a: Act, x: Operand) -> Operand:
        return a.emit(self.b, x)


class _Plan:
    """Buffers and sizes of one node's lowering."""

    def __init__(self, ctx: LowerContext, node: Node, a: RnnAttrs):
        self.a = a
        self.x, self.w, self.r = (ctx.buf(node.inputs[i]) for i in range(3))
        opt = [node.input(i) for i in range(8)]
        self.bias, self.lens, self.h0 = (None if v is None else ctx.buf(v) for v in opt[3:6])
        self.c0 = self.peep = None
        if a.kind == "LSTM":
            self.c0, self.peep = (None if v is None else ctx.buf(v) for v in opt[6:8])
        outs = [v if v.name else None for v in node.outputs]
        outs += [None] * (3 - len(outs))
        self.y, self.yh, self.yc = (None if v is None else ctx.buf(v) for v in outs)
        self.dt = self.x.dtype
        xs = self.x.shape
        self.S, self.N = (xs[1], xs[0]) if a.layout else (xs[0], xs[1])
        self.I = xs[2]
        self.H = self.r.shape[2]
        self.G = a.gates
        self.GH = self.G * self.H

    def xw_row(self, b: Builder, t: Operand, n: Operand) -> Operand:
        """Row of xw (X's row order) holding step t of batch entry n."""
        if self.a.layout:
            return b.iadd(b.imul(n, self.S), t)
        return b.iadd(b.imul(t, self.N), n)

    def state_index(self, b: Builder, d: int, n: Operand, j: Operand) -> Operand:
        """Index of (d, n, j) in initial_h/c and Y_h/c."""
        a, N, H = self.a, self.N, self.H
        if a.layout:
            return b.iadd(b.iadd(b.imul(n, a.dirs * H), i64(d * H)), j)
        return b.iadd(b.iadd(i64(d * N * H), b.imul(n, H)), j)

    def y_index(self, b: Builder, d: int, t: Operand, n: Operand, j: Operand) -> Operand:
        a, S, N, H = self.a, self.S, self.N, self.H
        if a.layout:
            row = b.iadd(b.imul(n, S * a.dirs), b.imul(t, a.dirs))
            return b.iadd(b.imul(b.iadd(row, i64(d)), H), j)
        return b.iadd(b.imul(b.iadd(b.imul(t, a.dirs * N), b.iadd(i64(d * N), n)), H), j)


def _lower(ctx: LowerContext, node: Node) -> None:
    a = attrs_of(node)
    p = _Plan(ctx, node, a)
    kind = a.kind.lower()
    if p.N * p.H == 0:
        return
    xw = ctx.scratch(f"{kind}_xw", p.dt, (p.S * p.N, p.GH))
    h = ctx.scratch(f"{kind}_h", p.dt, (p.N, p.H))
    c = ctx.scratch(f"{kind}_c", p.dt, (p.N, p.H)) if a.kind == "LSTM" else None
    extra: dict[str, Buffer] = {}
    if a.kind == "GRU":
        if a.linear_before_reset:
            extra["rec"] = ctx.scratch("gru_rec", p.dt, (p.N, p.GH))
        else:
            extra["rh"] = ctx.scratch("gru_rh", p.dt, (p.N, p.H))
            extra["z"] = ctx.scratch("gru_z", p.dt, (p.N, p.H))
    for d in range(a.dirs):
        b = Builder()
        b.emit(Matmul(xw, i64(0), p.GH, p.x, i64(0), p.I, p.w, i64(d * p.GH * p.I), p.I,
                      p.S * p.N, p.GH, p.I, b_trans=True))
        ctx.kernel(f"{kind}_proj", b.body)
        ctx.kernel(f"{kind}_init", _init(p, d, h, c))
        if p.S > 0:
            ctx.kernel(f"{kind}_steps", _steps(p, d, xw, h, c, extra))
        b = Builder()
        for out, st in ((p.yh, h), (p.yc, c)):
            if out is None or st is None:
                continue
            with b.loop(0, p.N, hint="n") as n:
                live = None
                if p.lens is not None:  # an entry of length 0 ends in state 0 (onnxruntime)
                    live = b.op("gt", b.load(p.lens, n), const(0, DType.INT32))
                with b.loop(0, p.H, hint="j") as j:
                    v: Operand = b.load(st, b.iadd(b.imul(n, p.H), j))
                    if live is not None:
                        v = b.op("select", live, v, const(0, p.dt))
                    b.store(out, p.state_index(b, d, n, j), v)
        if b.body:
            ctx.kernel(f"{kind}_final", b.body)


def _init(p: _Plan, d: int, h: Buffer, c: Buffer | None) -> list:
    b = Builder()
    with b.loop(0, p.N, hint="n") as n:
        if p.lens is not None and d == 0:
            ln = b.cast(b.load(p.lens, n), DType.INT64)
            ok = b.op("and", b.op("ge", ln, i64(0)), b.op("le", ln, i64(p.S)))
            b.check(ok, f"{p.a.kind}: every sequence_lens entry must be in [0, {p.S}] "
                        "(the sequence length of X)")
        with b.loop(0, p.H, hint="j") as j:
            at = b.iadd(b.imul(n, p.H), j)
            for st, init in ((h, p.h0), (c, p.c0)):
                if st is None:
                    continue
                v = const(0, p.dt) if init is None else b.load(init, p.state_index(b, d, n, j))
                b.store(st, at, v)
    return b.body


def _step_matmul(p: _Plan, b: Builder, d: int, t: Operand, c_buf: Buffer, a_buf: Buffer,
                 first_gate: int, n_gates: int, into_xw: bool) -> None:
    """c_buf's gate columns [first_gate, first_gate + n_gates) += a_buf x R[d]'s rows."""
    H, GH = p.H, p.GH
    if into_xw:  # the N rows of step t in xw
        off = b.imul(t, GH) if p.a.layout else b.imul(t, p.N * GH)
        ldc = p.S * GH if p.a.layout else GH
        c_off = b.iadd(off, i64(first_gate * H))
    else:
        c_off, ldc = i64(first_gate * H), GH
    b.emit(Matmul(c_buf, c_off, ldc, a_buf, i64(0), H, p.r,
                  i64(d * GH * H + first_gate * H * H), H, p.N, n_gates * H, H,
                  b_trans=True, accumulate=into_xw))


def _steps(p: _Plan, d: int, xw: Buffer, h: Buffer, c: Buffer | None,
           extra: dict[str, Buffer]) -> list:
    a, H, GH = p.a, p.H, p.GH
    b = Builder()
    o = LoopArith(b, p.dt, a.clip)
    acts = a.acts[d]
    with b.loop(0, p.S, hint="s") as s:
        t: Operand = b.op("sub", i64(p.S - 1), s) if a.reverse(d) else s

        def nest(body: Any) -> None:
            with b.loop(0, p.N, hint="n") as n:
                valid = None
                if p.lens is not None:
                    valid = b.op("lt", t, b.cast(b.load(p.lens, n), DType.INT64))
                row = b.imul(p.xw_row(b, t, n), GH)
                with b.loop(0, H, hint="j") as j:
                    body(n, j, row, valid)

        def pre(row: Operand, j: Operand, g: int, wb: bool = True, rb: bool = True) -> Operand:
            """Gate g's pre-activation from xw plus its biases."""
            v: Operand = b.load(xw, b.iadd(row, b.iadd(j, i64(g * H))))
            if p.bias is not None:
                base = d * 2 * GH + g * H
                if wb:
                    v = b.op("add", v, b.load(p.bias, b.iadd(j, i64(base))))
                if rb:
                    v = b.op("add", v, b.load(p.bias, b.iadd(j, i64(base + GH))))
            return v

        def finish(n: Operand, j: Operand, valid: Any, hn: Operand, cn: Operand | None) -> None:
            at = b.iadd(b.imul(n, H), j)
            yv = hn
            if valid is not None:
                hn = b.op("select", valid, hn, b.load(h, at))
                if cn is not None and c is not None:
                    cn = b.op("select", valid, cn, b.load(c, at))
                yv = b.op("select", valid, yv, const(0, p.dt))
            if p.y is not None:
                b.store(p.y, p.y_index(b, d, t, n, j), yv)
            b.store(h, at, hn)
            if cn is not None and c is not None:
                b.store(c, at, cn)

        if a.kind in ("RNN", "LSTM"):
            _step_matmul(p, b, d, t, xw, h, 0, a.gates, True)

            def cell(n: Operand, j: Operand, row: Operand, valid: Any) -> None:
                if a.kind == "RNN":
                    finish(n, j, valid, cell_rnn(o, acts, pre(row, j, 0)), None)
                    return
                assert c is not None
                at = b.iadd(b.imul(n, H), j)
                peep = None
                if p.peep is not None:
                    peep = tuple(b.load(p.peep, b.iadd(j, i64(d * 3 * H + k * H)))
                                 for k in range(3))
                hn, cn = cell_lstm(o, acts, a.input_forget, pre(row, j, 0), pre(row, j, 1),
                                   pre(row, j, 2), pre(row, j, 3), b.load(c, at), peep)
                finish(n, j, valid, hn, cn)

            nest(cell)
        elif a.linear_before_reset:
            rec = extra["rec"]
            _step_matmul(p, b, d, t, rec, h, 0, 3, False)

            def gru_lbr(n: Operand, j: Operand, row: Operand, valid: Any) -> None:
                rrow = b.imul(n, GH)
                gz, gr = (b.op("add", pre(row, j, g),
                               b.load(rec, b.iadd(rrow, b.iadd(j, i64(g * H)))))
                          for g in (0, 1))
                z, r = gru_gates(o, acts, gz, gr)
                hr: Operand = b.load(rec, b.iadd(rrow, b.iadd(j, i64(2 * H))))
                if p.bias is not None:
                    hr = b.op("add", hr, b.load(p.bias, b.iadd(j, i64(d * 2 * GH + GH + 2 * H))))
                gh = b.op("add", pre(row, j, 2, rb=False), b.op("mul", r, hr))
                at = b.iadd(b.imul(n, H), j)
                finish(n, j, valid, gru_out(o, acts, z, gh, b.load(h, at)), None)

            nest(gru_lbr)
        else:
            rh, zb = extra["rh"], extra["z"]
            _step_matmul(p, b, d, t, xw, h, 0, 2, True)

            def gates(n: Operand, j: Operand, row: Operand, valid: Any) -> None:
                at = b.iadd(b.imul(n, H), j)
                z, r = gru_gates(o, acts, pre(row, j, 0), pre(row, j, 1))
                b.store(zb, at, z)
                b.store(rh, at, b.op("mul", r, b.load(h, at)))

            nest(gates)
            _step_matmul(p, b, d, t, xw, rh, 2, 1, True)

            def gru(n: Operand, j: Operand, row: Operand, valid: Any) -> None:
                at = b.iadd(b.imul(n, H), j)
                hn = gru_out(o, acts, b.load(zb, at), pre(row, j, 2), b.load(h, at))
                finish(n, j, valid, hn, None)

            nest(gru)
    return b.body


_DOC = {
    "RNN": "simple RNN: H = f(X W^T + H R^T + Wb + Rb)",
    "GRU": "GRU (gates z, r, h; linear_before_reset from opset 3)",
    "LSTM": "LSTM (gates i, o, f, c; peepholes, input_forget)",
}
for _name, _versions in (("RNN", (1, 7, 14, 22)), ("GRU", (1, 3, 7, 14, 22)),
                         ("LSTM", (1, 7, 14, 22))):
    op(_name, _versions, infer=rnn_infer, evaluate=rnn_evaluate, lower=_lower, doc=_DOC[_name])
