"""How `onnxjit bench` times engines against each other in one process.

Both schedules alternate the engines, so the slow drifts of a shared machine hit them alike,
and return each engine's call times (warm-up calls excluded):

- `by_blocks` (the default): each engine in turn sleeps PAUSE_SECONDS, makes one untimed call
  (its threads wake up), then a timed block of calls (BLOCK_CALLS or more, BLOCK_SECONDS or
  more). The pause outlasts onnxruntime's idle spin (after each run its intra-op workers poll
  for work, ~50 ms of CPU), so no engine runs while the other's idle threads hold a core; inside
  its block each engine keeps its own threads warm, as back-to-back requests find them.
- `by_calls`: single calls alternated. Each onnxjit call then runs while onnxruntime's
  spinning worker shares a core with onnxjit's worker, and a short model's onnxruntime call
  runs during the 26 us spin of onnxjit's worker. Measured on two cores, one process:
  light_resnet50 onnxjit 37.5 ms in blocks, 64.8 ms alternating calls (onnxruntime 38.6 and
  39.7 ms); ResNet-like 6.7 and 8.4 ms (onnxruntime 8.6 and 8.7 ms); with a 100 us onnxjit
  spin (tried, not kept), MLP b32 onnxruntime 225 us in blocks, 297 us alternating.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

#: pause before each block: longer than onnxruntime's idle spin
PAUSE_SECONDS = 0.12
#: a block lasts at least this long and has at least BLOCK_CALLS timed calls
BLOCK_SECONDS, BLOCK_CALLS = 0.05, 5
#: stop after this many calls of an engine (sub-microsecond models)
MAX_CALLS = 100000


def by_calls(fns: list[Callable[[], Any]], seconds: float, min_runs: int = 5,
             warmup: int = 2) -> list[list[float]]:
    """Single calls of each function in turn for `seconds` (and `min_runs` rounds)."""
    for f in fns:
        for _ in range(warmup):
            f()
    times: list[list[float]] = [[] for _ in fns]
    deadline = time.perf_counter() + seconds
    while len(times[0]) < min_runs or time.perf_counter() < deadline:
        for f, t in zip(fns, times):
            t0 = time.perf_counter()
            f()
            t.append(time.perf_counter() - t0)
        if len(times[0]) >= MAX_CALLS:
            break
    return times


def by_blocks(fns: list[Callable[[], Any]], seconds: float, warmup: int = 2
              ) -> list[list[float]]:
    """Blocks of calls of each function in turn, each after a pause and an untimed call, for
    `seconds` of wall time (pauses included): at least three rounds, one when `seconds` is 0
    (a smoke run)."""
    min_rounds = 3 if seconds > 0 else 1
    for f in fns:
        for _ in range(warmup):
            f()
    times: list[list[float]] = [[] for _ in fns]
    deadline = time.perf_counter() + seconds
    rounds = 0
    while rounds < min_rounds or time.perf_counter() < deadline:
        for f, t in zip(fns, times):
            time.sleep(PAUSE_SECONDS)
            f()
            start = len(t)
            end = time.perf_counter() + BLOCK_SECONDS
            while len(t) - start < BLOCK_CALLS or time.perf_counter() < end:
                t0 = time.perf_counter()
                f()
                t.append(time.perf_counter() - t0)
                if len(t) >= MAX_CALLS:
                    break
        rounds += 1
        if len(times[0]) >= MAX_CALLS:
            break
    return times


def iqr(xs: list[float]) -> float:
    """Interquartile range (0 for fewer than two values)."""
    if len(xs) < 2:
        return 0.0
    q = statistics.quantiles(xs, n=4)
    return q[2] - q[0]
