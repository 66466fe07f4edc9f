"""Cast and CastLike: element type conversion, one scalar `cast` per element.

The scalar `cast` gives ONNX's rules among the compute dtypes: float -> int truncates (and
saturates out of range; NaN -> 0: the safe rule for the compiler's own index arithmetic),
int -> int wraps,
anything -> bool is `x != 0`, bool -> number is 0/1. The cast-only types (float8, float4e2m1,
4-/2-bit ints; `types.CAST_ONLY_DTYPES`) convert as `ir/narrow.py` says: round to nearest even,
overflow to NaN/inf per type, sub-byte ints wrap. `saturate=1` (the default) on a float8 target
is a clamp of the source to +-max before the cast (NaN stays NaN, inf becomes max), exactly
onnx.numpy_helper.saturate_cast; float4 always saturates. float8e8m0 (once
`types.CAST_ONLY_DTYPES` lists it) supports the defaults round_mode "up", saturate=1 only.
Other types (strings, float6) are UnsupportedError. The Cast op itself converts a float to
an int type as onnxruntime and numpy do where ONNX leaves the result undefined (NaN, inf, out
of range): as C compiles it for x86-64 (`c_float_to_int`), built from compares and selects
around the scalar `cast`.
CastLike is lowered and folded directly rather than through a scalar rule: its second input
only lends its type, and a fused loop nest would load it. Cast to int64 keeps a shape value
(`sym_value`) flowing, so Shape -> Cast -> Reshape resolves.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, elementwise
from onnxjit.ir.loops import Const, Operand, Var
from onnxjit.ir.narrow import SATURATING, max_finite
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.elementwise.arithmetic import arity, int_attr
from onnxjit.ir.ops.elementwise.c_cast import C_INTS, c_float_to_int
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import require_attr, tensor_input
from onnxjit.ir.types import STORAGE_DTYPES, DType, supported_dtypes_text


def _computable(node: Node, dt: DType, what: str) -> DType:
    if dt == DType.STRING and node.version >= 9:
        return dt  # converted on the host (`_string_cast`): string nodes never compile
    if dt not in STORAGE_DTYPES:
        raise UnsupportedError(f"op '{node.op}' {what} element type {dt.short} is not supported "
                               f"(supported: {supported_dtypes_text(STORAGE_DTYPES)})",
                               where=node)
    return dt


def emit_cast(b: Builder, x: Operand, target: DType, saturate: bool = True,
              c_rule: bool = True) -> Operand:
    """`x` converted to `target`; a saturating float8 target first clamps to +-max; a float to
    an int type converts as `c_float_to_int` says (`c_rule`), else saturating."""
    if x.dtype == target:
        return b.op("copy", x)
    if c_rule and x.dtype.is_float and target in C_INTS:
        return c_float_to_int(b, x, target)
    if saturate and target in SATURATING and x.dtype != DType.BOOL:
        if not x.dtype.is_float:  # ints and small floats: clamp the f32 value cast converts
            x = b.cast(x, DType.FLOAT)
        hi = max_finite(target)
        x = b.op("max", b.op("min", x, Const(hi, x.dtype)), Const(-hi, x.dtype))
    return b.cast(x, target)


def _saturate(node: Node) -> bool:
    return bool(int(node.attrs.get("saturate", 1)))


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
        if isinstance(to, (bytes, str)):  # Cast-1: the TensorProto.DataType name ("FLOAT")
            name = to.decode() if isinstance(to, bytes) else to
            return DType[name.upper()]
        return DType(int(to))  # type: ignore[call-overload]
    except (TypeError, ValueError, KeyError):
        raise ModelError(f"attribute 'to' = {to!r} is not an ONNX element type",
                         where=node) from None


def _check_e8m0(node: Node, target: DType) -> None:
    if target != DType.FLOAT8E8M0:
        return
    mode = node.attr("round_mode", "up")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "up" or not _saturate(node):
        raise UnsupportedError(f"op '{node.op}' to f8e8m0 with round_mode={mode!r}, saturate="
                               f"{int(_saturate(node))} is not supported (supported: "
                               "round_mode='up', saturate=1)", where=node)


def _cast_infer(node: Node) -> list:
    arity(node, 1)
    _common_attrs(node)
    target = _to(node)
    _check_e8m0(node, target)
    t = tensor_input(node, 0)
    _computable(node, t.dtype, "from")
    _computable(node, target, "to")
    src = node.inputs[0]
    if target == DType.INT64 and t.dtype.is_int and src is not None \
            and src.sym_value is not None:
        node.outputs[0].sym_value = src.sym_value
    return tensor(target, t.shape)


def _cast(b: Builder, node: Node, a: list[Operand]) -> Operand:
    return emit_cast(b, a[0], _to(node), _saturate(node))


def _string_cast(node: Node, x: np.ndarray, target: DType) -> np.ndarray:
    """Cast from or to strings (`strings.text.to_strings` / `parse_numbers`, then the numeric
    rules), on the host."""
    from onnxjit.ir.ops.strings.text import parse_numbers, to_strings

    if target == DType.STRING:
        return to_strings(x)
    # numbers read from text saturate, as an integer parse does ("9223372036854775807" reads
    # as 2^63 in float64: INT64_MAX, not C's overflow value)
    return _numeric_cast(parse_numbers(x, target, node), target, _saturate(node), c_rule=False)


def _numeric_cast(x: np.ndarray, target: DType, saturate: bool, c_rule: bool = True
                  ) -> np.ndarray:
    from onnxjit.ir.scalar_eval import run_ops

    b = Builder()
    var = Var(DType.from_numpy(x.dtype), "x")
    res = emit_cast(b, var, target, saturate, c_rule)
    env = {var: x}
    run_ops(b.body, env)
    return np.asarray(env[res], order="C").reshape(x.shape)  # type: ignore[index]


def _cast_evaluate(node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    target = _to(node)
    if x.dtype == object or target == DType.STRING:
        return [_string_cast(node, x, target)]
    from onnxjit.ir.opdef import lookup
    from onnxjit.ir.scalar_eval import evaluate_elementwise

    return evaluate_elementwise(lookup("", "Cast"), node, inputs)  # type: ignore[arg-type]


op("Cast", (1, 6, 9, 13, 19, 21, 23, 24, 25, 28), infer=_cast_infer, scalar=_cast,
   evaluate=_cast_evaluate, doc="convert to the element type 'to'")


def _castlike_infer(node: Node) -> list:
    arity(node, 2)
    _common_attrs(node)
    t = tensor_input(node, 0)
    target = tensor_input(node, 1).dtype
    _check_e8m0(node, target)
    _computable(node, t.dtype, "from")
    _computable(node, target, "to")
    return tensor(target, t.shape)


def _castlike_lower(ctx: LowerContext, node: Node) -> None:
    target = tensor_input(node, 1).dtype
    sat = _saturate(node)
    b = Builder()
    elementwise(b, ctx.buf(node.outputs[0]), [ctx.buf(node.inputs[0])],  # type: ignore[arg-type]
                lambda b, a: emit_cast(b, a[0], target, sat))
    ctx.kernel("castlike", b.body)


def _castlike_evaluate(node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    from onnxjit.ir.scalar_eval import run_ops

    x = np.asarray(inputs[0])
    if x.dtype == object or tensor_input(node, 1).dtype == DType.STRING:
        return [_string_cast(node, x, tensor_input(node, 1).dtype)]
    b = Builder()
    var = Var(DType.from_numpy(x.dtype), "x")
    res = emit_cast(b, var, tensor_input(node, 1).dtype, _saturate(node))
    env = {var: x}
    run_ops(b.body, env)
    return [np.asarray(env[res], order="C")]  # type: ignore[index]  # keeps 0-d 0-d


# Not a `scalar` op: the second input only lends its type (it may even be empty), and a scalar
# rule would make the loop nest load it. The same scalar `cast` runs in `lower`/`evaluate`.
op("CastLike", (15, 19, 21, 23, 24, 25), infer=_castlike_infer, lower=_castlike_lower,
   evaluate=_castlike_evaluate, doc="convert to the element type of the second input")
