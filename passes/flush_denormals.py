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

The argument holds for data, not for every input: a subnormal weight times an input near
1e38 is a term of 1e-1 (a differential fuzzer's extreme values make exactly that). So a
multiplicand is flushed only where the cliff is a trained model's (MIN_ELEMENTS entries or
more, at least MIN_FRACTION of them subnormal), and an addend (a bias, Gemm's C) always: its
subnormals move a result by less than the smallest normal, whatever the inputs.

Algorithm, one sweep, after fold-batchnorm (which scales weights and can make subnormals):
for every weight input of a product (Conv/ConvTranspose W and B, MatMul A and B, Gemm A, B, C)
that is an f32/f64 constant holding a nonzero entry below the type's smallest normal (for a
multiplicand, enough of them: above), a copy with those entries zeroed becomes a new
initializer, read by the products in place of the original (one copy per original value and
rule); other readers keep the original.
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
#: The inputs of `_WEIGHTS` that are added to the sums, not multiplied.
_ADDENDS = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2}
#: A multiplicand is flushed from this many entries, at least this fraction of them
#: subnormal (PP-OCRv6's detector: 295K entries, 24% and 63%).
MIN_ELEMENTS, MIN_FRACTION = 4096, 0.01


def flushed(arr: np.ndarray, addend: bool = True) -> np.ndarray | None:
    """`arr` with its subnormal entries zeroed, or None when it holds none (a multiplicand,
    `addend` False: none or too few, see `MIN_ELEMENTS`)."""
    tiny = np.finfo(arr.dtype).tiny
    mask = (np.abs(arr) < tiny) & (arr != 0)
    count = int(mask.sum())
    if not count or not addend and (arr.size < MIN_ELEMENTS
                                    or count < MIN_FRACTION * arr.size):
        return None
    out = np.array(arr, copy=True)
    out[mask] = 0
    return out


def run(model: Model, ctx: PassContext) -> PassResult:
    graph = model.graph
    copies: dict[tuple[Value, bool], Value | None] = {}
    changed = False
    for node in graph.nodes:
        slots = _WEIGHTS.get(node.op) if node.domain in ("", "ai.onnx") else None
        for i in slots or ():
            v = node.input(i)
            if v is None or v.const is None or v.dtype not in (DType.FLOAT, DType.DOUBLE):
                continue
            key = (v, _ADDENDS.get(node.op) == i)
            if key not in copies:
                arr = flushed(np.asarray(v.const), key[1])
                copies[key] = None if arr is None else Value(v.type, v.name, const=arr)
                if arr is not None:
                    graph.initializers.append(copies[key])
            new = copies[key]
            if new is not None:
                node.inputs[i] = new
                changed = True
    return PassResult(model, changed)
