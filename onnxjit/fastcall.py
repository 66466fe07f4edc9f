"""Binding a loaded program to a CPython builtin through the fast call trampoline.

`codegen/pyentry.py` generates the trampoline (a METH_FASTCALL function) into every program's
object code; this module fills its context block and makes the builtin:

    ctx   = 16 words: API function addresses, the entry, consts table, arena slot, counts,
            descriptor tables ([dtype number, rank, dims...] per input and output)
    self  = PyCapsule(ctx)                      (the trampoline reads its pointer at offset 16)
    fn    = PyCFunction_NewEx(&PyMethodDef{name, trampoline, METH_FASTCALL}, self, keep)
            (keep: the memory fn points to, so it lives as long as fn)

`fn(*arrays)` returns the tuple of outputs, or an int: -2 when the arrays do not match the
signature exactly (the caller takes the slow path, which converts or explains), k > 0 when
check k failed. Every object offset the trampoline relies on is verified once per process by
`layout_ok` on live objects; if any differs (another Python or numpy build) no builtin is made
and calls take the ctypes path.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

__all__ = ["FastCall", "layout_ok"]

_METH_FASTCALL = 0x80
_ARRAY_NEW_INDEX = 93  # PyArray_New in numpy's C-API table (stable since numpy 1.x)


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCFunction_NewEx.restype = ctypes.py_object
_api.PyCFunction_NewEx.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]


def _addr(fn: Any) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value or 0


@functools.lru_cache(maxsize=None)
def _array_new() -> int:
    from numpy._core import _multiarray_umath as mu

    table = _api.PyCapsule_GetPointer(mu._ARRAY_API, None)
    return ctypes.c_void_p.from_address(table + 8 * _ARRAY_NEW_INDEX).value or 0


def _word(address: int, offset: int, kind: type = ctypes.c_int64) -> int:
    return kind.from_address(address + offset).value


@functools.lru_cache(maxsize=None)
def layout_ok() -> bool:
    """True when every offset `codegen.pyentry` reads matches this interpreter and numpy."""
    from onnxjit.codegen import pyabi as p

    try:
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        if _word(id(a), p.OB_TYPE) != id(np.ndarray) or _word(id(a), p.AR_DATA) != a.ctypes.data:
            return False
        if _word(id(a), p.AR_ND, ctypes.c_int32) != 2:
            return False
        dims = _word(id(a), p.AR_DIMS)
        if (_word(dims, 0), _word(dims, 8)) != (2, 3):
            return False
        descr = _word(id(a), p.AR_DESCR)
        if descr != id(a.dtype) or _word(descr, p.DESCR_TYPE_NUM, ctypes.c_int32) != a.dtype.num:
            return False
        big = np.dtype(">f4")
        if _word(id(big), p.DESCR_BYTEORDER, ctypes.c_int8) != ord(">"):
            return False
        if _word(id(a), p.AR_FLAGS, ctypes.c_int32) != a.flags.num:
            return False
        t = (a, big)
        if _word(id(t), p.TUPLE_ITEMS) != id(a) or _word(id(t), p.TUPLE_ITEMS + 8) != id(big):
            return False
        cap = _api.PyCapsule_New(ctypes.c_void_p(12345), None, None)
        if _word(id(cap), p.CAPSULE_POINTER) != 12345:
            return False
        new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_int,
                               ctypes.POINTER(ctypes.c_int64), ctypes.c_int, ctypes.c_void_p,
                               ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                               ctypes.c_void_p)(_array_new())
        shape = (ctypes.c_int64 * 2)(4, 5)
        made = new(id(np.ndarray), 2, shape, np.dtype(np.float64).num, None, None, 0, 0, None)
        return (type(made) is np.ndarray and made.shape == (4, 5)
                and made.dtype == np.float64 and made.flags.c_contiguous)
    except Exception:
        return False


def _desc(specs: list[tuple[int, tuple[int, ...]]]) -> ctypes.Array:
    words: list[int] = []
    for num, shape in specs:
        words += [num, len(shape), *shape]
    return (ctypes.c_int64 * max(1, len(words)))(*words)


class FastCall:
    """The builtin for one loaded artifact; `fn` is what callers invoke."""

    def __init__(self, trampoline: int, entry: int, consts_ptr: int,
                 inputs: list[tuple[np.dtype, tuple[int, ...]]],
                 outputs: list[tuple[np.dtype, tuple[int, ...]]],
                 arena_size: int, release_gil: bool):
        from onnxjit.codegen import pyabi as p

        self._in_desc = _desc([(np.dtype(d).num, tuple(s)) for d, s in inputs])
        self._out_desc = _desc([(np.dtype(d).num, tuple(s)) for d, s in outputs])
        # The arena the trampoline borrows with an atomic exchange; the slot holds its aligned
        # address while no call uses it.
        self._arena = np.empty(arena_size + 64, np.uint8) if arena_size else None
        self._slot = ctypes.c_void_p(
            (self._arena.ctypes.data + 63) // 64 * 64 if arena_size else 0)
        values = {
            "ndarray_type": id(np.ndarray), "array_new": _array_new(),
            "tuple_new": _addr(_api.PyTuple_New), "long_from": _addr(_api.PyLong_FromLongLong),
            "decref": _addr(_api.Py_DecRef), "save_thread": _addr(_api.PyEval_SaveThread),
            "restore_thread": _addr(_api.PyEval_RestoreThread), "entry": entry,
            "consts": consts_ptr, "arena_slot": ctypes.addressof(self._slot),
            "n_in": len(inputs), "n_out": len(outputs), "release_gil": int(release_gil),
            "in_desc": ctypes.addressof(self._in_desc),
            "out_desc": ctypes.addressof(self._out_desc), "needs_arena": int(arena_size > 0),
        }
        self._ctx = (ctypes.c_uint64 * len(p.CTX_FIELDS))(
            *[values[name] & (2**64 - 1) for name in p.CTX_FIELDS])
        self._capsule = _api.PyCapsule_New(ctypes.addressof(self._ctx), None, None)
        self._name = b"onnxjit_call"
        self._def = _MethodDef(self._name, trampoline, _METH_FASTCALL, None)
        # The function's `m_module` holds what it points to (its PyMethodDef, the context and
        # the buffers the trampoline reads): CPython reads `m_ml->ml_flags` when it traverses
        # or frees the function, which may happen after this object is gone (an artifact's
        # attributes are freed in order, the function last; a tuple frees its items last
        # first), and freed memory there crashed a process now and then.
        keep = (self._def, self._ctx, self._slot, self._in_desc, self._out_desc, self._arena)
        self.fn = _api.PyCFunction_NewEx(ctypes.addressof(self._def), self._capsule, keep)
