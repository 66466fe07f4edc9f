"""Types of the IR: element types, symbolic dims and value types.

A dim is an `int`, a `Sym` (a named symbol or an expression over symbols: `+ * // max min`), or
`None` (unknown). Symbols are global to a model, as the ONNX IR spec says of `dim_param`: two
inputs that share `"N"` have the same size at run time. Expressions are kept canonical (constants
folded, sums and products flattened and sorted) so that structural equality is a useful
approximation of semantic equality, and `evaluate(bindings)` gives the concrete size.
"""

from __future__ import annotations

import enum
import importlib.util
from typing import Union

import numpy as np

from onnxjit.record import Record


class DType(enum.Enum):
    """ONNX element types; the value is `TensorProto.DataType`'s number."""

    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    STRING = 8
    BOOL = 9
    FLOAT16 = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    COMPLEX64 = 14
    COMPLEX128 = 15
    BFLOAT16 = 16
    FLOAT8E4M3FN = 17
    FLOAT8E4M3FNUZ = 18
    FLOAT8E5M2 = 19
    FLOAT8E5M2FNUZ = 20
    UINT4 = 21
    INT4 = 22
    FLOAT4E2M1 = 23
    FLOAT8E8M0 = 24
    UINT2 = 25
    INT2 = 26
    FLOAT6E2M3 = 27
    FLOAT6E3M2 = 28

    @property
    def short(self) -> str:
        """The name used in IR text: f32, i64, bool, ..."""
        return _SHORT[self]

    @staticmethod
    def from_short(name: str) -> DType:
        try:
            return _FROM_SHORT[name]
        except KeyError:
            raise ValueError(f"unknown element type {name!r}") from None

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype holding this type; raises KeyError for types numpy cannot hold."""
        t = _NUMPY.get(self)
        if t is None and _HAVE_ML and _load_ml_dtypes():
            t = _NUMPY.get(self)
        if t is None:
            raise KeyError(self)
        return np.dtype(t)

    @staticmethod
    def from_numpy(dtype: object) -> DType:
        """The DType of a numpy dtype; raises KeyError if there is none."""
        dt = np.dtype(dtype)
        found = _FROM_NUMPY.get(dt)
        if found is None and _HAVE_ML and _load_ml_dtypes():
            found = _FROM_NUMPY.get(dt)
        if found is None:
            raise KeyError(dt)
        return found

    @property
    def is_float(self) -> bool:
        return self in (DType.FLOAT, DType.DOUBLE, DType.FLOAT16, DType.BFLOAT16)

    @property
    def is_int(self) -> bool:
        return self in _INTS

    @property
    def is_signed(self) -> bool:
        return self in (DType.INT8, DType.INT16, DType.INT32, DType.INT64)

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    def __repr__(self) -> str:
        return f"DType.{self.name}"


_SHORT = {
    DType.FLOAT: "f32", DType.UINT8: "u8", DType.INT8: "i8", DType.UINT16: "u16",
    DType.INT16: "i16", DType.INT32: "i32", DType.INT64: "i64", DType.STRING: "str",
    DType.BOOL: "bool", DType.FLOAT16: "f16", DType.DOUBLE: "f64", DType.UINT32: "u32",
    DType.UINT64: "u64", DType.COMPLEX64: "c64", DType.COMPLEX128: "c128",
    DType.BFLOAT16: "bf16", DType.FLOAT8E4M3FN: "f8e4m3fn", DType.FLOAT8E4M3FNUZ: "f8e4m3fnuz",
    DType.FLOAT8E5M2: "f8e5m2", DType.FLOAT8E5M2FNUZ: "f8e5m2fnuz", DType.UINT4: "u4",
    DType.INT4: "i4", DType.FLOAT4E2M1: "f4e2m1", DType.FLOAT8E8M0: "f8e8m0",
    DType.UINT2: "u2", DType.INT2: "i2", DType.FLOAT6E2M3: "f6e2m3", DType.FLOAT6E3M2: "f6e3m2",
}
_FROM_SHORT = {v: k for k, v in _SHORT.items()}
_NUMPY = {
    DType.FLOAT: np.float32, DType.UINT8: np.uint8, DType.INT8: np.int8,
    DType.UINT16: np.uint16, DType.INT16: np.int16, DType.INT32: np.int32,
    DType.INT64: np.int64, DType.STRING: np.object_, DType.BOOL: np.bool_,
    DType.FLOAT16: np.float16, DType.DOUBLE: np.float64, DType.UINT32: np.uint32,
    DType.UINT64: np.uint64, DType.COMPLEX64: np.complex64, DType.COMPLEX128: np.complex128,
}
# numpy has no narrow float or sub-byte types; `ml_dtypes` (a dependency of onnx, the types
# onnx.numpy_helper and the ONNX backend tests use) adds them, one element per byte for the 4- and
# 2-bit types. Without it those types have no numpy dtype and are unsupported.
# Importing ml_dtypes costs ~5 ms, which a warm start (everything from the disk cache) should
# not pay when the model has no such types: it is imported on the first lookup that needs it.
_HAVE_ML = importlib.util.find_spec("ml_dtypes") is not None
_ML_LOADED = False


def _load_ml_dtypes() -> bool:
    """Add ml_dtypes' types to the tables (once); False if nothing new was added."""
    global _ML_LOADED
    if _ML_LOADED:
        return False
    import ml_dtypes as _ml

    _NUMPY.update({
        DType.BFLOAT16: _ml.bfloat16, DType.FLOAT8E4M3FN: _ml.float8_e4m3fn,
        DType.FLOAT8E4M3FNUZ: _ml.float8_e4m3fnuz, DType.FLOAT8E5M2: _ml.float8_e5m2,
        DType.FLOAT8E5M2FNUZ: _ml.float8_e5m2fnuz, DType.UINT4: _ml.uint4, DType.INT4: _ml.int4,
        DType.FLOAT4E2M1: _ml.float4_e2m1fn, DType.FLOAT8E8M0: _ml.float8_e8m0fnu,
        DType.UINT2: _ml.uint2, DType.INT2: _ml.int2,
    })
    _FROM_NUMPY.update({np.dtype(v): k for k, v in _NUMPY.items()})
    _ML_LOADED = True
    return True


