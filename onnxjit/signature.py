"""Input signatures: checking a call's arrays against the model's declared inputs.

A signature is a tuple of (DType, shape) per graph input, with concrete shapes. An input that
is a sequence or an optional (a Python list of arrays, or an array or None) has the entry
(its declared ValueType, the entries of its contents): a tuple of (DType, shape) per element of
a sequence; None or the held value's entry for an optional; `entry_type` turns an entry back
into the type a specialised graph input gets. A map input is a dict (keys as declared, values
converted like inputs of the value type) with the entry (its MapType, "map"): no ai.onnx op
reads a map, so its contents never shape the compiled code. `check` turns a
call's arguments into arrays and validates them against the declared input types: dtype, rank,
fixed dims, and symbolic dims (a symbol shared by several inputs must have one size); an input
declared as a scalar (rank 0) takes an array of any shape, as onnxruntime allows. Python
scalars and lists are converted to the declared dtype; numpy arrays of another dtype are refused
(no silent casts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxjit.errors import InputError, InputTypeError, UnsupportedError
from onnxjit.ir.types import (
    DType,
    MapType,
    OptionalType,
    SequenceType,
    Sym,
    TensorType,
    ValueType,
)

#: A declared input: (name, kind, dims) where a dim is an int, a symbol name (str) or None;
#: `kind` is a DType for a tensor, else the input's ValueType (sequence, optional; dims None).
Declared = tuple[str, Any, "tuple[int | str | None, ...] | None"]


def declared_of(name: str, t: ValueType | None) -> Declared:
    """The declaration of a graph input of type `t`."""
    if isinstance(t, (SequenceType, OptionalType, MapType)):
        return (name, t, None)
    if not isinstance(t, TensorType):
        raise UnsupportedError(f"graph input '{name}' has type {t}; tensors, sequences, "
                               "optionals and maps are supported as inputs")
    dims = None if t.shape is None else tuple(
        d if isinstance(d, int) else (d.args[0] if isinstance(d, Sym) and d.op == "var"
                                      else None) for d in t.shape)
    return (name, t.dtype, dims)


def _elem_dtype(kind: Any) -> DType | None:
    e = kind.elem if isinstance(kind, (SequenceType, OptionalType)) else None
    return e.dtype if isinstance(e, TensorType) else None


def to_value(name: str, x: Any, kind: Any) -> Any:
    """A call's argument for an input of any kind: an array, a list of arrays, or None."""
    if isinstance(kind, DType):
        return to_array(name, x, kind)
    if isinstance(kind, OptionalType):
        if x is None:
            return None
        inner = kind.elem
        if isinstance(inner, (SequenceType, OptionalType)):
            return to_value(name, x, inner)
        return _any_array(name, x, _elem_dtype(kind))
    if isinstance(kind, MapType):
        return _map(name, x, kind)
    if not isinstance(x, (list, tuple)):
        raise InputTypeError(f"input '{name}' is a sequence ({kind}); pass a list of arrays, "
                             f"got {type(x).__name__}")
    return [_any_array(f"{name}[{i}]", e, _elem_dtype(kind)) for i, e in enumerate(x)]


def _map(name: str, x: Any, kind: MapType) -> dict:
    """A map input: a dict whose keys are ints or strs as declared, its values converted
    like an input of the value type (no ai.onnx op reads a map: it passes through)."""
    if not isinstance(x, dict):
        raise InputTypeError(f"input '{name}' is a map ({kind}); pass a dict, got "
                             f"{type(x).__name__}")
    value = kind.value.dtype if isinstance(kind.value, TensorType) else kind.value
    out = {}
    for k, v in x.items():
        if kind.key == DType.STRING:
            if not isinstance(k, str):
                raise InputTypeError(f"input '{name}' has str keys; got {k!r}")
            key: Any = k
        elif isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
            key = int(k)
        else:
            raise InputTypeError(f"input '{name}' has {kind.key.short} keys; got {k!r}")
        out[key] = to_value(f"{name}[{k!r}]", v, value)
    return out


def _any_array(name: str, x: Any, dtype: DType | None) -> np.ndarray:
    if dtype is not None:
        return to_array(name, x, dtype)
    arr = np.asarray(x)
    if arr.dtype == object:
        raise InputTypeError(f"input '{name}' cannot be converted to an array")
    return arr


def _content(kind: Any, x: Any) -> Any:
    if isinstance(kind, MapType):
        return "map"  # its contents never shape the compiled code
    if isinstance(kind, SequenceType):
        return tuple(_content(kind.elem, e) for e in x)
    if isinstance(kind, OptionalType):
        return None if x is None else _content(kind.elem, x)
    return (DType.from_numpy(x.dtype), tuple(int(n) for n in x.shape))


