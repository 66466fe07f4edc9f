"""The serial step loop of the RNN/GRU/LSTM lowering, split over threads by blocks of hidden units.

Each step's work is split by columns: a block of JB hidden units j owns every gate's columns
for those units, so its cell needs nothing another block computes, and one step is one
parallel loop over the blocks (one pool dispatch: `codegen.parallel` dispatches a parallel loop
directly inside a serial top-level loop; the blocks past the last full one form a tail run
serially after it). Per step t (layouts and buffers: `recurrent.lowering`):
1) the state h is double-buffered, h[2, N, H]: step s reads half s % 2 and writes the other,
   so a block writing its units of the new state never races a block still reading the old
   one in its product; c is updated in place (each (n, j) by its own block);
2) per block (hidden units j0 .. j0+w) and gate group (gl: the gates one product covers):
   - one Matmul rec[:, cols] = h_prev[N, H] x Rp_block[H, len(gl)*w], where Rp is R[d]
     transposed and regrouped at compile time (`pack_r`): the block's gate rows as columns,
     gate after gate, in the register-tiled kernel's column panels when the block is wider
     than one (`b_packed`), so the kernel reads B in place, contiguously;
     rec[N, G*H] is scratch holding gate g's unit j0+jj of group gl at column
     goff + j0*len(gl) + gi*w + jj (goff: the columns of the groups before);
   - one nest over (n, jj) adding xw (the input projection of step t, X's row order, gate
     columns in R's order), the biases and rec, and running the cell (`recurrent.cells` rules
     through `LoopArith`), writing the new state and Y; with sequence_lens, entries past their
     length keep their state and get Y = 0 (selects, no branches).
   LSTM and RNN use one group of all gates, as does GRU with linear_before_reset (the whole
   h x R^T product is needed before r multiplies the h gate's part); plain GRU needs r * h of
   EVERY unit before the h gate's product, so it runs two parallel loops per step: gates z, r
   (storing z and r * h_prev in scratch), then the h gate's product on r * h and the output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onnxjit.codegen.kernel_shapes import INT8_PANEL
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Matmul, Operand, Stmt, i64, size_operand
from onnxjit.ir.ops.recurrent.cells import Act, cell_lstm, cell_rnn, gru_gates, gru_out
from onnxjit.ir.types import DType


class LoopArith:
    """`recurrent.cells.Arith` emitting loop-IR scalar ops through a Builder."""

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


#: a cell body: (n, j, xw row offset, valid, rec(gi) loader) -> None
Cell = Callable[[Operand, Operand, Operand, Any, Callable[[int], Operand]], None]


class StepEmitter:
    """Emits the step loop of one direction `d`; `p` is the lowering's plan
    (`recurrent.lowering`)."""

    def __init__(self, p: Any, d: int, scratch: dict[str, Buffer], parallel: bool = True):
        self.p, self.d, self.sc = p, d, scratch
        self.parallel = parallel  # the blocks as a parallel loop (else: the thread's own)
        self.b = Builder()
        self.o = LoopArith(self.b, p.dt, p.a.clip)
        self.acts = p.a.acts[d]

    def emit(self) -> list[Stmt]:
        p, b = self.p, self.b
        nh = p.N * p.H
        with b.loop(0, p.S, hint="s") as s:
            last = size_operand(p.S - 1)
            self.s = s
            self.t: Operand = b.op("sub", last, s) if p.a.reverse(self.d) else s
            par = b.op("rem", s, i64(2))
            self.hp = b.imul(par, nh)  # this step's input state: half s % 2
            self.hn = b.imul(b.op("sub", i64(1), par), nh)
            if p.quant is not None:  # `recurrent.quantized`: h quantized, then the blocks
                p.quant.quantize(b, self.sc["h"], self.hp, p.N, p.H, self.live)
                self.blocks(0, p.quant.hq, i64(0), self.lstm)
            elif p.a.kind == "LSTM":
                self.blocks(0, self.sc["h"], self.hp, self.lstm)
            elif p.a.kind == "RNN":
                self.blocks(0, self.sc["h"], self.hp, self.rnn)
            elif p.a.linear_before_reset:
                self.blocks(0, self.sc["h"], self.hp, self.gru_lbr)
            else:
                self.blocks(0, self.sc["h"], self.hp, self.gru_zr)
                self.blocks(1, self.sc["rh"], i64(0), self.gru_h)
        return b.body

    # blocks ------------------------------------------------------------------------------------
    def blocks(self, group: int, a_buf: Buffer, a_off: Operand, cell: Cell) -> None:
        """Gate group `group`'s product and `cell` over every block of hidden units."""
        p, b = self.p, self.b
        if p.nfull:
            with b.loop(0, p.nfull, parallel=self.parallel, hint="blk") as blk:
                self.block(group, a_buf, a_off, cell, b.imul(blk, p.jb), p.jb)
        if p.tail:
            self.block(group, a_buf, a_off, cell, i64(p.nfull * p.jb), p.tail)

    def block(self, group: int, a_buf: Buffer, a_off: Operand, cell: Cell, j0: Operand,
              w: int) -> None:
        p, b, d = self.p, self.b, self.d
        gl, goff = p.groups[group], p.group_offsets[group]
        ng, GH, H = len(gl), p.GH, p.H
        rec = self.sc["rec"]
        col0 = b.iadd(i64(goff), b.imul(j0, ng))
        b_off = b.iadd(i64(d * GH * H + goff * H), b.imul(j0, ng * H))
        panels = p.nr is not None and ng * w > p.nr  # else row-major (`recurrent.lowering.pack_r`)
        if p.quant is not None:  # u8 h x i8 R -> i32, in quads (`recurrent.quantized`)
            q = p.quant
            b.emit(Matmul(rec, col0, GH, a_buf, a_off, H, q.packed, q.block_offset(b, d, j0),
                          INT8_PANEL, p.N, ng * w, H, b_packed=True,
                          rank1=q.rank1(b, d, col0, GH)))
        else:
            b.emit(Matmul(rec, col0, GH, a_buf, a_off, H, p.rp, b_off,
                          p.nr if panels else ng * w, p.N, ng * w, H, b_packed=panels))
        with b.loop(0, p.N, hint="n") as n:
            valid = None
            self.tn = self.t
            if p.lens is not None and p.quant is not None and p.a.reverse(d):
                valid = self.aligned(n)
            elif p.lens is not None:
                valid = b.op("lt", self.t, b.cast(b.load(p.lens, n), DType.INT64))
            row = b.imul(p.xw_row(b, self.tn, n, d), GH)
            rrow = b.iadd(b.imul(n, GH), col0)
            with b.loop(0, w, hint="jj") as jj:
                j = b.iadd(j0, jj)

                def rec_at(gi: int, jj: Operand = jj) -> Operand:
                    return b.load(rec, b.iadd(rrow, b.iadd(jj, i64(gi * w))))

                cell(n, j, row, valid, rec_at)

    def aligned(self, n: Operand) -> Operand:
        """A QuantizedLSTM's reverse direction with sequence_lens runs entry n from its own
        last step, as onnxruntime does (it reverses each entry's first L_n steps), so the
        rows h is quantized with match: at step s, time L_n - 1 - s, then (s >= L_n, the
        entry done) times S - 1 down to L_n, where Y gets its zeros. Sets `tn`; returns
        whether the entry is live."""
        b, p = self.b, self.p
        ln = b.cast(b.load(p.lens, n), DType.INT64)
        live = b.op("lt", self.s, ln)
        own = b.op("sub", b.op("sub", ln, i64(1)), self.s)
        done = b.op("add", b.op("sub", size_operand(p.S - 1), self.s), ln)
        self.tn = b.op("select", live, own, done)
        return live

    def live(self, r: Operand) -> Operand | None:
        """Whether row r of h enters this step's quantization: onnxruntime zeroes the state
        of an entry past its length (its output row, read back as h): rows with s > L_r
        quantize as zeros."""
        p, b = self.p, self.b
        if p.lens is None:
            return None
        return b.op("le", self.s, b.cast(b.load(p.lens, r), DType.INT64))

    # cell pieces -------------------------------------------------------------------------------
    def pre(self, row: Operand, j: Operand, g: int, wb: bool = True, rb: bool = True) -> Operand:
        """Gate g's input projection plus its biases."""
        p, b, d = self.p, self.b, self.d
        H, GH = p.H, p.GH
        v: Operand = b.load(self.sc["xw"], b.iadd(row, b.iadd(j, i64(g * H))))
        if p.bias_sum is not None and wb and rb:
            v = b.op("add", v, b.load(p.bias_sum, b.iadd(j, i64(d * GH + g * H))))
        elif p.bias is not None:
            base = d * 2 * GH + g * H
            if wb:
                v = b.op("add", v, b.load(p.bias, b.iadd(j, i64(base))))
            if rb:
                v = b.op("add", v, b.load(p.bias, b.iadd(j, i64(base + GH))))
        return v

    def pre_quantized(self, n: Operand, row: Operand, j: Operand, g: int, acc: Operand
                      ) -> Operand:
        """A QuantizedLSTM gate before its activation: (xw + float(acc) * (h_scale *
        R_scale)) + (Wb + Rb), onnxruntime's order (`recurrent.quantized`)."""
        p, b, d = self.p, self.b, self.d
        H, GH = p.H, p.GH
        col = b.iadd(j, i64(d * GH + g * H))
        assert p.quant is not None
        mult = b.op("mul", b.load(p.quant.h_scale, n), b.load(p.quant.scale, col))
        v = b.op("add", b.load(self.sc["xw"], b.iadd(row, b.iadd(j, i64(g * H)))),
                 b.op("mul", b.cast(acc, p.dt), mult))
        if p.bias_sum is not None:
            return b.op("add", v, b.load(p.bias_sum, col))
        if p.bias is not None:
            base = d * 2 * GH + g * H
            both = b.op("add", b.load(p.bias, b.iadd(j, i64(base))),
                        b.load(p.bias, b.iadd(j, i64(base + GH))))
            return b.op("add", v, both)
        return v

    def h_prev(self, n: Operand, j: Operand) -> Operand:
        b = self.b
        return b.load(self.sc["h"], b.iadd(self.hp, b.iadd(b.imul(n, self.p.H), j)))

    def finish(self, n: Operand, j: Operand, valid: Any, hn: Operand,
               cn: Operand | None) -> None:
        p, b = self.p, self.b
        at = b.iadd(b.imul(n, p.H), j)
        c = self.sc.get("c")
        yv = hn
        if valid is not None:
            hn = b.op("select", valid, hn, self.h_prev(n, j))
            if cn is not None and c is not None:
                cn = b.op("select", valid, cn, b.load(c, at))
            yv = b.op("select", valid, yv, const(0, p.dt))
        if p.y is not None:
            b.store(p.y, p.y_index(b, self.d, self.tn, n, j), yv)
        b.store(self.sc["h"], b.iadd(self.hn, at), hn)
        if cn is not None and c is not None:
            b.store(c, at, cn)

    # cells -------------------------------------------------------------------------------------
    def rnn(self, n: Operand, j: Operand, row: Operand, valid: Any,
            rec: Callable[[int], Operand]) -> None:
        g = self.b.op("add", self.pre(row, j, 0), rec(0))
        self.finish(n, j, valid, cell_rnn(self.o, self.acts, g), None)

    def lstm(self, n: Operand, j: Operand, row: Operand, valid: Any,
             rec: Callable[[int], Operand]) -> None:
        p, b, d = self.p, self.b, self.d
        if p.quant is not None:
            gates = [self.pre_quantized(n, row, j, g, rec(g)) for g in range(4)]
        else:
            gates = [b.op("add", self.pre(row, j, g), rec(g)) for g in range(4)]
        peep = None
        if p.peep is not None:
            peep = tuple(b.load(p.peep, b.iadd(j, i64(d * 3 * p.H + k * p.H)))
                         for k in range(3))
        c_old = b.load(self.sc["c"], b.iadd(b.imul(n, p.H), j))
        hn, cn = cell_lstm(self.o, self.acts, p.a.input_forget, *gates, c_old, peep)
        self.finish(n, j, valid, hn, cn)

    def gru_lbr(self, n: Operand, j: Operand, row: Operand, valid: Any,
                rec: Callable[[int], Operand]) -> None:
        p, b = self.p, self.b
        gz, gr = (b.op("add", self.pre(row, j, g), rec(g)) for g in (0, 1))
        z, r = gru_gates(self.o, self.acts, gz, gr)
        hr = rec(2)
        if p.bias is not None:
            hr = b.op("add", hr, b.load(p.bias, b.iadd(j, i64(self.d * 2 * p.GH + p.GH
                                                               + 2 * p.H))))
        gh = b.op("add", self.pre(row, j, 2, rb=False), b.op("mul", r, hr))
        self.finish(n, j, valid, gru_out(self.o, self.acts, z, gh, self.h_prev(n, j)), None)

    def gru_zr(self, n: Operand, j: Operand, row: Operand, valid: Any,
               rec: Callable[[int], Operand]) -> None:
        p, b = self.p, self.b
        gz, gr = (b.op("add", self.pre(row, j, g), rec(g)) for g in (0, 1))
        z, r = gru_gates(self.o, self.acts, gz, gr)
        at = b.iadd(b.imul(n, p.H), j)
        b.store(self.sc["z"], at, z)
        b.store(self.sc["rh"], at, b.op("mul", r, self.h_prev(n, j)))

    def gru_h(self, n: Operand, j: Operand, row: Operand, valid: Any,
              rec: Callable[[int], Operand]) -> None:
        p, b = self.p, self.b
        gh = b.op("add", self.pre(row, j, 2), rec(0))
        z = b.load(self.sc["z"], b.iadd(b.imul(n, p.H), j))
        self.finish(n, j, valid, gru_out(self.o, self.acts, z, gh, self.h_prev(n, j)), None)
