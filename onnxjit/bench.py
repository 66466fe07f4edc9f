"""Benchmarks: onnxjit against onnxruntime (and numpy) in one process, as ratios.

Method: build each model in code, compile it with onnxjit and load it in onnxruntime (2
intra-op threads unless told otherwise), check the outputs agree, warm both up, then alternate
single calls of the two (interleaved, so machine noise hits both alike) and report medians,
spread (interquartile range), and the ratio `ort_median / onnxjit_median` (> 1: onnxjit is
faster). Cold compile time and, from a fresh disk cache folder, warm compile time are reported.
Timings never go in tests; `--baseline FILE` compares ratios against a committed JSON and exits
non-zero when a ratio fell by more than the tolerance.

Building models and running onnxruntime needs the test extra (`onnx`, `onnxruntime`).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass
class Result:
    name: str
    onnxjit_us: float
    ort_us: float | None
    ratio: float | None
    onnxjit_iqr_us: float
    compile_cold_ms: float
    compile_warm_ms: float
    note: str = ""


def _onnx() -> Any:
    try:
        import onnx  # noqa: TID251 - benchmarks build models with the test extra
    except ImportError:
        raise SystemExit("onnxjit bench needs the test extra: pip install -e '.[test]'") from None
    return onnx


def model_add4() -> tuple[Any, dict[str, np.ndarray], str]:
    onnx = _onnx()
    h, tp = onnx.helper, onnx.TensorProto
    g = h.make_graph([h.make_node("Add", ["a", "b"], ["y"])], "add4",
                     [h.make_tensor_value_info("a", tp.FLOAT, [4]),
                      h.make_tensor_value_info("b", tp.FLOAT, [4])],
                     [h.make_tensor_value_info("y", tp.FLOAT, [4])])
    feeds = {"a": np.ones(4, np.float32), "b": np.ones(4, np.float32)}
    return g, feeds, "call overhead: one Add on 4 floats"


def model_chain() -> tuple[Any, dict[str, np.ndarray], str]:
    onnx = _onnx()
    h, tp = onnx.helper, onnx.TensorProto
    n = 4 * 1024 * 1024
    nodes = [h.make_node("Mul", ["x", "s"], ["t1"]), h.make_node("Add", ["t1", "b"], ["t2"]),
             h.make_node("Tanh", ["t2"], ["t3"]), h.make_node("Erf", ["t3"], ["t4"]),
             h.make_node("Sigmoid", ["t4"], ["t5"]), h.make_node("Mul", ["t5", "x"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.array(0.5, np.float32), "s"),
             onnx.numpy_helper.from_array(np.array(0.1, np.float32), "b")]
    g = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", tp.FLOAT, [n])],
                     [h.make_tensor_value_info("y", tp.FLOAT, [n])], inits)
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    return g, {"x": x}, "6 elementwise ops (Tanh, Erf, Sigmoid) over 4M floats"


def model_mlp(batch: int = 32) -> tuple[Any, dict[str, np.ndarray], str]:
    onnx = _onnx()
    h, tp = onnx.helper, onnx.TensorProto
    rng = np.random.default_rng(0)
    sizes = (784, 512, 512, 10)
    nodes, inits, x = [], [], "x"
    for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        inits += [onnx.numpy_helper.from_array(
            (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), f"w{k}"),
            onnx.numpy_helper.from_array(np.zeros(b, np.float32), f"b{k}")]
        nodes += [h.make_node("MatMul", [x, f"w{k}"], [f"m{k}"]),
                  h.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"])]
        x = f"a{k}"
        if k < 2:
            nodes.append(h.make_node("Relu", [x], [f"r{k}"]))
            x = f"r{k}"
    nodes[-1].output[0] = "y"
    g = h.make_graph(nodes, "mlp", [h.make_tensor_value_info("x", tp.FLOAT, ["N", 784])],
                     [h.make_tensor_value_info("y", tp.FLOAT, ["N", 10])], inits)
    feeds = {"x": rng.standard_normal((batch, 784)).astype(np.float32)}
    return g, feeds, f"MLP 784-512-512-10, batch {batch}"


BENCHMARKS: dict[str, Callable[[], tuple[Any, dict[str, np.ndarray], str]]] = {
    "add4": model_add4,
    "elementwise_chain_4M": model_chain,
    "mlp_b32": model_mlp,
    "mlp_b1": lambda: model_mlp(1),
}
QUICK = ["add4", "mlp_b1"]


def _model(graph: Any) -> Any:
    onnx = _onnx()
    m = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _interleaved(fns: list[Callable[[], Any]], seconds: float, min_runs: int = 20
                 ) -> list[list[float]]:
    for f in fns:  # warm-up
        for _ in range(3):
            f()
    times: list[list[float]] = [[] for _ in fns]
    deadline = time.perf_counter() + seconds
    while len(times[0]) < min_runs or time.perf_counter() < deadline:
        for f, t in zip(fns, times):
            t0 = time.perf_counter()
            f()
            t.append(time.perf_counter() - t0)
        if len(times[0]) >= 100000:
            break
    return times


def _iqr(xs: list[float]) -> float:
    q = statistics.quantiles(xs, n=4)
    return q[2] - q[0]


def run_one(name: str, seconds: float = 3.0, ort_threads: int = 2) -> Result:
    import onnxjit

    graph, feeds, note = BENCHMARKS[name]()
    model = _model(graph)
    data = model.SerializeToString()
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        fn = onnxjit.compile(data, cache_dir=cache)
        out = fn(**feeds)
        cold = time.perf_counter() - t0
        # A second CompiledModel on the same folder, after clearing the process memory cache,
        # measures the warm (disk cache) start.
        from onnxjit import runtime

        runtime._MEMORY.clear()
        t0 = time.perf_counter()
        fn2 = onnxjit.compile(data, cache_dir=cache)
        fn2(**feeds)
        warm = time.perf_counter() - t0
    args = [feeds[n] for n in fn.input_names]
    ort_us = ratio = None
    try:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = ort_threads
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        ref = sess.run(None, feeds)
        for a, b in zip(out, ref):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        tj, to = _interleaved([lambda: fn(*args), lambda: sess.run(None, feeds)], seconds)
        ort_us = statistics.median(to) * 1e6
        ratio = statistics.median(to) / statistics.median(tj)
    except ImportError:
        (tj,) = _interleaved([lambda: fn(*args)], seconds)
    return Result(name, statistics.median(tj) * 1e6, ort_us, ratio, _iqr(tj) * 1e6,
                  cold * 1e3, warm * 1e3, note)


def markdown(results: list[Result]) -> str:
    lines = ["| benchmark | onnxjit (us) | onnxruntime (us) | speed-up | cold compile (ms) | "
             "warm start (ms) |", "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        ort = f"{r.ort_us:.1f}" if r.ort_us is not None else "-"
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        lines.append(f"| {r.name} | {r.onnxjit_us:.1f} | {ort} | {ratio} | "
                     f"{r.compile_cold_ms:.0f} | {r.compile_warm_ms:.1f} |")
    return "\n".join(lines)


def main(args: Any) -> int:
    names = QUICK if args.quick else list(BENCHMARKS)
    if args.k:
        names = [n for n in names if args.k in n]
    seconds = 0.5 if args.quick else 3.0
    results = []
    for n in names:
        r = run_one(n, seconds)
        results.append(r)
        print(f"{n:24s} onnxjit {r.onnxjit_us:10.1f} us  ort "
              f"{r.ort_us if r.ort_us is not None else float('nan'):10.1f} us  ratio "
              f"{r.ratio if r.ratio is not None else float('nan'):6.2f}x  cold "
              f"{r.compile_cold_ms:7.0f} ms  warm {r.compile_warm_ms:6.1f} ms", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(results) + "\n")
    if args.baseline:
        with open(args.baseline) as f:
            base = {r["name"]: r for r in json.load(f)}
        bad = [r for r in results if r.ratio is not None and r.name in base
               and base[r.name]["ratio"] and r.ratio < base[r.name]["ratio"] * (1 - args.tolerance)]
        for r in bad:
            print(f"REGRESSION {r.name}: ratio {r.ratio:.2f}x < baseline "
                  f"{base[r.name]['ratio']:.2f}x - {args.tolerance:.0%}")
        return 1 if bad else 0
    return 0
