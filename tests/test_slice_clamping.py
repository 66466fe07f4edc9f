"""Slice's clamping rules at every extreme, on each path (issue 26, item 2).

The oracle is the spec's text, implemented literally below (`spec_slice`): negative starts and
ends get the dim added, then for a positive step both are clamped to [0, dim], for a negative
step the start to [0, dim-1] and the end to [-1, dim-1]. onnx.reference slices with Python's
rules, which differ for a negative step and a start below -dim (Python: empty; the spec: from
index 0), and onnxruntime differs for a negative step and an end of exactly INT32_MAX or
INT64_MAX (it treats that end as "to the front"; the spec clamps it to dim-1), so neither is
the oracle here.

Each model holds one Slice node per case (one compile checks them all), on a 1-D input of
size 4, 1 and 0, with int64 and int32 parameters, on four paths: folded (the input is an
initializer: `evaluate`), lowered with constant parameters, lowered with run-time parameters
(graph inputs, the output sizes declared: the dynamic kernel's clamping code), and a symbolic
program (`specialize="dynamic"`, positive steps, bound to several sizes).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit

I64, I32 = np.iinfo(np.int64), np.iinfo(np.int32)

# (start, end, step); int32 models clip them to the int32 range.
CASES = [
    (-6, -10, -1), (-6, I64.min, -1), (I64.min, I64.min, -1), (I64.min, I64.max, -1),
    (I64.max, I64.min, -1), (I64.max, -6, -1), (-1, -6, -1), (3, -6, -1), (5, 0, -1),
    (4, -5, -2), (-5, 2, -1), (0, 4, I64.min), (3, I64.min, I64.min), (-1, -2, I64.min),
    (I64.max, I64.min, I64.min), (I64.max, I64.max, -1), (0, I64.max, -1), (2, I32.max, -1),
    (-6, 4, 1), (I64.min, I64.max, 1), (I64.min, I64.min, 1), (I64.max, I64.max, 1),
    (0, 4, I64.max), (1, 3, I64.max), (1, I64.max, I64.max), (-3, I32.max, 2), (2, 2, 1),
    (0, -1, 1), (I32.min, I32.max, 3), (-2, I64.max, 1),
]


def spec_slice(x: np.ndarray, start: int, end: int, step: int) -> np.ndarray:
    """The spec's Slice of a 1-D array, step by step as its text says."""
    n = len(x)
    start, end = start + n if start < 0 else start, end + n if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), n), min(max(end, 0), n)
    else:
        start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
    idx = []
    i = start
    while (i < end) if step > 0 else (i > end):
        idx.append(i)
        i += step
    return x[np.array(idx, np.int64)]


def _params(dtype: type) -> list[tuple[int, int, int]]:
    if dtype is np.int64:
        return CASES
    return [tuple(int(np.clip(v, I32.min, I32.max)) for v in c) for c in CASES]


def _model(n: int | str, dtype: type, path: str, cases: list) -> tuple[onnx.ModelProto, dict]:
    x = np.arange(n if isinstance(n, int) else 4, dtype=np.float32) + 1
    pt = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes, inputs, inits, outputs, feeds = [], [], [], [], {}
    if path == "folded":
        inits.append(numpy_helper.from_array(x, "x"))
    else:
        inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [n]))
        feeds["x"] = x
    for k, (s, e, st) in enumerate(cases):
        names = [f"{w}{k}" for w in "seat"]
        for name, v in zip(names, (s, e, 0, st)):
            arr = np.array([v], dtype)
            if path == "runtime-params":
                inputs.append(helper.make_tensor_value_info(name, pt, [1]))
                feeds[name] = arr
            else:
                inits.append(numpy_helper.from_array(arr, name))
        nodes.append(helper.make_node("Slice", ["x", *names], [f"y{k}"]))
        size = len(spec_slice(x, s, e, st)) if path == "runtime-params" else None
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [size]))
    g = helper.make_graph(nodes, "slices", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 10
    return m, feeds


def _check(got: list, x: np.ndarray, cases: list, where: str) -> None:
    for (s, e, st), y in zip(cases, got):
        want = spec_slice(x, s, e, st)
        assert y.shape == want.shape, f"{where} {s}:{e}:{st}: shape {y.shape}, want {want.shape}"
        np.testing.assert_array_equal(y, want, err_msg=f"{where} {s}:{e}:{st}")


@pytest.mark.parametrize("dtype", [np.int64, np.int32], ids=["i64", "i32"])
@pytest.mark.parametrize("n", [4, 1, 0])
@pytest.mark.parametrize("path", ["folded", "constant-params", "runtime-params"])
def test_slice_clamps_as_the_spec_says(path: str, n: int, dtype: type) -> None:
    cases = _params(dtype)
    m, feeds = _model(n, dtype, path, cases)
    fn = onnxjit.compile(m, cache_dir=False)
    got = fn.run(None, feeds)
    if path != "folded":
        fn.ir("loops")  # ran as native kernels, not on the host
    _check(got, np.arange(n, dtype=np.float32) + 1, cases, f"{path} n={n}")


@pytest.mark.parametrize("dtype", [np.int64, np.int32], ids=["i64", "i32"])
def test_symbolic_program_clamps_as_the_spec_says(dtype: type) -> None:
    """Positive steps compile one program for every size of the symbolic dim (the bounds and
    counts are size expressions, `slice_params_sym`); negative steps, which it cannot express,
    fall back to per-shape programs and must be right too."""
    for cases in ([c for c in _params(dtype) if c[2] > 0], _params(dtype)):
        m, _ = _model("n", dtype, "constant-params", cases)
        fn = onnxjit.compile(m, cache_dir=False, specialize="dynamic")
        misses = fn.cache_info()["misses"]
        for n in (4, 7, 1, 0, 5):
            x = np.arange(n, dtype=np.float32) + 1
            _check(fn(x), x, cases, f"symbolic n={n}")
        if all(c[2] > 0 for c in cases):
            assert fn.cache_info()["misses"] - misses == 1  # one symbolic program served all
