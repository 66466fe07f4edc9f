"""Shared machinery of the per-op audits (tests/test_audit_*.py).

Each audit takes one property that every op family must honour (every opset-version
difference, negative axes, broadcasting, empty tensors), derives cases for every registered
`ai.onnx` op, and compares onnxjit with an oracle: `onnx.reference` at the model's own opset
(it implements the historical versions of each op), or the backend suite's expected outputs
when a case is a metamorphic variant of one (a negative axis must not change the result).

Each audit also has a completeness test: every registered op either has a case for the
property or is listed in the audit's `EXEMPT` table with the reason the property does not
apply. Adding an op to the registry without auditing it therefore fails the run.

The backend suite's node cases (`onnx.backend.test.case.node`) are the seed for most variants:
they are valid models with realistic inputs for every op and version form.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx
from onnx import helper

import onnxjit


@functools.cache
def registered_ops() -> dict[str, tuple[int, ...]]:
    """The `ai.onnx` ops onnxjit registers: op -> the opset versions of its schemas."""
    return {e["op"]: tuple(e["versions"]) for e in onnxjit.supported_ops()
            if e["domain"] in ("", "ai.onnx")}


@functools.cache
def _all_node_cases() -> tuple:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(collect_testcases(None))


def node_cases(op: str) -> list:
    """The backend suite's node cases whose graph is one `op` node of the default domain (not
    the `_expanded` function bodies), each with `.name`, `.model` and `.data_sets` (a list of
    (inputs, expected outputs))."""
    out = []
    for case in _all_node_cases():
        nodes = case.model.graph.node
        if (len(nodes) == 1 and nodes[0].op_type == op and nodes[0].domain in ("", "ai.onnx")
                and not case.name.endswith("_expanded")):
            out.append(case)
    return out


def schema(op: str, version: int) -> onnx.defs.OpSchema:
    """The schema of `op` in force at opset `version`."""
    return onnx.defs.get_schema(op, version, "")


def with_opset(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    """A copy of `model` importing the default domain at `version`, with the IR version that
    opset first appeared in (so older readers accept it)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.opset_import[:]
    m.opset_import.append(helper.make_opsetid("", version))
    m.ir_version = min(10, helper.find_min_ir_version_for([m.opset_import[0]]))
    return m


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs of onnx's reference evaluator (which implements every historical version)."""
    from onnx.reference import ReferenceEvaluator

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return list(ReferenceEvaluator(model).run(None, feeds))


def assert_matches(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                   expected: list[np.ndarray] | None = None, rtol: float = 1e-5,
                   atol: float = 1e-6) -> list[np.ndarray]:
    """Compile `model`, run it on `feeds`, and check every output's dtype, shape and values
    against `expected` (default: the reference evaluator's). Returns onnxjit's outputs."""
    if expected is None:
        expected = reference(model, feeds)
    got = onnxjit.compile(model, cache_dir=False).run(None, feeds)
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        assert_same(g, e, f"output {k}", (rtol, atol))
    return got


def feeds_of(model: onnx.ModelProto, inputs: list) -> dict[str, np.ndarray]:
    """A backend case's positional inputs as a feeds dict (by the graph's input names)."""
    names = [i.name for i in model.graph.input if i.name not in
             {t.name for t in model.graph.initializer}]
    return dict(zip(names, inputs))


def _tolerance(dtype: np.dtype) -> tuple[float, float]:
    name = np.dtype(dtype).name
    if name == "bfloat16":
        return 2e-2, 2e-2
    if name == "float16":
        return 2e-3, 2e-3
    return 1e-5, 1e-6


def assert_same(got, expected, where: str = "output",
                tol: tuple[float, float] | None = None) -> None:
    """`got` equals `expected` in type, shape and value; sequences (lists) element-wise,
    strings whatever numpy string dtype holds them; floats within `tol` (rtol, atol), by
    default a tolerance for the element type."""
    if isinstance(expected, (list, tuple)):
        assert isinstance(got, (list, tuple)), f"{where}: {type(got)}, expected a sequence"
        assert len(got) == len(expected), f"{where}: {len(got)} elements, {len(expected)}"
        for k, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, f"{where}[{k}]", tol)
        return
    e = np.asarray(expected)
    g = np.asarray(got)
    assert g.shape == e.shape, f"{where}: shape {g.shape}, expected {e.shape}"
    if e.dtype.kind in "OUS":
        assert g.dtype.kind in "OUS", f"{where}: dtype {g.dtype}, expected strings"
        assert g.astype(str).tolist() == e.astype(str).tolist(), where
        return
    assert g.dtype == e.dtype, f"{where}: dtype {g.dtype}, expected {e.dtype}"
    if e.dtype.kind in "fcV" or e.dtype.name in ("bfloat16", "float16"):
        rtol, atol = tol or _tolerance(e.dtype)
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64),
                                   rtol=rtol, atol=atol, err_msg=where)
    else:
        np.testing.assert_array_equal(g, e, err_msg=where)
