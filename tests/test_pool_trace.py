"""The pool's dispatch trace ($ONNXJIT_POOL_TRACE, `codegen/pool_trace.py`): one record per
dispatch with consistent times when on, nothing when off, and a traced pool never shared
through the disk cache with processes that did not ask for one. Each case runs in a fresh
process: the pool is built once per process, when the first artifact needs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
from models import chain

N = 300_000

SCRIPT = """
import json, sys, numpy as np, onnxjit
from onnxjit.codegen import pool
fn = onnxjit.compile(sys.argv[1], num_threads=2, cache_dir=sys.argv[2])
x = np.linspace(-3, 3, {n}).astype(np.float32)
fn(x)
pool.trace_records()  # drop the first call's records
for _ in range(3):
    fn(x)
print(json.dumps([list(r) for r in pool.trace_records()]))
"""


def _records(model: Path, cache: Path, trace: bool) -> list[list[int]]:
    env = dict(os.environ)
    env.pop("ONNXJIT_POOL_TRACE", None)
    if trace:
        env["ONNXJIT_POOL_TRACE"] = "1"
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(n=N), str(model), str(cache)],
                         check=True, timeout=300, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.splitlines()[-1])


def test_trace_records_each_dispatch_only_when_asked(tmp_path) -> None:
    model = tmp_path / "chain.onnx"
    onnx.save(chain(N), str(model))
    # a traced process must not link the pool an untraced one left in the cache entry ...
    assert _records(model, tmp_path / "a", trace=False) == []
    recs = _records(model, tmp_path / "a", trace=True)
    assert recs and len(recs) % 3 == 0, recs  # the same dispatches in each of the 3 calls
    for n, start, caller_done, worker_done, end in recs:
        assert n > 0 and 0 < start <= end
        assert caller_done == 0 or start <= caller_done <= end
        assert worker_done == 0 or start <= worker_done <= end
    assert any(r[2] for r in recs)  # the chain's loops are big enough for two threads
    # ... nor leave its own there for an untraced process
    assert _records(model, tmp_path / "b", trace=True)
    assert _records(model, tmp_path / "b", trace=False) == []
