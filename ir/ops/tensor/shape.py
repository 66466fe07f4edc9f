"""Shape ops: Identity, Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze.

Inference works on symbolic dims. Shape (and Size) publish the input's dims as the output's
`sym_value`; Reshape/Squeeze/Unsqueeze/Identity forward it for rank <= 1 tensors, and Reshape
reads its target shape from `dims_of` (a constant or a `sym_value`), so a chain such as
Shape -> Gather -> Unsqueeze -> Concat -> Reshape resolves to `[batch, 784]` before any input
is bound; a -1 divides the input's product by the other dims after cancelling equal symbolic
factors. A target that is data-dependent and unknown gives unknown (None) dims, never an
error: per signature the dims become concrete once fold-constants runs.

Lowering: Identity, Reshape, Flatten, Squeeze and Unsqueeze alias the input's storage
(`ctx.view`, no copy); Shape and Size fold per signature, and their lowering stores the (then
static) dims for completeness. (Dropout, also a view in inference: `random.dropout`.)
"""
from __future__ import annotations

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir import symbolic
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import i64, size_operand
from onnxjit.ir.opdef import LowerContext, op, since_version
from onnxjit.ir.ops.elementwise.inference import check_dtype, dims_of, tensor
from onnxjit.ir.ops.shape_utils import require_attr, tensor_input
from onnxjit.ir.ops.tensor.indexing import (
    axes_list,
    check_int_input,
    div_dims,
    input_length,
    int_values,
    prod_dims,
    static_lower,
)
from onnxjit.ir.types import Dim, DType, TensorType, ValueType


def forward_sym(node: Node, shape: tuple | None) -> None:
    """Dims held by a rank <= 1 input stay known through reshape-like ops."""
    x = node.inputs[0]
    out = node.outputs[0]
    out.sym_value = None
    if x is not None and x.sym_value is not None and shape is not None and len(shape) <= 1:
        out.sym_value = x.sym_value


def _lower_view(ctx: LowerContext, node: Node) -> None:
    ctx.view(node.outputs[0], ctx.buf(node.inputs[0]))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Identity


def _identity_infer(node: Node) -> list[ValueType | None]:
    x = node.input(0)
    if x is None:
        raise ModelError("required input 0 is missing", where=node)
    if isinstance(x.type, TensorType):
        check_dtype(node, 0)
        forward_sym(node, x.type.shape)
    return [x.type]


# --------------------------------------------------------------------------- Shape, Size


def _shape_range(node: Node, rank: int) -> slice:
    if since_version(node) < 15:
        return slice(0, rank)
    # Python slicing clamps negative/out-of-range start/end exactly as ONNX specifies.
    return slice(int(node.attr("start", 0)), node.attr("end"))


def _shape_infer(node: Node) -> list[ValueType | None]:
    t = tensor_input(node, 0)
    out = node.outputs[0]
    out.sym_value = None
    if t.shape is None:
        return tensor(DType.INT64, (None,))  # type: ignore[return-value]
    dims = tuple(t.shape[_shape_range(node, len(t.shape))])
    out.sym_value = dims
    return tensor(DType.INT64, (len(dims),))  # type: ignore[return-value]


def _shape_eval(node: Node, inputs: list) -> list[np.ndarray]:
    shape = np.shape(inputs[0])
    return [np.array(shape[_shape_range(node, len(shape))], dtype=np.int64)]


def _store_ints(ctx: LowerContext, node: Node, values: list) -> None:
    out = ctx.buf(node.outputs[0])
    b = Builder()
    for k, v in enumerate(values):
        b.store(out, i64(k), size_operand(v))
    ctx.kernel(node.op.lower(), b.body)


def _shape_lower(ctx: LowerContext, node: Node) -> None:
    shape = tuple(node.inputs[0].shape)  # type: ignore[union-attr, arg-type]
    _store_ints(ctx, node, list(shape[_shape_range(node, len(shape))]))


def _size_infer(node: Node) -> list[ValueType | None]:
    t = tensor_input(node, 0)
    n = None if t.shape is None else prod_dims(t.shape)
    node.outputs[0].sym_value = None if n is None else (n,)
    return tensor(DType.INT64, ())  # type: ignore[return-value]


def _size_eval(node: Node, inputs: list) -> list[np.ndarray]:
    return [np.array(np.size(inputs[0]), dtype=np.int64)]


def _size_lower(ctx: LowerContext, node: Node) -> None:
    _store_ints(ctx, node, [prod_dims(node.inputs[0].shape)])  # type: ignore[union-attr, list-item]


# --------------------------------------------------------------------------- Reshape, Flatten


