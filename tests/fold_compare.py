"""Sweep (issue 26): constant folding (`OpDef.evaluate`, or the scalar rule interpreted by
`ir.scalar_eval`) against the lowered kernel of the same op, on zero-size and broadcast-shaped
operands.

Algorithm (`folded_like_lowered`, called by the audits once they have run a case):
1. Seeds: the cases of two per-op audits, which hold valid models with their inputs for every
   registered op: the zero-size cases of tests/test_audit_empty.py (backend node cases cut to an
   empty batch, and the hand-written cases that empty the axis an op works along; the static
   form of each) and the broadcast cases of tests/test_audit_broadcast.py (size-1 dims, rank
   mismatch, 0-d scalars, a zero dim against 1).
2. Each case runs twice: as written (every input a graph input, so the op is lowered to loops
   and runs natively: the audit's own run, whose outputs it has just checked against its
   oracle), and with every graph input turned into an initializer of the same value (so
   fold-constants evaluates the op at compile time and the compiled model only returns
   constants).
3. Both results must agree in dtype, shape and value. The audits compare the lowered path with
   onnx.reference / onnxruntime; this sweep closes the loop for the folding rules, which the
   audits never reach (their inputs are never constant).
A case whose folded variant keeps a node (a random generator, a region, a sequence input, an
op with no folding rule) compares nothing (the function says which ops stayed).
"""

from __future__ import annotations

import audit_empty_cases as empty_hand
import numpy as np
import onnx
from op_audit import assert_same

import onnxjit
from onnxjit.driver import import_model
from onnxjit.options import CompileOptions


def _folded(model: onnx.ModelProto, feeds: dict) -> onnx.ModelProto:
    """`model` with every fed graph input replaced by an initializer holding its value."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [i for i in m.graph.input if i.name not in feeds]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.graph.initializer.extend(empty_hand._tensor(np.asarray(a), n) for n, a in feeds.items())
    m.ir_version = max(m.ir_version, 4)  # initializers outside the inputs
    return m


def _typed_outputs(model: onnx.ModelProto, outs: list) -> onnx.ModelProto:
    """`model` with its outputs declared from `outs` (element type and rank): the folded
    variant's compiler needs ranked outputs just as the lowered one does."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for o, a in zip(m.graph.output, outs):
        if not isinstance(a, np.ndarray) or o.type.HasField("tensor_type") and \
                o.type.tensor_type.HasField("shape"):
            continue
        o.CopyFrom(onnx.helper.make_tensor_value_info(o.name, empty_hand._elem(a),
                                                      [None] * a.ndim))
    return m


def folded_like_lowered(model: onnx.ModelProto, feeds: dict, lowered: list) -> str | None:
    """The folded variant of `model` gives `lowered`, the outputs of `model` compiled as
    written and run on `feeds` (module docs); returns why nothing was compared, or None."""
    if not all(isinstance(a, np.ndarray) for a in feeds.values()):
        return "a sequence or optional input cannot be an initializer"
    model = _typed_outputs(model, lowered)
    folded = _folded(model, feeds)
    graph = import_model(folded.SerializeToString(), CompileOptions.from_user({}))
    if graph.graph.nodes:
        return "not folded: " + ", ".join(sorted({n.op for n in graph.graph.nodes}))
    got = onnxjit.compile(folded, cache_dir=False).run(None, {})
    assert len(got) == len(lowered)
    for k, (g, want) in enumerate(zip(got, lowered)):
        tol = None
        if isinstance(want, np.ndarray) and want.dtype in (np.float32, np.float64):
            tol = (1e-4, 1e-5)  # transcendentals: numpy's libm against the generated code's
        assert_same(g, want, f"output {k}: folded vs lowered", tol)
    return None
