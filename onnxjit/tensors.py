"""TensorProto / SparseTensorProto -> numpy arrays (part of the importer).

Algorithm for a dense tensor: 1) check the dims (non-negative, element count below 2**62) and the
element type; 2) pick the payload: external data (read through `external_data.ExternalReader`),
else `raw_data` if present, else the typed field the ONNX spec assigns to the element type;
3) check the payload holds exactly one entry per element (bytes for `raw_data`) *before*
allocating anything, so a forged dims list cannot make us allocate terabytes; 4) decode: raw
data is little-endian fixed width; `int32_data` holds the small ints, bool and float16 bit
patterns; complex types are (real, imaginary) pairs of `float_data`/`double_data`; strings
become an object array of `str` (UTF-8 decoded; invalid bytes as lone surrogates).

bfloat16 and the float8 family become `ml_dtypes` arrays (their `int32_data` entries hold the
bit patterns). The 4-/2-bit types (int4, uint4, float4e2m1, int2, uint2) are packed in the proto,
two or four elements a byte, the first element in the lowest bits, in `raw_data` or one byte per
`int32_data` entry; they are unpacked to ml_dtypes' one element a byte (the element's bits in the
low bits of its byte). Types without a numpy dtype raise UnsupportedError naming the tensor
rather than hand back bit patterns a later pass would misread. Segmented tensors (`segment`) are
refused likewise.

A sparse tensor (COO: `values` [NNZ], `indices` [NNZ] linearised or [NNZ, rank]) is densified;
indices are bounds-checked, and the dense size is capped (`MAX_DENSE_BYTES`), since a few bytes
of sparse tensor can claim any size.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.types import DType
from onnxjit.proto import onnx_pb2 as P

#: A larger element count cannot come from a real model and would overflow int64 byte offsets.
MAX_ELEMENTS = 1 << 62

#: Densifying a sparse tensor allocates this much at most: a few sparse bytes can ask for any size.
MAX_DENSE_BYTES = 1 << 34

#: Reads an EXTERNAL tensor's bytes; given the TensorProto and a description for messages.
ExternalRead = Callable[[P.TensorProto, str], bytes]

# The typed field holding each numpy-representable element type, and the numpy dtype of that
# field's entries (before conversion to the element type).
_FIELD = {
    DType.FLOAT: "float_data", DType.COMPLEX64: "float_data",
    DType.DOUBLE: "double_data", DType.COMPLEX128: "double_data",
    DType.INT64: "int64_data",
    DType.UINT32: "uint64_data", DType.UINT64: "uint64_data",
    DType.INT32: "int32_data", DType.INT16: "int32_data", DType.INT8: "int32_data",
    DType.UINT16: "int32_data", DType.UINT8: "int32_data", DType.BOOL: "int32_data",
    DType.FLOAT16: "int32_data", DType.BFLOAT16: "int32_data",
    DType.FLOAT8E4M3FN: "int32_data", DType.FLOAT8E4M3FNUZ: "int32_data",
    DType.FLOAT8E5M2: "int32_data", DType.FLOAT8E5M2FNUZ: "int32_data",
    DType.FLOAT8E8M0: "int32_data",
}
#: Bits per element of the packed sub-byte types.
_PACKED_BITS = {DType.INT4: 4, DType.UINT4: 4, DType.FLOAT4E2M1: 4, DType.INT2: 2,
                DType.UINT2: 2}
#: Element types whose `int32_data` entries are bit patterns of the element's width.
_BIT_PATTERNS = (DType.FLOAT16, DType.BFLOAT16, DType.FLOAT8E4M3FN, DType.FLOAT8E4M3FNUZ,
                 DType.FLOAT8E5M2, DType.FLOAT8E5M2FNUZ, DType.FLOAT8E8M0)
_FIELD_DTYPE = {"float_data": np.float32, "double_data": np.float64, "int64_data": np.int64,
                "uint64_data": np.uint64, "int32_data": np.int32}


def tensor_desc(t: P.TensorProto) -> str:
    return f"tensor '{t.name}'" if t.name else "an unnamed tensor"


def check_dims(dims: list[int] | tuple[int, ...], where: str) -> tuple[int, ...]:
    """The dims as a tuple, after checking each is >= 0 and the element count is sane."""
    n = 1
    for d in dims:
        if d < 0:
            raise ModelError(f"negative dimension {d} in dims {list(dims)}", where=where)
        n *= d
        if n >= MAX_ELEMENTS:
            raise ModelError(f"dims {list(dims)} hold too many elements (the product "
                             "overflows)", where=where)
    return tuple(int(d) for d in dims)


def element_type(code: int, where: str) -> DType:
    """The DType of a `data_type`/`elem_type` number; ModelError if it is not one."""
    if code == 0:
        raise ModelError("element type is UNDEFINED (data_type 0)", where=where)
    try:
        return DType(code)
    except ValueError:
        raise ModelError(f"unknown element type {code}", where=where) from None


def numel(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def to_numpy(t: P.TensorProto, external: ExternalRead | None = None) -> np.ndarray:
    """The contents of a TensorProto as a numpy array (see the module docstring)."""
    where = tensor_desc(t)
    dims = check_dims(list(t.dims), where)
    dtype = element_type(t.data_type, where)
    n = numel(dims)
    if t.HasField("segment"):
        raise UnsupportedError("segmented tensors (TensorProto.segment) are not supported",
                               where=where)
    if dtype == DType.STRING:
        if t.data_location == P.TensorProto.EXTERNAL or t.HasField("raw_data"):
            raise ModelError("a STRING tensor must store its data in string_data", where=where)
        if len(t.string_data) != n:
            raise ModelError(f"has {len(t.string_data)} strings in string_data, dims "
                             f"{list(dims)} need {n}", where=where)
        out = np.empty(n, dtype=object)
        # Strings are UTF-8 (ONNX IR spec); bytes that are not decode losslessly to lone
        # surrogates rather than fail the import.
        out[:] = [s.decode("utf-8", "surrogateescape") for s in t.string_data]
        return out.reshape(dims)
    try:
        np_dtype = dtype.numpy
        if dtype not in _FIELD and dtype not in _PACKED_BITS:
            raise KeyError(dtype)
    except KeyError:
        raise UnsupportedError(f"element type {dtype.name} cannot be imported yet (numpy has no "
                               "such type and the compiler does not compute in it)",
                               where=where) from None

    if dtype in _PACKED_BITS:
        return _from_packed(t, dtype, dims, n, where, external)
    if t.data_location == P.TensorProto.EXTERNAL:
        if external is None:
            raise ModelError("external data is not allowed here", where=where)
        return _from_raw(external(t, where), np_dtype, dims, n, where)
    if t.HasField("raw_data"):
        return _from_raw(t.raw_data, np_dtype, dims, n, where)
    return _from_field(t, dtype, np_dtype, dims, n, where)


def _from_packed(t: P.TensorProto, dtype: DType, dims: tuple[int, ...], n: int, where: str,
                 external: ExternalRead | None) -> np.ndarray:
    bits = _PACKED_BITS[dtype]
    per_byte = 8 // bits
    nbytes = (n + per_byte - 1) // per_byte
    if t.data_location == P.TensorProto.EXTERNAL:
        if external is None:
            raise ModelError("external data is not allowed here", where=where)
        packed = np.frombuffer(external(t, where), dtype=np.uint8)
    elif t.HasField("raw_data"):
        packed = np.frombuffer(t.raw_data, dtype=np.uint8)
    else:
        if len(t.int32_data) != nbytes:
            raise ModelError(f"has {len(t.int32_data)} entries in int32_data, dims {list(dims)} "
                             f"of packed {dtype.name} need {nbytes}", where=where)
        packed = np.asarray(t.int32_data, dtype=np.int64).astype(np.uint8)
    if packed.size != nbytes:
        raise ModelError(f"holds {packed.size} bytes of data, dims {list(dims)} of packed "
                         f"{dtype.name} need {nbytes}", where=where)
    shifts = np.arange(per_byte, dtype=np.uint8) * np.uint8(bits)
    out = (packed[:, None] >> shifts[None, :]) & np.uint8((1 << bits) - 1)
    return np.ascontiguousarray(out.reshape(-1)[:n]).view(dtype.numpy).reshape(dims)


def _from_raw(raw: bytes, np_dtype: np.dtype, dims: tuple[int, ...], n: int,
              where: str) -> np.ndarray:
    if len(raw) != n * np_dtype.itemsize:
        raise ModelError(f"holds {len(raw)} bytes of data, dims {list(dims)} of "
                         f"{np_dtype} need {n * np_dtype.itemsize}", where=where)
    if np_dtype == np.bool_:
        return (np.frombuffer(raw, dtype=np.uint8) != 0).reshape(dims)
    arr = np.frombuffer(raw, dtype=np_dtype.newbyteorder("<"))
    # astype to the native order also makes a writable copy that owns its memory.
    return arr.astype(np_dtype).reshape(dims)


def _from_field(t: P.TensorProto, dtype: DType, np_dtype: np.dtype, dims: tuple[int, ...],
                n: int, where: str) -> np.ndarray:
    field = _FIELD[dtype]
    data = getattr(t, field)
    per_elem = 2 if dtype in (DType.COMPLEX64, DType.COMPLEX128) else 1
    if len(data) != n * per_elem:
        raise ModelError(f"has {len(data)} entries in {field}, dims {list(dims)} of "
                         f"{dtype.name} need {n * per_elem}", where=where)
    src = np.asarray(data, dtype=_FIELD_DTYPE[field])
    if per_elem == 2:
        return src.view(np_dtype).reshape(dims).copy()
    if dtype in _BIT_PATTERNS:
        bits = np.dtype(f"u{np_dtype.itemsize}")
        return src.astype(bits).view(np_dtype).reshape(dims)
    if dtype == DType.BOOL:
        return (src != 0).reshape(dims)
    return src.astype(np_dtype).reshape(dims)


def sparse_to_numpy(s: P.SparseTensorProto, external: ExternalRead | None = None) -> np.ndarray:
    """A dense array holding a SparseTensorProto's values at its indices (zeros elsewhere)."""
    name = s.values.name or s.indices.name
    where = f"sparse tensor '{name}'" if name else "an unnamed sparse tensor"
    dims = check_dims(list(s.dims), where)
    values = to_numpy(s.values, external).reshape(-1)
    indices = to_numpy(s.indices, external)
    if indices.dtype != np.int64:
        raise ModelError(f"indices must be int64, not {indices.dtype}", where=where)
    nnz = values.shape[0]
    total = numel(dims)
    if indices.ndim == 1 and indices.shape[0] == nnz:
        flat = indices
    elif indices.ndim == 2 and indices.shape == (nnz, len(dims)):
        for axis, d in enumerate(dims):
            col = indices[:, axis]
            if col.size and (col.min() < 0 or col.max() >= d):
                raise ModelError(f"an index on axis {axis} is outside [0, {d})", where=where)
        flat = np.ravel_multi_index(indices.T, dims) if nnz else indices.reshape(0)
    else:
        raise ModelError(f"indices of shape {list(indices.shape)} do not fit {nnz} values of "
                         f"a rank-{len(dims)} tensor", where=where)
    if flat.size and (flat.min() < 0 or flat.max() >= total):
        raise ModelError(f"an index is outside the {total} elements of dims {list(dims)}",
                         where=where)
    if total * values.dtype.itemsize > MAX_DENSE_BYTES:
        raise UnsupportedError(f"densifying dims {list(dims)} would need more than "
                               f"{MAX_DENSE_BYTES >> 30} GiB", where=where)
    try:
        dense = np.zeros(total, dtype=values.dtype)
    except MemoryError:
        raise ModelError(f"not enough memory to densify dims {list(dims)}", where=where) from None
    if values.dtype == object:
        dense[:] = b""
    dense[flat] = values
    return dense.reshape(dims)
