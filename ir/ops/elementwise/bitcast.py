"""BitCast (opset 26): reinterpret the bytes of every element as another type of one width.

numpy's `view`; the shape is unchanged. It is evaluated in numpy (folded when constant, else run
on the host by the run-time shape phase): the loop IR has no bit-reinterpreting scalar op.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.elementwise.arithmetic import arity
from onnxjit.ir.ops.elementwise.inference import check_dtype, tensor
from onnxjit.ir.ops.shape_utils import require_attr, tensor_input
from onnxjit.ir.types import COMPUTE_DTYPES, DType

_BITS = {DType.BOOL: 8, DType.INT8: 8, DType.UINT8: 8, DType.INT16: 16, DType.UINT16: 16,
         DType.FLOAT16: 16, DType.BFLOAT16: 16, DType.INT32: 32, DType.UINT32: 32,
         DType.FLOAT: 32, DType.INT64: 64, DType.UINT64: 64, DType.DOUBLE: 64}


def _bitcast_to(node: Node) -> DType:
    code = require_attr(node, "to")
    try:
        to = DType(int(code))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ModelError(f"attribute 'to' must be an ONNX element type, got {code!r}",
                         where=node) from None
    if to == DType.STRING:
        raise ModelError("BitCast to string is not defined", where=node)
    if to not in COMPUTE_DTYPES:
        raise UnsupportedError(f"op 'BitCast' to element type {to.short} is not supported",
                               where=node)
    return to


def _bitcast_infer(node: Node) -> list:
    arity(node, 1)
    dt = check_dtype(node, 0)
    to = _bitcast_to(node)
    if _BITS.get(dt) != _BITS[to]:
        raise ModelError(f"BitCast needs types of one width: {dt.short} has "
                         f"{_BITS.get(dt)} bits, {to.short} has {_BITS[to]}", where=node)
    return tensor(to, tensor_input(node, 0).shape)


def _bitcast_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    x = x if x.flags.c_contiguous else x.copy()  # (ascontiguousarray would make 0-d 1-d)
    return [x.view(_bitcast_to(node).numpy).reshape(x.shape)]


op("BitCast", (26,), infer=_bitcast_infer, evaluate=_bitcast_evaluate,
   doc="reinterpret each element's bytes as a type of the same width")
