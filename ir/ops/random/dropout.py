"""Dropout, in inference and in training mode.

Inference (no `training_mode` input, or it is false, or the ratio is 0): y = x and the mask is
all true; the lowering aliases x's storage (`ctx.view`), and `passes/simplify` removes the node
when its mask is unused.

Training mode (opset 12 on, `training_mode` true and a non-zero ratio) draws a random mask, so
the node runs on the host at every call (`OpDef.draws`: never folded, never compiled):
    mask = uniform[0, 1)(x.shape) >= ratio,   y = x * mask * 1 / (1 - ratio)
The uniforms come from `numpy.random.RandomState(seed)`, fresh at every call, when the node has
a `seed` attribute, the generator and formula of the ONNX reference (so a seeded node is
reproducible and matches the backend suite); without a seed from a fresh OS-seeded generator.
A `training_mode` that is a graph input is a value input: the run-time shape phase binds it per
call, so a call with false still compiles natively and one with true runs the node on the host.
A ratio outside [0, 1) in training mode is an error (of the model when the ratio is constant;
of the call when it is an input: `onnxjit.staged` turns the ModelError into an InputError).
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import CompileError, ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.opdef import LowerContext, op, since_version
from onnxjit.ir.ops.elementwise.inference import check_dtype, tensor
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.ops.tensor.indexing import fill, static_lower
from onnxjit.ir.ops.tensor.shape import forward_sym
from onnxjit.ir.types import DType, ValueType


def _ratio_zero(node: Node) -> bool:
    r = node.input(1)
    return r is not None and r.const is not None and float(np.asarray(r.const)) == 0.0


def draws(node: Node) -> bool:
    """Training mode with a ratio that may be non-zero: the node draws a random mask."""
    mode = node.input(2) if since_version(node) >= 12 else None
    return (mode is not None and mode.const is not None and bool(np.asarray(mode.const))
            and not _ratio_zero(node))


def _infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0, "float")
    shape = tensor_input(node, 0).shape
    sv = since_version(node)
    if sv >= 12:
        r, mode = node.input(1), node.input(2)
        if r is not None and (r.dtype is None or not r.dtype.is_float):
            raise ModelError(f"input 1 (ratio) must be a float scalar, got {r.type}", where=node)
        if mode is not None and mode.dtype != DType.BOOL:
            raise ModelError(f"input 2 (training_mode) must be bool, got {mode.type}",
                             where=node)
    forward_sym(node, shape)
    out = tensor(dt, shape)
    if len(node.outputs) > 1:
        out += tensor(dt if sv < 10 else DType.BOOL, shape)
    return out  # type: ignore[return-value]


def _mask_dtype(node: Node, x: np.ndarray) -> np.dtype:
    return x.dtype if since_version(node) < 10 else np.dtype(bool)


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    training = since_version(node) >= 12 and len(inputs) > 2 and inputs[2] is not None \
        and bool(np.asarray(inputs[2]))
    ratio = float(np.asarray(inputs[1])) if len(inputs) > 1 and inputs[1] is not None else 0.5
    if not training or ratio == 0.0:
        out = [x]
        if len(node.outputs) > 1:
            out.append(np.ones(x.shape, dtype=_mask_dtype(node, x)))
        return out
    if not 0.0 <= ratio < 1.0:
        raise ModelError(f"ratio must be in [0, 1) in training mode, got {ratio}", where=node)
    seed = node.attr("seed")
    rng = np.random.RandomState() if seed is None else np.random.RandomState(int(seed))
    mask = rng.uniform(0.0, 1.0, x.shape) >= ratio
    scale = 1.0 / (1.0 - np.asarray(inputs[1]).astype(np.float32)) \
        if inputs[1] is not None else np.float32(2.0)
    y = (mask * x * scale).astype(x.dtype)
    out = [np.asarray(y, order="C")]
    if len(node.outputs) > 1:
        out.append(mask.astype(_mask_dtype(node, x)))
    return out


def _lower(ctx: LowerContext, node: Node) -> None:
    # Lowered only in inference mode: training mode is host-only (`draws`), and a runtime
    # training_mode is a value input, bound (to false, here) before lowering.
    if draws(node):
        raise CompileError("training-mode Dropout reached lowering; it must run on the host",
                           where=node)
    ctx.view(node.outputs[0], ctx.buf(node.inputs[0]))  # type: ignore[arg-type]
    if len(node.outputs) > 1 and node.outputs[1].name:
        mask = ctx.buf(node.outputs[1])
        b = Builder()
        fill(b, mask, const(1, mask.dtype))
        ctx.kernel("dropout_mask", b.body)


op("Dropout", (1, 6, 7, 10, 12, 13, 22), infer=_infer, evaluate=_evaluate,
   lower=static_lower(_lower), value_inputs=(2,), draws=draws,
   doc="inference: y = x, mask all true; training mode: random mask on the host "
       "(numpy RandomState(seed) like the reference)")
