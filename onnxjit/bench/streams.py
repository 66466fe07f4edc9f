"""Streams of calls whose input shapes vary, timed end to end against onnxruntime.

A stream is a model and a seeded sequence of calls, the way a service meets them: sentence
embeddings for batches of 1-8 texts of 6-128 tokens, a decoder's 24-token prefill followed by
one token per step with its KV cache growing (each call's `present` outputs are the next call's
`past` inputs), text lines of an OCR recognizer 48 pixels high and 96-640 wide, pages of an
OCR detector of 320-960 pixels a side (`ocr.py`). Each engine runs the whole stream in a fresh
process (`run_stream`, started by `measure`): onnxruntime from session creation, onnxjit from
`compile` with an empty disk-cache folder ("cold"), and again with a folder that another stream
of the same model (other shapes, another seed) filled ("warm": a restarted server meeting new
requests); these fresh runs are repeated, interleaved, and their medians reported
(`FRESH_ROUNDS`, `COLD_ROUNDS`). Then, in this process, both engines run the stream once more,
everything warm, alternating whole streams ("steady").
Ratios are onnxruntime's time over onnxjit's (> 1: onnxjit faster). The cold stream's compile
stages (`onnxjit.timings`, over all its compiles) go into the row as `compile_stages_ms`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

#: stream name -> its note
STREAMS: dict[str, str] = {
    "stream_minilm": "MiniLM-style encoder (6 layers, hidden 384), 60 calls, batch 1-8, "
                     "6-128 tokens",
    "stream_decoder": "GPT-style decoder (4 layers, hidden 256), KV cache: 24-token prefill + "
                      "48 steps",
    "stream_ocr_rec": "PP-OCR-style text-line recognizer, 24 lines 48 x 96..640 (steps of 32), "
                      "6625 classes",
    "stream_ocr_det": "PP-OCR-style DB text detector, 6 pages 320..960 (multiples of 32)",
}
ORT_THREADS = 2


def _minilm(tiny: bool) -> Any:
    from onnxjit.bench.transformers import sentence_encoder

    return sentence_encoder(layers=1 if tiny else 6, hidden=64 if tiny else 384,
                            heads=2 if tiny else 12, inter=128 if tiny else 1536)


def _decoder(tiny: bool) -> Any:
    from onnxjit.bench.transformers import gpt_decoder

    return gpt_decoder(layers=1 if tiny else 4, hidden=64 if tiny else 256,
                       heads=2 if tiny else 4)


def model_of(name: str, tiny: bool = False) -> Any:
    from onnxjit.bench.ocr import text_detector, text_recognizer

    return {"stream_minilm": _minilm, "stream_decoder": _decoder,
            "stream_ocr_rec": text_recognizer, "stream_ocr_det": text_detector}[name](tiny)


def _images(shapes: list[tuple[int, ...]], rng: Any) -> Callable[[Callable[[dict], list]], int]:
    feeds = [{"x": rng.standard_normal(s).astype(np.float32)} for s in shapes]

    def drive_images(run: Callable[[dict], list]) -> int:
        for f in feeds:
            run(f)
        return len(feeds)

    return drive_images


def calls_of(name: str, model: Any, seed: int, tiny: bool = False
             ) -> Callable[[Callable[[dict], list]], int]:
    """The stream's driver: `drive(run)` makes every call through `run(feeds) -> outputs` and
    returns the number of calls."""
    rng = np.random.default_rng(seed)
    if name == "stream_ocr_rec":  # text lines: widths in steps of 32, some seen twice
        widths = rng.choice(np.arange(96, 641, 32), 4 if tiny else 24)
        return _images([(1, 3, 48, int(w)) for w in widths], rng)
    if name == "stream_ocr_det":  # pages: every call a new size
        sides = rng.permutation(np.arange(320, 961, 32))[:4 if tiny else 12]
        return _images([(1, 3, int(h), int(w)) for h, w in zip(sides[::2], sides[1::2])], rng)
    if name == "stream_minilm":
        n = 8 if tiny else 60
        shapes = [(int(rng.integers(1, 9)), int(rng.integers(6, 129))) for _ in range(n)]
        feeds = []
        for b, s in shapes:
            mask = np.ones((b, s), np.int64)
            for r in range(b):
                mask[r, int(rng.integers(max(1, s // 2), s + 1)):] = 0
            feeds.append({"input_ids": rng.integers(0, 1000, (b, s)).astype(np.int64),
                          "attention_mask": mask})

        def drive_encoder(run: Callable[[dict], list]) -> int:
            for f in feeds:
                run(f)
            return len(feeds)

        return drive_encoder
    prefill, steps = (4, 4) if tiny else (24, 48)
    ins = [i.name for i in model.graph.input][1:]
    heads = model.graph.input[1].type.tensor_type.shape.dim[1].dim_value
    dh = model.graph.input[1].type.tensor_type.shape.dim[3].dim_value
    tokens = rng.integers(0, 2000, (1, prefill + steps)).astype(np.int64)

    def drive_decoder(run: Callable[[dict], list]) -> int:
        cache = {n: np.zeros((1, heads, 0, dh), np.float32) for n in ins}
        feeds = {"input_ids": tokens[:, :prefill], **cache}
        for t in range(steps + 1):
            res = run(feeds)
            feeds = {"input_ids": tokens[:, prefill + t:prefill + t + 1],
                     **dict(zip(ins, res[1:]))}
        return steps + 1

    return drive_decoder


def run_stream(engine: str, name: str, cache: str, seed: int, tiny: bool = False
               ) -> dict[str, Any]:
    """One engine through one stream in this (fresh) process: seconds from session creation
    (or `compile`) to the last result; the model is built first, untimed."""
    model = model_of(name, tiny)
    data = model.SerializeToString()
    drive = calls_of(name, model, seed, tiny)
    import onnxjit
    from onnxjit.timings import grouped_total

    if engine != "onnxjit":  # both engines imported before the clock starts
        import onnxruntime as ort
    t0 = time.perf_counter()
    if engine == "onnxjit":
        fn = onnxjit.compile(data, cache_dir=cache or False)
        n = drive(lambda feeds: fn(**feeds))
        stats = dict(type(fn).cache_info(), stages=grouped_total(fn.timings()))
    else:
        so = ort.SessionOptions()
        so.intra_op_num_threads = ORT_THREADS
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        n = drive(lambda feeds: sess.run(None, feeds))
        stats = {}
    return {"seconds": time.perf_counter() - t0, "calls": n, "cache": stats}


def _fresh(engine: str, name: str, cache: str, seed: int, tiny: bool) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "onnxjit.bench.streams", engine, name, cache, str(seed),
           "1" if tiny else "0"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"{engine} stream {name} failed: {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _steady(name: str, tiny: bool, rounds: int) -> tuple[float, float]:
    """(onnxjit, onnxruntime) medians of whole warm streams, alternated in this process."""
    import onnxruntime as ort

    import onnxjit

    model = model_of(name, tiny)
    data = model.SerializeToString()
    drive = calls_of(name, model, 1, tiny)
    fn = onnxjit.compile(data, cache_dir=False)
    so = ort.SessionOptions()
    so.intra_op_num_threads = ORT_THREADS
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    runs: list[Callable[[dict], Any]] = [lambda f: fn(**f), lambda f: sess.run(None, f)]
    for run in runs:
        drive(run)  # warm: every shape compiled (or bound) and every session path seen
    times: list[list[float]] = [[], []]
    for _ in range(rounds):
        for k, run in enumerate(runs):
            time.sleep(0.12)
            t0 = time.perf_counter()
            drive(run)
            times[k].append(time.perf_counter() - t0)
    return float(np.median(times[0])), float(np.median(times[1]))


#: fresh processes per engine for the end-to-end figures: onnxruntime and the warm cache
#: `FRESH_ROUNDS` times, the cold start `COLD_ROUNDS` times (each waits for its background
#: compile at exit), interleaved, medians reported; one run of an 80 ms stream swung 0.85x to
#: 1.13x from one bench to the next on a shared host
FRESH_ROUNDS = 3
COLD_ROUNDS = 2


def measure(name: str, tiny: bool = False, rounds: int = 3, fresh: int = FRESH_ROUNDS
            ) -> dict[str, Any]:
    """A report row: end-to-end times and ratios of one stream (see the module docstring;
    `fresh` rounds of fresh processes, `rounds` of steady streams); `ratio` (what a baseline
    compares) is the steady one."""
    row: dict[str, Any] = {"name": name, "note": STREAMS[name], "status": "ok", "kind": "stream"}
    runs: dict[str, list[dict[str, Any]]] = {"ort": [], "cold": [], "warm": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            warm_dir = os.path.join(tmp, "warm")
            _fresh("onnxjit", name, warm_dir, 7, tiny)  # other shapes fill the cache
            for i in range(fresh):
                runs["ort"].append(_fresh("onnxruntime", name, "", 0, tiny))
                if i < COLD_ROUNDS:
                    cold_dir = os.path.join(tmp, f"cold{i}")
                    runs["cold"].append(_fresh("onnxjit", name, cold_dir, 0, tiny))
                runs["warm"].append(_fresh("onnxjit", name, warm_dir, 0, tiny))
        jit_s, ort_s = _steady(name, tiny, rounds)
    except Exception as e:  # noqa: BLE001 - a failed stream is a row saying why
        row.update(status="error", message=f"{type(e).__name__}: {e}"[:300])
        return row
    ort, cold, warm = (float(np.median([r["seconds"] for r in runs[k]]))
                       for k in ("ort", "cold", "warm"))
    first = runs["cold"][0]["cache"]
    row.update(calls=runs["ort"][0]["calls"], ort_e2e_s=ort, onnxjit_cold_s=cold,
               onnxjit_warm_s=warm, ratio_cold=ort / cold, ratio_warm=ort / warm,
               cold_compiles=first.get("misses"),
               warm_misses=max(r["cache"].get("misses", 0) for r in runs["warm"]),
               onnxjit_steady_s=jit_s, ort_steady_s=ort_s, ratio_steady=ort_s / jit_s,
               ratio=ort_s / jit_s)
    if first.get("stages"):  # the cold stream's compiles by stage (`report.stages`)
        row["compile_stages_ms"] = {k: v * 1e3 for k, v in first["stages"].items()}
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    """The streams' table (rows of `measure`)."""
    lines = ["| stream | calls | onnxruntime e2e | onnxjit cold (ratio, compiles) | onnxjit warm "
             "cache (ratio, compiles) | steady ratio | note |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['name']} | {r['status']} | | | | | {r.get('message', '')} |")
            continue
        lines.append(
            f"| {r['name']} | {r['calls']} | {r['ort_e2e_s']:.2f} s | "
            f"{r['onnxjit_cold_s']:.2f} s ({r['ratio_cold']:.2f}x, {r.get('cold_compiles')}) | "
            f"{r['onnxjit_warm_s']:.2f} s ({r['ratio_warm']:.2f}x, {r['warm_misses']}) | "
            f"{r['ratio_steady']:.2f}x | {r['note']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    eng, nm, cache_dir, sd, tn = sys.argv[1:6]
    print(json.dumps(run_stream(eng, nm, cache_dir, int(sd), tn == "1")))
