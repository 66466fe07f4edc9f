"""A native artifact: the loaded code of one signature, and the fast call path into it.

The call path is the part of onnxjit that runs on every inference, so it does as little as it can:
allocate the outputs, then one ctypes call into `<name>_entry_py`, which reads each array's data
pointer and flags straight from the numpy object (offsets checked once at start-up by
`pyobject_layout_ok`). Constants are passed through a pointer table built once; temps live in an
arena kept per thread (so concurrent calls never share scratch memory, `ArenaShare`): per artifact,
or, for the signatures a symbolic program binds, one per program that grows to the largest (a
stream of new shapes then touches fresh pages only when a call needs more). The pointer table ends
with two slots for parallel loops (`codegen.pool_slots`): the worker pool's `parallel_for` and
`num_threads` (0: all cores), and, for a program compiled for symbolic sizes, one more: its `dims`
table for this artifact's signature (`onnxjit.dynamic`). No `ndarray.ctypes` or
`__array_interface__` on this path. If the entry reports a non-contiguous, misaligned or read-only
array (-1), the call is retried with contiguous copies; a failed `Check` (k > 0) raises
`InputError` with its message.

Sizes: a call's input shapes (or values, in staged graphs) fix the sizes of the outputs and the
arena. Before anything is allocated, each is checked against `memory_limit()` (the machine's
RAM plus swap, at most 2**47 bytes): a buffer that can never be filled is refused with an
`InputError` naming the output (or the arena) and the size, instead of a bare MemoryError or,
under `vm.overcommit_memory=1`, a process killed while writing it. A MemoryError of an
allocation that fits the limit (memory in use elsewhere) becomes the same `InputError`.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from onnxjit.errors import InputError, ModelError, SizeLimitError, format_size

#: Byte offsets of `data` and `flags` in numpy's PyArrayObject_fields on 64-bit CPython
#: (ob_refcnt, ob_type, data, nd, dimensions, strides, base, descr, flags); checked at start-up.
DATA_OFFSET = 16
FLAGS_OFFSET = 64


def pyobject_layout_ok(data_offset: int, flags_offset: int) -> bool:
    """True when numpy arrays keep their data pointer and flags at the offsets the generated
    `_entry_py` reads (CPython 64-bit with numpy's PyArrayObject_fields)."""
    try:
        probes = [np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(2, 3)[:, ::2],
                  np.zeros(0, np.int64)]
        probes[0].flags.writeable = False
        for a in probes:
            ptr = ctypes.c_void_p.from_address(id(a) + data_offset).value or 0
            flags = ctypes.c_int.from_address(id(a) + flags_offset).value
            if ptr != (a.ctypes.data or 0) or flags != a.flags.num:
                return False
        return ctypes.sizeof(ctypes.c_void_p) == 8
    except Exception:
        return False


#: No x86-64/AArch64 process can address more (47-bit user space).
MAX_BYTES = 1 << 47


@functools.lru_cache(maxsize=None)
def memory_limit() -> int:
    """The most bytes one buffer may take: RAM plus swap (Linux `/proc/meminfo`, else RAM from
    sysconf), capped at MAX_BYTES; MAX_BYTES when the platform does not say."""
    total = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "SwapTotal"):
                    total += int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        total = 0
    if not total:
        try:
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, OSError, ValueError):
            total = 0
    return min(total, MAX_BYTES) if total > 0 else MAX_BYTES


def too_large(what: str, nbytes: int, detail: str = "") -> InputError:
    """The error for a buffer of `nbytes` that this call needs but cannot have."""
    limit = memory_limit()
    why = (f"more than this machine's memory ({format_size(limit)})" if nbytes > limit
           else "more than could be allocated now")
    return InputError(f"{what} would need {format_size(nbytes)}, {why}; the shapes or values of "
                      f"this call's inputs make it this large{detail}")


@contextmanager
def sized_for_call(what: str, values: bool = False, shapes: bool = False) -> Iterator[None]:
    """Around specialising, compiling or running for one call (`what` describes its inputs):
    a value too large for a process (`SizeLimitError` of shape inference) or an allocation
    that fails is the call's fault, an `InputError`; so is any other `ModelError` with `values`
    (the run-time shape phase, working on the call's values) or `shapes` (specialising a model
    whose declared input shapes leave sizes to the call: sizes that do not fit together are
    the call's)."""
    try:
        yield
    except (SizeLimitError, MemoryError, ModelError) as e:
        err = call_fault(e, what, values, shapes)
        if err is e:
            raise
        raise err from None


