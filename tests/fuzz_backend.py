"""The fuzzer's third generator ("backend"): the ONNX backend node cases with new values.

The chain and corner generators build their own models; this one takes the node cases onnx
generates (`onnx.backend.test.case.node`: every op at the attribute combinations its authors
chose; ~1,500 usable here) and changes what the cases' expected outputs pin down: the
values. Algorithm, per seed (`generate`):
1. Draw a case among those whose inputs and outputs are all tensors of numeric or bool types
   (no sequences, optionals or strings) and that the static backend suite does not list as
   an expected failure (`backend_expected_failures`).
2. Per call (two calls), per graph input: float values are redrawn (85%) at the scale of the
   case's own values (normal, or uniform between the case's min and max), and with some
   chance seeded with extremes (0, -0, +-inf, NaN, +-1e30 or the type's largest finite
   values, denormals); int inputs of more than 8 elements are permuted with probability
   1/3 (indices stay in range; small ones, shapes and axes, keep their values: permuted,
   they are mostly invalid), otherwise kept; bool inputs are redrawn.
3. With probability 1/2 every input dim becomes a `dim_param` (as `test_backend_symbolic`
   does), so the case also runs the shape-generic program.
`tools/fuzz.py --mode backend` judges these cases with the oracle (`fuzz_oracle`).
"""

from __future__ import annotations

import functools
import random
import re

import numpy as np
import onnx
from fuzz_graphs import Case
from onnx import TensorProto

_NUMERIC = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8,
            TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32,
            TensorProto.UINT32, TensorProto.INT64, TensorProto.UINT64, TensorProto.BOOL}


def _tensor_types_ok(values) -> bool:
    for v in values:
        if not v.type.HasField("tensor_type") or v.type.tensor_type.elem_type not in _NUMERIC:
            return False
    return True


@functools.lru_cache(maxsize=1)
def cases() -> list:
    """The usable node cases (`onnx.backend.test.case.node.TestCase`), sorted by name (so a
    seed means the same case everywhere). Collecting runs every case's numpy reference: ~12 s,
    once per process."""
    import warnings

    from backend_expected_failures import EXPECTED_FAILURES
    from onnx.backend.test.case.node import collect_testcases

    failing = [re.compile(p) for p in EXPECTED_FAILURES]
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collected = collect_testcases()
    for c in sorted(collected, key=lambda c: c.name):
        if any(p.search(c.name + "_cpu") for p in failing) or not c.data_sets:
            continue
        g = c.model.graph
        if _tensor_types_ok(g.input) and _tensor_types_ok(g.output) and all(
                isinstance(a, np.ndarray) for a in c.data_sets[0][0]):
            out.append(c)
    return out


def _extremes(dtype: np.dtype) -> np.ndarray:
    fi = np.finfo(dtype)
    big = fi.max if dtype == np.float16 else min(float(fi.max), 1e30)
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, big, -big, fi.max, fi.tiny / 4,
                     -fi.tiny / 4], dtype=dtype)


def _float(a: np.ndarray, rng: random.Random, nrng: np.random.Generator) -> np.ndarray:
    finite = a[np.isfinite(a)] if a.size else a
    scale = float(np.abs(finite).max()) if finite.size else 1.0
    scale = scale if scale > 0 else 1.0
    if finite.size and rng.random() < 0.5:
        lo, hi = float(finite.min()), float(finite.max())
        out = nrng.uniform(lo, hi if hi > lo else lo + 1.0, a.shape)
    else:
        out = nrng.standard_normal(a.shape) * scale
    out = out.astype(a.dtype)
    if out.size and rng.random() < 0.35:
        ext = _extremes(a.dtype)
        k = max(1, out.size // 8)
        at = nrng.integers(0, out.size, k)
        out.reshape(-1)[at] = ext[nrng.integers(0, len(ext), k)]
    return out


def _mutate(a: np.ndarray, rng: random.Random, nrng: np.random.Generator) -> np.ndarray:
    if a.dtype.kind == "f":
        return _float(a, rng, nrng) if rng.random() < 0.85 else a
    if a.dtype == np.bool_:
        return nrng.random(a.shape) < 0.5
    if a.size > 1 and a.ndim >= 1 and rng.random() < 1 / 3 and a.size > 8:
        return nrng.permutation(a.reshape(-1)).reshape(a.shape)
    return a


def _symbolic(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name for t in m.graph.initializer}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        for k, d in enumerate(vi.type.tensor_type.shape.dim):
            d.ClearField("dim_value")
            d.dim_param = f"{vi.name}_d{k}"
    return m


def generate(seed: int) -> Case:
    """Case `seed` of the backend mode (deterministic)."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    case = rng.choice(cases())
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    base = list(case.data_sets[0][0])
    names = [vi.name for vi in model.graph.input]
    feeds = [{n: _mutate(a, rng, nrng) for n, a in zip(names, base)} for _ in range(2)]
    symbolic = rng.random() < 0.5
    if symbolic:
        model = _symbolic(model)
    model.ir_version = min(model.ir_version, 10)
    ops = [n.op_type for n in model.graph.node] + [case.name]  # the case's name last
    return Case(seed, model, feeds, symbolic, ops=ops)
