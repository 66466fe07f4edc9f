"""flush-denormals: subnormal entries of constant product weights become zeros.

x86 cores multiply a subnormal operand through a microcode assist, about a hundred times
slower than a normal multiply-add. Trained weights can hold many of them (PP-OCRv6's
detector has 384x768 convolutions whose weights are up to 63% subnormal, after a layer-scale
folded into them): such a product runs tens of times slower than the same product with
zeros, in onnxruntime too. A subnormal weight w (|w| < 1.2e-38 in f32) adds w * x to a sum
S of products; that term is below S's rounding (|S| * 2^-24) whenever |S| > 2e-31 * |x|, so
zeroing it changes no result short of outputs that are themselves almost zero, and removes
the cliff. A subnormal bias b is flushed too (|b| < 1.2e-38 added to the same sums): where the
weights of a channel are all zero or subnormal (pruned channels), its outputs would be the
subnormal bias, and every elementwise op of the epilogue after it (a GELU's erf) and the next
product reading it would run on subnormals. Activations are left alone otherwise (no FTZ/DAZ
mode is set).

Algorithm, one sweep, after fold-batchnorm (which scales weights and can make subnormals):
for every weight input of a product (Conv/ConvTranspose W and B, MatMul A and B, Gemm A, B, C)
that is an f32/f64 constant holding a nonzero entry below the type's smallest normal, a copy
with those entries zeroed becomes a new initializer, read by the products in place of the
original (one copy per original value); other readers keep the original.
"""

from __future__ import annotations

import numpy as np

from onnxjit.ir.graph import Model, Value
from onnxjit.ir.types import DType
from onnxjit.passes import PassContext, PassResult

name = "flush-denormals"
level = "graph"

#: The product inputs (by position) that are multiplicands or added to the sums (biases).
_WEIGHTS = {"Conv": (1, 2), "ConvTranspose": (1, 2), "MatMul": (0, 1), "Gemm": (0, 1, 2)}


def flushed(arr: np.ndarray) -> np.ndarray | None:
    """`arr` with its subnormal entries zeroed, or None when it holds none."""
    tiny = np.finfo(arr.dtype).tiny
    mask = (np.abs(arr) < tiny) & (arr != 0)
    if not mask.any():
        return None
    out = np.array(arr, copy=True)
    out[mask] = 0
    return out


def run(model: Model, ctx: PassContext) -> PassResult:
    graph = model.graph
    copies: dict[Value, Value | None] = {}
    changed = False
    for node in graph.nodes:
        slots = _WEIGHTS.get(node.op) if node.domain in ("", "ai.onnx") else None
        for i in slots or ():
            v = node.input(i)
            if v is None or v.const is None or v.dtype not in (DType.FLOAT, DType.DOUBLE):
                continue
            if v not in copies:
                arr = flushed(np.asarray(v.const))
                copies[v] = None if arr is None else Value(v.type, v.name, const=arr)
                if arr is not None:
                    graph.initializers.append(copies[v])
            new = copies[v]
            if new is not None:
                node.inputs[i] = new
                changed = True
    return PassResult(model, changed)
