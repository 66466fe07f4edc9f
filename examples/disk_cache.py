"""The disk cache across two processes: the second one loads the native code from the cache
instead of compiling (no import, no passes, no LLVM), so its first result comes much sooner.

    python examples/disk_cache.py
"""

import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import sys, time
t0 = time.perf_counter()
import numpy as np, onnxjit
t1 = time.perf_counter()
fn = onnxjit.compile(sys.argv[1], cache_dir=sys.argv[2])
fn(np.ones((32, 784), np.float32))
t2 = time.perf_counter()
info = fn.cache_info()
print(f"compile + first call {1e3 * (t2 - t1):7.1f} ms, after {1e3 * (t1 - t0):5.1f} ms of "
      f"imports (disk hits {info['disk_hits']}, misses {info['misses']})")
"""

model = Path(__file__).resolve().parents[1] / "onnxjit" / "examples" / "mlp.onnx"
with tempfile.TemporaryDirectory() as cache:
    for label in ("cold process", "warm process"):
        print(f"{label}: ", end="", flush=True)
        subprocess.run([sys.executable, "-c", CHILD, str(model), cache], check=True)