_FROM_NUMPY = {np.dtype(v): k for k, v in _NUMPY.items()}
_INTS = (DType.UINT8, DType.INT8, DType.UINT16, DType.INT16, DType.INT32, DType.INT64,
         DType.UINT32, DType.UINT64)

#: Floats held in memory in a narrow format and computed in float32: a register of such a
#: dtype holds an f32 value that is exactly representable in the narrow format. Every scalar op
#: producing one computes in f32 and rounds once (to nearest, ties to even) to the narrow
#: format, which is numpy's (and onnxruntime's) per-op semantics for float16/bfloat16; loads
#: widen exactly, stores narrow exactly (the value is already rounded).
NARROW_FLOATS = frozenset({DType.FLOAT16, DType.BFLOAT16} if _HAVE_ML
                          else {DType.FLOAT16})

#: Element types every op may compute on: loads, stores and all scalar ops are implemented.
COMPUTE_DTYPES = frozenset({DType.FLOAT, DType.DOUBLE, DType.BOOL, DType.INT8, DType.INT16,
                            DType.INT32, DType.INT64, DType.UINT8, DType.UINT16, DType.UINT32,
                            DType.UINT64}) | NARROW_FLOATS

#: Element types that can be stored in buffers and converted by Cast/CastLike (and moved by
#: pure data-movement lowerings), but on which no arithmetic is defined: the float8 family and
#: the 4-/2-bit ints and float4, one element per byte as ml_dtypes holds them.
CAST_ONLY_DTYPES = frozenset({DType.FLOAT8E4M3FN, DType.FLOAT8E4M3FNUZ, DType.FLOAT8E5M2,
                              DType.FLOAT8E5M2FNUZ, DType.UINT4, DType.INT4, DType.UINT2,
                              DType.INT2, DType.FLOAT4E2M1, DType.FLOAT8E8M0}
                             if _HAVE_ML else ())

#: Every element type a buffer may hold.
STORAGE_DTYPES = COMPUTE_DTYPES | CAST_ONLY_DTYPES


