"""CausalConvWithState (opset 27): a depthwise causal 1-D convolution with a carried state.

For streaming: input (B, C, L), weight (C, 1, K), optional bias (C), optional past_state
(B, C, K-1) (zeros when absent). With padded = concat(past_state, input) along time (length
L + K - 1):
    output[b, c, t] = act(bias[c] + sum_k weight[c, 0, k] * padded[b, c, t + k])
    present_state   = padded[:, :, L:]            (the last K - 1 samples)
where act is the identity (`none`) or x * sigmoid(x) (`silu`, alias `swish`).
Lowering: one kernel, parallel over (b, c) rows: the row's padded signal is written to a
scratch buffer, then the K-tap dot products, then the state tail is copied out of the scratch.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, Types, accept_same, arity
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType, TensorType

_CONV_TYPES: Types = ((27, FLOATS | BF16),)


def _activation(node: Node) -> str:
    act = node.attr("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise ModelError(f"attribute 'activation' must be none, silu or swish, got {act!r}",
                         where=node)
    return act


def _ccs_infer(node: Node) -> list:
    given = arity(node, 2, 4)
    dt = accept_same(node, given, _CONV_TYPES)
    _activation(node)
    x, w = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if x is not None and len(x) != 3:
        raise ModelError(f"input must be 3-D (batch, channels, length), got rank {len(x)}",
                         where=node)
    if w is not None and (len(w) != 3 or (isinstance(w[1], int) and w[1] != 1)):
        raise ModelError(f"weight must have shape (channels, 1, kernel), got {list(w)}",
                         where=node)
    b_, c, k = (x[0] if x else None), (x[1] if x else None), (w[2] if w else None)
    if x is not None and w is not None and isinstance(x[1], int) and isinstance(w[0], int) \
            and x[1] != w[0]:
        raise ModelError(f"input has {x[1]} channels but weight has {w[0]}", where=node)
    if isinstance(k, int) and k < 1:
        raise ModelError(f"kernel size must be >= 1, got {k}", where=node)
    k1 = k - 1 if isinstance(k, int) else None
    if 2 in given:
        bs = tensor_input(node, 2).shape
        if bs is not None and (len(bs) != 1 or (isinstance(c, int) and isinstance(bs[0], int)
                                                 and bs[0] != c)):
            raise ModelError(f"bias must have shape ({c},), got {list(bs)}", where=node)
    if 3 in given:
        ps = tensor_input(node, 3).shape
        want = (b_, c, k1)
        if ps is not None and (len(ps) != 3 or any(isinstance(p, int) and isinstance(q, int)
                                                    and p != q for p, q in zip(ps, want))):
            raise ModelError(f"past_state must have shape {list(want)}, got {list(ps)}",
                             where=node)
    return [TensorType(dt, x), TensorType(dt, None if x is None else (b_, c, k1))]


def _ccs_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    ins = list(inputs) + [None] * (4 - len(inputs))
    x, w, bias, past = ins
    bsz, c, length = x.shape
    k = w.shape[2]
    if past is None:
        past = np.zeros((bsz, c, k - 1), dtype=x.dtype)
    padded = np.concatenate([past, x], axis=2)
    out = np.zeros((bsz, c, length), dtype=x.dtype)
    for j in range(k):
        out += w[None, :, 0, j, None] * padded[:, :, j:j + length]
    if bias is not None:
        out += bias[None, :, None]
    if _activation(node) != "none":
        f = out.astype(np.float32)
        with np.errstate(over="ignore"):
            out = f * (1 / (1 + np.exp(-f)))
    return [out.astype(x.dtype), np.ascontiguousarray(padded[:, :, length:])]


def _ccs_lower(ctx: LowerContext, node: Node) -> None:
    xb, wb = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1])
    bb = ctx.buf(node.inputs[2]) if node.input(2) is not None else None
    pb = ctx.buf(node.inputs[3]) if node.input(3) is not None else None
    yb, sb = ctx.buf(node.outputs[0]), ctx.buf(node.outputs[1])
    bsz, c, length = xb.shape
    k = wb.shape[2]
    rows, width = bsz * c, length + k - 1
    if rows == 0:
        return
    dt = xb.dtype
    ct = DType.FLOAT if dt in (DType.FLOAT16, DType.BFLOAT16) else dt
    pad = ctx.scratch("padded", dt, (rows, width))
    silu = _activation(node) != "none"
    b = Builder()
    with b.loop(0, rows, parallel=True, hint="bc") as row:
        ch = b.op("rem", row, i64(c))
        base = b.imul(row, width)
        with b.loop(0, k - 1, hint="j") as j:
            v = b.load(pb, b.iadd(b.imul(row, k - 1), j)) if pb is not None else const(0, dt)
            b.store(pad, b.iadd(base, j), v)
        with b.loop(0, length, hint="t") as t:
            b.store(pad, b.iadd(base, b.iadd(t, i64(k - 1))),
                    b.load(xb, b.iadd(b.imul(row, length), t)))
        with b.loop(0, length, hint="t") as t:
            # Half types accumulate in f32, round the sum to the type, then apply the
            # activation in f32 (as the reference does: conv in T, silu in float32).
            init = b.cast(b.load(bb, ch), ct) if bb is not None else const(0, ct)
            acc = b.var(init, hint="acc")
            with b.loop(0, k, hint="k") as kk:
                wv = b.cast(b.load(wb, b.iadd(b.imul(ch, k), kk)), ct)
                xv = b.cast(b.load(pad, b.iadd(base, b.iadd(t, kk))), ct)
                b.assign(acc, "add", acc, b.op("mul", wv, xv))
            out = b.cast(b.cast(acc, dt), ct) if ct != dt else acc
            if silu:
                out = b.op("mul", out, b.op("sigmoid", out))
            b.store(yb, b.iadd(b.imul(row, length), t), b.cast(out, dt))
        with b.loop(0, k - 1, hint="j") as j:
            b.store(sb, b.iadd(b.imul(row, k - 1), j),
                    b.load(pad, b.iadd(base, b.iadd(j, i64(length)))))
    ctx.kernel("causal_conv", b.body)


op("CausalConvWithState", (27,), infer=_ccs_infer, evaluate=_ccs_evaluate, lower=_ccs_lower,
   doc="depthwise causal 1-D conv over concat(past_state, input); returns the new state")
