"""Smoke test of the benchmark suite: every bench model once, at tiny size and duration.

No timing assertions (timing thresholds live in `onnxjit bench --baseline`): each model must
build, compile, and agree with onnxruntime numerically; the subprocess measurements (cold and
warm compile, peak memory), the JSON and markdown reports, the baseline comparison (including
the non-zero exit on a synthetic regression) and the "unsupported" row are checked on tiny
models. The nine `light` models keep their real size (they cannot be shrunk): they are the
ONNX backend suite's real models, which `tests/test_backend.py` already compiles and checks,
so only the smallest (SqueezeNet) goes through the bench here (the others cost CI minutes and
would test nothing more of the bench).
"""

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxjit import cli
from onnxjit.bench import models as bench_models
from onnxjit.bench import peak as bench_peak
from onnxjit.bench import report as bench_report
from onnxjit.bench import runner as bench
from onnxjit.bench.builder import BenchModel

NAMES = [n for n in bench_models.registry()
         if not n.startswith("light_") or n == "light_squeezenet"]
BASELINE = Path(__file__).parent / "baseline.json"


@pytest.mark.parametrize("name", NAMES)
def test_model_builds_compiles_and_matches_onnxruntime(name):
    row = bench.run_one(name, seconds=0.0, tiny=True, subprocesses=False)
    allowed = ("ok", "unsupported") if name == "lstm" else ("ok",)
    assert row["status"] in allowed, row["message"]
    if row["status"] == "ok":
        assert row["max_rel_err"] <= 1e-3
        assert row["onnxjit_us"] > 0 and row["ort_us"] > 0 and row["ratio"] > 0
        assert row["runs"] >= 5


def test_tiny_models_keep_their_structure():
    big, small = bench_models.build("bert_tiny"), bench_models.build("bert_tiny", tiny=True)
    ops = lambda bm: sorted(n.op_type for n in bm.model.graph.node)  # noqa: E731
    assert ops(big) == ops(small)
    assert {"LayerNormalization", "Erf", "Softmax", "Transpose", "Reshape"} <= set(ops(big))
    assert big.feeds["input_ids"].shape == (1, 128)
    assert bench_models.build("gemm_1024x1024x1024").threads == 1
    assert len(bench_models.light_available()) == 9


def test_subprocess_measurements_and_thread_scaling(monkeypatch):
    monkeypatch.setattr(bench, "THREAD_SCALING", {"mlp_b1"})
    row = bench.run_one("mlp_b1", seconds=0.0, tiny=True, subprocesses=True)
    assert row["status"] == "ok", row["message"]
    assert row["compile_cold_ms"] > 0 and row["compile_warm_ms"] > 0
    assert row["first_result_ms"] > 0  # a fresh process with tiering on (mlp_b1 is small)
    assert row["mem_onnxjit_mb"] >= 0 and row["mem_onnxjit_cold_mb"] > 0
    assert row["mem_ort_mb"] is not None and row["mem_method"] in ("clear_refs", "hwm-delta")
    assert row["speedup_threads"] > 0
    stages = row["compile_stages_ms"]  # the cold compile's stages, and their table
    assert {"passes", "lowering", "llvm-ir", "llvm-optimize", "emit-object", "link"} <= set(stages)
    table = bench_report.markdown({"results": [row]})
    assert "Cold compile by stage" in table and "| mlp_b1 | " in table.split("by stage")[1]


def test_blocks_and_alternating_calls(monkeypatch):
    # blocks (the default) also report the alternating-calls ratio; `--interleave calls` times
    # single calls alternated only
    row = bench.run_one("mlp_b1", seconds=0.0, tiny=True, subprocesses=False)
    assert row["interleave"] == "blocks" and row["ratio_calls"] > 0 and row["runs"] >= 5
    table = bench_report.markdown({"settings": {"interleave": "blocks"}, "results": [row]})
    assert "alternating blocks" in table and table.count(" | ") >= 10
    monkeypatch.setattr(bench, "INTERLEAVE", "calls")
    row = bench.run_one("mlp_b1", seconds=0.0, tiny=True, subprocesses=False)
    assert row["interleave"] == "calls" and "ratio_calls" not in row and row["ratio"] > 0


def test_dynamic_comparison_and_its_table():
    from onnxjit.bench import dynamic

    bm = bench_models.build("bert_tiny", tiny=True)
    sym = dynamic.symbolic_variant(bm.model)
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in sym.graph.input]
    assert dims == [["d0_0", "d0_1"]]  # token ids: batch and sequence open
    row = {"name": "bert_tiny", **dynamic.compare(bm.model, bm.feeds, 0, 0.0)}
    assert row["dynamic_status"] == "symbolic" and row["dynamic_ratio"] > 0
    table = bench_report.markdown({"results": [dict(row, status="error", message="x")]})
    assert "specialize=\"dynamic\"" in table and "| bert_tiny |" in table


def test_stream_row_end_to_end():
    from onnxjit.bench import streams

    row = streams.measure("stream_decoder", tiny=True, rounds=1, fresh=1)
    assert row["status"] == "ok", row.get("message")
    assert row["calls"] == 5 and row["warm_misses"] == 0  # a warm cache compiles nothing
    assert row["ratio_cold"] > 0 and row["ratio_warm"] > 0 and row["ratio_steady"] > 0
    table = bench_report.markdown({"results": [row]})
    assert "| stream_decoder | 5 |" in table
    assert row["compile_stages_ms"]["llvm-optimize"] > 0  # the cold stream's compiles
    assert "| stream_decoder | " in table.split("by stage")[1]