def call_fault(e: BaseException, what: str | Callable[[], str], values: bool = False,
               shapes: bool = False) -> BaseException:
    """The error `sized_for_call` raises for `e` (`e` itself when it is the model's fault);
    `what` may be a function giving the text, called only here."""
    what = what if isinstance(what, str) else what()
    if isinstance(e, SizeLimitError):
        return InputError(f"{e}; the shapes or values of this call's inputs ({what}) make it "
                          "this large")
    if isinstance(e, MemoryError):
        return InputError(f"not enough memory for this call's inputs ({what}): "
                          f"{e or 'MemoryError'}")
    if isinstance(e, ModelError) and (values or shapes):
        kind = "values" if values else "shapes"
        err = InputError(f"{e}; with the {kind} of this call's inputs ({what})")
        err.where = e.where
        return err
    return e


def _entry_functions(library: Any, n_io: int, py_entry: bool) -> tuple[Any, Any]:
    """The ctypes functions calling a library's entries (made once per library and arity:
    every signature a symbolic program binds shares them)."""
    cache = library.entry_functions
    fns = cache.get((n_io, py_entry))
    if fns is None:
        fn_py = None
        if py_entry:
            proto = ctypes.CFUNCTYPE(ctypes.c_int, *([ctypes.py_object] * n_io),
                                     ctypes.c_void_p, ctypes.c_void_p)
            fn_py = proto(library.entry_py_addr)
        proto2 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_void_p)
        fns = cache[(n_io, py_entry)] = (fn_py, proto2(library.entry_addr))
    return fns


def _nbytes(shape: tuple[int, ...], dtype: Any) -> int:
    n = np.dtype(dtype).itemsize
    for d in shape:
        n *= int(d)
    return n


