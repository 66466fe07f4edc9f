"""Ops that create, tile or mask tensors: Constant, ConstantOfShape, EyeLike, Range, Tile,
Trilu.

Constant and ConstantOfShape normally fold away (fold-constants evaluates nodes whose inputs are
all known, which includes nodes with no inputs); Constant accepts every attribute form (`value`,
`sparse_value` densified by the importer, `value_float(s)`, `value_int(s)`, `value_string(s)`).
ConstantOfShape reads its target shape through `dims_of`, so a Shape-driven target stays
symbolic; an unknown target gives unknown dims. Their lowerings (a view of a constant buffer, a
fill loop) only run when a shape was data-dependent until binding.

EyeLike and Trilu compare the row and column index of each element (`j - i` against `k`).
Range computes `start + i * delta` per element; its length is known once its inputs are, and
when it came from declared types instead, a `Check` compares it with the runtime inputs.
Tile is one box copy (`tensor.indexing.strided_copy`) that walks each output dim as
(repeat, index) with source stride 0 on the repeat.
"""
from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir import symbolic
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Operand, i64, size_operand
from onnxjit.ir.opdef import LowerContext, op, since_version
from onnxjit.ir.ops.elementwise.inference import check_dtype, dims_of, same_dtypes, tensor
from onnxjit.ir.ops.shape_utils import normalize_axis, tensor_input
from onnxjit.ir.ops.tensor.indexing import (
    PARALLEL_MIN,
    check_int_input,
    fill,
    input_length,
    int_values,
    prod_dims,
    row_strides,
    size_values,
    static_lower,
    strided_copy,
)
from onnxjit.ir.types import (
    COMPUTE_DTYPES,
    DType,
    TensorType,
    ValueType,
    supported_dtypes_text,
    sym_max,
)


def _out_dtype(node: Node, dtype: object, what: str = "output") -> DType:
    """The DType of a numpy dtype or ONNX type number, checked to be computable."""
    try:
        dt = DType(int(dtype)) if isinstance(dtype, (int, np.integer)) \
            else DType.from_numpy(dtype)
    except (KeyError, ValueError):
        raise UnsupportedError(f"op '{node.op}': {what} element type {dtype} is not "
                               "supported", where=node) from None
    if dt == DType.STRING:  # none of these ops' ONNX type constraints has tensor(string)
        raise ModelError(f"op '{node.op}' does not allow {what} element type str", where=node)
    if dt not in COMPUTE_DTYPES:
        raise UnsupportedError(f"op '{node.op}' with {what} element type {dt.short} is not "
                               f"supported (supported: {supported_dtypes_text()})", where=node)
    return dt


# --------------------------------------------------------------------------- Constant

_CONST_ATTRS = ("value", "sparse_value", "value_float", "value_floats", "value_int",
                "value_ints", "value_string", "value_strings")


def _text(s: object) -> str:
    # String tensors hold `str` (as the importer decodes them); undecodable bytes survive as
    # lone surrogates.
    return s if isinstance(s, str) else bytes(s).decode(  # type: ignore[arg-type]
        "utf-8", "surrogateescape")


def constant_array(node: Node) -> np.ndarray:
    """The value of a Constant node, from whichever attribute form it uses."""
    given = [a for a in _CONST_ATTRS if a in node.attrs]
    if len(given) != 1:
        raise ModelError(f"Constant needs exactly one of {', '.join(_CONST_ATTRS)}; got "
                         f"{given or 'none'}", where=node)
    name = given[0]
    v = node.attrs[name]
    if name in ("value", "sparse_value"):
        if not isinstance(v, np.ndarray):
            raise ModelError(f"attribute '{name}' must be a tensor", where=node)
        return v
    if name == "value_float":
        return np.array(v, dtype=np.float32)
    if name == "value_floats":
        return np.array(v, dtype=np.float32).reshape(-1)
    if name == "value_int":
        return np.array(v, dtype=np.int64)
    if name == "value_ints":
        return np.array(v, dtype=np.int64).reshape(-1)
    out = np.empty(() if name == "value_string" else (len(v),), dtype=object)
    if name == "value_string":
        out[()] = _text(v)
    else:
        out[:] = [_text(s) for s in v]
    return out


def _constant_infer(node: Node) -> list[ValueType | None]:
    arr = constant_array(node)
    try:
        dt = DType.from_numpy(arr.dtype)
    except KeyError:
        raise UnsupportedError(f"Constant of numpy dtype {arr.dtype} is not supported",
                               where=node) from None
    return tensor(dt, tuple(arr.shape))  # type: ignore[return-value]


