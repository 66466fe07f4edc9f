"""`onnxjit bench`: onnxjit against onnxruntime, model by model, as ratios.

Method, per benchmark (models from `models`):
1) build the model and feeds; write both to a temporary folder;
2) cold compile: a fresh process compiles with an empty disk-cache folder and runs once (time to
   first result); warm start: another fresh process on the now filled folder; a third process
   loads the model in onnxruntime. Each reports its peak memory (`fresh_process` explains the
   VmHWM method; tracemalloc cannot see native allocations);
3) in this process: compile (from that disk cache) with the default `num_threads`, open an
   onnxruntime session with 2 intra-op threads (both engines pinned to one thread where the
   benchmark says so: the 1024^3 GEMM), check the outputs agree
   (max |a - b| <= rtol * max |b| + atol per output), warm both up, then time them
   interleaved for the given duration (so the shared machine's noise hits both alike): in
   alternating blocks of calls after pauses that outlast onnxruntime's idle spin, or with
   `--interleave calls` single calls alternated (`timing` says why blocks; in blocks mode
   a shorter alternating-calls run gives `ratio_calls` too), and report medians,
   interquartile ranges and the ratio `ort_median / onnxjit_median` (> 1: onnxjit faster),
   GFLOP/s (of the median call) where the model has a FLOP count, and for single-thread
   benchmarks the % of the measured FMA peak (`peak`, a best-of figure) reached by the
   best call. For `THREAD_SCALING` models onnxjit with one thread joins the interleaving,
   giving the default-threads vs 1-thread speed-up.
An `UnsupportedError` from onnxjit makes the row "unsupported"; any other failure "error"; a
numeric disagreement "mismatch" (no timing then). `--baseline FILE` compares ratios
(`report.regressions`) and exits 1 on a regression; an error or mismatch also exits 1.
Timing thresholds live here, never in tests.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxjit.bench import report, timing
from onnxjit.bench.builder import BenchModel
from onnxjit.bench.models import build, registry
from onnxjit.errors import OnnxJitError

ORT_THREADS = 2
QUICK = ["add4", "mlp_b1", "mlp_b32", "gemm_1024x1024x1024", "gemm_64x784x512", "gemm_1x512x512",
         "bert_tiny", "resnet_like", "lstm", "elementwise_chain_4M", "conv3x3_64_56",
         "conv1x1_256to64_56", "dwconv3x3_144_56"]
THREAD_SCALING = {"light_resnet50", "resnet_like"}
#: models also compiled with their open dims symbolic, timed against the specialised program
#: (`bench.dynamic`)
#: (light_resnet50 reshapes to a constant [1, 2048]: its batch and size are fixed, so it runs
#: per shape; resnet_like is the ResNet whose dims are free)
DYNAMIC_COMPARE = {"mlp_b1", "mlp_b32", "bert_tiny", "mobilenetv2_like", "resnet_like",
                   "light_resnet50", "lstm"}
NOISE_NOTE = ("Measured on a shared 2-core VM (other guests run on its host): absolute times and "
              "ratios vary by 20-50% between runs, more for sub-100-us models; compare ratios "
              "with a generous tolerance.")


def _proc(engine: str, folder: str, cache: str, threads: int, tiered: bool = False
          ) -> dict[str, Any]:
    """One fresh process (`fresh_process`); onnxjit compiles at once unless `tiered`."""
    cmd = [sys.executable, "-m", "onnxjit.bench.fresh_process", engine,
           os.path.join(folder, "m.onnx"), os.path.join(folder, "feeds.npz"), cache, str(threads)]
    env = dict(os.environ, ONNXJIT_TIERED="1" if tiered else "0")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": "crash", "message": f"{engine} process exited {p.returncode}: {tail}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def _row(bm: BenchModel) -> dict[str, Any]:
    return {"name": bm.name, "note": bm.note, "status": "ok", "message": "",
            "threads_onnxjit": bm.threads or 0, "threads_ort": bm.threads or ORT_THREADS}


def _fail(row: dict[str, Any], e: BaseException) -> dict[str, Any]:
    from onnxjit.errors import UnsupportedError

    row["status"] = "unsupported" if isinstance(e, UnsupportedError) else "error"
    row["message"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return row


def _compare(out: list[np.ndarray], ref: list[np.ndarray], bm: BenchModel) -> float:
    """Largest error relative to each output's magnitude; raises AssertionError past rtol."""
    worst = 0.0
    for i, (a, b) in enumerate(zip(out, ref)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            raise AssertionError(f"output {i}: shape {a.shape} != onnxruntime's {b.shape}")
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        err = float(np.max(np.abs(a.astype(np.float64) - b))) if b.size else 0.0
        if not err <= bm.rtol * scale + bm.atol:
            raise AssertionError(f"output {i}: max |onnxjit - onnxruntime| = {err:.3g} > "
                                 f"{bm.rtol} * {scale:.3g} + {bm.atol}")
        worst = max(worst, err / scale if scale else err)
    return worst


def _subprocesses(row: dict[str, Any], folder: str, cache: str, threads: int) -> None:
    cold = _proc("onnxjit", folder, cache, threads)
    if "error" in cold:
        raise _ProcError(cold)
    warm = _proc("onnxjit", folder, cache, threads)
    ort = _proc("onnxruntime", folder, cache, row["threads_ort"])
    row["compile_cold_ms"] = cold["first_s"] * 1e3
    # a user's default: tier 0 answers while the compile runs in the background
    tier0 = _proc("onnxjit", folder, os.path.join(folder, "cache-tiered"), threads, tiered=True)
    row["first_result_ms"] = tier0.get("first_s", float("nan")) * 1e3
    row["compile_warm_ms"] = warm.get("first_s", float("nan")) * 1e3
    row["mem_onnxjit_mb"] = warm.get("peak_kb", 0) / 1024
    row["mem_onnxjit_cold_mb"] = cold["peak_kb"] / 1024
    row["mem_ort_mb"] = ort["peak_kb"] / 1024 if "peak_kb" in ort else None
    row["ort_load_ms"] = ort["first_s"] * 1e3 if "first_s" in ort else None
    row["mem_method"] = cold["method"]
    if cold.get("stages"):  # where the cold compile's time went (`report.stages`)
        row["compile_stages_ms"] = {k: v * 1e3 for k, v in cold["stages"].items()}


class _ProcError(Exception):
    def __init__(self, info: dict[str, Any]):
        super().__init__(f"{info['error']}: {info['message']}")
        self.info = info


def run_one(name: str, seconds: float = 2.0, tiny: bool = False, subprocesses: bool = True,
            peak_gflops: float | None = None) -> dict[str, Any]:
    """Measure benchmark `name`; returns its report row (see the module docstring)."""
    bm = build(name, tiny)
    row = _row(bm)
    # the folder (and the disk cache in it) outlives the timing: stages of a model with
    # data-dependent shapes are compiled, and cached, on their first call
    folder = tempfile.mkdtemp(prefix="onnxjit-bench-")
    try:
        return _measure(bm, row, folder, seconds, subprocesses, peak_gflops)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _measure(bm: BenchModel, row: dict[str, Any], folder: str, seconds: float,
             subprocesses: bool, peak_gflops: float | None) -> dict[str, Any]:
    import onnxjit
    from onnxjit.errors import UnsupportedError

    threads = bm.threads or 0
    cache = os.path.join(folder, "cache")
    path = os.path.join(folder, "m.onnx")
    with open(path, "wb") as f:
        f.write(bm.model.SerializeToString())
    np.savez(os.path.join(folder, "feeds.npz"), **bm.feeds)
    try:
        if subprocesses:
            _subprocesses(row, folder, cache, threads)
        fn = onnxjit.compile(path, cache_dir=cache, num_threads=threads, tiered=False)
        out = fn(**bm.feeds)
        one = (onnxjit.compile(path, cache_dir=cache, num_threads=1, tiered=False)
               if bm.name in THREAD_SCALING and not bm.threads else None)
    except _ProcError as e:
        if e.info["error"] == "UnsupportedError":
            return _fail(row, UnsupportedError(e.info["message"]))
        row.update(status="error", message=str(e)[:300])
        return row
    except Exception as e:  # noqa: BLE001 - any failure is reported in the row
        return _fail(row, e)
    if all(n in bm.feeds for n in fn.input_names):
        args = [bm.feeds[n] for n in fn.input_names]
        fns: list[Callable[[], Any]] = [lambda: fn(*args)]
    else:  # inputs with initializer defaults (old models list weights as inputs)
        fns = [lambda: fn(**bm.feeds)]
    try:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = row["threads_ort"]
        if not ORT_SPINNING:
            # onnxruntime's idle intra-op threads spin after each run; interleaved with onnxjit
            # in one process they hold the core onnxjit's worker needs (4M chain: 1.0x with
            # spinning, 2.1x without; onnxruntime itself ~6% slower without).
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(bm.model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        row["max_rel_err"] = _compare(list(out), sess.run(None, bm.feeds), bm)
        fns.append(lambda: sess.run(None, bm.feeds))
    except ImportError:
        sess = None
    except AssertionError as e:
        row.update(status="mismatch", message=str(e))
        return row
    except Exception as e:  # noqa: BLE001 - onnxruntime refused the model: say so in the row
        row.update(status="error", message=f"onnxruntime: {type(e).__name__}: {e}"[:300])
        return row
    if one is not None:
        fns.append(lambda: one(**bm.feeds))
    schedule = timing.by_blocks if INTERLEAVE == "blocks" else timing.by_calls
    times = schedule(fns, seconds)
    tj = statistics.median(times[0])
    row.update(onnxjit_us=tj * 1e6, onnxjit_iqr_us=timing.iqr(times[0]) * 1e6,
               runs=len(times[0]), onnxjit_min_us=min(times[0]) * 1e6, interleave=INTERLEAVE)
    if sess is not None:
        to = statistics.median(times[1])
        row.update(ort_us=to * 1e6, ort_iqr_us=timing.iqr(times[1]) * 1e6, ratio=to / tj,
                   ort_min_us=min(times[1]) * 1e6)
        if INTERLEAVE == "blocks":  # the other schedule's ratio, for reference
            calls = timing.by_calls(fns[:2], seconds / 3)
            row["ratio_calls"] = statistics.median(calls[1]) / statistics.median(calls[0])
    if one is not None:
        row.update(speedup_threads=statistics.median(times[-1]) / tj,
                   threads_default=fn.options.num_threads)
    if bm.name in DYNAMIC_COMPARE and seconds > 0:  # (not in a smoke run)
        from onnxjit.bench import dynamic

        try:
            row.update(dynamic.compare(bm.model, bm.feeds, threads, seconds / 2))
        except Exception as e:  # noqa: BLE001 - reported in the row, the timing stands
            row["dynamic_status"] = f"error: {type(e).__name__}: {e}"[:200]
    if bm.flops:
        row["gflops"] = bm.flops / tj / 1e9
        if _uses_strassen(fn):
            row["note"] += "; Strassen products: GFLOP/s counts the 2*m*k*n of a direct product"
        if bm.threads == 1 and peak_gflops:
            # the peak is a best-of measurement, so is the figure set against it
            row["gflops_best"] = bm.flops / min(times[0]) / 1e9
            row["peak_pct"] = 100 * row["gflops_best"] / peak_gflops
    return row


def _uses_strassen(fn: Any) -> bool:
    """Whether the last signature's code multiplies with Strassen products
    (`ir/ops/linalg/strassen.py`: 7/8 of a direct product's multiply-adds)."""
    try:
        return "strassen" in fn.ir("loops")
    except OnnxJitError:  # a staged graph has no single loop program
        return False


def select(names: list[str], k: str | None) -> list[str]:
    """Names containing any of the comma-separated substrings of `k` (all when k is None)."""
    if not k:
        return names
    keys = [s for s in k.split(",") if s]
    return [n for n in names if any(s in n for s in keys)]


#: onnxruntime's default (spinning idle threads) unless `--ort-spinning off`.
ORT_SPINNING = True
#: `timing` schedule: "blocks" unless `--interleave calls`.
INTERLEAVE = "blocks"


def _baseline(path: str) -> tuple[dict[str, dict[str, Any]], str | None]:
    """(rows, CPU) of a baseline report; OnnxJitError when the file is missing or not one."""
    try:
        return report.load_baseline(path)
    except OSError as e:
        raise OnnxJitError(f"cannot read the baseline '{path}': {e.strerror or e}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise OnnxJitError(f"the baseline '{path}' is not a bench JSON report "
                           f"({type(e).__name__}: {e})") from None


def main(args: Any) -> int:
    """The `onnxjit bench` command (options: see `cli.py`)."""
    global ORT_SPINNING, INTERLEAVE
    from onnxjit.bench import peak

    ORT_SPINNING = getattr(args, "ort_spinning", "on") != "off"
    INTERLEAVE = getattr(args, "interleave", "blocks")
    from onnxjit.bench import streams

    # before minutes of runs
    baseline, baseline_cpu = _baseline(args.baseline) if args.baseline else ({}, None)

    names = list(registry())
    if args.quick and not args.k:
        names = [n for n in names if n in QUICK]
    names = select(names, args.k)
    stream_names = [] if args.quick and not args.k else select(list(streams.STREAMS), args.k)
    if not names and not stream_names:
        print(f"no benchmark matches -k {args.k!r}; known: "
              f"{', '.join([*registry(), *streams.STREAMS])}")
        return 2
    seconds = args.seconds if args.seconds is not None else (0.4 if args.quick else 3.0)
    doc: dict[str, Any] = {"note": args.note or NOISE_NOTE, "machine": report.machine(),
                           "settings": {"seconds": seconds, "tiny": args.tiny,
                                        "ort_threads": ORT_THREADS, "interleave": INTERLEAVE}}
    doc["fma_peak"] = peak.measure(0.1 if args.quick else 0.5)
    print(f"single-thread FMA peak: {doc['fma_peak']['gflops']:.1f} GFLOP/s", flush=True)
    doc["results"] = []
    for n in names:
        r = run_one(n, seconds, args.tiny, not args.no_subprocess, doc["fma_peak"]["gflops"])
        doc["results"].append(r)
        if r["status"] != "ok":
            print(f"{n:24s} {r['status']}: {r['message']}", flush=True)
            continue
        num = {k: "-" if r.get(k) is None else format(r[k], f) for k, f in (
            ("onnxjit_us", "10.1f"), ("ort_us", "10.1f"), ("ratio", "6.2f"),
            ("compile_cold_ms", "7.0f"), ("compile_warm_ms", "6.0f"),
            ("first_result_ms", "6.0f"))}
        print(f"{n:24s} onnxjit {num['onnxjit_us']} us  ort {num['ort_us']} us  ratio "
              f"{num['ratio']}x  cold {num['compile_cold_ms']} ms  first (tier 0) "
              f"{num['first_result_ms']} ms  warm "
              f"{num['compile_warm_ms']} ms", flush=True)
    for n in stream_names:
        r = streams.measure(n, args.tiny)
        doc["results"].append(r)
        print(f"{n:24s} end to end: onnxruntime {r['ort_e2e_s']:.2f} s, onnxjit cold "
              f"{r['ratio_cold']:.2f}x, warm cache {r['ratio_warm']:.2f}x "
              f"({r['warm_misses']} compiles); steady {r['ratio_steady']:.2f}x", flush=True)
    if args.json:
        report.write_json(doc, args.json)
    table = report.markdown(doc)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    print(table)
    failed = [r["name"] for r in doc["results"] if r["status"] in ("error", "mismatch")]
    if failed:
        print(f"FAILED: {', '.join(failed)}")
    bad: list[str] = []
    if args.baseline:
        bad = report.regressions(doc["results"], baseline, args.tolerance)
        for msg in bad:
            print(f"REGRESSION {msg}")
        cpu = doc["machine"]["cpu"]
        if baseline_cpu and baseline_cpu != cpu:  # Zen 4: one 512-bit FMA a cycle, Xeons two
            print(f"NOTE the baseline was measured on '{baseline_cpu}' and this machine is "
                  f"'{cpu}': "
                  "ratios move between CPU families (tests/benchmarks/ has a baseline per "
                  "family)")
    return 1 if bad or failed else 0
