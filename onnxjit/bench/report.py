"""Benchmark reports: the markdown table, the JSON document, and the baseline comparison.

The JSON document is `{"note", "machine", "fma_peak", "settings", "results": [row, ...]}`, one
row per benchmark (the fields of `bench.run_one`'s dict). The comparison against a baseline
looks only at ratios (`ort_median / onnxjit_median`, measured interleaved in one process, so
the machine's speed cancels out much more than in absolute times): a benchmark regressed when
its ratio fell below `baseline_ratio * (1 - tolerance)`, or when it had a ratio in the baseline
and now fails (error or numeric mismatch); likewise its `dynamic_ratio` (the symbolic program
against the specialised one, `bench.dynamic`) against the baseline's. Benchmarks missing on
either side, or unsupported in both, are not compared.
"""

from __future__ import annotations

import json
import os
import platform
from typing import Any


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = -1.0
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "load_avg_1min": round(load, 2), "versions": versions()}


def versions() -> dict[str, str]:
    """Installed versions of the packages the ratios depend on (onnxruntime above all: a new
    release moves every ratio), "-" for one that is not installed."""
    from importlib import metadata

    out = {}
    for name in ("onnxjit", "onnxruntime", "onnx", "numpy", "llvmlite"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "-"
    return out


def _f(x: float | None, fmt: str = ".1f", unit: str = "") -> str:
    return "-" if x is None else f"{x:{fmt}}{unit}"


def _us(x: float | None, like: float | None = None) -> str:
    """Microseconds as text, in ms from 10 ms up; `like`: use the unit that value gets."""
    if x is None:
        return "-"
    return f"{x / 1000:.2f} ms" if (x if like is None else like) >= 10000 else f"{x:.1f} us"


_SCHEDULE = {
    "blocks": "timed in alternating blocks of calls after pauses that outlast onnxruntime's idle"
              " spin; \"alternating calls\": the ratio with single calls alternated instead, each"
              " onnxjit call then sharing a core with onnxruntime's spinning worker"
              " (`onnxjit/bench/timing.py`).",
    "calls": "timed in single calls alternated.",
}


def markdown(doc: dict[str, Any]) -> str:
    """The results as a markdown table, preceded by the FMA peak and machine lines."""
    peak = doc.get("fma_peak") or {}
    m = doc.get("machine") or {}
    interleave = (doc.get("settings") or {}).get("interleave", "calls")
    ort = (m.get("versions") or {}).get("onnxruntime", "?")
    lines = [f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, 1-min load average "
             f"{m.get('load_avg_1min', '?')} at the start; onnxruntime {ort}. Measured "
             "single-thread FMA peak: "
             f"{_f(peak.get('gflops'))} GFLOP/s. Speed-up = onnxruntime median / onnxjit median"
             " (> 1: onnxjit faster), onnxruntime with 2 intra-op threads unless noted;"
             f" {_SCHEDULE.get(interleave, interleave)}", "",
             "| benchmark | onnxjit (IQR) | onnxruntime (IQR) | speed-up | alternating calls "
             "| GFLOP/s | cold compile | first result (tier 0) | warm start "
             "| peak MB onnxjit / ort | note |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in doc["results"]:
        if r.get("kind") == "stream":
            continue
        if r["status"] != "ok":
            lines.append(f"| {r['name']} | {r['status']} | | | | | | | | "
                         f"{r['message'][:80].replace('|', '/')} |")
            continue
        gf = _f(r.get("gflops"))
        if r.get("peak_pct") is not None:
            gf += f" (best {r['gflops_best']:.1f} = {r['peak_pct']:.0f}% of peak)"
        mem = f"{_f(r.get('mem_onnxjit_mb'), '.0f')} / {_f(r.get('mem_ort_mb'), '.0f')}"
        note = r["note"]
        if r.get("speedup_threads") is not None:
            note += f"; onnxjit {r['threads_default']} vs 1 thread: {r['speedup_threads']:.2f}x"
        lines.append(
            f"| {r['name']} | {_us(r['onnxjit_us'])} "
            f"({_us(r['onnxjit_iqr_us'], r['onnxjit_us'])}) | "
            f"{_us(r.get('ort_us'))} ({_us(r.get('ort_iqr_us'), r.get('ort_us'))}) | "
            f"{_f(r.get('ratio'), '.2f', 'x')} | {_f(r.get('ratio_calls'), '.2f', 'x')} | {gf} | "
            f"{_f(r.get('compile_cold_ms'), '.0f', ' ms')} | "
            f"{_f(r.get('first_result_ms'), '.0f', ' ms')} | "
            f"{_f(r.get('compile_warm_ms'), '.0f', ' ms')} | {mem} | {note} |")
    return ("\n".join(lines) + "\n" + stages(doc["results"]) + _dynamic(doc["results"])
            + _streams(doc["results"]))


#: the columns of the cold compile's stage table (`onnxjit.timings.grouped` names)
STAGE_COLUMNS = ("import", "op-table", "passes", "verify", "lowering", "llvm-ir", "llvm-parse",
                 "llvm-optimize", "emit-object", "link", "cache-write")


def stages(rows: list[dict[str, Any]]) -> str:
    """The cold compile of each row split by stage (ms), if any row measured it."""
    rows = [r for r in rows if r.get("compile_stages_ms")]
    if not rows:
        return ""
    lines = ["", "Cold compile by stage (ms, in the cold process; `fn.timings()`, "
             "`onnxjit info --timings`): passes = graph passes, lowering = lower-to-loops and "
             "the loop-IR passes, llvm-ir = LLVM IR emission, emit-object = code generation; "
             "other = the rest of the first result (of the whole stream for streams).", "",
             "| benchmark | " + " | ".join(STAGE_COLUMNS) + " | other | cold first result |",
             "|---|" + "---:|" * (len(STAGE_COLUMNS) + 2)]
    for r in rows:
        st = r["compile_stages_ms"]
        known = [st.get(c) for c in STAGE_COLUMNS]
        cold = r.get("compile_cold_ms") or r.get("onnxjit_cold_s", 0.0) * 1e3
        other = cold - sum(v for v in st.values())
        lines.append(f"| {r['name']} | " + " | ".join(_f(v, ".0f") for v in known)
                     + f" | {other:.0f} | {cold:.0f} |")
    return "\n".join(lines) + "\n"


def _dynamic(rows: list[dict[str, Any]]) -> str:
    """The table of `bench.dynamic` (symbolic program vs specialised), if any row has it."""
    rows = [r for r in rows if r.get("dynamic_status")]
    if not rows:
        return ""
    lines = ["", "`specialize=\"dynamic\"` (open dims symbolic, one program for every size) "
             "against the program specialised for the benchmark's shapes, interleaved; ratio = "
             "specialised median / symbolic median (>= 0.90: within 10%).", "",
             "| benchmark | symbolic | specialised | ratio | program |", "|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {_us(r.get('dynamic_us'))} | "
                     f"{_us(r.get('specialised_us'))} | {_f(r.get('dynamic_ratio'), '.2f', 'x')} "
                     f"| {r['dynamic_status'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def _streams(rows: list[dict[str, Any]]) -> str:
    rows = [r for r in rows if r.get("kind") == "stream"]
    if not rows:
        return ""
    from onnxjit.bench.streams import markdown as stream_table

    return ("\nStreams of calls with varying shapes, end to end against onnxruntime (session "
            "creation included), each engine in fresh processes (medians of interleaved runs): "
            "cold = empty disk cache, warm = a cache filled by another stream of the model (other "
            "shapes); steady = both warm, "
            "whole streams alternated in one process (`onnxjit/bench/streams.py`).\n\n"
            + stream_table(rows))


def write_json(doc: dict[str, Any], path: str) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def load_results(path: str) -> dict[str, dict[str, Any]]:
    """Rows of a JSON report (or of a bare list of rows) by benchmark name."""
    return load_baseline(path)[0]


def load_baseline(path: str) -> tuple[dict[str, dict[str, Any]], str | None]:
    """(rows by benchmark name, the CPU it was measured on or None) of a JSON report (or of
    a bare list of rows)."""
    with open(path) as f:
        doc = json.load(f)
    rows = doc["results"] if isinstance(doc, dict) else doc
    cpu = doc.get("machine", {}).get("cpu") if isinstance(doc, dict) else None
    return {r["name"]: r for r in rows}, cpu


def regressions(results: list[dict[str, Any]], baseline: dict[str, dict[str, Any]],
                tolerance: float) -> list[str]:
    """One message per benchmark that regressed against `baseline` (see the module docstring)."""
    out = []
    for r in results:
        b = baseline.get(r["name"])
        if b is None:
            continue
        was, now = b.get("dynamic_ratio"), r.get("dynamic_ratio")
        if was and now is not None and now < was * (1 - tolerance):
            out.append(f"{r['name']}: dynamic/specialised {now:.2f}x < baseline {was:.2f}x "
                       f"- {tolerance:.0%}")
        if not b.get("ratio"):
            continue
        if r["status"] != "ok" and r["status"] != "unsupported":
            out.append(f"{r['name']}: {r['status']} ({r['message'][:100]}); baseline ratio "
                       f"{b['ratio']:.2f}x")
        elif r["status"] == "unsupported":
            out.append(f"{r['name']}: now unsupported; baseline ratio {b['ratio']:.2f}x")
        elif r.get("ratio") is not None and r["ratio"] < b["ratio"] * (1 - tolerance):
            out.append(f"{r['name']}: ratio {r['ratio']:.2f}x < baseline {b['ratio']:.2f}x "
                       f"- {tolerance:.0%}")
    return out
