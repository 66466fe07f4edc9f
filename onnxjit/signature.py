"""Input signatures: checking a call's arrays against the model's declared inputs.

A signature is a tuple of (DType, shape) per graph input, with concrete shapes. `check` turns a
call's arguments into arrays and validates them against the declared input types: dtype, rank,
fixed dims, and symbolic dims (a symbol shared by several inputs must have one size). Python
scalars and lists are converted to the declared dtype; numpy arrays of another dtype are refused
(no silent casts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxjit.errors import InputError, InputTypeError
from onnxjit.ir.types import DType

#: A declared input: (name, dtype, dims) where a dim is an int, a symbol name (str) or None.
Declared = tuple[str, DType, "tuple[int | str | None, ...] | None"]


def to_array(name: str, x: Any, dtype: DType) -> np.ndarray:
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
    try:
        arr = np.asarray(x)
    except Exception as e:
        raise InputTypeError(f"input '{name}' cannot be converted to an array: {e}") from None
    if arr.dtype == object or arr.dtype.kind in "USV":
        raise InputTypeError(f"input '{name}' must be numeric ({dtype.short}), got {type(x)}")
    if arr.dtype.kind == "f" and dtype.is_int:
        raise InputTypeError(f"input '{name}' is {dtype.short}; got floating-point values")
    if arr.dtype.kind in "fiub" and dtype == DType.BOOL and arr.dtype.kind != "b":
        raise InputTypeError(f"input '{name}' is bool; got {arr.dtype}")
    return arr.astype(dtype.numpy)


def check(declared: Sequence[Declared], arrays: Sequence[np.ndarray]) -> tuple:
    """Validate arrays against declarations; returns the signature."""
    bound: dict[str, tuple[int, str]] = {}
    sig = []
    for (name, dtype, dims), a in zip(declared, arrays):
        if a.dtype != dtype.numpy:
            raise InputTypeError(f"input '{name}' must have dtype {dtype.short}, got {a.dtype}")
        if dims is not None:
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
    return ", ".join(f"{n}: {dt.short}[{','.join(map(str, s))}]"
                     for n, (dt, s) in zip(names, signature))


def signature_id(signature: tuple) -> str:
    """A short, file-name-safe text of a signature (used for dump folders and cache keys)."""
    return "_".join(f"{dt.short}-{'x'.join(map(str, s)) or 'scalar'}" for dt, s in signature)