def supported_dtypes_text(dtypes: frozenset | None = None) -> str:
    """The compute dtypes (or `dtypes`) as text for error messages: "bool, f32, f64, ..."."""
    return ", ".join(sorted(d.short for d in (COMPUTE_DTYPES if dtypes is None else dtypes)))


# --------------------------------------------------------------------------- symbolic dims


class Sym(Record):
    """A symbolic size: `op` is "var" (args = (name,)), "add", "mul", "floordiv", "max" or "min".

    Build with `Sym.var("N")` and Python operators; results are canonical and fold to `int`
    when no symbol is left.
    """

    __slots__ = ("op", "args")
    op: str
    args: tuple

    def __init__(self, op: str, args: tuple) -> None:  # the hot path: no generic binding
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "args", args)

    def _values(self) -> tuple:
        return (self.op, self.args)

    @staticmethod
    def var(name: str) -> Sym:
        return Sym("var", (name,))

    # arithmetic --------------------------------------------------------------------------
    def __add__(self, other: DimLike) -> Dim:
        return sym_add(self, other)

    __radd__ = __add__

    def __mul__(self, other: DimLike) -> Dim:
        return sym_mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other: DimLike) -> Dim:
        return sym_floordiv(self, other)

    def __rfloordiv__(self, other: DimLike) -> Dim:
        return sym_floordiv(other, self)

    def __sub__(self, other: DimLike) -> Dim:
        return sym_add(self, sym_mul(other, -1))

    def __rsub__(self, other: DimLike) -> Dim:
        return sym_add(other, sym_mul(self, -1))

    # queries -----------------------------------------------------------------------------
    def symbols(self) -> set[str]:
        if self.op == "var":
            return {self.args[0]}
        out: set[str] = set()
        for a in self.args:
            if isinstance(a, Sym):
                out |= a.symbols()
        return out

    def evaluate(self, bindings: dict[str, int]) -> int:
        """The concrete value given every symbol's size; KeyError names a missing symbol."""
        if self.op == "var":
            return bindings[self.args[0]]
        vals = [a.evaluate(bindings) if isinstance(a, Sym) else a for a in self.args]
        if self.op == "add":
            return sum(vals)
        if self.op == "mul":
            p = 1
            for v in vals:
                p *= v
            return p
        if self.op == "floordiv":
            return vals[0] // vals[1]
        if self.op == "max":
            return max(vals)
        if self.op == "min":
            return min(vals)
        raise ValueError(f"bad Sym op {self.op}")

    def __str__(self) -> str:
        if self.op == "var":
            return self.args[0]
        parts = [_paren(a) for a in self.args]
        if self.op == "add":
            return " + ".join(parts)
        if self.op == "mul":
            return "*".join(parts)
        if self.op == "floordiv":
            d = self.args[1]
            # `N // 2*M` would read back as `(N // 2)*M`: a product divisor needs parentheses.
            div = f"({d})" if isinstance(d, Sym) and d.op == "mul" else parts[1]
            return f"{parts[0]} // {div}"
        return f"{self.op}({', '.join(str(a) for a in self.args)})"

    def __repr__(self) -> str:
        return f"Sym({str(self)!r})"


Dim = Union[int, Sym, None]
DimLike = Union[int, Sym]


def _paren(a: DimLike) -> str:
    if isinstance(a, Sym) and a.op in ("add", "floordiv"):
        return f"({a})"
    return str(a)


def _key(a: DimLike) -> tuple:
    return (0, a) if isinstance(a, int) else (1, str(a))


def _split_coeff(t: DimLike) -> tuple[int, DimLike]:
    """(coefficient, symbolic part) of a product term: 3*N -> (3, N)."""
    if isinstance(t, Sym) and t.op == "mul" and isinstance(t.args[0], int):
        rest = t.args[1:]
        return t.args[0], rest[0] if len(rest) == 1 else Sym("mul", rest)
    return 1, t


