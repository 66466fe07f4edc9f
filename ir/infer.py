"""One node's output types from its op's `infer` rule, merged with the types it declares.

`infer_node(node)` looks up the node's OpDef and calls `infer(node)`, which reads input types,
constant inputs and `sym_value`s and returns the output types. Each result is merged with the
output's declared type (value_info, `merge`): an inferred concrete dim wins, a declared dim
fills an unknown inferred one, and the declared dtype must agree. An output too big for any
address space is refused here, naming the node (a later overflow of index arithmetic or of an
allocation would be a crash or a wrong result). A node naming more outputs than its op has is
refused too. The infer-shapes pass runs this over a graph; the host interpreter over proxies.
While a program is compiled for symbolic sizes (`ir.symbolic`), declared dims fill nothing:
nothing would check them when the program is called.
"""

from __future__ import annotations

from onnxjit.errors import ModelError, SizeLimitError, format_size
from onnxjit.ir import symbolic
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.opdef import resolve
from onnxjit.ir.types import TensorType, ValueType


def merge(inferred: ValueType | None, declared: ValueType | None, node: Node, index: int
          ) -> ValueType | None:
    if symbolic.active():  # declared sizes are not checked at run time: trust only inference
        if (isinstance(inferred, TensorType) and isinstance(declared, TensorType)
                and inferred.dtype != declared.dtype):
            raise ModelError(f"output {index} is declared {declared.dtype.short} but the op "
                             f"produces {inferred.dtype.short}", where=node)
        return inferred
    if inferred is None:
        return declared
    if not isinstance(inferred, TensorType) or not isinstance(declared, TensorType):
        return inferred
    if inferred.dtype != declared.dtype:
        raise ModelError(f"output {index} is declared {declared.dtype.short} but the op "
                         f"produces {inferred.dtype.short}", where=node)
    if inferred.shape is None:
        return declared
    if declared.shape is None or len(declared.shape) != len(inferred.shape):
        return inferred
    dims = tuple(d if d is not None else e for d, e in zip(inferred.shape, declared.shape))
    return TensorType(inferred.dtype, dims)


def infer_node(node: Node) -> None:
    opdef = resolve(node)
    if opdef.infer is None:
        return
    types = opdef.infer(node)
    if len(types) < len(node.outputs):
        extra = [v.name for v in node.outputs[len(types):] if v.name]
        if extra and types:
            # Without this the extra output stays untyped and surfaces much later as a
            # confusing "data-dependent shape" error far from its cause.
            raise ModelError(f"{node.op} has {len(types)} output(s), but the node names "
                             f"{len(node.outputs)} (extra: "
                             f"{', '.join(repr(n) for n in extra)})", where=node)
        types = list(types) + [None] * (len(node.outputs) - len(types))
    for k, (out, t) in enumerate(zip(node.outputs, types)):
        out.type = merge(t, out.type, node, k)
        _check_size(out, node)


#: No x86-64/AArch64 process can address more (47-bit user space).
MAX_BYTES = 1 << 47


def _check_size(v: Value, node: Node) -> None:
    """A shape no machine can hold (e.g. Tile by 2**62) is a model error here, at its cause,
    rather than an overflow in index arithmetic or a failed allocation at run time."""
    t = v.type
    if not isinstance(t, TensorType) or t.shape is None or \
            not all(isinstance(d, int) for d in t.shape):
        return
    n = 1
    for d in t.shape:
        n *= d
    try:
        size = n * t.dtype.numpy.itemsize
    except Exception:  # dtypes without a numpy equivalent: count elements only
        size = n
    if size > MAX_BYTES:
        raise SizeLimitError(f"output '{v.name}' would have shape {list(t.shape)}: {n} "
                             f"elements, {format_size(size)}, more than a process can address",
                             where=node)
