"""Activation functions, each a `scalar` rule composed from the loop IR's scalar ops:
Relu LeakyRelu PRelu Gelu Elu Selu Celu HardSigmoid HardSwish Softplus Softsign ThresholdedRelu
Shrink Mish Swish SwiGLU.

Compositions worth a note:
- Softplus = max(x, 0) + log1p(exp(-|x|)): never overflows, unlike log(exp(x) + 1), and keeps
  the tail (e**x for x < -17, where 1 + e**-|x| rounds to 1); log1p is `unary_math.log1p`;
- Elu/Selu/Celu use the scalar `expm1` (e**x - 1 cancels near 0: Elu(-1e-10) would be 0);
- HardSwish computes x * max(0, min(1, alpha * x + 1/2)) with alpha = 1/6 in the type, the
  references' roundings, from -1.5 up; below, where that sum cancels, (x + 3) / 6 (exact
  near -3);
- compositions compute f16/bf16 in f32 and round once (`arithmetic.in_f32`);
- Gelu "none" = x/2 * (1 + erf(x/sqrt 2)), "tanh" = x/2 * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  computed as x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)) (the same value; 1 + tanh cancels for
  x < -3, sigmoid keeps the tail);
- Shrink on integers computes in f64 (lambd and bias are floats) and truncates back;
- PRelu's slope broadcasts unidirectionally to X: the output has X's shape; in opsets 1 and 6
  a 1-D slope that does not broadcast but has X's channel count applies per channel (axis 1).
- Swish(x) = x * sigmoid(alpha * x); SwiGLU(A, B) = Swish_alpha(A) * B (A and B of one shape,
  no broadcasting): both fuse like any activation.
Attributes keep their per-version defaults (Selu-1's alpha/gamma differ from Selu-6's).
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, coalesce, const, row_major_strides
from onnxjit.ir.loops import Operand
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import (
    BF16,
    FLOATS,
    INTS,
    SIGNED,
    WIDE_INTS,
    Types,
    accept,
    accept_same,
    arity,
    c,
    float_attr,
    float_attrs,
    in_f32,
    unary,
)
from onnxjit.ir.ops.elementwise.inference import out_shape, tensor
from onnxjit.ir.ops.elementwise.unary_math import log1p
from onnxjit.ir.ops.fused.region import lower_elementwise_nodes
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.scalar_eval import evaluate_elementwise
from onnxjit.ir.types import DType

_F22 = ((1, FLOATS), (22, FLOATS | BF16))  # T of the activations revised in opset 22


def _relu(b: Builder, node: Node, a: list[Operand]) -> Operand:
    return b.op("max", a[0], c(0, a[0]))


unary("Relu", (1, 6, 13, 14), ((1, FLOATS), (13, FLOATS | BF16), (14, FLOATS | BF16 | SIGNED)),
      _relu, "max(x, 0)")


def _leaky(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    alpha = float_attr(node, "alpha", 0.01)
    return b.op("select", b.op("lt", x, c(0, x)), b.op("mul", x, c(alpha, x)), x)


unary("LeakyRelu", (1, 6, 16), ((1, FLOATS), (16, FLOATS | BF16)), _leaky,
      "x < 0 ? alpha * x : x", check=float_attrs("alpha"))


def _prelu_legacy(node: Node) -> bool:
    """Opsets 1 and 6 (Caffe2's PRelu): a 1-D slope of X's channel count C that does not
    broadcast numpy-style applies along axis 1, one slope per channel. Later opsets (and the
    reference, which tries numpy broadcasting first) keep numpy's rule for every other case."""
    if node.version >= 7:
        return False
    x, s = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if x is None or s is None or len(s) != 1 or len(x) < 2 or not isinstance(x[-1], int):
        return False
    return s[0] != 1 and x[1] == s[0] and x[-1] != s[0]


def _prelu_infer(node: Node) -> list:
    arity(node, 2)
    dt = accept_same(node, (0, 1), ((1, FLOATS), (9, FLOATS | WIDE_INTS),
                                    (16, FLOATS | BF16 | WIDE_INTS)))
    x = tensor_input(node, 0).shape
    if _prelu_legacy(node):
        return tensor(dt, x)
    shape = out_shape(node, (0, 1))
    if x is not None and shape is not None and (
            len(shape) != len(x) or any(isinstance(d, int) and isinstance(e, int) and d != e
                                        for d, e in zip(shape, x))):
        raise ModelError(f"slope of shape {tensor_input(node, 1)} does not broadcast to X of "
                         f"shape {tensor_input(node, 0)}", where=node)
    return tensor(dt, x if x is not None else shape)


def _prelu(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x, slope = a
    return b.op("select", b.op("lt", x, c(0, x)), b.op("mul", x, slope), x)


def _prelu_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, slope = inputs
    if _prelu_legacy(node):
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
    return evaluate_elementwise(_PRELU, node, [x, slope])


def _prelu_lower(ctx: LowerContext, node: Node) -> None:
    if not _prelu_legacy(node):
        ins = node.inputs[:2]
        lower_elementwise_nodes(ctx, [node], ins, ins, node.outputs[:1], node.outputs[:1],
                                "prelu")
        return
    # The legacy per-channel slope: the scalar rule over one nest, slope read with stride 1
    # along axis 1 and 0 elsewhere (a broadcast `elementwise` cannot express).
    x, slope, y = (ctx.buf(v) for v in (*node.inputs[:2], node.outputs[0]))
    if y.numel == 0:
        return
    own = row_major_strides(y.shape)
    sst = [1 if k == 1 else 0 for k in range(len(y.shape))]
    shape, strides = coalesce(y.shape, [own, sst])
    b = Builder()
    with b.nest(shape, parallel_outer=True) as idx:
        i = b.linear(idx, strides[0])
        r = _prelu(b, node, [b.load(x, i), b.load(slope, b.linear(idx, strides[1]))])
        b.store(y, i, b.cast(r, y.dtype))
    ctx.kernel("prelu", b.body)


# `lower`/`evaluate` handle the legacy per-channel rule; the scalar rule serves fusion (the
# fuse pass only fuses nodes whose inputs broadcast numpy-style to the output)
_PRELU = op("PRelu", (1, 6, 7, 9, 16), infer=_prelu_infer, scalar=_prelu,
            evaluate=_prelu_evaluate, lower=_prelu_lower,
            doc="x < 0 ? slope * x : x, slope broadcast to x (opset < 7: per channel)")


def _gelu_check(node: Node) -> str:
    mode = node.attr("approximate", "none")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("none", "tanh"):
        raise ModelError(f"attribute 'approximate' must be 'none' or 'tanh', got {mode!r}",
                         where=node)
    return mode


def _gelu(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    if _gelu_check(node) == "tanh":  # (1 + tanh u) / 2 = sigmoid(2u): no cancellation
        x3 = b.op("mul", b.op("mul", x, x), x)
        inner = b.op("mul", b.op("add", x, b.op("mul", x3, c(0.044715, x))),
                     c(2 * math.sqrt(2 / math.pi), x))
        return b.op("mul", x, b.op("sigmoid", inner))
    t = b.op("erf", b.op("mul", x, c(1 / math.sqrt(2), x)))
    return b.op("mul", b.op("mul", x, c(0.5, x)), b.op("add", t, c(1, x)))


unary("Gelu", (20,), ((20, FLOATS | BF16),), in_f32(_gelu),
      "Gaussian error linear unit (exact, or the tanh approximation)", check=_gelu_check)


def _elu(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    alpha = float_attr(node, "alpha", 1.0)
    neg = b.op("mul", b.op("expm1", x), c(alpha, x))
    return b.op("select", b.op("lt", x, c(0, x)), neg, x)


unary("Elu", (1, 6, 22), _F22, in_f32(_elu), "x < 0 ? alpha * (e**x - 1) : x",
      check=float_attrs("alpha"))


def _selu(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    legacy = node.version < 6  # Selu-1 had shorter default constants
    alpha = float_attr(node, "alpha", 1.6732 if legacy else 1.67326319217681884765625)
    gamma = float_attr(node, "gamma", 1.0507 if legacy else 1.05070102214813232421875)
    neg = b.op("mul", b.op("expm1", x), c(alpha, x))
    y = b.op("select", b.op("gt", x, c(0, x)), x, neg)
    return b.op("mul", y, c(gamma, x))


unary("Selu", (1, 6, 22), _F22, in_f32(_selu), "gamma * (x > 0 ? x : alpha * (e**x - 1))",
      check=float_attrs("alpha", "gamma"))


def _celu_alpha(node: Node) -> float:
    alpha = float_attr(node, "alpha", 1.0)
    if alpha == 0:
        raise ModelError("Celu's alpha must not be 0", where=node)
    return alpha


def _celu(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    alpha = _celu_alpha(node)
    neg = b.op("mul", b.op("expm1", b.op("div", x, c(alpha, x))), c(alpha, x))
    return b.op("add", b.op("max", x, c(0, x)), b.op("min", neg, c(0, x)))


unary("Celu", (12, 28), ((12, frozenset({DType.FLOAT})), (28, FLOATS | BF16)), in_f32(_celu),
      "max(0, x) + min(0, alpha * (e**(x/alpha) - 1))", check=_celu_alpha)


def hard_sigmoid(b: Builder, x: Operand, alpha: float, beta: float) -> Operand:
    """max(0, min(1, alpha * x + beta))."""
    y = b.op("add", b.op("mul", x, c(alpha, x)), c(beta, x))
    return b.op("max", b.op("min", y, c(1, x)), c(0, x))


unary("HardSigmoid", (1, 6, 22), _F22,
      lambda b, n, a: hard_sigmoid(b, a[0], float_attr(n, "alpha", 0.2),
                                   float_attr(n, "beta", 0.5)),
      "max(0, min(1, alpha * x + beta))", check=float_attrs("alpha", "beta"))


def _hard_swish(b: Builder, node: Node, a: list[Operand]) -> Operand:
    # alpha * x + 1/2 with alpha = 1/6 rounded to the type, as the reference and onnxruntime
    # compute it (bit for bit: a later Cast to double exposes any other rounding), except
    # below -1.5, where the sum cancels (thousands of ulps near -3): there (x + 3) / 6
    x = a[0]
    sixth = c(1 / 6, x)
    y = b.op("select", b.op("lt", x, c(-1.5, x)), b.op("mul", b.op("add", x, c(3, x)), sixth),
             b.op("add", b.op("mul", x, sixth), c(0.5, x)))
    return b.op("mul", x, b.op("max", b.op("min", y, c(1, x)), c(0, x)))


unary("HardSwish", (14, 22), ((14, FLOATS), (22, FLOATS | BF16)), in_f32(_hard_swish),
      "x * max(0, min(1, x / 6 + 1/2))")


def softplus(b: Builder, x: Operand) -> Operand:
    """log(1 + e**x) computed without overflow or loss of the tail (module docstring)."""
    return b.op("add", b.op("max", x, c(0, x)), log1p(b, b.op("exp", b.op("neg", b.op("abs", x)))))


unary("Softplus", (1, 22), _F22, in_f32(lambda b, n, a: softplus(b, a[0])), "log(1 + e**x)")
unary("Softsign", (1, 22), _F22,
      in_f32(lambda b, n, a: b.op("div", a[0], b.op("add", b.op("abs", a[0]), c(1, a[0])))),
      "x / (1 + |x|)")
unary("Mish", (18, 22), ((18, FLOATS), (22, FLOATS | BF16)),
      in_f32(lambda b, n, a: b.op("mul", a[0], b.op("tanh", softplus(b, a[0])))),
      "x * tanh(softplus(x))")


def _thresholded(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    alpha = float_attr(node, "alpha", 1.0)
    return b.op("select", b.op("gt", x, c(alpha, x)), x, c(0, x))


unary("ThresholdedRelu", (10, 22), ((10, FLOATS), (22, FLOATS | BF16)), _thresholded,
      "x > alpha ? x : 0", check=float_attrs("alpha"))


def _shrink(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    lambd = float_attr(node, "lambd", 0.5)
    bias = float_attr(node, "bias", 0.0)
    y = x if x.dtype.is_float else b.cast(x, DType.DOUBLE)
    low = b.op("add", y, c(bias, y))
    high = b.op("sub", y, c(bias, y))
    inner = b.op("select", b.op("gt", y, c(lambd, y)), high, c(0, y))
    r = b.op("select", b.op("lt", y, c(-lambd, y)), low, inner)
    return b.cast(r, x.dtype)


unary("Shrink", (9,), ((9, FLOATS | INTS),), _shrink,
      "x < -lambd ? x + bias : x > lambd ? x - bias : 0", check=float_attrs("lambd", "bias"))

# --------------------------------------------------------------------------- Swish / SwiGLU

_SWISH_TYPES: Types = ((1, FLOATS | BF16),)


def _swish(b: Builder, x: Operand, alpha: float) -> Operand:
    ax = x if alpha == 1.0 else b.op("mul", x, const(alpha, x.dtype))
    return b.op("mul", x, b.op("sigmoid", ax))


def _swish_infer(node: Node) -> list:
    arity(node, 1)
    dt = accept(node, 0, _SWISH_TYPES)
    float_attr(node, "alpha", 1.0)
    return tensor(dt, tensor_input(node, 0).shape)


def _swiglu_infer(node: Node) -> list:
    arity(node, 2)
    dt = accept_same(node, (0, 1), _SWISH_TYPES)
    float_attr(node, "alpha", 1.0)
    a, b = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if a is not None and b is not None and (len(a) != len(b) or any(
            isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(a, b))):
        raise ModelError(f"SwiGLU inputs A {list(a)} and B {list(b)} must have one shape "
                         "(no broadcasting)", where=node)
    return tensor(dt, a if a is not None else b)


op("Swish", (24,), infer=_swish_infer,
   scalar=in_f32(lambda b, n, a: _swish(b, a[0], float_attr(n, "alpha", 1.0))),
   doc="x * sigmoid(alpha * x)")
op("SwiGLU", (28,), infer=_swiglu_infer,
   scalar=in_f32(lambda b, n, a: b.op("mul", _swish(b, a[0], float_attr(n, "alpha", 1.0)),
                                       a[1])),
   doc="Swish_alpha(A) * B, A and B of one shape")
