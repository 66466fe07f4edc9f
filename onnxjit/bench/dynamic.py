"""The symbolic program against the specialised one: what `specialize="dynamic"` costs.

For a benchmark model, `symbolic_variant` declares the dims a deployment leaves open symbolic
(batch, and sequence or height/width: every axis but the channels of a 4-D float input and the
features of a 2-D or 3-D float one; every axis of an int input such as token ids), and
`compare` compiles it twice, `specialize="dynamic"` (one program for every size) and
`"shape"` (a program for the benchmark's feeds), checks they agree, and times them interleaved
in blocks (`timing.by_blocks`). The row gets `dynamic_us`, `dynamic_ratio` = specialised median /
symbolic median (>= 0.9: within 10%), and `dynamic_status`: "symbolic", or why the model's
code needs concrete sizes (then both programs are the specialised one).
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np


def symbolic_variant(model: Any) -> Any:
    """A copy of `model` whose open dims (see the module docstring) are named symbols."""
    import onnx
    from onnx import TensorProto

    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name for t in m.graph.initializer}
    for k, inp in enumerate(m.graph.input):
        if inp.name in inits or not inp.type.HasField("tensor_type"):
            continue
        t = inp.type.tensor_type
        dims = t.shape.dim
        floating = t.elem_type in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16)
        for axis, d in enumerate(dims):
            keep = floating and ((len(dims) == 4 and axis == 1)
                                 or (len(dims) in (2, 3) and axis == len(dims) - 1))
            if not keep:
                d.Clear()
                d.dim_param = f"d{k}_{axis}"
    for out in m.graph.output:  # outputs follow from the inputs
        if out.type.HasField("tensor_type"):
            for d in out.type.tensor_type.shape.dim:
                d.Clear()
    return m


def compare(model: Any, feeds: dict[str, np.ndarray], threads: int, seconds: float
            ) -> dict[str, Any]:
    """Fields of the row comparing the symbolic program with the specialised one."""
    import onnxjit
    from onnxjit.bench import timing

    data = symbolic_variant(model).SerializeToString()
    dyn = onnxjit.compile(data, cache_dir=False, specialize="dynamic", num_threads=threads)
    spec = onnxjit.compile(data, cache_dir=False, specialize="shape", num_threads=threads)
    a, b = dyn(**feeds), spec(**feeds)
    for x, y in zip(a, b):
        tol = 1e-3 * float(np.max(np.abs(y))) + 1e-4 if y.size and y.dtype.kind == "f" else 0
        if x.shape != y.shape or (y.size and float(np.max(np.abs(x - y))) > tol):
            return {"dynamic_status": "mismatch against the specialised program"}
    reasons = dyn._symbolic.reasons()
    status = "symbolic" if not reasons else f"per shape: {reasons[0][:120]}"
    if all(n in feeds for n in dyn.input_names):
        args = [feeds[n] for n in dyn.input_names]
        runs = [lambda: spec(*args), lambda: dyn(*args)]
    else:  # weights listed as inputs (IR < 4): by name
        runs = [lambda: spec(**feeds), lambda: dyn(**feeds)]
    times = timing.by_blocks(runs, seconds)
    ts, td = statistics.median(times[0]), statistics.median(times[1])
    return {"dynamic_us": td * 1e6, "specialised_us": ts * 1e6, "dynamic_ratio": ts / td,
            "dynamic_status": status}
