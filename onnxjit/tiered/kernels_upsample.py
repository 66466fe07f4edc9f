"""Tier-0 kernels of the upsampling ops: ConvTranspose.

ConvTranspose as one product and a scatter: the weights of each group, as an (M/g * K, C/g)
matrix (K kernel taps), times the input's (C/g, positions) columns give every tap's
contribution at every input position in one BLAS call; each tap's slice is then added into the
output at its strided offset (`a * dilation + i * stride` along each axis), into an array large
enough for every tap, and the pads are cropped off (the geometry is the host evaluation's,
`conv.transpose.scatter_plan`, which does the same per tap in float64 with `einsum`). Taps that
never meet (each offset below the stride: a detector's 2x2 stride-2 upsampling) are stored
rather than added, since numpy adds into a strided view about 10x slower than it stores into
one: 24 channels at 144x80 take 6 ms here against the host evaluation's 14-16 ms. float32 and
float64 only; a product whose columns would exceed MAX_COLUMNS elements `Decline`s to the host
evaluation.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnxjit.ir.graph import Node
from onnxjit.tiered.kernels import _floats
from onnxjit.tiered.registry import Decline, kernel

#: elements of the (N, M * K, positions) product above which the host evaluation runs
MAX_COLUMNS = 1 << 26


@kernel("ConvTranspose")
def _conv_transpose(node: Node) -> Any:
    from onnxjit.ir.ops.conv.attrs import infer_conv_shape, transpose_geometry
    from onnxjit.ir.ops.conv.transpose import scatter_plan

    def run(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> list:
        _floats(x)
        if w.dtype != x.dtype or x.ndim < 3 or w.ndim != x.ndim:
            raise Decline
        a, _ = infer_conv_shape(node, x.shape, w.shape, None, transpose=True)
        if a is None:
            raise Decline
        out, begin = transpose_geometry(node, a, x.shape[2:])
        n, c = x.shape[:2]
        g, mg, taps, ins = a.group, w.shape[1], w.shape[2:], x.shape[2:]
        k, p = math.prod(taps), math.prod(ins)
        if begin is None or c % g or n * g * mg * k * p > MAX_COLUMNS or 0 in x.shape or \
                (bias is not None and bias.dtype != x.dtype):
            raise Decline
        wt = w.reshape(g, c // g, mg * k).transpose(0, 2, 1)  # (g, mg*K, C/g)
        cols = np.matmul(wt, x.reshape(n, g, c // g, p)).reshape(n, g * mg, k, *ins)
        ext, at, crop = scatter_plan(a, ins, taps, out, begin)
        y = np.zeros((n, g * mg, *ext), x.dtype)
        # taps that never meet (every offset below the stride) are stored, not added: numpy
        # adds into a strided view 10x slower than it stores into one
        apart = all(dl * (kk - 1) < s for dl, kk, s in zip(a.dilations, taps, a.strides))
        for t, tap in enumerate(at):
            if apart:
                y[tap] = cols[:, :, t]
            else:
                y[tap] += cols[:, :, t]
        y = y[crop]
        if bias is not None:
            y += bias.reshape(1, -1, *([1] * len(ins)))  # y: a view of this call's array
        return [np.ascontiguousarray(y)]
    return run
