"""Data-movement ops: Transpose, Concat, Split, Expand, Gather, GatherElements (Slice is in
tensor.slice, Tile in tensor.generate).

Inference works on symbolic dims and keeps `sym_value` (dims held by small int64 tensors)
flowing through Concat and Gather, so Shape-driven subgraphs resolve before binding; Expand
reads its target through `dims_of`, and an unknown target gives unknown dims, not an error.

Lowering: Transpose, Concat and Split are each one or more box copies
(`tensor.indexing.strided_copy`: `dst[off + idx.dst_strides] = src[off + idx.src_strides]`, with
contiguous dims coalesced): a transpose permutes the source strides, a concat/split
writes/reads windows at running offsets; a Concat input its producer already wrote in place
(`passes/concat_in_place`) is not copied. Expand is a broadcast copy through the elementwise
nest. Gather and GatherElements load each index, wrap negative values (+dim) and range-check it
with a `Check` (InputError at run time naming the node and the bound) before the indirect load.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir import symbolic
from onnxjit.ir.graph import Node
from onnxjit.ir.host_eval import host_prepare
from onnxjit.ir.loop_builder import Builder, elementwise
from onnxjit.ir.opdef import LowerContext, op, since_version
from onnxjit.ir.ops.elementwise.inference import check_dtype, dims_of, present, same_dtypes, tensor
from onnxjit.ir.ops.shape_utils import broadcast_shapes, normalize_axis, require_attr, tensor_input
from onnxjit.ir.ops.tensor.indexing import (
    PARALLEL_MIN,
    check_int_input,
    input_length,
    int_values,
    loop_or_zero,
    prod_dims,
    row_strides,
    static_lower,
    strided_copy,
    wrap_index,
)
from onnxjit.ir.types import Dim, DType, TensorType, ValueType

# --------------------------------------------------------------------------- Transpose


def _perm(node: Node, rank: int) -> list[int]:
    perm = node.attr("perm")
    if perm is None:
        return list(range(rank))[::-1]
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ModelError(f"perm {perm} is not a permutation of the {rank} axes", where=node)
    return perm


def _transpose_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    src = tensor_input(node, 0).shape
    if src is None:
        perm = node.attr("perm")
        return tensor(dt, None if perm is None else (None,) * len(perm))  # type: ignore
    return tensor(dt, tuple(src[p] for p in _perm(node, len(src))))  # type: ignore


def _transpose_lower(ctx: LowerContext, node: Node) -> None:
    x, out = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])  # type: ignore[arg-type]
    in_st = row_strides(x.shape)
    b = Builder()
    strided_copy(b, out.shape, out, 0, row_strides(out.shape), x, 0,
                 [in_st[p] for p in _perm(node, len(x.shape))])
    ctx.kernel("transpose", b.body)


# --------------------------------------------------------------------------- Concat


def _concat_axis(node: Node, rank: int) -> int:
    axis = node.attr("axis", 1) if since_version(node) < 4 else require_attr(node, "axis")
    return normalize_axis(int(axis), rank, node)  # type: ignore[arg-type]


def _concat_infer(node: Node) -> list[ValueType | None]:
    idx = present(node)
    if not idx:
        raise ModelError("Concat needs at least one input", where=node)
    dt = same_dtypes(node, idx)
    shapes = [tensor_input(node, i).shape for i in idx]
    known = [s for s in shapes if s is not None]
    node.outputs[0].sym_value = None
    if not known:
        return tensor(dt, None)  # type: ignore[return-value]
    rank = len(known[0])
    for s in known:
        if len(s) != rank:
            raise ModelError(f"inputs have ranks {[len(s) for s in known]}; they must match",
                             where=node)
    if rank == 0:
        raise ModelError("cannot concatenate scalars (rank 0)", where=node)
    axis = _concat_axis(node, rank)
    out: list[Dim] = []
    for k in range(rank):
        dims = [s[k] for s in known]
        if k == axis:
            out.append(None if len(known) < len(shapes) else prod_sum(dims))
            continue
        ints = {d for d in dims if isinstance(d, int)}
        if len(ints) > 1:
            raise ModelError(f"inputs differ on axis {k} ({sorted(ints)}) which is not the "
                             f"concat axis {axis}", where=node)
        chosen = ints.pop() if ints else next((d for d in dims if d is not None), None)
        if symbolic.active():  # symbolic sizes: the inputs' dims are taken to agree
            for d in dims:
                if d is not None and chosen is not None:
                    symbolic.assume_equal(d, chosen, "the non-concat dims of Concat inputs")
        out.append(chosen)
    if dt == DType.INT64 and rank == 1:
        vals = [dims_of(node.inputs[i]) for i in idx]
        if all(v is not None for v in vals):
            node.outputs[0].sym_value = tuple(d for v in vals for d in v)  # type: ignore
    return tensor(dt, tuple(out))  # type: ignore[return-value]


def prod_sum(dims: list[Dim]) -> Dim:
    """Sum of dims; None when any is unknown."""
    total: Dim = 0
    for d in dims:
        if d is None:
            return None
        total = total + d  # type: ignore[operator]
    return total


def _concat_lower(ctx: LowerContext, node: Node) -> None:
    out = ctx.buf(node.outputs[0])
    axis = _concat_axis(node, len(out.shape))
    out_st = row_strides(out.shape)
    b = Builder()
    offset = 0
    for v in node.inputs:
        if v is None:
            continue
        x = ctx.buf(v)
        start = offset * out_st[axis]
        if not (x.base is out and x.offset == start * out.dtype.itemsize):
            # (an input its producer wrote in place already: `passes/concat_in_place`)
            strided_copy(b, x.shape, out, start, out_st, x, 0, row_strides(x.shape))
        offset += x.shape[axis]
    if b.body:
        ctx.kernel("concat", b.body)


# --------------------------------------------------------------------------- Split


def _split_sizes(node: Node, dim: Dim) -> list[Dim]:
    n_out = len(node.outputs)
    sv = since_version(node)
    split: tuple | None = None
    given = False
    if sv < 13:
        split, given = node.attr("split"), node.attr("split") is not None
        if split is None and sv == 1 and node.input(1) is not None:
            split, given = int_values(node.input(1)), True
    elif node.input(1) is not None:
        check_int_input(node, 1, "split")
        split, given = int_values(node.input(1)), True
    num = node.attr("num_outputs") if sv >= 18 else None
    if given and num is not None:
        raise ModelError("give either the split input or num_outputs, not both", where=node)
    if given:
        if split is None:
            return [None] * n_out
        split = tuple(int(s) for s in split)
        if len(split) != n_out or any(s < 0 for s in split):
            raise ModelError(f"split {list(split)} does not give {n_out} non-negative sizes",
                             where=node)
        if isinstance(dim, int) and sum(split) != dim:
            raise ModelError(f"split {list(split)} does not sum to the axis size {dim}",
                             where=node)
        if dim is not None and not isinstance(dim, int) and symbolic.active():
            symbolic.assume_equal(dim, sum(split), "the split sizes sum to the axis")
        return list(split)
    if num is not None and int(num) != n_out:
        raise ModelError(f"num_outputs={num} but the node has {n_out} outputs", where=node)
    if not isinstance(dim, int):
        if dim is not None and symbolic.active():  # equal parts, taken to divide evenly
            symbolic.assume_equal(dim, (dim // n_out) * n_out, "Split into equal parts")
        return [None if dim is None else dim // n_out] * n_out  # type: ignore[operator]
    if dim % n_out == 0:
        return [dim // n_out] * n_out
    if num is None:
        raise ModelError(f"axis size {dim} does not split into {n_out} equal parts",
                         where=node)
    chunk = -(-dim // n_out)  # uneven (opset 18): equal chunks, the last one smaller
    last = dim - chunk * (n_out - 1)
    if last < 0:
        raise ModelError(f"axis size {dim} cannot be split into {n_out} chunks", where=node)
    return [chunk] * (n_out - 1) + [last]


def _split_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    src = tensor_input(node, 0).shape
    if src is None:
        return tensor(dt, None) * len(node.outputs)  # type: ignore[return-value]
    axis = normalize_axis(int(node.attr("axis", 0)), len(src), node)
    sizes = _split_sizes(node, src[axis])
    return [TensorType(dt, src[:axis] + (s,) + src[axis + 1:]) for s in sizes]


def _split_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axis = normalize_axis(int(node.attr("axis", 0)), x.ndim, node)
    sizes = _split_sizes(node, x.shape[axis])
    return np.split(x, np.cumsum(sizes[:-1]).astype(int), axis=axis)  # type: ignore


def _split_lower(ctx: LowerContext, node: Node) -> None:
    x = ctx.buf(node.inputs[0])  # type: ignore[arg-type]
    axis = normalize_axis(int(node.attr("axis", 0)), len(x.shape), node)
    in_st = row_strides(x.shape)
    b = Builder()
    offset = 0
    for v in node.outputs:
        out = ctx.buf(v)
        strided_copy(b, out.shape, out, 0, row_strides(out.shape), x, offset * in_st[axis],
                     in_st)
        offset += out.shape[axis]
    ctx.kernel("split", b.body)


# --------------------------------------------------------------------------- Expand


def _expand_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    check_int_input(node, 1, "shape")
    src = tensor_input(node, 0).shape
    target = dims_of(node.input(1))
    if target is None:
        n = input_length(node.input(1))
        target = None if n is None else (None,) * n
    if target is not None and any(isinstance(d, int) and d < 0 for d in target):
        raise ModelError(f"shape {list(target)} has a negative dim", where=node)
    out = broadcast_shapes([src, target], node)
    if out is not None and target is not None and None in target:
        # A target dim known only from the call's values leaves the output dim unknown even
        # where the source dim is not 1 (the only valid result): the run-time shape phase then
        # evaluates the node and checks the values broadcast, which a static guess would skip.
        lead = len(out) - len(target)
        out = tuple(None if k >= lead and target[k - lead] is None else d
                    for k, d in enumerate(out))
    return tensor(dt, out)  # type: ignore[return-value]


def _expand_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    target = tuple(int(d) for d in np.asarray(inputs[1]).reshape(-1))
    shape = broadcast_shapes([x.shape, target], node)
    return [np.array(np.broadcast_to(x, shape))]  # type: ignore[arg-type]


def _expand_lower(ctx: LowerContext, node: Node) -> None:
    b = Builder()
    elementwise(b, ctx.buf(node.outputs[0]), [ctx.buf(node.inputs[0])],  # type: ignore[arg-type]
                lambda b, args: args[0])
    ctx.kernel("expand", b.body)


# --------------------------------------------------------------------------- Gather


def _index_dtype(node: Node) -> None:
    t = tensor_input(node, 1, "indices")
    if t.dtype not in (DType.INT32, DType.INT64):
        raise ModelError(f"indices must be i32 or i64, got {t.dtype.short}", where=node)


def _check_const_indices(node: Node, idx: np.ndarray, dim: Dim) -> np.ndarray:
    """Constant indices wrapped to [0, dim); ModelError naming the bound when out of range."""
    idx = np.asarray(idx, dtype=np.int64)
    if not isinstance(dim, int):
        return idx
    bad = (idx < -dim) | (idx >= dim)
    if bad.any():
        raise ModelError(f"index {int(idx[bad].reshape(-1)[0])} is out of range "
                         f"[-{dim}, {dim})", where=node)
    return np.where(idx < 0, idx + dim, idx)


def _gather_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    _index_dtype(node)
    data, ind = node.inputs[0], node.inputs[1]
    src, ishape = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    node.outputs[0].sym_value = None
    if src is None or ishape is None:
        return tensor(dt, None)  # type: ignore[return-value]
    if len(src) == 0:
        raise ModelError("cannot gather from a scalar (rank 0)", where=node)
    axis = normalize_axis(int(node.attr("axis", 0)), len(src), node)
    out = src[:axis] + tuple(ishape) + src[axis + 1:]
    if ind.const is not None:  # type: ignore[union-attr]
        k = _check_const_indices(node, ind.const, src[axis])  # type: ignore[union-attr]
        vals = dims_of(data)
        if vals is not None and len(src) == 1 and len(vals) == src[0] and len(out) <= 1:
            node.outputs[0].sym_value = tuple(vals[i] for i in k.reshape(-1))
    return tensor(dt, out)  # type: ignore[return-value]


def _gather_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axis = normalize_axis(int(node.attr("axis", 0)), x.ndim, node)
    return [np.take(x, _check_const_indices(node, inputs[1], x.shape[axis]), axis=axis)]


@host_prepare("Gather")
def _gather_prepare(node: Node) -> Callable[[list], list]:
    """A Gather ending a graph on the host (a classifier's string labels by class index): numpy
    takes negative indices as ONNX does and raises IndexError out of range (the caller then
    runs the checked path, which names the node)."""
    axis = int(node.attr("axis", 0))
    return lambda ins: [np.asarray(ins[0]).take(ins[1], axis=axis)]


def _gather_lower(ctx: LowerContext, node: Node) -> None:
    data, ind, out = (ctx.buf(v) for v in (node.inputs[0], node.inputs[1], node.outputs[0]))
    if out.numel == 0:
        return
    axis = normalize_axis(int(node.attr("axis", 0)), len(data.shape), node)
    outer, dim = prod_dims(data.shape[:axis]), data.shape[axis]
    inner, n = prod_dims(data.shape[axis + 1:]), ind.numel
    big = not isinstance(out.numel, int) or out.numel >= PARALLEL_MIN
    msg = (f"{node.describe()}: Gather index out of range: indices must be in "
           f"[-{dim}, {dim}) (axis {axis} of size {dim})")
    b = Builder()
    many = outer != 1  # (a symbolic outer size may be 1: the loop is then short)
    with loop_or_zero(b, outer, parallel=big and many, hint="o") as o:  # type: ignore
        with loop_or_zero(b, n, parallel=big and not many, hint="j") as j:
            k = wrap_index(b, b.load(ind, j), dim, msg)
            src = b.imul(b.iadd(b.imul(o, dim), k), inner)  # type: ignore[arg-type]
            dst = b.imul(b.iadd(b.imul(o, n), j), inner)  # type: ignore[arg-type]
            with loop_or_zero(b, inner) as i:  # type: ignore[arg-type]
                b.store(out, b.iadd(dst, i), b.load(data, b.iadd(src, i)))
    ctx.kernel("gather", b.body)


# --------------------------------------------------------------------------- GatherElements


def _gather_elements_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    _index_dtype(node)
    src, ishape = tensor_input(node, 0).shape, tensor_input(node, 1).shape
    if src is not None and ishape is not None:
        if len(src) != len(ishape) or len(src) == 0:
            raise ModelError(f"data (rank {len(src)}) and indices (rank {len(ishape)}) must "
                             "have the same rank >= 1", where=node)
        axis = normalize_axis(int(node.attr("axis", 0)), len(src), node)
        for k, (d, e) in enumerate(zip(src, ishape)):
            if k != axis and isinstance(d, int) and isinstance(e, int) and e > d:
                raise ModelError(f"indices dim {k} ({e}) exceeds the data dim ({d})",
                                 where=node)
    return tensor(dt, ishape)  # type: ignore[return-value]


def _gather_elements_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axis = normalize_axis(int(node.attr("axis", 0)), x.ndim, node)
    k = _check_const_indices(node, inputs[1], x.shape[axis])
    # The output is shaped like the indices, which may be smaller than the data on the other
    # dims (take_along_axis would broadcast them instead): out[i] = x[i with i[axis] = k[i]].
    if k.ndim != x.ndim:
        raise ModelError(f"data (rank {x.ndim}) and indices (rank {k.ndim}) must have the "
                         "same rank", where=node)
    x = x[tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(k.shape))]
    return [np.take_along_axis(x, k, axis=axis)]


def _gather_elements_lower(ctx: LowerContext, node: Node) -> None:
    data, ind, out = (ctx.buf(v) for v in (node.inputs[0], node.inputs[1], node.outputs[0]))
    if out.numel == 0:
        return
    axis = normalize_axis(int(node.attr("axis", 0)), len(data.shape), node)
    dim = data.shape[axis]
    msg = (f"{node.describe()}: GatherElements index out of range: indices must be in "
           f"[-{dim}, {dim}) (axis {axis} of size {dim})")
    st = row_strides(out.shape)
    b = Builder()
    with b.nest(out.shape, parallel_outer=out.numel >= PARALLEL_MIN) as idx:
        pos = b.linear(idx, st)
        k = wrap_index(b, b.load(ind, pos), dim, msg)
        src = b.linear(idx[:axis] + [k] + idx[axis + 1:], row_strides(data.shape))
        b.store(out, pos, b.load(data, src))
    ctx.kernel("gather_elements", b.body)


def _transpose_eval(node: Node, inputs: list) -> list[np.ndarray]:
    return [np.transpose(inputs[0], _perm(node, np.ndim(inputs[0])))]


def _concat_eval(node: Node, inputs: list) -> list[np.ndarray]:
    arrays = [x for x in inputs if x is not None]
    return [np.concatenate(arrays, axis=_concat_axis(node, np.ndim(arrays[0])))]


op("Transpose", (1, 13, 21, 23, 24, 25), infer=_transpose_infer, evaluate=_transpose_eval,
   lower=static_lower(_transpose_lower), doc="permute axes (default: reverse)",
   symbolic=True)
op("Concat", (1, 4, 11, 13), infer=_concat_infer, evaluate=_concat_eval,
   lower=static_lower(_concat_lower), doc="join along an axis",
   symbolic=True)
op("Split", (1, 2, 11, 13, 18), infer=_split_infer, evaluate=_split_eval,
   lower=static_lower(_split_lower),
   doc="cut along an axis (sizes, equal parts, or num_outputs chunks)",
   symbolic=True)
op("Gather", (1, 11, 13), infer=_gather_infer, evaluate=_gather_eval,
   lower=static_lower(_gather_lower), doc="take slices along an axis at indices (negative wrap)",
   symbolic=True)
op("GatherElements", (11, 13), infer=_gather_elements_infer, evaluate=_gather_elements_eval,
   lower=static_lower(_gather_elements_lower),
   doc="take elements along an axis at per-element indices")
op("Expand", (8, 13), infer=_expand_infer, evaluate=_expand_eval, lower=static_lower(_expand_lower),
   doc="bidirectional broadcast to a shape",
   size_inputs=(1,), symbolic=True)
