"""Lowering of RNN, GRU and LSTM to loop IR, and their registration in the op table.

Per direction d (bidirectional = two passes, the second in reverse), with S steps, batch N,
hidden H and G gates (semantics and shapes: `recurrent.cells`):
1) `<op>_proj`: the input projection of ALL steps as one Matmul, xw[S*N, G*H] = X[S*N, I] x
   W[d]^T into a scratch buffer (rows in X's own order: t*N + n, or n*S + t for layout 1);
   it is large, so code generation splits it over threads; a constant W is transposed at
   compile time (the kernel then packs B by copying rows, not by gathering columns);
2) R packed for the steps (`pack_r`): per gate group and block of JB hidden units, the block's
   gate rows of R[d] transposed into a contiguous [H, gates*w] matrix, itself in the tiled
   kernel's column panels (`loops.pack_panels`, NR columns a panel) when the block is wider
   than one, so the product reads B as it would a prepacked weight. A constant R is packed
   here, at compile time (a new constant: stored in the disk cache with the code); any other R
   by an `<op>_pack` kernel at the start of each call;
3) `<op>_init`: the state h[2, N, H] (double-buffered: `recurrent.steps`; the first half holds the
   initial state) and c[N, H] for LSTM, from initial_h/c or zeros; checks every
   sequence_lens entry is in [0, S];
4) `<op>_steps`: the serial loop over the steps, each a parallel loop over blocks of hidden
   units running the block's recurrent product and cell (`recurrent.steps`);
5) `<op>_final`: Y_h (and Y_c) from the state (h's half S % 2; 0 for an entry of sequence
   length 0).
Omitted outputs (empty names) are not written. On two threads, the two directions of a small
bidirectional node run at once, one a thread (`_directions_together`: 1) to 3) per
direction, then one kernel whose parallel loop of two runs each direction's 4), then 5)).
QuantizedLSTM (`recurrent.quantized`) skips 1)
(its input 0 holds the projections, direction after direction), and its steps quantize h
and run 8-bit products over R packed in quads (`QuantR`) instead of 2).

Symbolic programs (`ir.symbolic`): S and N may be run-time sizes. Then the projection's m
(S*N) and each step's product m (N) are run-time sizes (the tiled kernel's run-time rows), the
step loop runs a run-time trip count (none for S = 0, as the specialised program emits no
step), Y_h's half of h is S - 2*(S // 2), and the block width and panel layout are chosen for
N's size hint: they are layouts, right for every N. The hidden size must be fixed (hidden_size,
or R's shape); weights given as inputs of symbolic shape are assumed to have the sizes it and
the attributes fix (inference records it), and an input size known only at run time is the
projection's run-time depth.
"""

from __future__ import annotations

import numpy as np

from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import (
    Buffer,
    Matmul,
    Operand,
    Size,
    Stmt,
    i64,
    pack_panels,
    size_operand,
)
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.conv.packed_panels import packed_width
from onnxjit.ir.ops.fused.region import FUSED_DOMAIN
from onnxjit.ir.ops.recurrent.cells import RnnAttrs, attrs_of, rnn_infer
from onnxjit.ir.ops.recurrent.quantized import QuantR, quantized_lstm_infer
from onnxjit.ir.ops.recurrent.reference import rnn_evaluate
from onnxjit.ir.ops.recurrent.steps import StepEmitter
from onnxjit.ir.symbolic import hint
from onnxjit.ir.types import DType

