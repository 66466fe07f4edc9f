"""Types, literals and tensor constants of the ONNX textual syntax.

Grammar (spec/003_...), with the onnx reference parser's extensions:

    tensor-dim    ::= '?' | id | str | int
    tensor-type   ::= prim-type | prim-type '[' ']' | prim-type '[' tensor-dims ']'
    type          ::= tensor-type | 'seq' '(' type ')' | 'map' '(' prim-type ',' type ')'
                    | 'optional' '(' type ')' | 'sparse_tensor' '(' tensor-type ')'
                    | 'opaque' '(' [[domain ','] name] ')'
    tensor-body   ::= '{' prim-constants? '}' | '[' "key": "value", ... ']'   (external data)

`float` is a scalar (a shape with no dims), `float[]` a tensor of unknown rank (no shape).
Tensor values go to the typed TensorProto fields the onnx parser uses: int32_data for the
small integer, bool, float16/bfloat16/float8 (bit patterns) types, int64_data, uint64_data for
uint32/uint64, float_data for float/complex64 (real, imaginary interleaved), double_data for
double/complex128, string_data for strings. The number of values must match the shape.
"""

from __future__ import annotations

import math

from onnxjit.onnxtext.lexer import Cursor
from onnxjit.proto import onnx_pb2 as P

T = P.TensorProto
PRIM_TYPES: dict[str, int] = {
    "float": T.FLOAT, "uint8": T.UINT8, "int8": T.INT8, "uint16": T.UINT16, "int16": T.INT16,
    "int32": T.INT32, "int64": T.INT64, "string": T.STRING, "bool": T.BOOL,
    "float16": T.FLOAT16, "double": T.DOUBLE, "uint32": T.UINT32, "uint64": T.UINT64,
    "complex64": T.COMPLEX64, "complex128": T.COMPLEX128, "bfloat16": T.BFLOAT16,
    "float8e4m3fn": T.FLOAT8E4M3FN, "float8e4m3fnuz": T.FLOAT8E4M3FNUZ,
    "float8e5m2": T.FLOAT8E5M2, "float8e5m2fnuz": T.FLOAT8E5M2FNUZ,
    "float8e8m0": T.FLOAT8E8M0, "uint4": T.UINT4, "int4": T.INT4, "float4e2m1": T.FLOAT4E2M1,
    "uint2": T.UINT2, "int2": T.INT2, "float6e2m3": T.FLOAT6E2M3, "float6e3m2": T.FLOAT6E3M2,
}
PRIM_NAMES: dict[int, str] = {v: k for k, v in PRIM_TYPES.items()}
TYPE_KEYWORDS = ("seq", "map", "optional", "sparse_tensor", "opaque")
FLOAT_WORDS = ("inf", "infinity", "nan")
_TYPE_LIST = "a type (float, int64, bool, string, ..., seq, map, optional, sparse_tensor)"

# Element type -> (TensorProto field, literal kind, (lo, hi) or None, values per element).
_INT32_TYPES = (T.INT2, T.INT4, T.INT8, T.INT16, T.INT32, T.UINT2, T.UINT4, T.UINT8, T.UINT16,
                T.FLOAT16, T.BFLOAT16, T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2,
                T.FLOAT8E5M2FNUZ, T.FLOAT6E2M3, T.FLOAT6E3M2, T.FLOAT8E8M0, T.BOOL,
                T.FLOAT4E2M1)
_SUB_BYTE = (T.INT2, T.INT4, T.UINT2, T.UINT4, T.FLOAT4E2M1)
FIELDS: dict[int, tuple[str, str, tuple[int, int] | None, int]] = {
    **{t: ("int32_data", "int", (-2**31, 2**31 - 1), 1) for t in _INT32_TYPES},
    T.INT64: ("int64_data", "int", (-2**63, 2**63 - 1), 1),
    T.UINT32: ("uint64_data", "int", (0, 2**64 - 1), 1),
    T.UINT64: ("uint64_data", "int", (0, 2**64 - 1), 1),
    T.FLOAT: ("float_data", "float", None, 1),
    T.COMPLEX64: ("float_data", "float", None, 2),
    T.DOUBLE: ("double_data", "float", None, 1),
    T.COMPLEX128: ("double_data", "float", None, 2),
    T.STRING: ("string_data", "str", None, 1),
}
FLT_MAX_ROUNDING = 3.4028235677973366e38  # values at or above this round to inf in float32