def sym_add(a: DimLike, b: DimLike) -> Dim:
    terms: list = []
    for x in (a, b):
        terms.extend(x.args if isinstance(x, Sym) and x.op == "add" else [x])
    const = sum(t for t in terms if isinstance(t, int))
    coeffs: dict[Sym, int] = {}
    for t in terms:
        if not isinstance(t, int):
            c, part = _split_coeff(t)
            coeffs[part] = coeffs.get(part, 0) + c  # type: ignore[index]
    syms = sorted((sym_mul(part, c) for part, c in coeffs.items() if c != 0), key=_key)
    if not syms:
        return const
    args = tuple(syms) + ((const,) if const else ())
    return args[0] if len(args) == 1 else Sym("add", args)


def sym_mul(a: DimLike, b: DimLike) -> Dim:
    terms: list = []
    for x in (a, b):
        terms.extend(x.args if isinstance(x, Sym) and x.op == "mul" else [x])
    const = 1
    for t in terms:
        if isinstance(t, int):
            const *= t
    syms = sorted((t for t in terms if not isinstance(t, int)), key=_key)
    if not syms or const == 0:
        return const
    args = ((const,) if const != 1 else ()) + tuple(syms)
    return args[0] if len(args) == 1 else Sym("mul", args)


def sym_floordiv(a: DimLike, b: DimLike) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if b == 1:
        return a
    if isinstance(a, Sym) and a.op == "mul" and isinstance(a.args[0], int) and isinstance(b, int) \
            and b != 0 and a.args[0] % b == 0:
        return sym_mul(Sym("mul", a.args[1:]) if len(a.args) > 2 else a.args[1], a.args[0] // b)
    if a == b:
        return 1
    return Sym("floordiv", (a, b))


def sym_max(a: DimLike, b: DimLike) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    if a == b:
        return a
    return Sym("max", tuple(sorted((a, b), key=_key)))


def sym_min(a: DimLike, b: DimLike) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    if a == b:
        return a
    return Sym("min", tuple(sorted((a, b), key=_key)))


def dim_str(d: Dim) -> str:
    """Text of a dim in IR: `3`, `N`, `(N + 1)`, `?`."""
    if d is None:
        return "?"
    if isinstance(d, Sym) and d.op != "var":
        return f"({d})"
    return str(d)


def evaluate_dim(d: Dim, bindings: dict[str, int]) -> int | None:
    if d is None or isinstance(d, int):
        return d
    try:
        return d.evaluate(bindings)
    except KeyError:
        return None


# --------------------------------------------------------------------------- value types


class TensorType(Record):
    """A tensor of `dtype`; `shape` is None when even the rank is unknown."""

    __slots__ = ("dtype", "shape")
    dtype: DType
    shape: tuple[Dim, ...] | None

    def __init__(self, dtype: DType, shape: tuple[Dim, ...] | None) -> None:
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "shape", shape)

    def _values(self) -> tuple:
        return (self.dtype, self.shape)

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dim is a concrete int."""
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def numel(self) -> int:
        assert self.is_static, f"numel of non-static {self}"
        n = 1
        for d in self.shape:  # type: ignore[union-attr]
            n *= d  # type: ignore[operator]
        return n

    def with_shape(self, shape: tuple[Dim, ...] | None) -> TensorType:
        return TensorType(self.dtype, None if shape is None else tuple(shape))

    def __str__(self) -> str:
        if self.shape is None:
            return f"{self.dtype.short}[*]"
        return f"{self.dtype.short}[{','.join(dim_str(d) for d in self.shape)}]"


class SequenceType(Record):
    __slots__ = ("elem",)
    elem: ValueType | None

    def __str__(self) -> str:
        return f"seq({self.elem if self.elem is not None else '?'})"


class OptionalType(Record):
    __slots__ = ("elem",)
    elem: ValueType | None

    def __str__(self) -> str:
        return f"optional({self.elem if self.elem is not None else '?'})"


class MapType(Record):
    __slots__ = ("key", "value")
    key: DType
    value: ValueType

    def __str__(self) -> str:
        return f"map({self.key.short}, {self.value})"


class SparseTensorType(Record):
    __slots__ = ("dtype", "shape")
    dtype: DType
    shape: tuple[Dim, ...] | None

    def __str__(self) -> str:
        return "sparse_" + str(TensorType(self.dtype, self.shape))


ValueType = Union[TensorType, SequenceType, OptionalType, MapType, SparseTensorType]
