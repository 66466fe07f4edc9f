"""MaxPool's rule for NaN taps, written once for every MaxPool loop and the constant fold.

The references disagree on a NaN inside a window, and each has more than one rule:
- onnx.reference: pools whose strides and dilations are all 1 drop every NaN (the max of the
  window's non-NaN values; a window of NaNs only raises); other pools start from the first
  real tap and take a later tap only when it is greater, so a NaN first tap sticks and every
  later NaN is dropped;
- onnxruntime: in float64, and with the Indices output in every type, that first-tap rule for
  all pools; float32/float16 without Indices (MLAS) fold with x86 maxps, where a NaN tap
  resets the maximum and survives only as the last one, its vectorized edges differing again.
onnxjit follows onnx.reference exactly, so wherever the two references agree it agrees with
them (checked against both over 1-3-D pools, strides, dilations, pads, ceil_mode, with and
without Indices, float16/32/64: the reference's rule held in every window):
- DROP (strides and dilations all 1): the max of the non-NaN taps, NaN when all are NaN;
- FIRST (otherwise): NaN when the first real tap (row-major tap order, padding skipped) is
  NaN, else the max of the non-NaN taps.
Indices: the first real tap holding the result (the first real tap when it is NaN). Ties keep
the earlier tap (of -0 and +0, the first). A window of padding only gives -inf and index 0.
GlobalMaxPool and ReduceMax keep NaN-propagating maxima: onnx.reference propagates there, and
onnxruntime gives NaN or a number by position, so propagation matches whenever they agree.

Loops fold a tap v into the running maximum m with `take(v, m)` then select(take, v, m):
- FIRST starts m at the first real tap and takes v > m (x86 maxps, one instruction a tap);
- DROP also takes v when m is NaN (and, for Indices, v is not), starting from the first tap;
  where all taps are inside and there is no Indices output (`fold_taps`, the hot fused loops)
  it instead starts m at -inf, takes v > m and keeps an all-NaN flag (3 instructions a tap).
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Operand
from onnxjit.ir.narrow import is_narrow_array
from onnxjit.ir.types import DType


def drops_nan(g) -> bool:
    """True for the DROP rule (strides and dilations all 1) of geometry `g`, else FIRST."""
    return all(s == 1 for s in g.strides) and all(d == 1 for d in g.dilations)


def take(b: Builder, v: Operand, m: Operand, drop: bool, index: bool = False) -> Operand:
    """Whether tap v replaces the running maximum m (see the module docstring); `index`: an
    all-NaN window keeps its first tap's index."""
    t = b.op("gt", v, m)
    if not (drop and v.dtype.is_float):
        return t
    m_nan = b.op("isnan", m)
    if index:
        m_nan = b.op("and", m_nan, b.op("not", b.op("isnan", v)))
    return b.op("or", t, m_nan)


def fold_taps(b: Builder, values: list[Operand], drop: bool, identity: Operand) -> Operand:
    """The maximum of a window whose taps are all real, `values` in tap order."""
    if not values[0].dtype.is_float:
        drop = False
    if not drop:
        m = values[0]
        for v in values[1:]:
            m = b.op("select", b.op("gt", v, m), v, m)
        return m
    m, all_nan = identity, const(True, DType.BOOL)
    for v in values:
        m = b.op("select", b.op("gt", v, m), v, m)
        all_nan = b.op("and", all_nan, b.op("isnan", v))
    return b.op("select", all_nan, const(math.nan, m.dtype), m)


def window_max(w: np.ndarray, real: np.ndarray, drop: bool) -> tuple[np.ndarray, np.ndarray]:
    """numpy: (maximum, tap index in the window) over the last axis of windows `w` whose
    real taps are `real` (the constant fold's form of the rule)."""
    if not (w.dtype.kind == "f" or is_narrow_array(w)):
        low = np.asarray(np.iinfo(w.dtype).min, w.dtype)
        y = np.where(real, w, low).max(axis=-1)
    else:
        with np.errstate(invalid="ignore"):
            y = np.fmax.reduce(np.where(real, w, np.asarray(np.nan, w.dtype)), axis=-1)
            if not drop:
                first = np.take_along_axis(w, np.argmax(real, axis=-1)[..., None], -1)[..., 0]
                y = np.where(np.isnan(first), first, y)
            y = np.where(real.any(axis=-1), y, np.asarray(-np.inf, w.dtype))
    hit = real & ((w == y[..., None]) | np.isnan(y)[..., None])
    return y.astype(w.dtype), np.argmax(hit, axis=-1)