def encode_str(s: str) -> bytes:
    """Text -> bytes field; surrogateescape keeps non-UTF-8 bytes that the printer decoded."""
    return s.encode("utf-8", "surrogateescape")


class TypeParser(Cursor):
    """Types, literals and tensor constants; `GraphParser` adds graphs, nodes and functions."""

    def is_type_start(self) -> bool:
        if self.kinds[self.i] != "id":
            return False
        v = self.vals[self.i]
        return v in PRIM_TYPES or v in TYPE_KEYWORDS

    def parse_type(self) -> P.TypeProto:
        tp = P.TypeProto()
        self._type_into(tp)
        return tp

    def _type_into(self, tp: P.TypeProto) -> None:
        start = self.i
        name = self.ident(_TYPE_LIST)
        if name in PRIM_TYPES:
            tt = tp.tensor_type
            tt.elem_type = PRIM_TYPES[name]
            self._shape_into(tt)
        elif name in ("seq", "optional"):
            self.expect("(", f"after '{name}'")
            self._type_into(tp.sequence_type.elem_type if name == "seq"
                            else tp.optional_type.elem_type)
            self.expect(")", f"closing '{name}('")
        elif name == "map":
            self.expect("(", "after 'map'")
            tp.map_type.key_type = self._prim_type("a primitive type as the map key type")
            self.expect(",", "between the map key and value types")
            self._type_into(tp.map_type.value_type)
            self.expect(")", "closing 'map('")
        elif name == "sparse_tensor":
            self.expect("(", "after 'sparse_tensor'")
            st = tp.sparse_tensor_type
            st.elem_type = self._prim_type("a primitive element type of the sparse tensor")
            self._shape_into(st)
            self.expect(")", "closing 'sparse_tensor('")
        elif name == "opaque":
            self.expect("(", "after 'opaque'")
            if not self.accept(")"):
                first = self._dotted()
                if self.accept(","):
                    tp.opaque_type.domain = first
                    tp.opaque_type.name = self.ident("the opaque type's name")
                else:
                    tp.opaque_type.name = first
                self.expect(")", "closing 'opaque('")
            else:
                tp.opaque_type.SetInParent()
        else:
            self.error(_TYPE_LIST, at=start)

    def _dotted(self) -> str:
        parts = [self.ident("a name")]
        while self.accept("."):
            parts.append(self.ident("a name after '.'"))
        return ".".join(parts)

    def _prim_type(self, what: str) -> int:
        if self.kinds[self.i] != "id" or self.vals[self.i] not in PRIM_TYPES:
            self.error(what)
        t = PRIM_TYPES[self.vals[self.i]]  # type: ignore[index]
        self.i += 1
        return t

    def _shape_into(self, tt: P.TypeProto.Tensor | P.TypeProto.SparseTensor) -> None:
        if not self.accept("["):
            tt.shape.SetInParent()  # no brackets: a scalar, i.e. a known rank of 0
            return
        if self.accept("]"):
            return  # 'float[]': unknown rank, no shape at all
        shape = tt.shape
        while True:
            k = self.kinds[self.i]
            v = self.vals[self.i]
            if k == "p" and v == "?":
                shape.dim.add()
            elif k in ("id", "str"):
                shape.dim.add().dim_param = v
            elif k == "int":
                shape.dim.add().dim_value = self._int_in_range(v, (-2**63, 2**63 - 1))
            else:
                self.error("a dimension ('?', a name or an integer)")
            self.i += 1
            if not self.accept(","):
                break
        self.expect("]", "closing the shape (or ',' between dimensions)")

    # -- literals ----------------------------------------------------------------------------
    def _int_in_range(self, text: object, bounds: tuple[int, int]) -> int:
        v = int(text)  # type: ignore[arg-type]
        if not bounds[0] <= v <= bounds[1]:
            self.error_here(f"integer {v} is out of range [{bounds[0]}, {bounds[1]}]")
        return v

    def float_value(self, text: str) -> float:
        """A float literal's value; float32 overflow is checked by the caller that stores it."""
        try:
            return float(text)
        except ValueError:
            self.error("a number")

    def check_float32(self, v: float) -> None:
        if math.isfinite(v) and abs(v) >= FLT_MAX_ROUNDING:
            self.error_here(f"{v!r} is out of the range of float")

    def literal(self, what: str) -> tuple[str, object]:
        """('int' | 'float' | 'str', value) of one literal; bare inf/nan names are floats."""
        k = self.kinds[self.i]
        v = self.vals[self.i]
        if k == "int":
            self.i += 1
            return "int", int(v)  # type: ignore[arg-type]
        if k == "float":
            self.i += 1
            return "float", self.float_value(v)  # type: ignore[arg-type]
        if k == "str":
            self.i += 1
            return "str", v
        if k == "id" and str(v).lower() in FLOAT_WORDS:
            self.i += 1
            return "float", float(str(v))
        self.error(what)

    # -- tensors -----------------------------------------------------------------------------
    def tensor_body(self, t: P.TensorProto, tp: P.TypeProto, type_at: int) -> None:
        """Fill `t` (its name already set) from the type `tp` (parsed at token `type_at`) and
        the value list `{...}` or external-data list `[...]` that follows, if any."""
        if tp.WhichOneof("value") != "tensor_type":
            self.error_here("a tensor constant needs a tensor type", at=type_at)
        tt = tp.tensor_type
        if not tt.HasField("shape"):
            self.error_here("a tensor constant needs a known shape ('float[]' has none)",
                            at=type_at)
        dims = []
        for d in tt.shape.dim:
            if d.WhichOneof("value") != "dim_value":
                self.error_here("a tensor constant needs integer dimensions", at=type_at)
            dims.append(d.dim_value)
        t.data_type = tt.elem_type
        t.dims.extend(dims)
        if self.at("{"):
            self._values(t, dims)
        elif self.accept("["):
            t.data_location = T.EXTERNAL
            if not self.accept("]"):
                self.string_pairs(t.external_data)
                self.expect("]", "closing the external data list")

    def _values(self, t: P.TensorProto, dims: list[int]) -> None:
        open_at = self.i
        self.i += 1
        spec = FIELDS.get(t.data_type)
        if spec is None:
            self.error_here(f"tensors of type {PRIM_NAMES.get(t.data_type, t.data_type)} "
                            "cannot be written as literals")
        field, lit, bounds, per_elem = spec
        values: list = []
        kinds, vals = self.kinds, self.vals
        if not self.accept("}"):
            while True:
                k = kinds[self.i]
                v = vals[self.i]
                if lit == "int":
                    if k != "int":
                        self.error("an integer element")
                    values.append(self._int_in_range(v, bounds))  # type: ignore[arg-type]
                elif lit == "float":
                    if k == "int" or k == "float":
                        f = self.float_value(v)  # type: ignore[arg-type]
                    elif k == "id" and str(v).lower() in FLOAT_WORDS:
                        f = float(str(v))
                    else:
                        self.error("a number")
                    if field == "float_data":
                        self.check_float32(f)
                    values.append(f)
                else:
                    if k != "str":
                        self.error("a string literal")
                    values.append(encode_str(v))  # type: ignore[arg-type]
                self.i += 1
                if not self.accept(","):
                    break
            self.expect("}", "closing the tensor values (or ',' between values)")
        n = math.prod(dims) * per_elem
        if t.data_type not in _SUB_BYTE and len(values) != n:
            self.error_here(f"the tensor has {len(values)} values but its shape {dims} needs "
                            f"{n}", at=open_at)
        getattr(t, field).extend(values)

    def string_pairs(self, entries) -> None:  # noqa: ANN001 - a repeated StringStringEntryProto
        """'"key": "value", ...' into a repeated StringStringEntryProto."""
        while True:
            e = entries.add()
            e.key = self.string("a quoted key")
            self.expect(":", "between key and value")
            e.value = self.string("a quoted value")
            if not self.accept(","):
                break
