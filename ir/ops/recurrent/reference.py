"""numpy evaluation of RNN, GRU and LSTM (constant folding; the tests' second reference).

Algorithm, per direction: xw = X @ W[d]^T + Wb once, then for each step t (reversed for the
reverse direction) the cell rules of `recurrent.cells` on numpy arrays (`NumpyArith`, whose
activations interpret the same scalar rules the lowering emits); entries past their
sequence length keep their state and get Y = 0; Y_h/Y_c are 0 for a length-0 entry.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Var
from onnxjit.ir.ops.recurrent.cells import (
    Act,
    RnnAttrs,
    attrs_of,
    cell_lstm,
    cell_rnn,
    gru_gates,
    gru_out,
)
from onnxjit.ir.scalar_eval import operand_value, run_ops
from onnxjit.ir.types import DType


class NumpyArith:
    """`Arith` on numpy arrays of one float dtype; activations run their scalar rule."""

    def __init__(self, dtype: np.dtype, clip: float | None):
        self.dt = np.dtype(dtype)
        self.clip_value = clip

    def add(self, x: Any, y: Any) -> Any:
        return np.add(x, y, dtype=self.dt)

    def sub(self, x: Any, y: Any) -> Any:
        return np.subtract(x, y, dtype=self.dt)

    def mul(self, x: Any, y: Any) -> Any:
        return np.multiply(x, y, dtype=self.dt)

    def one_minus(self, x: Any) -> Any:
        return np.subtract(self.dt.type(1), x, dtype=self.dt)

    def clip(self, x: Any) -> Any:
        if self.clip_value is None:
            return x
        c = self.dt.type(self.clip_value)
        return np.minimum(np.maximum(x, -c), c)

    def act(self, a: Act, x: Any) -> Any:
        b = Builder()
        var = Var(DType.from_numpy(self.dt), "x")
        out = a.emit(b, var)
        env = {var: np.asarray(x, dtype=self.dt)}
        run_ops(b.body, env)
        return np.broadcast_to(operand_value(out, env), np.shape(x)).astype(self.dt)


# --------------------------------------------------------------------------- numpy evaluation


def rnn_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    """numpy semantics of RNN/GRU/LSTM (constant folding; the tests' second reference)."""
    a = attrs_of(node)
    x = inputs[0]
    dt = x.dtype
    opt = [inputs[i] if i < len(inputs) else None for i in range(8)]
    w, r, bias, lens, h0, c0, peep = opt[1], opt[2], opt[3], opt[4], opt[5], opt[6], opt[7]
    if a.layout:
        x = x.swapaxes(0, 1)
        h0 = None if h0 is None else h0.swapaxes(0, 1)
        c0 = None if c0 is None else c0.swapaxes(0, 1)
    seq, batch, _ = x.shape
    hid = r.shape[2]
    g = a.gates
    o = NumpyArith(dt, a.clip)
    y = np.zeros((seq, a.dirs, batch, hid), dt)
    yh = np.zeros((a.dirs, batch, hid), dt)
    yc = np.zeros((a.dirs, batch, hid), dt)
    steps = np.full(batch, seq, np.int64) if lens is None else lens.astype(np.int64)
    for d in range(a.dirs):
        wb = np.zeros(g * hid, dt) if bias is None else bias[d, :g * hid]
        rb = np.zeros(g * hid, dt) if bias is None else bias[d, g * hid:]
        h = np.zeros((batch, hid), dt) if h0 is None else h0[d].astype(dt)
        c = np.zeros((batch, hid), dt) if c0 is None else c0[d].astype(dt)
        pp = None if peep is None else tuple(peep[d, k * hid:(k + 1) * hid] for k in range(3))
        xw = np.matmul(x, w[d].T).astype(dt) + wb
        for s in range(seq):
            t = seq - 1 - s if a.reverse(d) else s
            valid = (t < steps)[:, None]
            hn, cn = _np_step(node, a, o, d, xw[t], h, c, r[d], rb, pp, hid)
            y[t, d] = np.where(valid, hn, 0)
            h = np.where(valid, hn, h)
            c = np.where(valid, cn, c)
        live = (steps > 0)[:, None]
        yh[d], yc[d] = np.where(live, h, 0), np.where(live, c, 0)
    if a.layout:
        y, yh, yc = y.transpose(2, 0, 1, 3), yh.swapaxes(0, 1), yc.swapaxes(0, 1)
    outs = [np.ascontiguousarray(v) for v in (y, yh, yc)]
    return outs[:len(node.outputs)]


def _np_step(node: Node, a: RnnAttrs, o: NumpyArith, d: int, xw: np.ndarray, h: np.ndarray,
             c: np.ndarray, r: np.ndarray, rb: np.ndarray, pp: Any, hid: int
             ) -> tuple[np.ndarray, np.ndarray]:
    acts = a.acts[d]
    with np.errstate(all="ignore"):
        if a.kind == "RNN":
            return cell_rnn(o, acts, xw + (h @ r.T + rb)), c
        if a.kind == "LSTM":
            gates = xw + (h @ r.T + rb)
            gi, go, gf, gc = (gates[:, k * hid:(k + 1) * hid] for k in range(4))
            return cell_lstm(o, acts, a.input_forget, gi, go, gf, gc, c, pp)
        hz = 2 * hid
        zr = xw[:, :hz] + (h @ r[:hz].T + rb[:hz])
        z, rr = gru_gates(o, acts, zr[:, :hid], zr[:, hid:])
        if a.linear_before_reset:
            gh = xw[:, hz:] + rr * (h @ r[hz:].T + rb[hz:])
        else:
            gh = xw[:, hz:] + ((rr * h) @ r[hz:].T + rb[hz:])
        return gru_out(o, acts, z, gh.astype(o.dt), h), c
