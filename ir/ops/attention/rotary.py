"""RotaryEmbedding (opset 23): rotate pairs of each head's first `rotary_embedding_dim` features.

X is 4-D (batch, heads, seq, head_size) or 3-D (batch, seq, heads * head_size) with `num_heads`.
For position (b, s) the cos/sin rows are cache[position_ids[b, s]] (caches of shape
(max_pos, R/2)) or, without position_ids, cache[b, s] (caches of shape (batch, seq, R/2)).
Pair k (k < R/2) is (x[k], x[k + R/2]) or, with `interleaved`, (x[2k], x[2k+1]); it becomes
(cos*x1 - sin*x2, sin*x1 + cos*x2). Features from R on are copied unchanged.

Lowering: one nest (batch parallel, seq, heads, pairs) computing each element's flat index from
the layout's strides, so the 3-D and 4-D layouts share the code; an out-of-range position id is
a run-time InputError (Check).
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import InputError, ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Operand, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import (
    BF16,
    FLOATS,
    Types,
    accept,
    accept_same,
    arity,
    int_attr,
)
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType

_TYPES: Types = ((23, FLOATS | BF16),)


class _Geom:
    """Sizes and strides of X's (b, s, h, d) elements; R = rotary dim."""

    def __init__(self, node: Node, shape: tuple):
        heads = int_attr(node, "num_heads", 0)
        if len(shape) == 4:
            self.b, self.h, self.s, self.d = shape
            self.strides = (self.h * self.s * self.d, self.d, self.s * self.d, 1)
        elif len(shape) == 3:
            if heads <= 0:
                raise ModelError("3-D input needs the num_heads attribute", where=node)
            self.b, self.s = shape[0], shape[1]
            if shape[2] % heads:
                raise ModelError(f"hidden size {shape[2]} is not a multiple of num_heads "
                                 f"{heads}", where=node)
            self.h, self.d = heads, shape[2] // heads
            self.strides = (self.s * shape[2], shape[2], self.d, 1)
        else:
            raise ModelError(f"input must be 3-D or 4-D, got shape {list(shape)}", where=node)
        self.r = int_attr(node, "rotary_embedding_dim", 0) or self.d
        if self.r > self.d or self.r % 2:
            raise ModelError(f"rotary_embedding_dim {self.r} must be even and <= head size "
                             f"{self.d}", where=node)


def _infer(node: Node) -> list:
    arity(node, 3, 4)
    dt = accept_same(node, (0, 1, 2), _TYPES)
    int_attr(node, "interleaved", 0, (0, 1))
    if node.input(3) is not None:
        accept(node, 3, ((23, frozenset({DType.INT64})),))
    shape = tensor_input(node, 0).shape
    if shape is not None and all(isinstance(d, int) for d in shape):
        g = _Geom(node, shape)
        cs = tensor_input(node, 1).shape
        if cs is not None and isinstance(cs[-1], int) and cs[-1] != g.r // 2:
            raise ModelError(f"the last dim of cos_cache ({cs[-1]}) must be "
                             f"rotary_embedding_dim / 2 = {g.r // 2}", where=node)
        _check_indexing(node, g)
    return tensor(dt, shape)