def entry_type(entry: tuple) -> ValueType:
    """The type of a specialised graph input from its signature entry."""
    from onnxjit.ir.ops.control.if_loop_scan import join

    kind, content = entry
    if isinstance(kind, DType):
        return TensorType(kind, tuple(content))
    if isinstance(kind, MapType):
        return kind
    if isinstance(kind, OptionalType):
        if content is None:
            return kind
        return OptionalType(_content_type(kind.elem, content))
    elem: ValueType | None = None
    for c in content:
        t = _content_type(kind.elem, c)
        elem = t if elem is None else join(elem, t)
    return SequenceType(elem if elem is not None else kind.elem)


def _content_type(kind: Any, c: Any) -> ValueType:
    if isinstance(kind, (SequenceType, OptionalType)):
        return entry_type((kind, c))
    return TensorType(c[0], tuple(c[1]))


def fast_key(values: Sequence[Any]) -> tuple:
    """A hashable key of a call's converted arguments (dtype and shape of each array)."""
    # String arrays get a key no raw argument matches: their elements are checked per call.
    return tuple(("str", a.shape) if isinstance(a, np.ndarray) and a.dtype == object else
                 (a.dtype, a.shape) if isinstance(a, np.ndarray) else
                 ("seq", fast_key(a)) if isinstance(a, list) else
                 "map" if isinstance(a, dict) else a for a in values)


def to_array(name: str, x: Any, dtype: DType) -> np.ndarray:
    if not isinstance(dtype, DType):
        return to_value(name, x, dtype)
    if dtype == DType.STRING:
        return _strings(name, x)
    if isinstance(x, np.ndarray):
        if x.dtype != dtype.numpy:
            if x.dtype.newbyteorder("=") == dtype.numpy:  # same type, other byte order
                return x.astype(dtype.numpy)
            raise InputTypeError(f"input '{name}' must have dtype {dtype.numpy} "
                                 f"({dtype.short}), got {x.dtype}")
        return x
    if isinstance(x, np.generic):
        x = x.item() if x.dtype != dtype.numpy else np.asarray(x)
        if isinstance(x, np.ndarray):
            return x
    if dtype.is_int and isinstance(x, (int, list, tuple)):
        exact = _python_ints(name, x, dtype)
        if exact is not None:
            return exact
    try:
        arr = np.asarray(x)
    except Exception as e:
        raise InputTypeError(f"input '{name}' cannot be converted to an array: {e}") from None
    if arr.dtype == object or arr.dtype.kind in "USVMm":
        raise InputTypeError(f"input '{name}' must be numeric ({dtype.short}), got "
                             f"{type(x).__name__} holding {arr.dtype}")
    if arr.dtype.kind in "fc" and dtype.is_int:
        raise InputTypeError(f"input '{name}' is {dtype.short}; got floating-point values")
    if arr.dtype.kind == "c" and arr.dtype.kind != np.dtype(dtype.numpy).kind:
        raise InputTypeError(f"input '{name}' is {dtype.short}; got complex values")
    if arr.dtype.kind in "fiub" and dtype == DType.BOOL and arr.dtype.kind != "b":
        raise InputTypeError(f"input '{name}' is bool; got {arr.dtype}")
    out = arr.astype(dtype.numpy)
    if arr.dtype.kind in "iu" and dtype.is_int and not np.array_equal(out, arr):
        # Python ints that do not fit the declared type would wrap around silently.
        raise InputError(f"input '{name}' is {dtype.short}; values such as "
                         f"{_first_misfit(arr, out)} do not fit in it")
    return out


def _strings(name: str, x: Any) -> np.ndarray:
    """A string input as an object array of `str`: from an object array, a numpy unicode
    array or (nested) lists of str; UTF-8 `bytes` elements are decoded. Every element is
    checked, since the host string ops would fail on anything else."""
    if isinstance(x, np.ndarray) and x.dtype.kind == "U":
        return x.astype(object)
    if isinstance(x, np.ndarray) and x.dtype.kind == "S":
        x = x.astype(object)  # bytes: decoded below
    if isinstance(x, (str, bytes)):
        x = np.array(x, dtype=object)
    try:
        arr = x if isinstance(x, np.ndarray) and x.dtype == object else np.array(x, object)
    except ValueError as e:
        raise InputTypeError(f"input '{name}' cannot be converted to an array: {e}") from None
    if isinstance(x, np.ndarray) and x.dtype != object:
        raise InputTypeError(f"input '{name}' must hold strings (str), got dtype {x.dtype}")
    flat = arr.reshape(-1)
    if all(type(v) is str for v in flat):
        return arr
    out = np.empty(arr.shape, dtype=object)
    dst = out.reshape(-1)
    for k, v in enumerate(flat):
        if isinstance(v, bytes):
            try:
                v = v.decode("utf-8")
            except UnicodeDecodeError:
                raise InputTypeError(f"input '{name}' element {k} is not UTF-8") from None
        if not isinstance(v, str):
            raise InputTypeError(f"input '{name}' must hold strings (str), element {k} is "
                                 f"{type(v).__name__}")
        dst[k] = str(v)
    return out