def _constant_lower(ctx: LowerContext, node: Node) -> None:
    out = node.outputs[0]
    ctx.view(out, ctx.buf(Value(out.type, out.name or "const", None, constant_array(node))))


# --------------------------------------------------------------------------- ConstantOfShape


def _fill_value(node: Node) -> np.ndarray:
    v = node.attr("value")
    if v is None:
        return np.zeros(1, dtype=np.float32)
    arr = np.asarray(v)
    if arr.size != 1:
        raise ModelError(f"attribute 'value' must hold one element, got shape {list(arr.shape)}",
                         where=node)
    return arr.reshape(1)


def _cos_infer(node: Node) -> list[ValueType | None]:
    dt = _out_dtype(node, _fill_value(node).dtype)
    check_int_input(node, 0, "shape")
    target = dims_of(node.input(0))
    if target is None:
        n = input_length(node.input(0))
        return tensor(dt, None if n is None else (None,) * n)  # type: ignore[return-value]
    if any(isinstance(d, int) and d < 0 for d in target):
        raise ModelError(f"shape {list(target)} has a negative dim", where=node)
    return tensor(dt, target)  # type: ignore[return-value]


def _cos_eval(node: Node, inputs: list) -> list[np.ndarray]:
    val = _fill_value(node)
    shape = tuple(int(d) for d in np.asarray(inputs[0]).reshape(-1))
    return [np.full(shape, val[0], dtype=val.dtype)]


def _cos_lower(ctx: LowerContext, node: Node) -> None:
    out = ctx.buf(node.outputs[0])
    b = Builder()
    fill(b, out, const(_fill_value(node)[0].item(), out.dtype))
    ctx.kernel("constant_of_shape", b.body)


# --------------------------------------------------------------------------- EyeLike


def _eyelike_dtype(node: Node) -> DType:
    given = node.attr("dtype")
    return check_dtype(node, 0) if given is None else _out_dtype(node, int(given))


def _eyelike_infer(node: Node) -> list[ValueType | None]:
    check_dtype(node, 0)
    t = node.inputs[0].type  # type: ignore[union-attr]
    if t.shape is not None and len(t.shape) != 2:  # type: ignore[union-attr]
        raise ModelError(f"input must be 2-D, got {t}", where=node)
    return tensor(_eyelike_dtype(node), t.shape)  # type: ignore[union-attr, return-value]


def _eyelike_eval(node: Node, inputs: list) -> list[np.ndarray]:
    n, m = np.shape(inputs[0])
    return [np.eye(n, m, int(node.attr("k", 0)), dtype=_eyelike_dtype(node).numpy)]


def _eyelike_lower(ctx: LowerContext, node: Node) -> None:
    out = ctx.buf(node.outputs[0])
    b = Builder()
    if out.numel:
        with b.nest(out.shape, parallel_outer=out.numel >= PARALLEL_MIN) as (i, j):
            on = b.op("eq", b.op("sub", j, i), i64(int(node.attr("k", 0))))
            b.store(out, b.linear([i, j], [out.shape[1], 1]), b.cast(on, out.dtype))
    ctx.kernel("eyelike", b.body)


# --------------------------------------------------------------------------- Range


