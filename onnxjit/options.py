"""Compile options: one frozen object, built once per `compile` call.

Environment variables are read only by `CompileOptions.from_user` (called by the driver), so the
rest of the compiler sees plain values.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

from onnxjit.errors import OnnxJitError
from onnxjit.paths import cache_root
from onnxjit.record import Record

SPECIALIZE = ("shape", "dynamic", "auto")


class CompileOptions(Record):
    """The validated options of one `compile` call (see `from_user`); immutable."""

    __slots__ = ("cache_dir", "dump_ir", "num_threads", "specialize", "opt_level", "base_dir",
                 "verify", "fast_algorithms", "progress", "cache_max_bytes", "tiered")
    #: Disk cache folder; None disables the disk cache.
    cache_dir: Path | None
    #: Folder receiving the IR after every pass; None for no dumps.
    dump_ir: Path | None
    #: Worker threads for parallel loops (0: all cores).
    num_threads: int
    #: "shape": one program per concrete input shapes; "dynamic": one per dtypes and ranks, the
    #: dims the model declares symbolic staying symbolic; "auto": shapes as they come, then one
    #: program with the dims seen varying symbolic (`onnxjit.specialize`).
    specialize: str
    #: 0 (no LLVM optimisation) .. 3.
    opt_level: int
    #: Base folder for external data of models given as bytes or objects.
    base_dir: Path | None
    #: When the IR verifiers run: True after every pass; None (the default, unless
    #: $ONNXJIT_VERIFY=1 or 0 says True or False) on the imported model and each pipeline's
    #: result; False never.
    verify: bool | None
    #: Products by constant weights may use algorithms with fewer multiplies whose sums round
    #: differently (Strassen for MatMul/Gemm, Winograd F(2x2,3x3) for 3x3 convs: errors
    #: bounded by the operands' magnitudes, not element by element); False: direct sums only.
    fast_algorithms: bool
    #: Progress of compiles: "auto" (a one-line display on stderr when it is a terminal, for
    #: compiles over a second), True (that display even when stderr is not a terminal), False
    #: (none), or a callable `fn(stage, done, total)` (`onnxjit.progress`).
    progress: Any
    #: Size cap of the disk cache in bytes (None: none); a write past it removes the least
    #: recently used entries (`onnxjit.cache_prune`). `$ONNXJIT_CACHE_MAX_SIZE`, e.g. "2G".
    cache_max_bytes: int | None
    #: Whether a call whose program is not compiled yet runs on tier 0 (the graph with numpy)
    #: while the program compiles in a background process (`onnxjit.tiered`); needs the disk
    #: cache. Default True; `$ONNXJIT_TIERED=0` turns it off.
    tiered: bool
    _defaults: ClassVar[dict[str, Any]] = {
        "cache_dir": None, "dump_ir": None, "num_threads": 0, "specialize": "auto",
        "opt_level": 3, "base_dir": None, "verify": None, "fast_algorithms": True,
        "progress": "auto", "cache_max_bytes": None, "tiered": True}

    @staticmethod
    def from_user(options: dict[str, Any]) -> CompileOptions:
        """Validate keyword options and fill defaults from the environment."""
        known = set(CompileOptions._fields)
        unknown = sorted(set(options) - known)
        if unknown:
            raise OnnxJitError(f"unknown compile option(s) {', '.join(unknown)}; "
                               f"known: {', '.join(sorted(known))}")
        cache = options.get("cache_dir")
        if cache is None:
            cache = cache_root()
        cache_dir = None if cache is False or cache == "" else Path(cache)
        dump = options.get("dump_ir") or os.environ.get("ONNXJIT_DUMP_IR") or None
        specialize = options.get("specialize") or os.environ.get("ONNXJIT_SPECIALIZE") or "auto"
        if specialize == "rank":  # its earlier name
            specialize = "dynamic"
        if specialize not in SPECIALIZE:
            raise OnnxJitError(f"specialize must be one of {SPECIALIZE}, got {specialize!r}")
        opt_level = options.get("opt_level", 3)
        if opt_level not in (0, 1, 2, 3):
            raise OnnxJitError(f"opt_level must be 0..3, got {opt_level!r}")
        num_threads = options.get("num_threads", 0) or 0
        if not isinstance(num_threads, int) or num_threads < 0:
            raise OnnxJitError(f"num_threads must be a non-negative int, got {num_threads!r}")
        base_dir = options.get("base_dir")
        fast = options.get("fast_algorithms", True)
        if not isinstance(fast, bool):
            raise OnnxJitError(f"fast_algorithms must be True or False, got {fast!r}")
        tiered = options.get("tiered")
        if tiered is None:
            tiered = os.environ.get("ONNXJIT_TIERED", "1").strip() not in ("0", "false", "no",
                                                                          "off", "")
        if not isinstance(tiered, bool):
            raise OnnxJitError(f"tiered must be True or False, got {tiered!r}")
        return CompileOptions(
            tiered=tiered,
            progress=_progress(options.get("progress")),
            cache_dir=cache_dir,
            dump_ir=Path(dump) if dump else None,
            num_threads=num_threads or (available_cores()),
            specialize=specialize,
            opt_level=opt_level,
            base_dir=Path(base_dir) if base_dir else None,
            verify=_verify(options.get("verify")),
            fast_algorithms=fast,
            cache_max_bytes=_cache_cap(options.get("cache_max_bytes")),
        )

    def code_key(self) -> str:
        """The options that change generated code (part of the cache key)."""
        return (f"opt{self.opt_level}-threads:{self.num_threads}"
                f"{'' if self.fast_algorithms else '-direct'}")


def _progress(value: Any) -> Any:
    """The `progress` option: None takes `$ONNXJIT_PROGRESS` (0: off, 1: on), else "auto"."""
    if value is None:
        env = os.environ.get("ONNXJIT_PROGRESS", "").strip().lower()
        value = {"0": False, "false": False, "off": False, "no": False,
                 "1": True, "true": True, "on": True, "yes": True}.get(env, "auto")
    if not (isinstance(value, bool) or callable(value) or value == "auto"):
        raise OnnxJitError(f"progress must be True, False, 'auto' or a callable "
                           f"fn(stage, done, total), got {value!r}")
    return value


#: the disk cache's size cap when neither the option nor the environment sets one
DEFAULT_CACHE_MAX = "5G"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str | int, what: str = "a size") -> int:
    """Bytes of a size given as an int or text: "500M", "2G", "1.5GiB", "1000000" (K, M, G, T
    are powers of 1024; a trailing "B" or "iB" is allowed)."""
    import re

    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", str(text))
    if isinstance(text, bool) or m is None:
        raise OnnxJitError(f"{what} must be a number of bytes or one like 500M or 2G, got "
                           f"{text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _cache_cap(value: Any) -> int | None:
    """The cap in bytes (None: no cap) from the option, else $ONNXJIT_CACHE_MAX_SIZE, else
    DEFAULT_CACHE_MAX; 0 means no cap."""
    if value is None:
        env = os.environ.get("ONNXJIT_CACHE_MAX_SIZE")
        value, what = (env, "$ONNXJIT_CACHE_MAX_SIZE") if env else (DEFAULT_CACHE_MAX, "")
    else:
        what = "cache_max_bytes"
    return parse_size(value, what) or None


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers and `taskset`
    restrict), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _verify(value: Any) -> bool | None:
    """The `verify` option: as given, else $ONNXJIT_VERIFY (1: True, 0: False), else None."""
    if value is None:
        value = {"1": True, "0": False}.get(os.environ.get("ONNXJIT_VERIFY", "").strip())
    return None if value is None else bool(value)
