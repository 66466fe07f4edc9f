"""Random generators: RandomNormal, RandomUniform, their -Like forms, Bernoulli, Multinomial.

All are evaluated in numpy on the host at every call (fold-constants never folds them: see
`passes/fold_constants.NONDETERMINISTIC`; they have no lowering, so the run-time shape phase
runs them). With a `seed` attribute every call draws from a fresh
`numpy.random.RandomState(int(seed))`, the generator the ONNX reference evaluator uses, so a
seeded node is reproducible and agrees with `onnx.reference`; without a seed each call draws
from a fresh OS-seeded generator.

- RandomNormal / RandomUniform: shape from the `shape` attribute, dtype attribute (default
  float); normal = randn * scale + mean, uniform = rand * (high - low) + low.
- ...Like: the input's shape; dtype attribute, else the input's dtype (which must be a float).
- Bernoulli: 1 with probability x, as `binomial(1, x)`; dtype attribute, else x's dtype.
- Multinomial: input (batch, classes) of unnormalised log-probabilities; draws `sample_size`
  class indexes per row (inverse CDF of softmax(x) at uniform draws); dtype int32 (default) or
  int64.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.elementwise.arithmetic import FLOATS, Types, accept, arity, float_attr, int_attr
from onnxjit.ir.ops.elementwise.inference import check_dtype, tensor
from onnxjit.ir.ops.shape_utils import require_attr, tensor_input
from onnxjit.ir.types import COMPUTE_DTYPES, DType

_FLOAT_OUT = FLOATS | {DType.BFLOAT16}


def _dtype_attr(node: Node, default: DType | None, allowed: frozenset) -> DType:
    code = node.attr("dtype")
    if code is None:
        if default is None:
            raise ModelError(f"{node.op} needs a 'dtype' attribute (its input is not a float "
                             "tensor)", where=node)
        dt = default
    else:
        try:
            dt = DType(int(code))
        except (TypeError, ValueError):
            raise ModelError(f"attribute 'dtype' must be an ONNX element type, got {code!r}",
                             where=node) from None
    if dt not in allowed:
        names = ", ".join(sorted(d.short for d in allowed))
        raise ModelError(f"attribute 'dtype' must be one of {names}, got {dt.short}",
                         where=node)
    if dt not in COMPUTE_DTYPES:
        raise UnsupportedError(f"op '{node.op}' with output type {dt.short} is not supported",
                               where=node)
    return dt


def _rng(node: Node) -> np.random.RandomState:
    seed = node.attr("seed")
    if seed is None or np.isnan(float(seed)):
        return np.random.RandomState()
    return np.random.RandomState(seed=int(seed) % (1 << 32))


def _draw(node: Node, shape: tuple[int, ...], dt: DType) -> np.ndarray:
    state = _rng(node)
    if node.op.startswith("RandomNormal"):
        mean, scale = float_attr(node, "mean", 0.0), float_attr(node, "scale", 1.0)
        res = state.randn(*shape).astype(dt.numpy) * scale + mean
    else:
        low, high = float_attr(node, "low", 0.0), float_attr(node, "high", 1.0)
        res = state.rand(*shape).astype(dt.numpy) * (high - low) + low
    return np.asarray(res, dtype=dt.numpy).reshape(shape)


def _gen_infer(node: Node) -> list:
    arity(node, 0)
    shape = require_attr(node, "shape")
    if not isinstance(shape, (list, tuple)) or any(int(s) < 0 for s in shape):
        raise ModelError(f"attribute 'shape' must be a list of dims >= 0, got {shape!r}",
                         where=node)
    return tensor(_dtype_attr(node, DType.FLOAT, _FLOAT_OUT), tuple(int(s) for s in shape))


def _gen_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    shape = tuple(int(s) for s in require_attr(node, "shape"))  # type: ignore[union-attr]
    return [_draw(node, shape, _dtype_attr(node, DType.FLOAT, _FLOAT_OUT))]


def _like_dtype(node: Node) -> DType:
    dt = tensor_input(node, 0).dtype
    return _dtype_attr(node, dt if dt in _FLOAT_OUT else None, _FLOAT_OUT)


def _like_infer(node: Node) -> list:
    arity(node, 1)
    return tensor(_like_dtype(node), tensor_input(node, 0).shape)


def _like_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    return [_draw(node, inputs[0].shape, _like_dtype(node))]


_GEN_VERSIONS = (1, 22)
for _name in ("RandomNormal", "RandomUniform"):
    op(_name, _GEN_VERSIONS, infer=_gen_infer, evaluate=_gen_evaluate,
       doc="random tensor of the `shape` attribute (host numpy generator)")
    op(_name + "Like", _GEN_VERSIONS, infer=_like_infer, evaluate=_like_evaluate,
       doc="random tensor of the input's shape (host numpy generator)")

# --------------------------------------------------------------------------- Bernoulli

_PROB_TYPES: Types = ((15, FLOATS), (22, FLOATS | {DType.BFLOAT16}))
_BERNOULLI_OUT = FLOATS | {DType.BFLOAT16, DType.BOOL, DType.INT8, DType.INT16, DType.INT32,
                           DType.INT64, DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64}


def _bernoulli_infer(node: Node) -> list:
    arity(node, 1)
    dt = accept(node, 0, _PROB_TYPES)
    return tensor(_dtype_attr(node, dt, _BERNOULLI_OUT), tensor_input(node, 0).shape)


def _bernoulli_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    dt = _dtype_attr(node, DType.from_numpy(x.dtype), _BERNOULLI_OUT)
    p = np.clip(np.nan_to_num(x.astype(np.float64)), 0.0, 1.0)
    return [np.asarray(_rng(node).binomial(1, p=p), dtype=dt.numpy).reshape(x.shape)]


op("Bernoulli", (15, 22), infer=_bernoulli_infer, evaluate=_bernoulli_evaluate,
   doc="1 with probability x, else 0 (host numpy generator)")

# --------------------------------------------------------------------------- Multinomial


def _multinomial_infer(node: Node) -> list:
    arity(node, 1)
    check_dtype(node, 0, "float")
    accept(node, 0, ((7, FLOATS), (22, FLOATS | {DType.BFLOAT16})))
    n = int_attr(node, "sample_size", 1)
    if n < 1:
        raise ModelError(f"attribute 'sample_size' must be >= 1, got {n}", where=node)
    dt = _dtype_attr(node, DType.INT32, frozenset({DType.INT32, DType.INT64}))
    shape = tensor_input(node, 0).shape
    if shape is not None and len(shape) != 2:
        raise ModelError(f"input must be 2-D (batch, classes), got rank {len(shape)}",
                         where=node)
    return tensor(dt, None if shape is None else (shape[0], n))


def _multinomial_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0].astype(np.float64)
    n = int_attr(node, "sample_size", 1)
    dt = _dtype_attr(node, DType.INT32, frozenset({DType.INT32, DType.INT64}))
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        cdf = np.cumsum(e / e.sum(axis=1, keepdims=True), axis=1)
    u = _rng(node).rand(x.shape[0], n)
    out = np.stack([np.searchsorted(cdf[i], u[i], side="right") for i in range(x.shape[0])]) \
        if x.shape[0] else np.zeros((0, n))
    return [np.minimum(out, x.shape[1] - 1).astype(dt.numpy).reshape(x.shape[0], n)]


op("Multinomial", (7, 22), infer=_multinomial_infer, evaluate=_multinomial_evaluate,
   doc="class indexes drawn from softmax(x) per row (host numpy generator)")