def test_single_thread_gemm_reports_peak_fraction():
    row = bench.run_one("gemm_1024x1024x1024", seconds=0.0, tiny=True, subprocesses=False,
                        peak_gflops=100.0)
    assert row["status"] == "ok" and row["threads_ort"] == 1 and row["threads_onnxjit"] == 1
    assert row["peak_pct"] == pytest.approx(row["gflops_best"]) and row["gflops_best"] > 0


def test_fma_peak_is_measured():
    peak = bench_peak.measure(0.02)
    assert peak["gflops"] > 0 and peak["gflops"] == max(peak["gflops_256"], peak["gflops_512"])


def test_unsupported_op_is_reported_not_raised(monkeypatch):
    g = helper.make_graph([helper.make_node("Nope", ["x"], ["y"], domain="bench.test")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("bench.test", 1)])
    m.ir_version = 10
    bm = BenchModel("nope", m, {"x": np.ones(2, np.float32)}, "unsupported op")
    monkeypatch.setattr(bench, "build", lambda name, tiny=False: bm)
    for sub in (False, True):
        row = bench.run_one("nope", seconds=0.0, subprocesses=sub)
        assert row["status"] == "unsupported" and "Nope" in row["message"]
    doc = {"results": [row]}
    assert "| nope | unsupported |" in bench_report.markdown(doc)


def _bench(tmp_path, *extra):
    return cli.main(["bench", "--tiny", "-k", "mlp_b1", "--seconds", "0", "--no-subprocess",
                     *extra])


def test_json_markdown_and_baseline_exit_codes(tmp_path, capsys):
    js, md = tmp_path / "r.json", tmp_path / "r.md"
    assert _bench(tmp_path, "--json", str(js), "--markdown", str(md)) == 0
    doc = json.loads(js.read_text())
    (row,) = doc["results"]
    assert row["name"] == "mlp_b1" and row["status"] == "ok" and row["ratio"] > 0
    assert doc["fma_peak"]["gflops"] > 0 and doc["note"]
    import onnxruntime

    # the ratios depend on onnxruntime's release: the report names it
    assert doc["machine"]["versions"]["onnxruntime"] == onnxruntime.__version__
    assert f"onnxruntime {onnxruntime.__version__}." in md.read_text()
    assert "| mlp_b1 |" in md.read_text() and "speed-up" in md.read_text()
    # a baseline 1000x better than anything measurable: a regression, exit 1
    high = tmp_path / "high.json"
    high.write_text(json.dumps({"results": [dict(row, ratio=row["ratio"] * 1000)]}))
    assert _bench(tmp_path, "--baseline", str(high), "--tolerance", "0.2") == 1
    assert "REGRESSION mlp_b1" in capsys.readouterr().out
    low = tmp_path / "low.json"
    low.write_text(json.dumps({"results": [dict(row, ratio=row["ratio"] / 1000)],
                               "machine": {"cpu": "Another CPU"}}))
    assert _bench(tmp_path, "--baseline", str(low), "--tolerance", "0.2") == 0
    # a baseline from another CPU is compared, with a note that says so
    assert "NOTE the baseline was measured on 'Another CPU'" in capsys.readouterr().out
    assert cli.main(["bench", "-k", "no_such_model"]) == 2


def test_regression_rule():
    base = {"a": {"name": "a", "ratio": 2.0}, "b": {"name": "b", "ratio": 2.0},
            "c": {"name": "c", "ratio": 1.0}, "d": {"name": "d", "ratio": None}}
    rows = [{"name": "a", "status": "ok", "message": "", "ratio": 1.7},   # -15%: fine
            {"name": "b", "status": "ok", "message": "", "ratio": 1.5},   # -25%: regression
            {"name": "c", "status": "error", "message": "CompileError: x", "ratio": None},
            {"name": "d", "status": "unsupported", "message": "", "ratio": None},
            {"name": "e", "status": "ok", "message": "", "ratio": 0.1}]   # not in baseline
    bad = bench_report.regressions(rows, base, 0.2)
    assert [m.split(":")[0] for m in bad] == ["b", "c"]
    # the symbolic program against the specialised one (`bench.dynamic`) is gated alike
    base["a"]["dynamic_ratio"] = base["b"]["dynamic_ratio"] = 1.0
    rows[0]["dynamic_ratio"], rows[1]["dynamic_ratio"] = 0.7, 0.85   # -30%, -15%
    bad = bench_report.regressions(rows, base, 0.2)
    assert [m.split(":")[0] for m in bad] == ["a", "b", "c"]
    assert "dynamic/specialised 0.70x" in bad[0]


@pytest.mark.parametrize("path", sorted(BASELINE.parent.glob("baseline*.json")),
                         ids=lambda p: p.name)
def test_committed_baseline_names_known_models(path):
    doc = json.loads(path.read_text())
    assert doc["note"] and doc["fma_peak"]["gflops"] > 0
    assert doc["machine"]["versions"]["onnxruntime"] != "-"
    from onnxjit.bench import streams

    names = {r["name"] for r in doc["results"]}
    assert names <= {*bench_models.registry(), *streams.STREAMS} and "mlp_b32" in names