class Artifact:
    """Everything needed to run one signature, whether just compiled or loaded from disk.

    `library` is codegen's NativeLibrary: it keeps the engine (and the code) alive. `source`
    is "compiled", "disk" or "memory"; `num_threads` the threads of its parallel loops (0: all
    cores); `out_names` name the outputs in messages.
    """

    def __init__(self, signature: tuple, out_specs: list[tuple[tuple[int, ...], np.dtype]],
                 consts: list[np.ndarray], arena_size: int, messages: list[str], library: Any,
                 use_py_entry: bool, program: Any = None, compile_seconds: float = 0.0,
                 source: str = "compiled", num_threads: int = 0,
                 out_names: list[str] | None = None, dims: np.ndarray | None = None,
                 table_prefix: list[int] | None = None) -> None:
        self.signature = signature
        self.out_specs = out_specs
        self.consts = consts
        self.arena_size = arena_size
        self.messages = messages
        self.library = library
        self.use_py_entry = use_py_entry
        self.program = program
        self.compile_seconds = compile_seconds
        self.source = source
        self.num_threads = num_threads
        self.out_names = out_names
        self.dims = dims  # a symbolic program's sizes for this signature (`onnxjit.dynamic`)
        self.symbolic: Any = None  # the SymbolicArtifact that bound it, if one did
        #: where its calls take their temps: an arena per thread of its own, or the one its
        #: symbolic program's signatures share (set by `SymbolicArtifact.bind`)
        self.arena_share = ArenaShare(slack=0)
        self._check_sizes()
        n_io = len(self.signature) + len(self.out_specs)
        self._n_in = len(self.signature)
        table = list(table_prefix or self.table_prefix(consts, library, num_threads))
        if dims is not None:
            table.append(dims.ctypes.data)
        self._consts_table = (ctypes.c_void_p * len(table))(*table)
        self.consts_ptr = ctypes.addressof(self._consts_table)
        self._fn_py, self._fn = _entry_functions(library, n_io, self.use_py_entry)
        self._io = ctypes.c_void_p * max(1, n_io)
        self._fast: Any = False  # built at the second call (`fast`)

    @property
    def fast(self) -> Any:
        """The FastCall builtin of this artifact (None if it has none), built when first asked
        for: the runtime asks at a signature's second call, so a stream whose every call has a
        new shape never builds one."""
        if self._fast is False:
            self._fast = self._fastcall()
        return self._fast

    @fast.setter
    def fast(self, value: Any) -> None:
        self._fast = value

    @staticmethod
    def table_prefix(consts: list[np.ndarray], library: Any, num_threads: int) -> list[int]:
        """The consts table's entries before the dims: the constants' addresses and the worker
        pool's slots (a symbolic program computes them once for all its signatures)."""
        from onnxjit.codegen import pool_slots
        from onnxjit.options import available_cores

        threads = num_threads or available_cores()
        return [a.ctypes.data for a in consts] + pool_slots(library.object, threads)

    def _fastcall(self) -> Any:
        """The CPython builtin that runs this artifact (`onnxjit.fastcall`), or None when the
        object code has no trampoline or this interpreter's object layout is not the one it
        reads."""
        name = getattr(self.library.object, "fastcall", "")
        if not name:
            return None
        from onnxjit import fastcall

        if not fastcall.layout_ok():
            return None
        addr = self.library.address(name)
        if not addr:
            return None
        # Release the GIL around big programs only: for a tiny one the release costs more
        # than the work, and other Python threads lose nothing while it runs.
        io_bytes = sum(math.prod(s) * np.dtype(d).itemsize
                       for d, s in self.signature_arrays() + [(d, s) for s, d in self.out_specs])
        release = io_bytes + self.arena_size > (1 << 16)
        try:
            return fastcall.FastCall(addr, self.library.entry_addr, self.consts_ptr,
                                     self.signature_arrays(),
                                     [(np.dtype(d), tuple(s)) for s, d in self.out_specs],
                                     self.arena_size, release)
        except MemoryError as e:  # its arena
            raise self._out_of_memory(e) from None

    def _output_name(self, k: int) -> str:
        names = self.out_names or []
        return f"output '{names[k]}'" if k < len(names) and names[k] else f"output {k}"

    def _check_sizes(self) -> None:
        """Refuse outputs and an arena that no allocation could hold (see the docstring)."""
        limit = memory_limit()
        for k, (shape, dtype) in enumerate(self.out_specs):
            nbytes = _nbytes(shape, dtype)
            if nbytes > limit:
                raise too_large(f"{self._output_name(k)} (shape {list(shape)}, "
                                f"{np.dtype(dtype).name})", nbytes)
        if self.arena_size + 64 > limit:
            raise too_large("the temporary values of this call", self.arena_size + 64)

    def _out_of_memory(self, e: MemoryError) -> InputError:
        sizes = [_nbytes(s, d) for s, d in self.out_specs]
        k = max(range(len(sizes)), key=sizes.__getitem__) if sizes else -1
        if k >= 0 and sizes[k] >= self.arena_size:
            what = f"{self._output_name(k)} (shape {list(self.out_specs[k][0])})"
            return too_large(what, sizes[k], f" ({e})")
        return too_large("the temporary values of this call", self.arena_size + 64, f" ({e})")

    def signature_arrays(self) -> list[tuple[np.dtype, tuple[int, ...]]]:
        return [(dt.numpy, tuple(shape)) for dt, shape in self.signature]

    def _arena(self) -> int | None:
        if self.arena_size == 0:
            return None
        try:
            return self.arena_share.get(self.arena_size)
        except MemoryError as e:
            raise self._out_of_memory(e) from None

    def run(self, args: tuple | list) -> tuple:
        """Run on validated input arrays (dtypes and shapes of `signature`)."""
        empty = np.empty
        try:
            outs = [empty(s, d) for s, d in self.out_specs]
        except MemoryError as e:
            raise self._out_of_memory(e) from None
        if self.use_py_entry:
            # the hot path: no arena, or this thread's arena is big enough already
            arena = self.arena_share.ptr(self.arena_size) if self.arena_size else None
            if arena is None and self.arena_size:
                arena = self._arena()
            rc = self._fn_py(*args, *outs, self.consts_ptr, arena)
            if rc == 0:
                return tuple(outs)
            if rc == -1:
                args = [np.ascontiguousarray(a) for a in args]
                aligned = [a if a.flags.aligned else a.copy() for a in args]
                rc = self._fn_py(*aligned, *outs, self.consts_ptr, self._arena())
                if rc == 0:
                    return tuple(outs)
        else:
            args = [np.ascontiguousarray(a) for a in args]
            io = self._io(*[a.ctypes.data for a in args], *[o.ctypes.data for o in outs])
            rc = self._fn(ctypes.addressof(io), self.consts_ptr, self._arena())
            if rc == 0:
                return tuple(outs)
        if 0 < rc <= len(self.messages):
            raise InputError(self.messages[rc - 1])
        raise InputError(f"compiled code rejected the call (status {rc})")


class ArenaShare:
    """An arena per thread: `get(size)` returns an aligned buffer of at least `size` bytes,
    reallocated when a call needs more, `slack` larger than asked. An artifact has one of its
    own (no slack: its size never changes); a symbolic program shares one between all the
    signatures it binds (`Artifact.arena_share`), a quarter larger, so a stream of growing
    shapes reallocates a few times, not at every shape. Measured, PP-OCR-style detector, six
    pages in a fresh process with the program on disk: each page's new arena had been first
    touched during its call."""

    def __init__(self, slack: float = 0.25) -> None:
        self.slack = slack
        self._tls = threading.local()

    def ptr(self, size: int) -> int | None:
        """This thread's arena if it holds `size` bytes, else None (then `get`)."""
        tls = self._tls.__dict__
        return tls["ptr"] if tls.get("cap", 0) >= size else None

    def get(self, size: int) -> int:
        tls = self._tls
        if getattr(tls, "cap", 0) < size:
            cap = size + int(size * self.slack)
            tls.cap, tls.buf = 0, None  # the old buffer goes first; if np.empty fails, no
            tls.buf = np.empty(cap + 64, np.uint8)  # stale pointer is left behind
            tls.cap = cap
            tls.ptr = (tls.buf.ctypes.data + 63) // 64 * 64  # aligned to a cache line
        return tls.ptr
