"""Compile sessions: timings per signature, progress reports, and the log lines of a compile.

Algorithm: `CompiledModel` opens a `Session` around every lookup of a new signature. The
session installs a `timings.Recorder` (so the stages run inside are timed) and is that
recorder's listener. A lookup served from memory or disk records only its reading and
linking; on a miss the runtime calls `compiling(expected_stages)`, which logs the start and,
if the `progress` option asks for it, starts reporting: each stage's beginning is passed to a
callback `fn(stage, done, total)` (`done` stages of about `total` finished; `total` is an
estimate and grows when exceeded), and a last call `("done", n, n)` ends a compile that
finished. `progress=None` means: the terminal display when stderr is a terminal (`Display`:
one line on stderr, repainted a few times a second from a daemon thread, shown only once the
compile has run for `DELAY` seconds, erased at the end), else nothing; `ONNXJIT_PROGRESS=0`
(read by `CompileOptions.from_user`) turns it off, `=1` forces the display.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from onnxjit.timings import DEBUG, INFO, Recorder, current, install, log, restore

ProgressFn = Callable[[str, int, int], None]
DELAY = 1.0  # seconds before the terminal display appears: quick compiles stay silent
_REPAINT = 0.2
_UNCOUNTED = frozenset({"verify", "op-table"})  # stages between or inside counted steps


def resolve(option: Any, stream: IO[str] | None = None) -> ProgressFn | None:
    """The progress callback of an option value: False/None-on-no-terminal -> None, a
    callable -> itself, True or "auto" on a terminal -> a `Display` on `stream` (stderr)."""
    if option is False or option is None:
        return None
    if callable(option):
        return option
    stream = stream or sys.stderr
    if option == "auto":
        try:
            if not stream.isatty():
                return None
        except (AttributeError, ValueError):  # a replaced or closed stream
            return None
    return Display(stream)


class Display:
    """The terminal display: `onnxjit: compiling [7/18] pass fuse  2.4 s` on one line."""

    def __init__(self, stream: IO[str], delay: float = DELAY) -> None:
        self.stream = stream
        self.delay = delay
        self.t0 = time.perf_counter()
        self.text = "starting"
        self.verb = "compiling"
        self.shown = False
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage == "done":
            self.close()
            return
        self.text = f"[{done}/{total}] {stage}"
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="onnxjit-progress",
                                           daemon=True)
            self.thread.start()

    def _run(self) -> None:
        if self.stop.wait(self.delay):
            return
        while not self.stop.is_set():
            self._paint()
            self.stop.wait(_REPAINT)

    def _paint(self) -> None:
        line = f"onnxjit: {self.verb} {self.text}  {time.perf_counter() - self.t0:.1f} s"
        with self.lock:
            if self.stop.is_set():
                return
            self.stream.write(f"\r\x1b[K{line}")
            self.stream.flush()
            self.shown = True

    def close(self) -> None:
        """Stop repainting and erase the line (also after an interrupt)."""
        self.stop.set()
        with self.lock:
            if self.shown:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self.shown = False


class Session:
    """The recorder and progress reporting of one signature's lookup (see the module
    docstring); `stages()` gives the seconds per stage afterwards."""

    def __init__(self, what: Any, option: Any, verbs: tuple[str, str] = ("compiling",
                                                                         "compiled")) -> None:
        self.what = what
        self.verbs = verbs
        self.option = option
        self.recorder = Recorder(self)
        self.callback: ProgressFn | None = None
        self.done = 0
        self.total = 0
        self.t0 = 0.0
        self.compiled = False

    def __enter__(self) -> Session:
        self._token = install(self.recorder)
        return self

    def __exit__(self, kind: type | None, exc: object, tb: object) -> None:
        restore(self._token)
        if not self.compiled:
            return
        seconds = time.perf_counter() - self.t0
        if kind is None:
            if self.callback is not None:
                self.callback("done", self.done, self.done)
            log(INFO, "%s %s in %.2f s", self.verbs[1], self.what, seconds)
        else:
            if isinstance(self.callback, Display):
                self.callback.close()
            log(INFO, "%s %s stopped after %.2f s by %s", self.verbs[0], self.what, seconds,
                getattr(kind, "__name__", kind))

    def compiling(self, expected: int) -> None:
        """A cache miss: `expected` more stages will run (a first compile can announce the
        import's, then the signature's)."""
        self.total += expected
        if self.compiled:
            return
        self.compiled = True
        self.t0 = time.perf_counter()
        log(INFO, "%s %s", self.verbs[0], self.what)
        self.callback = resolve(self.option)
        if isinstance(self.callback, Display):
            self.callback.verb = self.verbs[0]

    # timings.Listener
    def begin(self, stage: str) -> None:
        if self.callback is not None and stage not in _UNCOUNTED:
            self.callback(stage, self.done, max(self.total, self.done + 1))

    def end(self, stage: str) -> None:
        if stage not in _UNCOUNTED:
            self.done += 1

    def stages(self) -> dict[str, float]:
        return self.recorder.summary() if self.recorder.stages else {}


def compiling(expected: int) -> None:
    """Tell the session of the running lookup (if any) that it compiles (see `Session`)."""
    rec = current()
    session = rec.listener if rec is not None else None
    if isinstance(session, Session):
        session.compiling(expected)


def cache_event(kind: str, what: Any) -> None:
    """A debug log line for a memory hit, disk hit or miss."""
    log(DEBUG, "%s: %s", kind, what)


class LazyText:
    """Text computed when first formatted (a log line nobody shows costs nothing)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], str]) -> None:
        self.make = make

    def __str__(self) -> str:
        return self.make()


def format_table(stages: dict[str, float]) -> str:
    """Seconds per stage as an aligned table with each stage's share and the total."""
    total = sum(stages.values()) or 1e-12
    width = max([len(s) for s in stages] + [5])
    lines = [f"  {name:{width}s} {s * 1e3:10.1f} ms  {100 * s / total:5.1f}%"
             for name, s in stages.items()]
    lines.append(f"  {'total':{width}s} {total * 1e3:10.1f} ms")
    return "\n".join(lines)
