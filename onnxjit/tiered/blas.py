"""One BLAS thread for tier 0: the other cores are compiling.

numpy's products run on the OpenBLAS it loaded, with a thread per core. While tier 0 runs, a
background compile occupies another core, and OpenBLAS's threads then wait on each other: a
24x256 by 256x2000 product measured 0.44 ms on one thread and 5.7 ms on two beside a busy core.
`one_thread()` sets OpenBLAS to one thread for the duration of a tier-0 call and restores the
caller's setting after it. The library is found among the process's mapped files (the numpy
wheel's `scipy_openblas64_`, or a system OpenBLAS) and driven through its own
`*_set_num_threads` / `*_get_num_threads` entry points; without them it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import re
from collections.abc import Iterator
from typing import Any

_NAMES = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
          ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
          ("openblas_set_num_threads", "openblas_get_num_threads"))


@functools.lru_cache(maxsize=None)
def _entry_points() -> tuple[Any, Any] | None:
    try:
        import numpy  # noqa: F401  (loads its BLAS)

        with open("/proc/self/maps") as f:
            paths = sorted(set(re.findall(r"/\S*openblas\S*\.so\S*", f.read())))
        for path in paths:
            lib = ctypes.CDLL(path)
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