def reshape_dims(node: Node, src: tuple | None, target: tuple, allowzero: bool
                 ) -> tuple[Dim, ...] | None:
    """The output shape of Reshape(src -> target) with ONNX's 0 and -1 rules."""
    if list(target).count(-1) > 1:
        raise ModelError(f"shape {list(target)} has more than one -1", where=node)
    if allowzero and 0 in target and -1 in target:
        raise ModelError(f"shape {list(target)} has both 0 and -1 with allowzero=1", where=node)
    out: list = []
    for k, t in enumerate(target):
        if isinstance(t, int) and t == 0 and not allowzero:
            if src is None:
                out.append(None)
            elif k >= len(src):
                raise ModelError(f"shape {list(target)}: 0 at position {k} copies a dim the "
                                 f"input (rank {len(src)}) does not have", where=node)
            else:
                out.append(src[k])
        elif isinstance(t, int) and t < -1:
            raise ModelError(f"shape {list(target)} has invalid dim {t}", where=node)
        else:
            out.append(t)
    if -1 in out:
        k = out.index(-1)
        rest = out[:k] + out[k + 1:]
        out[k] = None if src is None else div_dims(src, rest)
        known = prod_dims(rest) if src is not None else None
        total = prod_dims(src) if src is not None else None
        if isinstance(known, int) and isinstance(total, int):
            if known == 0 or total % known:
                raise ModelError(f"cannot reshape {total} elements into {list(target)}",
                                 where=node)
    elif src is not None:
        a, b = prod_dims(src), prod_dims(out)
        if isinstance(a, int) and isinstance(b, int) and a != b:
            raise ModelError(f"cannot reshape {list(src)} ({a} elements) into {list(out)} "
                             f"({b} elements)", where=node)
    if symbolic.active() and src is not None and None not in out:
        a, b = prod_dims(src), prod_dims(out)
        if a is not None and b is not None and not (isinstance(a, int) and isinstance(b, int)):
            # a -1 divides by the other dims: the code assumes the division was exact
            symbolic.assume_equal(a, b, "Reshape keeps the element count")
    return tuple(out)


def _reshape_target(node: Node) -> tuple | None:
    if since_version(node) < 5:
        return tuple(int(d) for d in require_attr(node, "shape"))  # type: ignore[union-attr]
    check_int_input(node, 1, "shape")
    return dims_of(node.input(1))


def _allowzero(node: Node) -> bool:
    return since_version(node) >= 14 and bool(node.attr("allowzero", 0))


def _reshape_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    target = _reshape_target(node)
    src = tensor_input(node, 0).shape
    if target is None:
        n = input_length(node.input(1))
        shape = None if n is None else (None,) * n
    else:
        shape = reshape_dims(node, src, target, _allowzero(node))
    forward_sym(node, shape)
    return tensor(dt, shape)  # type: ignore[return-value]


def _reshape_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    target = _reshape_target(node)
    if since_version(node) >= 5:
        target = tuple(int(d) for d in np.asarray(inputs[1]).reshape(-1))
    shape = reshape_dims(node, x.shape, target, _allowzero(node))  # type: ignore[arg-type]
    return [x.reshape(shape)]


def _flatten_axis(node: Node, rank: int) -> int:
    axis = int(node.attr("axis", 1))
    if not -rank <= axis <= rank or (axis < 0 and since_version(node) < 11):
        raise ModelError(f"axis {axis} is out of range for rank {rank}", where=node)
    return axis + rank if axis < 0 else axis


def _flatten_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    src = tensor_input(node, 0).shape
    if src is None:
        return tensor(dt, (None, None))  # type: ignore[return-value]
    a = _flatten_axis(node, len(src))
    return tensor(dt, (prod_dims(src[:a]), prod_dims(src[a:])))  # type: ignore[return-value]


def _flatten_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    a = _flatten_axis(node, x.ndim)
    return [x.reshape(int(np.prod(x.shape[:a])), int(np.prod(x.shape[a:])))]


# --------------------------------------------------------------------------- Squeeze, Unsqueeze


def _axes_operand(node: Node) -> tuple[tuple[int, ...] | None, bool, int | None]:
    """(axes, known, count): axes from the attribute (< opset 13) or input 1 (>= 13)."""
    if since_version(node) < 13:
        axes = node.attr("axes")
        return (None if axes is None else tuple(int(a) for a in axes)), True, None
    v = node.input(1)
    if v is None:
        return None, True, None
    check_int_input(node, 1, "axes")
    vals = int_values(v)
    return vals, vals is not None, input_length(v)


