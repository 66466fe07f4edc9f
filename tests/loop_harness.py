"""Run ONNX models through the compiler down to the loop IR and execute that with the reference
interpreter (`onnxjit.ir.loop_eval`), without native code generation.

Used to test op lowerings independently of codegen, and to check that native code and the
loop-IR semantics agree. `run_case(case)` runs one ONNX backend test case (from
`onnx.backend.test.loader.load_model_tests`) and returns None on success or a one-line reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxjit.driver import import_model, lower_signature
from onnxjit.ir.loop_eval import run_program
from onnxjit.ir.types import DType
from onnxjit.options import CompileOptions

OPTIONS = CompileOptions(verify=False)


def run_via_loop_ir(model: Any, inputs: Sequence[np.ndarray],
                    options: CompileOptions = OPTIONS) -> list[np.ndarray]:
    """Compile `model` (anything `onnxjit.compile` accepts) for the inputs' signature down to the
    loop IR and run it with the reference interpreter; returns the outputs."""
    graph_model = import_model(model.SerializeToString() if hasattr(model, "SerializeToString")
                               else model, options)
    arrays = [np.asarray(x) for x in inputs]
    n_given = len(arrays)
    sig = tuple((DType.from_numpy(a.dtype), tuple(a.shape)) for a in arrays)
    # Inputs with a default value (an initializer of the same name) that were not given.
    for v in graph_model.graph.inputs[n_given:]:
        assert v.const is not None, f"input '{v.name}' has no value"
        arrays.append(v.const)
        sig += ((DType.from_numpy(v.const.dtype), tuple(v.const.shape)),)
    _, program = lower_signature(graph_model, sig, options)
    return run_program(program, arrays)


def as_array(x: Any) -> np.ndarray:
    """A backend test datum as an array (some cases hold TensorProtos, e.g. float8 casts)."""
    if hasattr(x, "SerializeToString") and hasattr(x, "data_type"):
        from onnx import numpy_helper

        return numpy_helper.to_array(x)
    return np.asarray(x)


def run_case(case: Any) -> str | None:
    """Run an ONNX backend node test case through the loop IR; None when it passes."""
    from onnxjit.errors import OnnxJitError

    try:
        for inputs, expected in case.data_sets:
            got = run_via_loop_ir(case.model, [as_array(x) for x in inputs])
            if len(got) != len(expected):
                return f"{len(got)} outputs, expected {len(expected)}"
            for k, (g, e) in enumerate(zip(got, expected)):
                e = as_array(e)
                if g.dtype != e.dtype or g.shape != e.shape:
                    return (f"output {k}: {g.dtype}{list(g.shape)}, "
                            f"expected {e.dtype}{list(e.shape)}")
                np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol)
    except AssertionError as e:
        return "mismatch: " + " ".join(str(e).split())[:200]
    except OnnxJitError as e:
        return f"{type(e).__name__}: {e}"
    return None
