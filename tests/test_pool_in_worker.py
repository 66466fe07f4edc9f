"""A cold compile's worker pool is compiled by a compile worker (`entries.POOL_IN_WORKER`).

In a fresh process with no pool installed and none on disk, a program compiled on the worker
path gets the pool compiled beside its kernels, by the entry's task, and installed by the
caller: the caller never compiles it alone, and the disk cache's pool entry is written as
before. Run in a subprocess (a process installs its pool once); with the rule off the caller
compiles it, as before.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import os, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import onnxjit
from onnxjit import entries
from onnxjit.codegen import pool, workers

entries.POOL_IN_WORKER = sys.argv[1] == "1"
workers.MIN_COST, workers.GROUP_COST = 0, 1
parent, calls = os.getpid(), []
real = pool.compile_pool

def spy():
    calls.append(os.getpid())  # in a worker: the worker's own copy of the list
    return real()

pool.compile_pool = spy
rng = np.random.default_rng(0)
w = numpy_helper.from_array(rng.standard_normal((64, 256)).astype(np.float32), "w")
graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]),
                           helper.make_node("Tanh", ["h"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 10
fn = onnxjit.compile(model, cache_dir=sys.argv[2], tiered=False, num_threads=2)
x = rng.standard_normal((512, 64)).astype(np.float32)
np.testing.assert_allclose(fn(x)[0], np.tanh(x @ numpy_helper.to_array(w)), rtol=1e-4,
                           atol=1e-5)
from pathlib import Path
from onnxjit import cache, entries
stored = cache.DiskCache(Path(sys.argv[2])).get(entries.pool_key()) is not None
print("parent-compiles", calls.count(parent), "installed", pool.installed(), "stored", stored)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="compile workers need fork")
@pytest.mark.parametrize("in_worker", [True, False])
def test_cold_compile_builds_the_pool_in_a_worker(tmp_path, in_worker):
    env = dict(os.environ, ONNXJIT_COMPILE_JOBS="2")
    out = subprocess.run([sys.executable, "-c", SCRIPT, "1" if in_worker else "0",
                          str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    expected = "parent-compiles 0" if in_worker else "parent-compiles 1"
    assert f"{expected} installed True stored True" in out.stdout, out.stdout
