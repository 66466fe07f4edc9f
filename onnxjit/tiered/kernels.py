"""Tier-0 kernels of elementwise ops: numpy with ONNX semantics.

Each builder reads its node's attributes once and returns `fn(*inputs) -> [outputs]`. They
cover the cases whose numpy meaning is exactly ONNX's; anything else raises `Decline` (the node's
host evaluation then runs: integer division and the like stay in one place). Views are fine as
results: the plan copies an output that aliases an input or a constant, and no kernel writes
into its inputs; a kernel may write into an array it made itself (HardSwish, HardSigmoid), and
one of several passes runs them over blocks of the elements that stay in cache (`in_blocks`).
Shape and data-movement ops are in `kernels_shape`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.polynomial import chebyshev

from onnxjit.ir.graph import Node
from onnxjit.ir.types import DType
from onnxjit.tiered.registry import TYPES, Decline, kernel

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
#: elements per block of a kernel of several passes: a block's arrays (256 KB each in float32)
#: stay in the core's caches from one pass to the next (`erf32`, `in_blocks`, `depthwise`)
BLOCK = 65536


def _floats(*xs: np.ndarray) -> None:
    for x in xs:
        if x.dtype not in _FLOATS:
            raise Decline


# ------------------------------------------------------------------------------- elementwise
_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Equal": np.equal,
           "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
           "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or,
           "Xor": np.logical_xor, "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or}


@kernel(*_BINARY)
def _binary(node: Node) -> Any:
    if node.version < 7:
        return None  # the legacy broadcast attribute
    f = _BINARY[node.op]

    def run(a: np.ndarray, b: np.ndarray) -> list:
        if a.dtype != b.dtype:
            raise Decline
        return [f(a, b)]
    return run


@kernel("Div", "Pow")
def _float_binary(node: Node) -> Any:
    if node.version < 7:
        return None
    f = np.divide if node.op == "Div" else np.power

    def run(a: np.ndarray, b: np.ndarray) -> list:
        _floats(a, b)
        if a.dtype != b.dtype:
            raise Decline
        with np.errstate(all="ignore"):
            return [f(a, b)]
    return run


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_UNARY = {"Relu": lambda x: np.maximum(x, x.dtype.type(0)), "Neg": np.negative,
          "Abs": np.abs, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt, "Tanh": np.tanh,
          "Reciprocal": np.reciprocal, "Floor": np.floor, "Ceil": np.ceil, "Sigmoid": _sigmoid,
          "Sin": np.sin, "Cos": np.cos, "Not": np.logical_not, "IsNaN": np.isnan,
          "Round": np.round, "Sign": np.sign}
_ANY_TYPE = {"Neg", "Abs", "Not", "Sign"}


@kernel(*_UNARY)
def _unary(node: Node) -> Any:
    f = _UNARY[node.op]
    any_type = node.op in _ANY_TYPE

    def run(x: np.ndarray) -> list:
        if not any_type:
            _floats(x)
        with np.errstate(all="ignore"):
            return [f(x)]
    return run


def in_blocks(x: np.ndarray, passes: Callable[[np.ndarray, np.ndarray], None]) -> np.ndarray:
    """A fresh array y of x's shape where `passes(xb, yb)` wrote each BLOCK-element block yb
    from the block xb of x's elements (in order): several passes over a large map run in
    cache (a detector's HardSwish over 32 x 320 x 320: 1.4x faster than whole-array passes)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty_like(flat)
    for s in range(0, flat.size, BLOCK):
        passes(flat[s:s + BLOCK], out[s:s + BLOCK])
    return out.reshape(x.shape)


@kernel("LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Softplus", "Selu")
def _activation(node: Node) -> Any:
    op = node.op
    alpha = float(node.attr("alpha", {"LeakyRelu": 0.01, "HardSigmoid": 0.2,
                                      "HardSwish": 1 / 6, "Elu": 1.0, "Softplus": 0.0,
                                      "Selu": 1.67326319217681884765625}[op]))
    beta = float(node.attr("beta", 0.5))
    gamma = float(node.attr("gamma", 1.05070102214813232421875))

    def hard(x: np.ndarray, y: np.ndarray) -> None:  # y = x * alpha + beta, clipped; * x
        t = x.dtype.type
        np.multiply(x, t(alpha), out=y)
        y += t(beta if op == "HardSigmoid" else 0.5)
        np.clip(y, t(0), t(1), out=y)
        if op == "HardSwish":
            y *= x

    def run(x: np.ndarray) -> list:
        _floats(x)
        t = x.dtype.type
        with np.errstate(all="ignore"):
            if op == "HardSigmoid" or op == "HardSwish":
                return [in_blocks(x, hard)]
            if op == "LeakyRelu":
                return [np.where(x < 0, x * t(alpha), x)]
            if op == "Elu":
                return [np.where(x < 0, t(alpha) * np.expm1(x), x)]
            if op == "Selu":
                return [t(gamma) * np.where(x <= 0, t(alpha) * np.expm1(x), x)]
            return [np.logaddexp(x, t(0))]
    return run


@kernel("Where")
def _where(node: Node) -> Any:
    def run(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> list:
        if a.dtype != b.dtype or c.dtype != np.bool_:
            raise Decline
        return [np.where(c, a, b)]
    return run


@kernel("Clip")
def _clip(node: Node) -> Any:
    if node.version < 11:
        return None

    def run(x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> list:
        _floats(x)
        y = x
        if lo is not None:
            y = np.maximum(y, lo.astype(x.dtype))
        if hi is not None:
            y = np.minimum(y, hi.astype(x.dtype))
        return [y]
    return run


@kernel("Cast")
def _cast(node: Node) -> Any:
    to = DType(int(node.attr("to")))
    if to not in TYPES or node.attr("saturate", 1) != 1:
        return None
    target = to.numpy

    def run(x: np.ndarray) -> list:
        if x.dtype.kind == "f" and target.kind in "iub" and target != np.bool_:
            raise Decline  # float -> int: NaN and out-of-range handling stays with the host
        if x.dtype.kind not in "fiub":
            raise Decline
        return [x.astype(target)]
    return run


@kernel("Identity", "Dropout")
def _identity(node: Node) -> Any:
    if len(node.outputs) > 1 or node.input(2) is not None:
        return None  # Dropout's mask, or its training mode: the host evaluation draws
    return lambda x, *_: [x]


# erf(x) ~ x P(x^2) / Q(x^2) on [-4, 4] (beyond, +-1 in float32): a rational fit of degree
# 13/8 whose float32 evaluation is within 8 ulp (4.2e-7) of erf over the whole float range
# (checked against math.erf: tests/test_tiered.py); from |x| = NEAR_ONE on, where erf is near
# +-1, 1 - erfc in float64 instead (`_near_one`)
_ERF_P = [np.float32(c) for c in (
    -2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
    -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)]
_ERF_Q = [np.float32(c) for c in (
    -1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
    -1.42647390514189e-02)]


def erf32(x: np.ndarray) -> np.ndarray:
    """erf of a float32 array, `BLOCK` elements at a time (`in_blocks`: each block's dozen
    passes run in cache, 4x faster than whole-array passes on a 1.5M-element GELU input), the
    block's near-one elements (`_near_one`) while they are in cache too."""
    m = min(BLOCK, x.size)
    xb, x2, p, q = (np.empty(m, np.float32) for _ in range(4))

    def block(src: np.ndarray, out: np.ndarray) -> None:
        n = src.size
        xv, x2v, pv, qv = xb[:n], x2[:n], p[:n], q[:n]
        np.clip(src, np.float32(-4), np.float32(4), out=xv)
        np.multiply(xv, xv, out=x2v)
        pv.fill(_ERF_P[0])
        for c in _ERF_P[1:]:
            pv *= x2v
            pv += c
        pv *= xv
        qv.fill(_ERF_Q[0])
        for c in _ERF_Q[1:]:
            qv *= x2v
            qv += c
        np.divide(pv, qv, out=out)
        np.abs(xv, out=x2v)
        at = np.flatnonzero(x2v >= NEAR_ONE)  # NaN compares false: the fit's NaN
        if at.size:
            out[at] = _near_one(xv[at])

    return in_blocks(x, block)


#: from this |x| on erf32 takes `_near_one` (erf >= 0.966: few elements of a GELU input)
NEAR_ONE = 1.5
#: a block's near-one elements up to this many take math.erf one by one (0.1 us each), more
#: the float64 passes (some 20 us however few they are)
EXACT_COUNT = 160
#: [NEAR_ONE, 4] as mid +- half: the interval of the erfc fit
_MID, _HALF = (4 + NEAR_ONE) / 2, (4 - NEAR_ONE) / 2


@functools.lru_cache(maxsize=None)
def _erfc_scaled_fit() -> list[float]:
    """Power coefficients, highest first, in t = (x - _MID) / _HALF, of erfc(x) exp(x^2) on
    [NEAR_ONE, 4]: a Chebyshev fit of degree 14 (from math.erfc at 200 Chebyshev nodes: about
    a ms at the first use; relative error 6e-12), in powers for Horner's rule in place."""
    t = np.cos(np.pi * (np.arange(200) + 0.5) / 200)
    c = chebyshev.chebfit(t, [math.erfc(v) * math.exp(v * v) for v in _MID + _HALF * t], 14)
    return [float(v) for v in chebyshev.cheb2poly(c)[::-1]]


def _near_one(x: np.ndarray) -> np.ndarray:
    """erf of float32 values with NEAR_ONE <= |x| <= 4, as 1 - erfc in float64 rounded once:
    there erf is within 2**20 float32 ulps of +-1, and the fit's 8 ulps were most of 1 - erf
    near 4 (a Log of it off by 10%, fuzz seed 10092311); every float32 there then rounds as
    math.erf's value does. Few values take math.erf itself (`EXACT_COUNT`)."""
    if x.size <= EXACT_COUNT:
        return np.array([math.erf(v) for v in x.tolist()], np.float32)
    a = np.abs(x).astype(np.float64)
    t = a - _MID
    t *= 1 / _HALF
    coeffs = _erfc_scaled_fit()
    y = np.full_like(t, coeffs[0])
    for c in coeffs[1:]:
        y *= t
        y += c
    a *= a
    np.negative(a, out=a)
    y *= np.exp(a, out=a)  # erfc
    np.subtract(1.0, y, out=y)
    return np.copysign(y, x, out=y).astype(np.float32)


@kernel("Erf")
def _erf(node: Node) -> Any:
    def run(x: np.ndarray) -> list:
        if x.dtype != np.float32:
            raise Decline
        return [erf32(x)]
    return run
