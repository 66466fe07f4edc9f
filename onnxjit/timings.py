"""Per-stage compile timings, and the `onnxjit` logger, at no cost when nobody listens.

Algorithm: a `Recorder` is installed in a context variable for the duration of one
signature's compile (`recording`); code that does a stage of work wraps it in
`with timed("stage"):` or, where nesting would re-indent a long function, marks stage
boundaries with `laps = Laps("first"); ...; laps.next("second"); ...; laps.end()`. Both look
up the context variable once and do nothing when it holds no recorder, so calls from outside
a compile (tests, `ir()`, the bench's kernels) cost one lookup. The recorder keeps the stages
in the order they ran (a pass that runs in two pipelines appears twice; `summary` adds them
up) and tells an optional listener (`onnxjit.progress`) when each stage begins and ends.

Stage names (what `CompiledModel.timings()` and `onnxjit info --timings` show):
    import            protobuf -> graph IR, verified
    op-table          the op families' modules imported (once a process, inside the first
                      pass that looks an op up; taken out of that pass's time)
    pass <name>       one pass of a pipeline (`pass lower-to-loops` is the lowering)
    verify            the IR verifiers run between passes (option `verify`)
    llvm-ir           LLVM IR emission (llvmlite IR objects, then module text)
    llvm-parse        LLVM parses and verifies the module text
    llvm-optimize     LLVM's optimisation pipeline
    emit-object       code generation: machine code for the host (object file)
                      (a large program's kernel groups compile in worker processes,
                      `codegen.workers`: these three stages then share the wall time waited
                      for them in proportion to the workers' own seconds, which go to the
                      debug log)
    link              the object file linked into the process (ELF loader or MCJIT)
    load              a disk-cache entry read, decoded and linked (a warm start)
    cache-write       the compiled artifact written to the disk cache

A context variable rather than a global: each thread (and asyncio task) compiling has its
own recorder, and worker threads started elsewhere see none. Work done in another process
(a compile worker) is timed there and added here with `record(stage, seconds)`.

`log(level, message, *args)` logs to the `onnxjit` logger only when the `logging` module is
already imported: importing it costs a few ms of a warm start, and when nobody imported it
nobody configured a handler that would show a debug or info record.
"""

from __future__ import annotations

import sys
import time
from contextvars import ContextVar, Token
from typing import Any, Protocol

DEBUG, INFO = 10, 20  # logging's levels, without importing logging


class Listener(Protocol):
    def begin(self, stage: str) -> None: ...

    def end(self, stage: str) -> None: ...


class Recorder:
    """The stages of one compile: (name, seconds) in the order they ended. A stage inside
    another (the op table loading during the first shape inference) counts only for itself:
    its seconds are taken out of the enclosing stage's, so the stages add up to the total."""

    __slots__ = ("stages", "listener", "inner")

    def __init__(self, listener: Listener | None = None) -> None:
        self.stages: list[tuple[str, float]] = []
        self.listener = listener
        self.inner = [0.0]  # per open stage (and the outermost level): its inner stages' time

    def begin(self, stage: str) -> None:
        self.inner.append(0.0)
        if self.listener is not None:
            self.listener.begin(stage)

    def end(self, stage: str, seconds: float) -> None:
        """A stage `begin` opened ended after `seconds` (its inner stages included)."""
        inner = self.inner.pop() if len(self.inner) > 1 else 0.0
        self.add(stage, seconds, seconds - inner)

    def add(self, stage: str, seconds: float, own: float | None = None) -> None:
        """A stage timed elsewhere took `seconds` (`own`: without its inner stages)."""
        self.inner[-1] += seconds
        self.stages.append((stage, seconds if own is None else own))
        if self.listener is not None:
            self.listener.end(stage)

    def summary(self) -> dict[str, float]:
        """Seconds per stage name (repeats added), in the order stages first ran."""
        out: dict[str, float] = {}
        for name, s in self.stages:
            out[name] = out.get(name, 0.0) + s
        return out


