"""One engine in a fresh process: time to first result and peak memory (run by `bench`).

    python -m onnxjit.bench.fresh_process ENGINE MODEL.onnx FEEDS.npz CACHE_DIR THREADS

ENGINE is `onnxjit` (compiled with `cache_dir=CACHE_DIR`: an empty folder gives the cold
compile time, a folder a previous run filled gives the warm start) or `onnxruntime`. THREADS 0
means the engine's default (onnxruntime: 2 intra-op threads, the bench's comparison setting).
Prints one JSON object: `first_s` (from before `compile`/`InferenceSession` to the first result,
imports and reading the feeds excluded), `import_s`, memory in KiB, and for onnxjit `stages`:
the seconds of each compile stage, summed over the model's import and its signatures and
grouped as `onnxjit.timings.grouped` does (passes, lowering, llvm-ir, llvm-optimize,
emit-object, link, load, ...).

Memory method: tracemalloc cannot see native allocations (LLVM, onnxruntime's arena, onnxjit's
arena and packed weights), so the kernel's accounting is used. After the imports and reading the
feeds, writing "5" to /proc/self/clear_refs resets the process's peak RSS (VmHWM) to its current
RSS; after loading the model and running it 3 times, `peak_kb = VmHWM - VmRSS at reset` is the
peak memory the engine added for this model (weights, compiled code, intermediates, LLVM during a
cold compile). Where the reset is refused, the delta of VmHWM is used (an underestimate when the
imports peaked higher) and `method` says so. `maxrss_kb` (getrusage) is the whole process's peak.
An error onnxjit raises on purpose is printed as {"error": type name, "message": ...} (exit 0).
"""

from __future__ import annotations

import json
import resource
import sys
import time


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> str:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return "clear_refs"
    except OSError:
        return "hwm-delta"


def run(engine: str, model: str, feeds_path: str, cache: str, threads: int) -> dict:
    t0 = time.perf_counter()
    import numpy as np

    if engine == "onnxjit":
        import onnxjit
    else:
        import onnxruntime as ort
    with np.load(feeds_path) as z:
        feeds = {k: z[k] for k in z.files}
    import_s = time.perf_counter() - t0
    method = _reset_peak()
    base = _status_kb("VmRSS") if method == "clear_refs" else _status_kb("VmHWM")
    t0 = time.perf_counter()
    if engine == "onnxjit":
        try:
            fn = onnxjit.compile(model, cache_dir=cache, num_threads=threads)
            fn(**feeds)
        except onnxjit.OnnxJitError as e:
            return {"error": type(e).__name__, "message": str(e)[:500]}
        first = time.perf_counter() - t0
        for _ in range(3):
            fn(**feeds)
    else:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads or 2
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
        first = time.perf_counter() - t0
        for _ in range(3):
            sess.run(None, feeds)
    hwm = _status_kb("VmHWM")
    out = {"first_s": first, "import_s": import_s, "peak_kb": max(0, hwm - base),
           "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "method": method}
    if engine == "onnxjit":
        from onnxjit.timings import grouped_total

        out["stages"] = grouped_total(fn.timings())
    return out


if __name__ == "__main__":
    engine, model, feeds, cache, threads = sys.argv[1:6]
    print(json.dumps(run(engine, model, feeds, cache, int(threads))))
