"""The fuzzer's second generator ("corners"): one op at a time at its attribute corners.

`fuzz_graphs` grows chains of 3-15 ops over float and int64 values; this mode is built the
other way round, to reach what chains rarely do. Algorithm, per seed (`generate`):
1. Draw an op from `fuzz_corners_ops.CORNERS` (ops the chain generator does not emit, and
   the attribute corners of those it does: auto_pad, ceil_mode, negative axes, keepdims,
   noop_with_empty_axes, select_last_index, reductions of ints, ...) and an element type
   among the op's (int8/uint8/int16/uint16/int32/int64, bool, float16/32/64). The entry
   returns a `Spec`: its nodes, opset, and per graph input the array of each call.
2. Inputs the entry marks `fixed` may become initializers (the op then folds, or meets
   constants in the middle of a run-time graph), or for floats the output of a constant
   subgraph (`Neg` of an initializer, folded before the op); entries may also give a second
   call of other sizes, which makes the differing dims symbolic (`dim_param`), and any
   model may be declared with every dim symbolic (`dynamic` compiles then run the
   shape-generic lowering).
3. The outputs are every node output the entry lists, typed by ONNX shape inference.
`tools/fuzz.py --mode corners` judges these cases with the same oracle (`fuzz_oracle`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import onnx
from fuzz_graphs import Case
from onnx import helper, numpy_helper


@dataclass
class Spec:
    nodes: list
    inputs: dict  # name -> list of arrays, one per call
    outputs: list
    opset: int = 18
    fixed: set = field(default_factory=set)  # inputs that may be constants
    domain_opsets: dict = field(default_factory=dict)


def _elem(a: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(a.dtype)


def build(seed: int, spec: Spec, rng: random.Random) -> Case:
    """The model and feeds of a Spec (see the module docstring, steps 2-3)."""
    calls = len(next(iter(spec.inputs.values()))) if spec.inputs else 1
    nodes, inits, g_in, feeds = list(spec.nodes), [], [], [{} for _ in range(calls)]
    all_sym = rng.random() < 0.3
    pre = []
    for name, arrays in spec.inputs.items():
        same = all(a.shape == arrays[0].shape and np.array_equal(a, arrays[0], equal_nan=True)
                   for a in arrays)
        if name in spec.fixed and same and rng.random() < 0.4:
            a = arrays[0]
            if a.dtype.kind == "f" and rng.random() < 0.3:
                inits.append(numpy_helper.from_array(-a, name + "_n"))
                pre += [helper.make_node("Neg", [name + "_n"], [name])]
            else:
                inits.append(numpy_helper.from_array(a, name))
            continue
        shapes = [a.shape for a in arrays]
        dims = []
        for k, d in enumerate(shapes[0]):
            vary = len({s[k] for s in shapes}) > 1
            dims.append(f"{name}_d{k}" if vary or (all_sym and rng.random() < 0.7) else d)
        g_in.append(helper.make_tensor_value_info(name, _elem(arrays[0]), dims))
        for c in range(calls):
            feeds[c][name] = arrays[c]
    opsets = [helper.make_opsetid("", spec.opset)] + [
        helper.make_opsetid(d, v) for d, v in spec.domain_opsets.items()]
    g = helper.make_graph(pre + nodes, f"corner{seed}", g_in, [], inits)
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 10
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    if any(not types.get(o) for o in spec.outputs):  # inference gave up (Einsum)
        types.update(_run_types(m, spec, feeds[0]))
    for o in spec.outputs:
        m.graph.output.append(helper.make_tensor_value_info(o, types.get(o, 0), None))
    return Case(seed, m, feeds, calls > 1 or all_sym, [n.op_type for n in nodes], {})


def _run_types(m: onnx.ModelProto, spec: Spec, feeds: dict) -> dict:
    """Output element types from a run of onnx.reference (the first input's on failure)."""
    from onnx.reference import ReferenceEvaluator

    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    probe.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in spec.outputs)
    try:
        with np.errstate(all="ignore"):
            outs = ReferenceEvaluator(probe).run(None, feeds)
        return {o: _elem(np.asarray(v)) for o, v in zip(spec.outputs, outs)}
    except Exception:  # the oracle will see the reference fail too
        first = next(iter(spec.inputs.values()))[0]
        return {o: _elem(first) for o in spec.outputs}


def generate(seed: int) -> Case:
    """Case `seed` of the corners mode (deterministic)."""
    import fuzz_corners_more  # noqa: F401  (registers its entries)
    import fuzz_corners_nn  # noqa: F401
    import fuzz_corners_shape  # noqa: F401
    from fuzz_corners_ops import CORNERS

    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    name = rng.choice(sorted(CORNERS))
    spec = CORNERS[name](rng, nrng)
    return build(seed, spec, rng)
