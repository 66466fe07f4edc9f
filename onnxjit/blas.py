"""numpy's OpenBLAS and onnxjit's threads: one BLAS thread for tier 0, no idle spinners.

numpy's products run on the OpenBLAS it loaded, with a thread per core. While tier 0 runs, a
background compile occupies another core, and OpenBLAS's threads then wait on each other: a
24x256 by 256x2000 product measured 0.44 ms on one thread and 5.7 ms on two beside a busy core.
`one_thread()` sets OpenBLAS to one thread for the duration of a tier-0 call and restores the
caller's setting after it. The library is found among the process's mapped files (the numpy
wheel's `scipy_openblas64_`, or a system OpenBLAS) and driven through its own
`*_set_num_threads` / `*_get_num_threads` entry points; without them it does nothing.

OpenBLAS's server threads spin for a while (some 65 ms of a core after numpy's import, 100 ms
after a product) before they sleep. A process that imports numpy and runs a model at once
(a warm start: the first result 60 ms after the import) had them spinning on the core its
worker pool wanted: ResNet-50's first inference took 38-46 ms instead of 27 (with
OPENBLAS_NUM_THREADS=1, 39 ms for the whole first call instead of 53-67). `park_spinners`,
called once per process by the first native call of a model, or before then by the disk
cache reading a large entry (whose checksum runs on two threads: the bench's ResNet-50 warm
start 51-56 -> 47 ms), stops them (`blas_thread_shutdown_`) when no other Python thread
runs, so no BLAS call can be under way.
The next BLAS call starts them again (0.6 ms once), and they spin anew: tier 0's first call
(`one_thread` restoring the thread count) did, so parking before tier 0 made cold streams
slower (decoder 0.15 -> 0.20 s), and tier-0 calls do not park.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import re
import threading
from collections.abc import Iterator
from typing import Any

_NAMES = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
          ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
          ("openblas_set_num_threads", "openblas_get_num_threads"))


@functools.lru_cache(maxsize=None)
def _libraries() -> tuple[Any, ...]:
    """The OpenBLAS libraries this process mapped (numpy's), opened."""
    try:
        import numpy  # noqa: F401  (loads its BLAS)

        with open("/proc/self/maps") as f:
            paths = sorted(set(re.findall(r"/\S*openblas\S*\.so\S*", f.read())))
        return tuple(ctypes.CDLL(path) for path in paths)
    except OSError:
        return ()


@functools.lru_cache(maxsize=None)
def _entry_points() -> tuple[Any, Any] | None:
    try:
        for lib in _libraries():
            for set_name, get_name in _NAMES:
                if hasattr(lib, set_name) and hasattr(lib, get_name):
                    setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                    setter.argtypes, setter.restype = [ctypes.c_int], None
                    getter.argtypes, getter.restype = [], ctypes.c_int
                    return setter, getter
    except (OSError, AttributeError):
        pass
    return None


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    ep = _entry_points()
    if ep is None:
        yield
        return
    setter, getter = ep
    before = getter()
    if before == 1:
        yield
        return
    setter(1)
    try:
        yield
    finally:
        setter(before)


_parked = False


def park_spinners() -> None:
    """Stop OpenBLAS's spinning server threads, the first time it is called in a process and
    when this is the only Python thread (module docstring)."""
    global _parked
    if _parked:
        return
    _parked = True
    if threading.active_count() != 1:
        return
    for lib in _libraries():
        shutdown = getattr(lib, "blas_thread_shutdown_", None)
        if shutdown is not None:
            shutdown.restype = ctypes.c_int
            shutdown()