def _python_ints(name: str, x: Any, dtype: DType) -> np.ndarray | None:
    """Python ints (nested lists) converted exactly, with a range check: numpy would turn ints
    beyond int64 into objects or floats. None when `x` is not made of ints only."""
    try:
        obj = np.array(x, dtype=object)
    except ValueError:
        return None  # ragged: the generic path reports it
    flat = obj.reshape(-1)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
               for v in flat):
        return None
    info = np.iinfo(dtype.numpy)
    bad = next((int(v) for v in flat if not info.min <= int(v) <= info.max), None)
    if bad is not None:
        raise InputError(f"input '{name}' is {dtype.short}; value {bad} does not fit in it")
    return np.array([int(v) for v in flat], dtype.numpy).reshape(obj.shape)


def _first_misfit(arr: np.ndarray, out: np.ndarray) -> Any:
    a, o = arr.reshape(-1), out.reshape(-1)
    return a[np.flatnonzero(a != o)[0]].item()


def check(declared: Sequence[Declared], arrays: Sequence[np.ndarray]) -> tuple:
    """Validate arrays against declarations; returns the signature."""
    bound: dict[str, tuple[int, str]] = {}
    sig = []
    for (name, dtype, dims), a in zip(declared, arrays):
        if not isinstance(dtype, DType):
            sig.append((dtype, _content(dtype, a)))
            continue
        if a.dtype != dtype.numpy:
            raise InputTypeError(f"input '{name}' must have dtype {dtype.short}, got {a.dtype}")
        # A declared scalar takes any shape, as onnxruntime has it: people pass a VAD model's
        # sample rate as np.array([16000]); the program is specialised on the shape given.
        if dims:
            if a.ndim != len(dims):
                raise InputError(f"input '{name}' must have rank {len(dims)} "
                                 f"(shape [{', '.join(_d(d) for d in dims)}]), got shape "
                                 f"{list(a.shape)}")
            for k, (d, n) in enumerate(zip(dims, a.shape)):
                if isinstance(d, int) and d != n:
                    raise InputError(f"input '{name}' dim {k} must be {d}, got {n} "
                                     f"(shape {list(a.shape)})")
                if isinstance(d, str):
                    prev = bound.get(d)
                    if prev is not None and prev[0] != n:
                        raise InputError(f"symbolic dim '{d}' is {prev[0]} in input "
                                         f"'{prev[1]}' but {n} in input '{name}' (dim {k})")
                    bound[d] = (n, name)
        sig.append((dtype, tuple(int(n) for n in a.shape)))
    return tuple(sig)


def _d(d: int | str | None) -> str:
    return "?" if d is None else str(d)


def describe(names: Sequence[str], signature: tuple) -> str:
    return ", ".join(f"{n}: {_describe(e)}" for n, e in zip(names, signature))


def _describe(entry: tuple) -> str:
    kind, content = entry
    if isinstance(kind, DType):
        return f"{kind.short}[{','.join(map(str, content))}]"
    return str(entry_type(entry))


def signature_id(signature: tuple) -> str:
    """A short, file-name-safe text of a signature (used for dump folders and cache keys)."""
    return "_".join(_entry_id(e) for e in signature)


def _entry_id(entry: tuple) -> str:
    kind, content = entry
    if isinstance(kind, DType):
        return f"{kind.short}-{'x'.join(map(str, content)) or 'scalar'}"
    if isinstance(kind, MapType):
        return "map"
    if isinstance(kind, OptionalType):
        return "opt-none" if content is None else "opt-" + _content_id(kind.elem, content)
    return f"seq{len(content)}-" + "-".join(_content_id(kind.elem, c) for c in content)


def _content_id(kind: Any, c: Any) -> str:
    if isinstance(kind, (SequenceType, OptionalType)):
        return "(" + _entry_id((kind, c)) + ")"
    return _entry_id(c)
