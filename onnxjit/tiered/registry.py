"""The tier-0 kernel table: `kernel(*ops)` registers a builder, `Decline` hands a call back.

A builder takes a node and returns `fn(*inputs) -> [outputs]` (or None: the node's host
evaluation serves every call); `fn` raises `Decline` for a case it does not cover, and that
call of the node takes the host evaluation instead (`interpreter.Plan`).
"""

from __future__ import annotations

from collections.abc import Callable

from onnxjit.ir.graph import Node
from onnxjit.ir.types import DType

__all__ = ["Decline", "KERNELS", "kernel", "TYPES"]

#: value types tier 0 computes as the native code does (narrow floats are rounded differently)
TYPES = frozenset({DType.FLOAT, DType.DOUBLE, DType.BOOL, DType.INT8, DType.UINT8, DType.INT16,
                   DType.UINT16, DType.INT32, DType.UINT32, DType.INT64, DType.UINT64})


class Decline(Exception):
    """A kernel does not cover this call's case: the node's host evaluation runs instead."""


#: (domain, op) -> build(node) -> fn(*inputs) -> list of outputs, or None
KERNELS: dict[tuple[str, str], Callable[[Node], Callable[..., list] | None]] = {}


def kernel(*ops: str, domain: str = "") -> Callable:
    def deco(build: Callable) -> Callable:
        for name in ops:
            KERNELS[(domain, name)] = build
        return build
    return deco