def squeeze_shape(node: Node, src: tuple | None, axes: tuple[int, ...] | None
                  ) -> tuple[Dim, ...] | None:
    if src is None:
        return None
    if axes is None:
        if not all(isinstance(d, int) for d in src):
            return None  # a symbolic dim might be 1: the rank is unknown until binding
        return tuple(d for d in src if d != 1)
    drop = axes_list(axes, len(src), node)
    for a in drop:
        if isinstance(src[a], int) and src[a] != 1:
            raise ModelError(f"cannot squeeze axis {a} of size {src[a]} (shape "
                             f"{list(src)})", where=node)
        if src[a] is not None and symbolic.active():
            symbolic.assume_equal(src[a], 1, "a squeezed dim")
    return tuple(d for k, d in enumerate(src) if k not in drop)


def _squeeze_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    src = tensor_input(node, 0).shape
    axes, known, count = _axes_operand(node)
    if known:
        shape = squeeze_shape(node, src, axes)
    else:
        shape = None if src is None or count is None else (None,) * (len(src) - count)
    forward_sym(node, shape)
    return tensor(dt, shape)  # type: ignore[return-value]


def _squeeze_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axes, _, _ = _axes_operand(node)
    if since_version(node) >= 13 and len(inputs) > 1 and inputs[1] is not None:
        axes = tuple(int(a) for a in np.asarray(inputs[1]).reshape(-1))
    return [x.reshape(squeeze_shape(node, x.shape, axes))]  # type: ignore[arg-type]


def unsqueeze_shape(node: Node, src: tuple | None, axes: tuple[int, ...]
                    ) -> tuple[Dim, ...] | None:
    if src is None:
        return None
    rank = len(src) + len(axes)
    ins = set(axes_list(axes, rank, node))
    rest = iter(src)
    return tuple(1 if k in ins else next(rest) for k in range(rank))


def _unsqueeze_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    src = tensor_input(node, 0).shape
    axes, known, count = _axes_operand(node)
    if known and axes is None:
        raise ModelError("Unsqueeze needs axes", where=node)
    if known:
        shape = unsqueeze_shape(node, src, axes)  # type: ignore[arg-type]
    else:
        shape = None if src is None or count is None else (None,) * (len(src) + count)
    forward_sym(node, shape)
    return tensor(dt, shape)  # type: ignore[return-value]


def _unsqueeze_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axes, _, _ = _axes_operand(node)
    if since_version(node) >= 13:
        axes = tuple(int(a) for a in np.asarray(inputs[1]).reshape(-1))
    return [x.reshape(unsqueeze_shape(node, x.shape, axes))]  # type: ignore[arg-type]


def _view_eval(node: Node, inputs: list) -> list[np.ndarray]:
    return [inputs[0]]


op("Identity", (1, 13, 14, 16, 19, 21, 23, 24, 25), infer=_identity_infer, evaluate=_view_eval,
   lower=static_lower(_lower_view), doc="output = input (storage shared)", symbolic=True)
op("Shape", (1, 13, 15, 19, 21, 23, 24, 25), infer=_shape_infer, evaluate=_shape_eval,
   lower=static_lower(_shape_lower), doc="dims of the input (start/end from 15) as i64",
   symbolic=True)
op("Size", (1, 13, 19, 21, 23, 24, 25), infer=_size_infer, evaluate=_size_eval,
   lower=static_lower(_size_lower), doc="number of elements as an i64 scalar", symbolic=True)
op("Reshape", (1, 5, 13, 14, 19, 21, 23, 24, 25), infer=_reshape_infer, evaluate=_reshape_eval,
   lower=static_lower(_lower_view),
   doc="new shape (0 copies a dim unless allowzero, -1 is inferred)",
   size_inputs=(1,), symbolic=True)
op("Flatten", (1, 9, 11, 13, 21, 23, 24, 25), infer=_flatten_infer, evaluate=_flatten_eval,
   lower=static_lower(_lower_view), doc="2-D view: dims before axis x dims from axis",
   symbolic=True)
op("Squeeze", (1, 11, 13, 21, 23, 24, 25), infer=_squeeze_infer, evaluate=_squeeze_eval,
   lower=static_lower(_lower_view),
   doc="drop size-1 dims (axes attribute before 13, input from 13)",
   size_inputs=(1,), symbolic=True)
op("Unsqueeze", (1, 11, 13, 21, 23, 24, 25), infer=_unsqueeze_infer, evaluate=_unsqueeze_eval,
   lower=static_lower(_lower_view),
   doc="insert size-1 dims (axes attribute before 13, input from 13)",
   size_inputs=(1,), symbolic=True)
