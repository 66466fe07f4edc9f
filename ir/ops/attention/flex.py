"""FlexAttention (domain ai.onnx.preview, version 1): attention with user subgraphs that modify
the scores (`score_mod`) and the probabilities (`prob_mod`).

Shapes: Q (B, Hq, L, E), K (B, Hkv, S, E), V (B, Hkv, S, Ev) -> Y (B, Hq, L, Ev); query head h
reads K/V head h // (Hq / Hkv). Algorithm (the ONNX reference's order of roundings):
1) scores = (Q * sqrt(scale)) @ (K * sqrt(scale))^T, computed in the input type (f16/bf16:
   in f32, rounded once to the input type); scale defaults to 1/sqrt(E);
2) scores are cast to the softmax type C: `softmax_precision` when given, else f32 for
   f16/bf16/f32 inputs and f64 for f64;
3) scores = score_mod(scores), a stable softmax over the last axis, probs = prob_mod(probs):
   each modifier is a one-input one-output region run by the host interpreter
   (`ir.host_eval.run_graph`, so it may read values of the enclosing graph);
4) Y = probs @ V (in C), cast to V's type.
Execution: the node is registered in `host_eval.HOST`, so the run-time shape phase runs it on
the host (numpy, steps 1-4) and compiles what is around it; shape inference infers the regions
with the score tensor's type and checks they return one tensor of rank 4.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Graph, Node
from onnxjit.ir.host_eval import HOST, Lookup, const_lookup, run_graph
from onnxjit.ir.narrow import narrow, widen
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, Types, accept, float_attr, int_attr
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import NARROW_FLOATS, Dim, DType, TensorType

DOMAIN = "ai.onnx.preview"
_TYPES: Types = ((1, FLOATS | BF16),)
_MODS = ("score_mod", "prob_mod")


def _softmax_type(node: Node, dt: DType) -> DType:
    p = int_attr(node, "softmax_precision", 0)
    if p == 0:
        return DType.DOUBLE if dt == DType.DOUBLE else DType.FLOAT
    try:
        c = DType(p)
    except ValueError:
        c = None
    if c not in FLOATS | BF16:
        raise ModelError(f"softmax_precision {p} is not a float type (f16, bf16, f32, f64)",
                         where=node)
    return c  # type: ignore[return-value]


def _mod(node: Node, name: str) -> Graph | None:
    g = node.attr(name)
    if g is None:
        return None
    if not isinstance(g, Graph):
        raise ModelError(f"attribute '{name}' must be a graph", where=node)
    if len(g.inputs) != 1 or len(g.outputs) != 1:
        raise ModelError(f"{name} must have one input and one output, got "
                         f"{len(g.inputs)} and {len(g.outputs)}", where=node)
    return g


def _same(node: Node, what: str, a: Dim, b: Dim) -> None:
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise ModelError(f"{what} differ: {a} and {b}", where=node)


def _infer(node: Node) -> list:
    from onnxjit.ir.ops.control.if_loop_scan import infer_graph

    if len(node.inputs) != 3 or any(v is None for v in node.inputs):
        raise ModelError("FlexAttention takes exactly Q, K and V", where=node)
    dt = accept(node, 0, _TYPES)
    for i in (1, 2):
        if accept(node, i, _TYPES) != dt:
            raise ModelError(f"input {i} must be {dt.short} like Q", where=node)
    if "scale" in node.attrs:
        float_attr(node, "scale", 0.0)
    c = _softmax_type(node, dt)
    q, k, v = (tensor_input(node, i).shape for i in range(3))
    for name, s in zip("QKV", (q, k, v)):
        if s is not None and len(s) != 4:
            raise ModelError(f"{name} must be 4-D, got shape {list(s)}", where=node)
    b = hq = lq = ev = s_len = None
    if q is not None:
        b, hq, lq = q[0], q[1], q[2]
    if k is not None and v is not None:
        for what, i in (("batch sizes of K and V", 0), ("head counts of K and V", 1),
                        ("sequence lengths of K and V", 2)):
            _same(node, what, k[i], v[i])
    if q is not None and k is not None:
        _same(node, "batch sizes of Q and K", q[0], k[0])
        _same(node, "head sizes of Q and K", q[3], k[3])
        if isinstance(q[1], int) and isinstance(k[1], int) and (k[1] <= 0 or q[1] % k[1]):
            raise ModelError(f"q heads ({q[1]}) must be a multiple of kv heads ({k[1]})",
                             where=node)
    if k is not None:
        s_len = k[2]
    if v is not None:
        ev = v[3]
        b = b if b is not None else v[0]
    scores = TensorType(c, (b, hq, lq, s_len) if q is not None and k is not None else None)
    for name in _MODS:
        g = _mod(node, name)
        if g is None:
            continue
        for n in g.walk():  # a re-inference must not keep the last round's dims
            for o in n.outputs:
                o.type = None
        out = infer_graph(g, [scores])[0]
        if isinstance(out, TensorType) and out.shape is not None and len(out.shape) != 4:
            raise ModelError(f"{name} must return a rank-4 tensor, got {out}", where=node)
    return [TensorType(dt, (b, hq, lq, ev) if q is not None and v is not None else None)]


def _run_mod(node: Node, name: str, x: np.ndarray, c: np.dtype, lookup: Lookup) -> np.ndarray:
    g = _mod(node, name)
    if g is None:
        return x
    y = np.asarray(run_graph(g, [x], lookup)[0])
    if y.shape != x.shape:
        raise ModelError(f"{name} returned shape {list(y.shape)} for scores of shape "
                         f"{list(x.shape)}", where=node)
    return y.astype(c)


def _eval(node: Node, ins: list[Any], lookup: Lookup) -> list[np.ndarray]:
    q, k, v = (np.asarray(x) for x in ins[:3])
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ModelError("Q, K and V must be 4-D", where=node)
    dt = DType.from_numpy(q.dtype)
    hq, hkv, e = q.shape[1], k.shape[1], q.shape[3]
    if hkv <= 0 or hq % hkv or k.shape[3] != e or k.shape[:3] != v.shape[:3] or \
            k.shape[0] != q.shape[0]:
        raise ModelError(f"inconsistent shapes Q {list(q.shape)}, K {list(k.shape)}, "
                         f"V {list(v.shape)}", where=node)
    scale = float_attr(node, "scale", 0.0) if "scale" in node.attrs else \
        (1.0 / math.sqrt(e) if e else 1.0)
    if hq != hkv:
        k, v = (np.repeat(x, hq // hkv, axis=1) for x in (k, v))
    work = np.float32 if dt in NARROW_FLOATS else dt.numpy
    root = np.sqrt(np.float32(scale)).astype(work)
    if dt in NARROW_FLOATS:
        root = widen(narrow(np.asarray(root), dt))
    qs, ks = (widen(x).astype(work) * root for x in (q, k))
    if dt in NARROW_FLOATS:  # both scaled operands are rounded to the input type, then the product
        qs, ks = (widen(narrow(x, dt)) for x in (qs, ks))
    c_dt = _softmax_type(node, dt)
    c = c_dt.numpy
    with np.errstate(all="ignore"):
        scores = qs @ np.swapaxes(ks, -1, -2)
        if dt in NARROW_FLOATS:
            scores = widen(narrow(scores, dt))
        scores = _run_mod(node, "score_mod", scores.astype(c), c, lookup)
        mx = np.max(scores, axis=-1, keepdims=True) if scores.shape[-1] else scores
        ex = np.exp(scores - mx)
        probs = (ex / np.sum(ex, axis=-1, keepdims=True)).astype(c)
        probs = _run_mod(node, "prob_mod", probs, c, lookup)
        y = probs @ widen(v).astype(c) if c_dt not in NARROW_FLOATS else \
            widen(probs).astype(np.float32) @ widen(v).astype(np.float32)
    out_dt = DType.from_numpy(v.dtype)
    if out_dt in NARROW_FLOATS:
        return [narrow(y, out_dt)]
    return [np.ascontiguousarray(y, dtype=out_dt.numpy)]


op("FlexAttention", (1,), domain=DOMAIN, infer=_infer,
   evaluate=lambda node, ins: _eval(node, ins, const_lookup),
   doc="attention with score_mod/prob_mod subgraphs (run on the host)")
HOST[(DOMAIN, "FlexAttention")] = _eval