_current: ContextVar[Recorder | None] = ContextVar("onnxjit_timings", default=None)


def current() -> Recorder | None:
    """The recorder of the compile running in this context, if any."""
    return _current.get()


def install(recorder: Recorder) -> Token:
    """Make `recorder` the current one; `restore(token)` puts the previous one back."""
    return _current.set(recorder)


def restore(token: Token) -> None:
    _current.reset(token)


class recording:  # noqa: N801 - used like a function: `with recording(rec):`
    """Install `recorder` for the stages run inside the `with` block (restored after)."""

    __slots__ = ("recorder", "token")

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def __enter__(self) -> Recorder:
        self.token = _current.set(self.recorder)
        return self.recorder

    def __exit__(self, *exc: object) -> None:
        _current.reset(self.token)


class timed:  # noqa: N801 - used like a function: `with timed("stage"):`
    """Time the `with` block as `stage` in the current recorder (nothing without one). A
    block left by an exception is recorded too: an interrupted compile still says where its
    time went."""

    __slots__ = ("stage", "recorder", "t0")

    def __init__(self, stage: str) -> None:
        self.stage = stage

    def __enter__(self) -> None:
        self.recorder = rec = _current.get()
        if rec is not None:
            rec.begin(self.stage)
            self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        if self.recorder is not None:
            self.recorder.end(self.stage, time.perf_counter() - self.t0)


class Laps:
    """Consecutive stages of one function without re-indenting it: `Laps("a")` starts stage
    "a", `next("b")` ends the running stage and starts "b", `end()` ends the running one."""

    __slots__ = ("recorder", "stage", "t0")

    def __init__(self, first: str) -> None:
        self.recorder = _current.get()
        self.stage: str | None = None
        if self.recorder is not None:
            self._start(first)

    def _start(self, stage: str) -> None:
        assert self.recorder is not None
        self.stage = stage
        self.recorder.begin(stage)
        self.t0 = time.perf_counter()

    def next(self, stage: str) -> None:
        if self.recorder is not None:
            self.end()
            self._start(stage)

    def end(self) -> None:
        if self.recorder is not None and self.stage is not None:
            self.recorder.end(self.stage, time.perf_counter() - self.t0)
            self.stage = None


def record(stage: str, seconds: float) -> None:
    """Add a stage timed elsewhere (a pass the driver timed itself)."""
    rec = _current.get()
    if rec is not None:
        rec.add(stage, seconds)


def group(stage: str) -> str:
    """The bench's coarser column of a stage: "passes", "lowering" (lower-to-loops and the
    loop-level passes after it), or the stage itself."""
    if stage.startswith("pass "):
        name = stage[5:]
        return "lowering" if name in LOOP_PASSES else "passes"
    return stage


#: passes that run on the loop IR, from lowering on (the rest run on the graph IR)
LOOP_PASSES = frozenset({"lower-to-loops", "prepack-weights", "plan-memory",
                         "materialize-dims", "parametrize-kernels"})


def grouped(stages: dict[str, float]) -> dict[str, float]:
    """`summary()` seconds added up by `group`."""
    out: dict[str, float] = {}
    for name, s in stages.items():
        g = group(name)
        out[g] = out.get(g, 0.0) + s
    return out


def grouped_total(timings: dict[str, dict[str, float]]) -> dict[str, float]:
    """`CompiledModel.timings()` (stages per signature) added up over its signatures and
    grouped (`grouped`): where a whole run's compile time went."""
    out: dict[str, float] = {}
    for stages in timings.values():
        for name, s in grouped(stages).items():
            out[name] = out.get(name, 0.0) + s
    return out


def log(level: int, message: str, *args: Any) -> None:
    """Log to the `onnxjit` logger, if `logging` is in use (see the module docstring)."""
    logging = sys.modules.get("logging")
    if logging is not None:
        logger = logging.getLogger("onnxjit")
        if logger.isEnabledFor(level):
            logger.log(level, message, *args)