#: the widest block product, in gate columns, and the most bytes of its result (N x gates*JB,
#: read back by the block's cell: it should stay in L1). Few, wide blocks cost less a step
#: than many narrow ones, but two per thread beat one unless their products get small
#: (`block_width`). Measured, two threads, against blocks of 16 units (64 columns of LSTM
#: gates): the bench LSTM (batch 8, hidden 256) 1.02-1.04x, the same with batch 64 1.015x, GRU
#: 1.08x (batch 1: 1.22x), LSTM batch 1 hidden 128 1.06x; hidden 64 batch 16 keeps blocks of
#: 16 (2 blocks of 32: 0.96-0.98x)
BLOCK_COLS, REC_BYTES, BLOCK_MIN_WORK = 256, 32 * 1024, 1 << 15
#: store a block wider than one panel of the tiled kernel in its column panels (`pack_r`)
PANELS = True
#: sum a constant bias's two halves (Wb + Rb) at compile time (see `_Plan`); measured on the
#: bench LSTM (two threads): its steps 1.01-1.04x faster per dispatch, the model 1.012x
BIAS_SUM = True


def block_width(hidden: int, gates: int, batch: int, itemsize: int, threads: int) -> int:
    """Hidden units per block of the step loop (JB), among the multiples of 16 (whole vectors
    of every gate's slice) with gates * JB <= BLOCK_COLS and a result of at most REC_BYTES
    that cut `hidden` into equal blocks, as many as a multiple of `threads` (each thread then
    runs the same blocks every step, and their R panels stay in its cache): the widest giving
    two blocks a thread of BLOCK_MIN_WORK multiply-adds each, else the widest. With none, 16,
    the units past the last whole block forming a narrower tail block. At most `hidden`."""
    fits = [jb for jb in range(16, hidden + 1, 16)
            if gates * jb <= BLOCK_COLS and batch * gates * jb * itemsize <= REC_BYTES
            and hidden % jb == 0 and hidden // jb % threads == 0]
    two = [jb for jb in fits if hidden // jb >= 2 * threads
           and batch * gates * jb * hidden >= BLOCK_MIN_WORK]
    return min(hidden, max(two or fits or [16]))


def gate_groups(a: RnnAttrs) -> tuple[tuple[int, ...], ...]:
    """The gates each recurrent product covers: plain GRU needs r before its h gate's product."""
    if a.kind == "GRU" and not a.linear_before_reset:
        return ((0, 1), (2,))
    return (tuple(range(a.gates)),)


def pack_r(r: np.ndarray, groups: tuple[tuple[int, ...], ...], jb: int, nr: int | None = None
           ) -> np.ndarray:
    """R [D, G*H, H] packed for the step loop (flat): per direction, gate group and block of
    hidden units j0 .. j0+w, the rows g*H + j0 + jj (g in the group, jj < w) transposed, so
    block[k, gi*w + jj] = R[d, gl[gi]*H + j0 + jj, k] is an [H, len(gl)*w] matrix, stored
    row-major, or in column panels of `nr` columns (`pack_panels`; the same for a block of at
    most nr columns). Each block takes H*len(gl)*w elements either way."""
    dirs, _, hid = r.shape
    parts = []
    for d in range(dirs):
        for gl in groups:
            for j0 in range(0, hid, jb):
                w = min(jb, hid - j0)
                rows = [g * hid + j0 + jj for g in gl for jj in range(w)]
                blk = np.ascontiguousarray(r[d][rows, :].T)
                parts.append(pack_panels(blk, nr) if nr else blk.reshape(-1))
    return np.ascontiguousarray(np.concatenate(parts) if parts else r.reshape(-1))


class _Plan:
    """Buffers and sizes of one node's lowering."""

    def __init__(self, ctx: LowerContext, node: Node, a: RnnAttrs):
        self.a = a
        #: QuantizedLSTM (`recurrent.quantized`): input 0 holds the projections, W is none
        self.quantized = node.op == "QuantizedLSTM"
        self.quant: QuantR | None = None  # its R, set by `_lower`
        self.x = ctx.buf(node.inputs[0])
        # constant W and R are repacked at compile time: their own buffers are never read
        if self.quantized:
            self.w_value, self.r_value = None, node.inputs[1]
            self.w = self.r = None
            opt = [None, None, None] + [node.input(i) for i in range(4, 9)]
        else:
            self.w_value, self.r_value = node.inputs[1], node.inputs[2]
            self.w, self.r = (None if v.const is not None else ctx.buf(v)
                              for v in (self.w_value, self.r_value))
            opt = [node.input(i) for i in range(8)]
        self.bias, self.lens, self.h0 = (None if v is None else ctx.buf(v) for v in opt[3:6])
        # a constant B's halves Wb + Rb summed at compile time (f32/f64, whose cells compute in
        # their own type): the cell then adds one bias, not two, to each gate taking both
        self.bias_sum: Buffer | None = None
        own_type = self.x.dtype in (DType.FLOAT, DType.DOUBLE)
        if BIAS_SUM and opt[3] is not None and opt[3].const is not None and own_type:
            bias = np.asarray(opt[3].const, dtype=self.x.dtype.numpy).reshape(a.dirs, 2, -1)
            self.bias_sum = ctx.constant(f"{a.kind.lower()}_bias_sum",
                                         np.ascontiguousarray(bias[:, 0] + bias[:, 1]))
        self.c0 = self.peep = None
        if a.kind == "LSTM":
            self.c0, self.peep = (None if v is None else ctx.buf(v) for v in opt[6:8])
        outs = [v if v.name else None for v in node.outputs]
        outs += [None] * (3 - len(outs))
        self.y, self.yh, self.yc = (None if v is None else ctx.buf(v) for v in outs)
        self.dt = self.x.dtype
        xs = self.x.shape
        if self.quantized:  # XW [D, S, N, 4H]
            xs = xs[1:]
        self.S, self.N = (xs[1], xs[0]) if a.layout else (xs[0], xs[1])
        # sizes the weights fix are taken from them (inference assumed X's and the states'
        # equal), so only S and N stay symbolic when the weights are constants
        w_in = self.w_value.type.shape[2] if self.w_value is not None else 0
        self.I = w_in if isinstance(w_in, int) else xs[2]
        hid = a.hidden if a.hidden is not None else \
            self.r_value.type.shape[1 if self.quantized else 2]
        if not isinstance(hid, int):
            raise TypeError("a symbolic hidden size (no hidden_size attribute, R of symbolic "
                            "shape)")
        self.H = hid
        self.G = a.gates
        self.GH = self.G * self.H
        self.groups = gate_groups(a)
        self.group_offsets = [sum(len(g) for g in self.groups[:k]) * self.H
                              for k in range(len(self.groups))]
        n_usual = hint(self.N)  # a run-time batch: its usual size (`ir.symbolic.hint`)
        self.jb = (block_width(self.H, self.G, n_usual, self.dt.itemsize, ctx.num_threads)
                   if self.H else 1)
        self.nfull, self.tail = divmod(self.H, self.jb)
        #: the tiled kernel's panel width when the blocks are stored in panels (`pack_r`)
        self.nr: int | None = None
        widest = max(len(g) for g in self.groups) * self.jb
        if PANELS and n_usual * self.H:
            nr = packed_width(self.dt, n_usual, widest, self.H)
            self.nr = nr if nr is not None and widest > nr else None
        self.rp: Buffer | None = None  # R packed for the steps (`_lower`)

    def xw_row(self, b: Builder, t: Operand, n: Operand, d: int = 0) -> Operand:
        """Row of xw (X's row order) holding step t of batch entry n (direction d's rows
        of a QuantizedLSTM's projections)."""
        if self.quantized:
            return b.iadd(b.iadd(b.imul(t, self.N), n), size_operand(d * self.S * self.N))
        if self.a.layout:
            return b.iadd(b.imul(n, self.S), t)
        return b.iadd(b.imul(t, self.N), n)

    def state_index(self, b: Builder, d: int, n: Operand, j: Operand) -> Operand:
        """Index of (d, n, j) in initial_h/c and Y_h/c."""
        a, N, H = self.a, self.N, self.H
        if a.layout:
            return b.iadd(b.iadd(b.imul(n, a.dirs * H), i64(d * H)), j)
        return b.iadd(b.iadd(size_operand(d * N * H), b.imul(n, H)), j)

    def y_index(self, b: Builder, d: int, t: Operand, n: Operand, j: Operand) -> Operand:
        a, S, N, H = self.a, self.S, self.N, self.H
        if a.layout:
            row = b.iadd(b.imul(n, S * a.dirs), b.imul(t, a.dirs))
            return b.iadd(b.imul(b.iadd(row, i64(d)), H), j)
        return b.iadd(b.imul(b.iadd(b.imul(t, a.dirs * N), b.iadd(size_operand(d * N), n)), H),
                      j)


def _lower(ctx: LowerContext, node: Node) -> None:
    a = attrs_of(node)
    p = _Plan(ctx, node, a)
    kind = a.kind.lower()
    if p.N * p.H == 0:
        return
    together = _directions_together(ctx, p)
    scs = [_scratch(ctx, p, kind) for _ in range(a.dirs if together else 1)]
    if _may_run(p.S) and p.quantized:
        p.quant = QuantR(ctx, node, p.H, p.jb)
    elif _may_run(p.S):
        if p.r is None:
            data = np.asarray(p.r_value.const, dtype=p.dt.numpy).reshape(a.dirs, p.GH, p.H)
            p.rp = ctx.constant(f"{kind}_r_packed", pack_r(data, p.groups, p.jb, p.nr))
        else:
            p.rp = ctx.scratch(f"{kind}_r_packed", p.dt, (a.dirs * p.GH * p.H,))
            ctx.kernel(f"{kind}_pack", _pack_kernel(p))
    wt = None
    # W[d]^T, so the projection's B is read by rows (packing it is a copy)
    if p.w is None and p.w_value is not None:
        data = np.asarray(p.w_value.const, dtype=p.dt.numpy).reshape(a.dirs, p.GH, p.I)
        wt = ctx.constant(f"{kind}_wt", np.ascontiguousarray(data.transpose(0, 2, 1)))
    steps = []
    for d in range(a.dirs):
        sc = scs[d if together else 0]
        b = Builder()
        if p.quantized:
            pass  # the projections are the node's input
        elif wt is not None:
            b.emit(Matmul(sc["xw"], i64(0), p.GH, p.x, i64(0), p.I, wt,
                          size_operand(d * p.GH * p.I), p.GH, p.S * p.N, p.GH, p.I))
        else:
            b.emit(Matmul(sc["xw"], i64(0), p.GH, p.x, i64(0), p.I, p.w,
                          size_operand(d * p.GH * p.I), p.I, p.S * p.N, p.GH, p.I,
                          b_trans=True))
        if b.body:
            ctx.kernel(f"{kind}_proj", b.body)
        ctx.kernel(f"{kind}_init", _init(p, d, sc["h"], sc.get("c")))
        if _may_run(p.S) and together:
            steps.append(StepEmitter(p, d, sc, parallel=False).emit())
        elif _may_run(p.S):
            ctx.kernel(f"{kind}_steps", StepEmitter(p, d, sc).emit())
        if together and d == 0:
            continue  # its Y_h/Y_c after both directions' steps
        if steps:
            ctx.kernel(f"{kind}_steps", _one_per_thread(steps))
        for dd in (range(a.dirs) if together else (d,)):
            _final(ctx, p, dd, scs[dd if together else 0], kind)


#: run the two directions of a bidirectional node at once, one a thread, when the program has
#: two threads and a direction's R is at most TOGETHER_BYTES (`_directions_together`): no
#: pool dispatch and no wait per step, each core keeping its direction's R in its L2.
#: Measured, two threads, against the blocks of both threads per step, direction after
#: direction (interleaved, load 6-7): LSTM hidden 64 (50 steps, batch 1) 1.48x (3.3x by wall
#: time alone), GRU hidden 64 1.20x, LSTM hidden 256 1.02-1.06x; an R of 4 MB (the CRNN's
#: LSTM, hidden 512: each core streams its direction's R from L3 every step instead of half
#: of one) 1.10-1.23x alone but the CRNN model 0.94-0.98x, hence the bound
TOGETHER, TOGETHER_BYTES = True, 1 << 20


def _directions_together(ctx: LowerContext, p: _Plan) -> bool:
    """Whether the directions' step loops run as one parallel loop of two (each its own
    scratch state): a bidirectional float node on two threads, R small enough."""
    r_bytes = p.GH * p.H * p.dt.itemsize
    return TOGETHER and p.a.dirs == 2 and ctx.num_threads == 2 and not p.quantized \
        and _may_run(p.S) and r_bytes <= TOGETHER_BYTES


def _scratch(ctx: LowerContext, p: _Plan, kind: str) -> dict[str, Buffer]:
    """The step loop's scratch buffers (`recurrent.steps`): projections, state, products."""
    sc = {"xw": p.x if p.quantized else ctx.scratch(f"{kind}_xw", p.dt, (p.S * p.N, p.GH)),
          "h": ctx.scratch(f"{kind}_h", p.dt, (2, p.N, p.H)),
          "rec": ctx.scratch(f"{kind}_rec", DType.INT32 if p.quantized else p.dt,
                             (p.N, p.GH))}
    if p.a.kind == "LSTM":
        sc["c"] = ctx.scratch(f"{kind}_c", p.dt, (p.N, p.H))
    if p.a.kind == "GRU" and not p.a.linear_before_reset:
        sc["rh"] = ctx.scratch("gru_rh", p.dt, (p.N, p.H))
        sc["z"] = ctx.scratch("gru_z", p.dt, (p.N, p.H))
    return sc


def _one_per_thread(bodies: list[list[Stmt]]) -> list[Stmt]:
    """A parallel loop whose iteration d runs bodies[d] (as a loop of one trip when d is its
    index, of none otherwise)."""
    b = Builder()
    with b.loop(0, len(bodies), parallel=True, hint="dir") as dv:
        for d, body in enumerate(bodies):
            once = b.cast(b.op("eq", dv, i64(d)), DType.INT64)
            with b.loop(0, once, hint="once"):
                for st in body:
                    b.emit(st)
    return b.body


def _final(ctx: LowerContext, p: _Plan, d: int, sc: dict[str, Buffer], kind: str) -> None:
    """Y_h (and Y_c) of direction d from its state."""
    b = Builder()
    final = size_operand(_parity(p.S) * p.N * p.H)  # the half of h the last step wrote
    for out, st, off in ((p.yh, sc["h"], final), (p.yc, sc.get("c"), i64(0))):
        if out is None or st is None:
            continue
        with b.loop(0, p.N, hint="n") as n:
            live = None
            if p.lens is not None:  # an entry of length 0 ends in state 0 (onnxruntime)
                live = b.op("gt", b.load(p.lens, n), const(0, DType.INT32))
            elif not isinstance(p.S, int) or p.S == 0:  # so does an empty sequence
                live = b.op("gt", size_operand(p.S), i64(0))
            with b.loop(0, p.H, hint="j") as j:
                v: Operand = b.load(st, b.iadd(off, b.iadd(b.imul(n, p.H), j)))
                if live is not None:
                    v = b.op("select", live, v, const(0, p.dt))
                b.store(out, p.state_index(b, d, n, j), v)
    if b.body:
        ctx.kernel(f"{kind}_final", b.body)


def _may_run(steps: Size) -> bool:
    """Whether a step loop of `steps` iterations may run (a run-time count may be 0: then its
    loop runs no iteration, as the specialised program emits none)."""
    return not isinstance(steps, int) or steps > 0


def _parity(steps: Size) -> Size:
    """steps % 2, also of a symbolic count (steps - 2 * (steps // 2))."""
    return steps % 2 if isinstance(steps, int) else steps - 2 * (steps // 2)


def _pack_kernel(p: _Plan) -> list[Stmt]:
    """`pack_r` as loops, for an R known only at run time."""
    b = Builder()
    H, GH = p.H, p.GH

    def block(d: int, gl: tuple[int, ...], dst0: Operand, j0: Operand, w: int) -> None:
        ncols = len(gl) * w
        nr = p.nr or ncols
        with b.loop(0, H, hint="k") as k:
            for gi, g in enumerate(gl):
                # the gate's columns [gi*w, gi*w + w), cut where a panel ends: column col of
                # panel q (width pw) is at q*nr*H + k*pw + col - q*nr
                c, end = gi * w, gi * w + w
                while c < end:
                    q = c // nr
                    c1, pw = min(end, (q + 1) * nr), min(nr, ncols - q * nr)
                    row = b.iadd(dst0, b.iadd(b.imul(k, pw), i64(q * nr * H + gi * w - q * nr)))
                    with b.loop(c - gi * w, c1 - gi * w, hint="jj") as jj:
                        src = b.iadd(b.imul(b.iadd(i64(d * GH + g * H), b.iadd(j0, jj)), H), k)
                        b.store(p.rp, b.iadd(row, jj), b.load(p.r, src))
                    c = c1

    for d in range(p.a.dirs):
        for gl, goff in zip(p.groups, p.group_offsets):
            base = d * GH * H + goff * H
            if p.nfull:
                with b.loop(0, p.nfull, parallel=True, hint="blk") as blk:
                    j0 = b.imul(blk, p.jb)
                    block(d, gl, b.iadd(i64(base), b.imul(j0, len(gl) * H)), j0, p.jb)
            if p.tail:
                j0c = p.nfull * p.jb
                block(d, gl, i64(base + j0c * len(gl) * H), i64(j0c), p.tail)
    return b.body


def _init(p: _Plan, d: int, h: Buffer, c: Buffer | None) -> list:
    b = Builder()
    with b.loop(0, p.N, hint="n") as n:
        if p.lens is not None and d == 0:
            ln = b.cast(b.load(p.lens, n), DType.INT64)
            ok = b.op("and", b.op("ge", ln, i64(0)), b.op("le", ln, size_operand(p.S)))
            top = p.S if isinstance(p.S, int) else "seq_length"
            b.check(ok, f"{p.a.kind}: every sequence_lens entry must be in [0, {top}] "
                        "(the sequence length of X)")
        with b.loop(0, p.H, hint="j") as j:
            at = b.iadd(b.imul(n, p.H), j)
            for st, init in ((h, p.h0), (c, p.c0)):
                if st is None:
                    continue
                v = const(0, p.dt) if init is None else b.load(init, p.state_index(b, d, n, j))
                b.store(st, at, v)
    return b.body


_DOC = {
    "RNN": "simple RNN: H = f(X W^T + H R^T + Wb + Rb)",
    "GRU": "GRU (gates z, r, h; linear_before_reset from opset 3)",
    "LSTM": "LSTM (gates i, o, f, c; peepholes, input_forget)",
}
for _name, _versions in (("RNN", (1, 7, 14, 22)), ("GRU", (1, 3, 7, 14, 22)),
                         ("LSTM", (1, 7, 14, 22))):
    op(_name, _versions, infer=rnn_infer, evaluate=rnn_evaluate, lower=_lower, doc=_DOC[_name],
       symbolic=True)
op("QuantizedLSTM", (1,), domain=FUSED_DOMAIN, infer=quantized_lstm_infer, lower=_lower,
   doc="LSTM on projections computed in int8, h quantized at each step (DynamicQuantizeLSTM)")