def _range_len(node: Node, start: object, limit: object, delta: object, dt: DType) -> int:
    if float(delta) == 0:  # type: ignore[arg-type]
        raise ModelError("Range delta cannot be 0", where=node)
    if dt.is_int:
        return max(0, -((int(start) - int(limit)) // int(delta)))  # type: ignore[call-overload]
    # np.arange's own length rule (the scalars' arithmetic, then ceil), without allocating
    # the range: a call may ask for 1e15 elements, which the size check then refuses.
    with np.errstate(all="ignore"):
        span = float((limit - start) / delta)  # type: ignore[operator]
    if not math.isfinite(span):
        raise ModelError(f"Range from {start} to {limit} by {delta} has no finite length",
                         where=node)
    return max(0, math.ceil(span))


def _symbolic_len(node: Node, dt: DType, delta: object) -> object:
    """While compiling for symbolic sizes: the length of an int64 Range whose start and limit
    are sizes (`sym_value`s, such as a KV cache's length) and whose delta is a positive
    constant; None (unknown) otherwise."""
    if not symbolic.active() or dt != DType.INT64 or delta is None:
        return None
    d = int(np.asarray(delta).reshape(-1)[0])
    ends = [size_values(node.inputs[i]) for i in (0, 1)]
    if d <= 0 or any(e is None or len(e) != 1 for e in ends):
        return None
    start, limit = ends[0][0], ends[1][0]  # type: ignore[index]
    span = sym_max(limit - start, 0) if not isinstance(limit - start, int) \
        else max(limit - start, 0)
    return span if d == 1 else (span + d - 1) // d


def _range_infer(node: Node) -> list[ValueType | None]:
    dt = same_dtypes(node, (0, 1, 2), "num")
    for i in range(3):
        t = node.inputs[i].type  # type: ignore[union-attr]
        if t.shape is not None and prod_dims(t.shape) not in (1, None):  # type: ignore
            raise ModelError(f"input {i} must be a scalar, got {t}", where=node)
    vals = [node.inputs[i].const for i in range(3)]  # type: ignore[union-attr]
    if any(v is None for v in vals):
        return tensor(dt, (_symbolic_len(node, dt, vals[2]),))  # type: ignore[return-value]
    n = _range_len(node, *(np.asarray(v).reshape(-1)[0] for v in vals), dt)
    return tensor(dt, (n,))  # type: ignore[return-value]


def _range_eval(node: Node, inputs: list) -> list[np.ndarray]:
    start, limit, delta = (np.asarray(v).reshape(-1)[0] for v in inputs)
    dt = DType.from_numpy(np.asarray(inputs[0]).dtype)
    n = _range_len(node, start, limit, delta, dt)
    return [(start + np.arange(n).astype(dt.numpy) * delta).astype(dt.numpy)]


def _range_lower(ctx: LowerContext, node: Node) -> None:
    out = ctx.buf(node.outputs[0])
    start, delta = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[2])  # type: ignore[arg-type]
    b = Builder()
    s, d = b.load(start, i64(0)), b.load(delta, i64(0))
    if any(v is not None and v.const is None for v in node.inputs):
        # The length came from declared types: check the runtime values agree with it.
        lim = b.load(ctx.buf(node.inputs[1]), i64(0))  # type: ignore[arg-type]
        zero = const(0, out.dtype)
        b.check(b.op("ne", d, zero), f"{node.describe()}: Range delta is 0")
        q = b.op("div", b.op("sub", lim, s), d)
        if out.dtype.is_float:
            n = b.cast(b.op("ceil", q), DType.INT64)
        else:  # ceil of an integer quotient: the truncated one, plus one when the division
            # is inexact and the exact quotient is positive (remainder has the dividend's sign)
            r = b.op("rem", b.op("sub", lim, s), d)
            up = b.op("and", b.op("ne", r, zero),
                      b.op("eq", b.op("gt", r, zero), b.op("gt", d, zero)))
            n = b.op("add", b.cast(q, DType.INT64), b.cast(up, DType.INT64))
        b.check(b.op("eq", b.op("max", n, i64(0)), size_operand(out.numel)),
                f"{node.describe()}: Range inputs give a length other than the output's "
                f"{out.numel}")
    if out.numel:
        big = not isinstance(out.numel, int) or out.numel >= PARALLEL_MIN
        with b.loop(0, out.numel, parallel=big) as i:
            b.store(out, i, b.op("add", s, b.op("mul", b.cast(i, out.dtype), d)))
    ctx.kernel("range", b.body)


# --------------------------------------------------------------------------- Tile


def _repeats(node: Node, rank: int | None) -> tuple[int, ...] | None:
    if since_version(node) < 6:  # Tile-1: a scalar count of tiles along one axis
        tiles, axis = int_values(node.input(1)), int_values(node.input(2))
        if tiles is None or axis is None or rank is None:
            return None
        reps = [1] * rank
        reps[normalize_axis(axis[0], rank, node)] = tiles[0]
        return tuple(reps)
    check_int_input(node, 1, "repeats")
    reps = int_values(node.input(1))
    if reps is not None and rank is not None and len(reps) != rank:
        raise ModelError(f"repeats {list(reps)} must have one entry per input dim ({rank})",
                         where=node)
    if reps is not None and any(r < 0 for r in reps):
        raise ModelError(f"repeats {list(reps)} must be non-negative", where=node)
    return reps


def _tile_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    src = tensor_input(node, 0).shape
    reps = _repeats(node, None if src is None else len(src))
    if src is None:
        return tensor(dt, None)  # type: ignore[return-value]
    if reps is None:
        return tensor(dt, (None,) * len(src))  # type: ignore[return-value]
    return tensor(dt, tuple(None if d is None else d * r  # type: ignore[operator]
                            for d, r in zip(src, reps)))


def _tile_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    return [np.tile(x, _repeats(node, x.ndim))]  # type: ignore[arg-type]


def _tile_lower(ctx: LowerContext, node: Node) -> None:
    x, out = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])  # type: ignore[arg-type]
    in_st, out_st = row_strides(x.shape), row_strides(out.shape)
    shape, dst_st, src_st = [], [], []
    for d, r, si, so in zip(x.shape, (o // max(d, 1) for d, o in zip(x.shape, out.shape)),
                            in_st, out_st):
        shape += [r, d]
        dst_st += [d * so, so]
        src_st += [0, si]
    b = Builder()
    strided_copy(b, shape, out, 0, dst_st, x, 0, src_st)
    ctx.kernel("tile", b.body)


# --------------------------------------------------------------------------- Trilu


def _trilu_infer(node: Node) -> list[ValueType | None]:
    dt = check_dtype(node, 0)
    t = node.inputs[0].type  # type: ignore[union-attr]
    if t.shape is not None and len(t.shape) < 2:  # type: ignore[union-attr]
        raise ModelError(f"input must have rank >= 2, got {t}", where=node)
    k = node.input(1)
    if k is not None:
        kt = k.type
        if not isinstance(kt, TensorType) or kt.dtype != DType.INT64 or \
                (kt.shape is not None and prod_dims(kt.shape) not in (1, None)):
            raise ModelError(f"input 1 (k) must be an i64 scalar, got {kt}", where=node)
    return tensor(dt, t.shape)  # type: ignore[union-attr, return-value]


def _trilu_eval(node: Node, inputs: list) -> list[np.ndarray]:
    k = 0 if len(inputs) < 2 or inputs[1] is None else int(np.asarray(inputs[1]).reshape(-1)[0])
    x = np.asarray(inputs[0])
    # numpy's triu/tril overflow on k near the int64 extremes (they compute k - 1): any k
    # outside [-rows, cols] keeps or clears the whole matrix, as the clamped k does
    k = max(-x.shape[-2], min(x.shape[-1], k))
    if x.dtype == object:  # strings: the cleared triangle holds "" (a string's zero)
        ones = np.ones(x.shape[-2:], bool)
        keep = np.triu(ones, k) if node.attr("upper", 1) else np.tril(ones, k)
        return [np.where(keep, x, np.array("", dtype=object))]
    return [np.triu(x, k) if node.attr("upper", 1) else np.tril(x, k)]


def _trilu_lower(ctx: LowerContext, node: Node) -> None:
    x, out = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])  # type: ignore[arg-type]
    b = Builder()
    if out.numel:
        kv = node.input(1)
        k: Operand = i64(0) if kv is None else b.load(ctx.buf(kv), i64(0))
        n, m = out.shape[-2:]
        shape = [prod_dims(out.shape[:-2]), n, m]
        cmp = "ge" if node.attr("upper", 1) else "le"
        with b.nest(shape, parallel_outer=out.numel >= PARALLEL_MIN) as (t, i, j):  # type: ignore
            pos = b.linear([t, i, j], [n * m, m, 1])
            keep = b.op(cmp, b.op("sub", j, i), k)
            b.store(out, pos, b.op("select", keep, b.load(x, pos), const(0, out.dtype)))
    ctx.kernel("trilu", b.body)


op("Constant", (1, 9, 11, 12, 13, 19, 21, 23, 24, 25), infer=_constant_infer,
   evaluate=lambda node, inputs: [constant_array(node)], lower=static_lower(_constant_lower),
   doc="a tensor from one of the value attributes")
op("ConstantOfShape", (9, 20, 21, 23, 24, 25), infer=_cos_infer, evaluate=_cos_eval,
   lower=static_lower(_cos_lower), doc="a tensor of a given shape filled with one value")
op("EyeLike", (9, 22), infer=_eyelike_infer, evaluate=_eyelike_eval,
   lower=static_lower(_eyelike_lower), doc="ones on the k-th diagonal, shape of the input")
op("Range", (11, 27), infer=_range_infer, evaluate=_range_eval, lower=static_lower(_range_lower),
   doc="start + i * delta for i < ceil((limit - start) / delta)",
   symbolic=True)
op("Trilu", (14,), infer=_trilu_infer, evaluate=_trilu_eval, lower=static_lower(_trilu_lower),
   doc="upper (or lower) triangle from the k-th diagonal, the rest zero")
op("Tile", (1, 6, 13), infer=_tile_infer, evaluate=_tile_eval, lower=static_lower(_tile_lower),
   doc="repeat the input along each axis")