def _check_indexing(node: Node, g: _Geom) -> None:
    """The caches and position_ids have the shapes the rows are read with (the kernel reads
    them unchecked): position_ids (batch, seq) with caches (max_pos, R/2), else caches
    (batch, seq, R/2); sin_cache shaped like cos_cache."""
    cs, ss = tensor_input(node, 1).shape, tensor_input(node, 2).shape

    def fits(got: tuple | None, want: tuple) -> bool:
        return got is None or len(got) == len(want) and all(
            not isinstance(a, int) or w is None or a == w for a, w in zip(got, want))

    if node.input(3) is not None:
        pid = tensor_input(node, 3).shape
        if not fits(pid, (g.b, g.s)):
            raise ModelError(f"position_ids must have shape [batch, seq] = [{g.b}, {g.s}], "
                             f"got {list(pid)}", where=node)  # type: ignore[arg-type]
        want: tuple = (None, g.r // 2)
    else:
        want = (g.b, g.s, g.r // 2)
    for name, got in (("cos_cache", cs), ("sin_cache", ss)):
        if not fits(got, want):
            form = "[max_position, R/2]" if len(want) == 2 else "[batch, seq, R/2]"
            raise ModelError(f"{name} must have shape {form} here, got {list(got)}",
                             where=node)  # type: ignore[arg-type]
    if cs is not None and ss is not None and not fits(ss, cs):
        raise ModelError(f"sin_cache {list(ss)} and cos_cache {list(cs)} differ", where=node)


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, cos, sin = inputs[:3]
    pid = inputs[3] if len(inputs) > 3 else None
    g = _Geom(node, x.shape)
    xs = x.transpose(0, 2, 1, 3) if x.ndim == 4 else x.reshape(g.b, g.s, g.h, g.d)
    if pid is not None:
        if pid.size and (pid.min() < 0 or pid.max() >= cos.shape[0]):
            raise InputError("a position id is out of range of the caches", where=node)
        cos, sin = cos[pid], sin[pid]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    rot = xs[..., :g.r]
    if int_attr(node, "interleaved", 0):
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., :g.r // 2], rot[..., g.r // 2:]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    out = xs.copy()
    if int_attr(node, "interleaved", 0):
        out[..., 0:g.r:2], out[..., 1:g.r:2] = real, imag
    else:
        out[..., :g.r // 2], out[..., g.r // 2:g.r] = real, imag
    out = out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(x.shape)
    return [np.ascontiguousarray(out, dtype=x.dtype)]


def _lower(ctx: LowerContext, node: Node) -> None:
    x, cos, sin, y = (ctx.buf(v) for v in (*node.inputs[:3], node.outputs[0]))
    pid = ctx.buf(node.inputs[3]) if node.input(3) is not None else None
    if y.numel == 0:
        return
    g = _Geom(node, x.shape)
    inter = int_attr(node, "interleaved", 0) == 1
    half = g.r // 2
    sb, ss, sh, _ = g.strides
    b = Builder()
    with b.loop(0, g.b, parallel=True, hint="b") as bi:
        with b.loop(0, g.s, hint="s") as si:
            bs = b.iadd(b.imul(bi, g.s), si)
            if pid is not None:
                p = b.cast(b.load(pid, bs, hint="pos"), DType.INT64)
                n_pos = cos.shape[0]
                b.check(b.op("and", b.op("ge", p, i64(0)), b.op("lt", p, i64(n_pos))),
                        f"{node.describe()}: a position id is out of range [0, {n_pos})")
                row = b.imul(p, half)
            else:
                row = b.imul(bs, half)
            with b.loop(0, g.h, hint="h") as hi:
                base = b.iadd(b.iadd(b.imul(bi, sb), b.imul(si, ss)), b.imul(hi, sh))
                with b.loop(0, half, hint="k") as k:
                    c, s_ = b.load(cos, b.iadd(row, k)), b.load(sin, b.iadd(row, k))
                    if inter:
                        k2 = b.imul(k, 2)
                        i1: Operand = b.iadd(base, k2)
                        i2: Operand = b.iadd(i1, i64(1))
                    else:
                        i1 = b.iadd(base, k)
                        i2 = b.iadd(i1, i64(half))
                    x1, x2 = b.load(x, i1), b.load(x, i2)
                    b.store(y, i1, b.op("sub", b.op("mul", c, x1), b.op("mul", s_, x2)))
                    b.store(y, i2, b.op("add", b.op("mul", s_, x1), b.op("mul", c, x2)))
                if g.r < g.d:
                    with b.loop(g.r, g.d, hint="d") as d:
                        b.store(y, b.iadd(base, d), b.load(x, b.iadd(base, d)))
    ctx.kernel("rotary_embedding", b.body)


op("RotaryEmbedding", (23,), infer=_infer, evaluate=_evaluate, lower=_lower,
   doc="rotary position embedding of each head's first rotary_embedding_dim features")
