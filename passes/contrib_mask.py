"""Helpers shared by the contrib expansions (`contrib_transformer`, `contrib_past`): float32
constants, and the additive attention mask onnxruntime's Attention builds from a mask_index:
key positions a mask excludes get `mask_filter_value` (-10000 by default), others 0, as a
float tensor broadcasting to [B, heads, S, T]."""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.errors import UnsupportedError
from onnxjit.ir.graph import Value


def f32(e: Any, x: float, hint: str) -> Value:
    return e.const(np.array(x, np.float32), hint)


def attention_mask(e: Any, mask: Value, q: Value, k: Value) -> Value:
    """An additive float mask broadcasting to [B, heads, S, T] from a mask_index of shape [B]
    (key lengths), [B, T] (raw 0/1) or [B, S, T]."""
    n = e.node
    fill = float(n.attr("mask_filter_value", -10000.0))
    rank = len(mask.shape) if mask.shape is not None else None
    if rank == 1:
        t = e.emit("Shape", 15, [k], "t_len", start=1, end=2)
        t = e.emit("Squeeze", 13, [t, e.const(np.array([0], np.int64), "axis0")], "t")
        pos = e.emit("Range", 11, [e.const(np.array(0, np.int32), "zero"),
                                   e.emit("Cast", 13, [t], "t_i32", to=6),
                                   e.const(np.array(1, np.int32), "one")], "key_pos")
        lens = e.emit("Unsqueeze", 13, [mask, e.const(np.array([1], np.int64), "ax1")], "lens")
        keep = e.emit("Less", 13, [pos, lens], "keep")
        add = e.emit("Where", 16, [keep, f32(e, 0.0, "zero_f"), f32(e, fill, "fill")], "add")
        return e.emit("Unsqueeze", 13, [add, e.const(np.array([1, 2], np.int64), "ax12")],
                      "mask4")
    if rank not in (2, 3):
        raise UnsupportedError(f"Attention mask_index of rank {rank} is not supported (ranks "
                               "1, 2 and 3 are)", where=n)
    m = e.emit("Cast", 13, [mask], "mask_f", to=1)
    m = e.emit("Mul", 14, [e.emit("Sub", 14, [f32(e, 1.0, "one_f"), m], "inv"),
                           f32(e, fill, "fill")], "add")
    axes = [1, 2] if rank == 2 else [1]
    return e.emit("Unsqueeze", 13, [m, e.const(np.array(axes, np.int64), "axes")], "mask4")
