"""Tier 0's views of a convolution's or a pool's input windows.

`pad` copies an (N, C, *spatial) input once into a filled array with the pads around it;
`windows` views a padded input as (N, C, *kernel, *out) with `as_strided` (kernel taps and
output positions as axes, no copy); `flat_taps` lays a stride-1 2-D conv's taps out as
contiguous column ranges of the flattened padded map (see there), which products and
depthwise sums read without any window copy.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

__all__ = ["pad", "windows", "flat_taps"]


def windows(xp: np.ndarray, k: tuple, strides: tuple, dil: tuple, out: tuple) -> np.ndarray:
    """View (N, C, *kernel, *out) of the windows of a padded input."""
    st = xp.strides
    r = len(k)
    return as_strided(xp, xp.shape[:2] + k + out,
                      st[:2] + tuple(st[2 + j] * dil[j] for j in range(r))
                      + tuple(st[2 + j] * strides[j] for j in range(r)), writeable=False)


def pad(x: np.ndarray, pads: list, value: float = 0.0) -> np.ndarray:
    """x (N, C, *spatial) padded with `value`: a filled array and one copy (np.pad costs about
    0.1 ms of Python per call, more than the copy on a recognizer's maps)."""
    if not any(b or e for b, e in pads):
        return x
    shape = x.shape[:2] + tuple(d + b + e for d, (b, e) in zip(x.shape[2:], pads))
    out = np.full(shape, value, x.dtype) if value else np.zeros(shape, x.dtype)
    out[(slice(None), slice(None)) + tuple(slice(b, b + d)
                                           for d, (b, _) in zip(x.shape[2:], pads))] = x
    return out


def flat_taps(xp: np.ndarray, k: tuple, dil: tuple, out: tuple
              ) -> tuple[np.ndarray, list[int], int, int]:
    """A stride-1 2-D conv's taps as column windows of the flat padded input: (xp as
    (N, C, Hp*Wp), each tap's offset, L, Wp). Output (i, j) sits at column i*Wp + j of a
    row-major (OH, Wp) grid, so tap (a, b) reads the contiguous columns [off, off + L) with
    off = a*dh*Wp + b*dw; L = (OH-1)*Wp + OW stops each tap inside the input, and the
    Wp - OW columns between rows are computed and dropped."""
    hp, wp = xp.shape[2:]
    offs = [a * dil[0] * wp + b * dil[1] for a, b in np.ndindex(*k)]
    return xp.reshape(xp.shape[:2] + (hp * wp,)), offs, (out[0] - 1) * wp + out[1], wp
