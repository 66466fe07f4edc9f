"""The packed layout of an 8-bit B for the VNNI product (`loops.Matmul` on 8-bit operands).

`vpdpbusd` multiplies 4 consecutive bytes of A (one row, depths 4g .. 4g+3) by 4 bytes of B per
32-bit lane and adds the four products to that lane: so B is stored in "quads", the 4 depths
of one column next to each other. B' (k x n) is split into column panels of `width` columns
(the last one padded with zero columns to `width`), and each panel's depth is padded with zero
rows to kp = 4 * ceil(k / 4). Panel p is a kp/4 x width x 4 block starting at p * width * kp:

    packed[p*width*kp + g*width*4 + jj*4 + r] = B'[4g + r, p*width + jj]   (0 when outside B')

The zero padding lets the kernel run whole quads and whole panels (a product with a zero is
zero); only A's last partial quad and C's last panel need care there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.ir.types import DType


def is_int8_product(s: Any) -> bool:
    """Whether the Matmul `s` is the widening 8-bit product (u8 A, i8 B in quads, i32 C)."""
    return s.a.dtype == DType.UINT8 and s.b.dtype == DType.INT8 and s.c.dtype == DType.INT32


def padded_depth(k: int) -> int:
    """The depth of a packed panel: k rounded up to a multiple of 4."""
    return -(-k // 4) * 4


def packed_size(k: int, n: int, width: int) -> int:
    """Elements of the packed form of a k x n matrix in panels of `width` columns."""
    return -(-n // width) * width * padded_depth(k)


def pack_quads(b: np.ndarray, width: int) -> np.ndarray:
    """The flat packed form of the k x n matrix `b` (see the module docstring)."""
    k, n = b.shape
    kp, panels = padded_depth(k), -(-n // width)
    full = np.zeros((kp, panels * width), dtype=b.dtype)
    full[:k, :n] = b
    # (kp/4, 4, panels, width) -> (panels, kp/4, width, 4)
    quads = full.reshape(kp // 4, 4, panels, width).transpose(2, 0, 3, 1)
    return np.ascontiguousarray(quads).reshape(-1)


def unpack_quads(flat: np.ndarray, k: int, n: int, width: int) -> np.ndarray:
    """The k x n matrix from its packed form (inverse of `pack_quads`; extra elements after
    the packed panels are ignored)."""
    kp, panels = padded_depth(k), -(-n // width)
    quads = flat[:panels * width * kp].reshape(panels, kp // 4, width, 4)
    full = quads.transpose(1, 3, 0, 2).reshape(kp, panels * width)
    return np.ascontiguousarray(full[:k, :n])
