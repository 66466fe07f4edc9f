"""Cast and CastLike: element type conversion, one scalar `cast` per element.

The scalar `cast` gives ONNX's rules among the compute dtypes: float -> int truncates (and
saturates out of range, where ONNX leaves the result undefined; NaN -> 0), int -> int wraps,
anything -> bool is `x != 0`, bool -> number is 0/1. Types the compiler cannot compute (f16,
bf16, float8, 4-bit, strings) on either side are UnsupportedError; `saturate` and `round_mode`
only affect float8 targets, which are unsupported, so they are checked and otherwise ignored.
CastLike is lowered and folded directly rather than through a scalar rule: its second input
only lends its type, and a fused loop nest would load it. Cast to int64 keeps a shape value
(`sym_value`) flowing, so Shape -> Cast -> Reshape resolves.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.elementwise_utils import tensor
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, elementwise
from onnxjit.ir.loops import Operand
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops_elementwise import arity, int_attr
from onnxjit.ir.scalar_eval import eval_op
from onnxjit.ir.shape_utils import require_attr, tensor_input
from onnxjit.ir.types import COMPUTE_DTYPES, DType, supported_dtypes_text


def _computable(node: Node, dt: DType, what: str) -> DType:
    if dt not in COMPUTE_DTYPES:
        raise UnsupportedError(f"op '{node.op}' {what} element type {dt.short} is not supported "
                               f"(supported: {supported_dtypes_text()})", where=node)
    return dt


def _common_attrs(node: Node) -> None:
    if "saturate" in node.attrs:
        int_attr(node, "saturate", 1, (0, 1))
    mode = node.attr("round_mode", "up")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("up", "down", "nearest"):
        raise ModelError(f"attribute 'round_mode' must be 'up', 'down' or 'nearest', got "
                         f"{mode!r}", where=node)


def _to(node: Node) -> DType:
    to = require_attr(node, "to")
    try:
        return DType(int(to))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ModelError(f"attribute 'to' = {to!r} is not an ONNX element type",
                         where=node) from None


def _cast_infer(node: Node) -> list:
    arity(node, 1)
    _common_attrs(node)
    target = _to(node)
    t = tensor_input(node, 0)
    _computable(node, t.dtype, "from")
    _computable(node, target, "to")
    src = node.inputs[0]
    if target == DType.INT64 and t.dtype.is_int and src is not None \
            and src.sym_value is not None:
        node.outputs[0].sym_value = src.sym_value
    return tensor(target, t.shape)


def _cast(b: Builder, node: Node, a: list[Operand]) -> Operand:
    x = a[0]
    target = DType(int(node.attrs["to"]))
    return b.cast(x, target) if x.dtype != target else b.op("copy", x)


op("Cast", (1, 6, 9, 13, 19, 21, 23, 24, 25, 28), infer=_cast_infer, scalar=_cast,
   doc="convert to the element type 'to'")


def _castlike_infer(node: Node) -> list:
    arity(node, 2)
    _common_attrs(node)
    t = tensor_input(node, 0)
    target = tensor_input(node, 1).dtype
    _computable(node, t.dtype, "from")
    _computable(node, target, "to")
    return tensor(target, t.shape)


def _castlike_lower(ctx: LowerContext, node: Node) -> None:
    target = tensor_input(node, 1).dtype
    b = Builder()
    elementwise(b, ctx.buf(node.outputs[0]), [ctx.buf(node.inputs[0])],  # type: ignore[arg-type]
                lambda b, a: b.cast(a[0], target) if a[0].dtype != target else b.op("copy", a[0]))
    ctx.kernel("castlike", b.body)


def _castlike_evaluate(node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    return [eval_op("cast", [inputs[0]], tensor_input(node, 1).dtype)]


# Not a `scalar` op: the second input only lends its type (it may even be empty), and a scalar
# rule would make the loop nest load it. The same scalar `cast` runs in `lower`/`evaluate`.
op("CastLike", (15, 19, 21, 23, 24, 25), infer=_castlike_infer, lower=_castlike_lower,
   evaluate=_castlike_evaluate, doc="convert to the element type of the second input")
