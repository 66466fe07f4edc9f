"""Tier 0's depthwise convolution: each channel's taps summed over its own windows.

out[n, c] = sum over taps t of w[c, t] * window_t(x[n, c]), one multiply and one add per tap.
On large maps the sum runs in blocks of about BLOCK elements (rows of channels by columns), so
a block's accumulator, scratch and inputs stay in the core's caches across the taps: over
whole maps (a detector's 16 x 320 x 320) the 18 passes ran from memory, 2.1-2.3x slower at
stride 1 and 1.6x at stride 2 (numpy, one thread). By case:
  - 2-D, stride 1, FLAT_POSITIONS or more padded positions: channels first on the flat padded
    map, where each tap is a contiguous column range (`windows.flat_taps`); blocks of
    (image, channel) rows by columns;
  - 2-D, other strides, as large: channels first, each tap a strided view of the padded map;
    blocks of (image, channel) rows by output rows;
  - smaller 2-D maps: channels last (the padded input copied once as (N, H, W, C)), so every
    tap's window is a view whose inner axis is the C contiguous channels; with channels first
    the inner axis would be an output row, as short as 48 on a recognizer's maps, where numpy's
    per-row cost was most of the time (1.4-1.9x slower); the result is an NCHW view of the
    NHWC sums;
  - other ranks: the windows view (`windows.windows`), whole.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from onnxjit.tiered import kernels
from onnxjit.tiered.windows import flat_taps, pad, windows

__all__ = ["depthwise", "FLAT_POSITIONS", "BLOCK"]

#: padded positions from which a 2-D map runs channels first, in blocks
FLAT_POSITIONS = 4096
#: elements of a block's accumulator: `kernels.BLOCK` (65536 beat 16384 by 1.2-1.4x and 262144
#: by 1.4x on 80x80 to 320x320 maps)
BLOCK = kernels.BLOCK


def depthwise(x: np.ndarray, w: np.ndarray, pads: list, k: tuple, strides: tuple,
              dil: tuple, out: tuple) -> np.ndarray:
    """The depthwise convolution of x (N, C, *spatial) by w (C, 1, *k) (module docstring)."""
    n, c = x.shape[:2]
    wt = np.ascontiguousarray(w.reshape(c, -1).T)  # (taps, C)
    padded = math.prod(d + b + e for d, (b, e) in zip(x.shape[2:], pads))
    if len(k) == 2 and padded >= FLAT_POSITIONS:
        rows_w = np.tile(wt, (1, n))[:, :, None]  # (taps, N*C, 1): row r is channel r % C
        if all(s == 1 for s in strides):
            return _flat(x, rows_w, pads, k, dil, out)
        return _strided(x, rows_w, pads, k, strides, dil, out)
    if len(k) == 2:
        (t0, b0), (l0, r0) = pads
        h, wd = x.shape[2:]
        xl = np.zeros((n, h + t0 + b0, wd + l0 + r0, c), x.dtype)
        xl[:, t0:t0 + h, l0:l0 + wd] = x.transpose(0, 2, 3, 1)
        (oh, ow), (sh, sw) = out, strides
        wins = (xl[:, a * dil[0]:a * dil[0] + sh * (oh - 1) + 1:sh,
                   b * dil[1]:b * dil[1] + sw * (ow - 1) + 1:sw] for a, b in np.ndindex(*k))
        return _tap_sum(zip(wins, wt)).transpose(0, 3, 1, 2)
    win = windows(pad(x, pads), k, strides, dil, out)
    wt = wt.reshape((-1, 1, c) + (1,) * len(out))
    lead = (slice(None), slice(None))
    return _tap_sum((win[lead + tap], wt[t]) for t, tap in enumerate(np.ndindex(*k)))


def _flat(x: np.ndarray, rows_w: np.ndarray, pads: list, k: tuple, dil: tuple, out: tuple
          ) -> np.ndarray:
    """Stride 1: blocks of rows (image, channel) by columns of the flat map."""
    n, c = x.shape[:2]
    flat, offs, length, wp = flat_taps(pad(x, pads), k, dil, out)
    rows = flat.reshape(n * c, -1)
    y = np.empty((n * c, out[0] * wp), x.dtype)
    cols = min(length, BLOCK)
    per = max(1, BLOCK // cols)
    tmp = np.empty((per, cols), x.dtype)
    for r0 in range(0, n * c, per):
        r1 = min(n * c, r0 + per)
        for j0 in range(0, length, cols):
            j1 = min(length, j0 + cols)
            _tap_sum(((rows[r0:r1, o + j0:o + j1], rows_w[t, r0:r1]) for t, o in enumerate(offs)),
                     y[r0:r1, j0:j1], tmp[:r1 - r0, :j1 - j0])
    return y.reshape(n, c, out[0], wp)[:, :, :, :out[1]]


def _strided(x: np.ndarray, rows_w: np.ndarray, pads: list, k: tuple, strides: tuple,
             dil: tuple, out: tuple) -> np.ndarray:
    """Other strides: blocks of rows (image, channel) by output rows, taps as strided views."""
    n, c = x.shape[:2]
    xp = pad(x, pads)
    xp = xp.reshape((n * c,) + xp.shape[2:])
    (oh, ow), (sh, sw), (dh, dw) = out, strides, dil
    y = np.empty((n * c, oh, ow), x.dtype)
    lines = max(1, min(oh, BLOCK // ow))
    per = max(1, BLOCK // (lines * ow))
    tmp = np.empty((per, lines, ow), x.dtype)
    taps = list(np.ndindex(*k))
    for r0 in range(0, n * c, per):
        r1 = min(n * c, r0 + per)
        for i0 in range(0, oh, lines):
            i1 = min(oh, i0 + lines)
            wins = (xp[r0:r1, a * dh + i0 * sh:a * dh + (i1 - 1) * sh + 1:sh,
                       b * dw:b * dw + sw * (ow - 1) + 1:sw] for a, b in taps)
            _tap_sum(zip(wins, (rows_w[t, r0:r1, :, None] for t in range(len(taps)))),
                     y[r0:r1, i0:i1], tmp[:r1 - r0, :i1 - i0])
    return y.reshape(n, c, oh, ow)


def _tap_sum(pairs: Iterable, out: np.ndarray | None = None,
             tmp: np.ndarray | None = None) -> np.ndarray:
    """The sum of window * weight over (window, weight) pairs: the first product into `out`
    (a fresh array when None), the others through one scratch array (`tmp`, else a fresh
    one) added in place."""
    y = None
    for win, wt in pairs:
        if y is None:
            y = np.multiply(win, wt, out=out)
            if tmp is None:
                tmp = np.empty_like(y)
        else:
            y += np.multiply(win, wt, out=tmp)
    return y
