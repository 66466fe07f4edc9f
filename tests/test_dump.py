"""dump_ir: one file per pass for graph and loop IR, LLVM IR before/after optimisation and
assembly; the graph and loop texts parse back to the same IR."""

import numpy as np
from models import chain, mlp

import onnxjit
from onnxjit.driver import GRAPH_PIPELINE, SIGNATURE_PIPELINE
from onnxjit.ir.loop_parser import parse_program
from onnxjit.ir.loop_printer import print_program
from onnxjit.ir.parser import parse_model
from onnxjit.ir.printer import print_model


def _check_round_trip(path):
    text = path.read_text()
    if path.name.endswith(".graph.txt"):
        assert print_model(parse_model(text)) == text, path.name
    else:
        assert print_program(parse_program(text)) == text, path.name


def test_dump_files_per_pass(tmp_path):
    fn = onnxjit.compile(mlp(sizes=(8, 6, 4)), dump_ir=tmp_path, cache_dir=False)
    fn(np.ones((2, 8), np.float32))
    graph_files = sorted(p.name for p in (tmp_path / "graph").iterdir())
    assert graph_files[0] == "00-import.graph.txt"
    assert [f.split("-", 1)[1] for f in graph_files[1:]] == [
        f"{p}.graph.txt" for p in GRAPH_PIPELINE]
    assert {"infer-shapes", "fold-constants", "dce"} <= set(GRAPH_PIPELINE)
    (sig,) = [p for p in tmp_path.iterdir() if p.name != "graph"]
    names = sorted(p.name for p in sig.iterdir())
    stems = [n.split("-", 1)[1] for n in names]
    lower = SIGNATURE_PIPELINE.index("lower-to-loops")
    expected = (["bind-shapes.graph.txt"]
                + [f"{p}.graph.txt" for p in SIGNATURE_PIPELINE[:lower]]
                + [f"{p}.loops.txt" for p in SIGNATURE_PIPELINE[lower:]]
                + ["llvm.ll", "llvm-opt.ll", "asm.s"])
    assert {"fuse", "lower-to-loops", "plan-memory"} <= set(SIGNATURE_PIPELINE)
    assert stems == expected
    for p in list((tmp_path / "graph").iterdir()) + list(sig.iterdir()):
        if p.name.endswith((".graph.txt", ".loops.txt")):
            _check_round_trip(p)


def test_env_var_enables_dumps(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNXJIT_DUMP_IR", str(tmp_path))
    onnxjit.compile(chain(16), cache_dir=False)(np.ones(16, np.float32))
    assert any(p.name.endswith("fuse.graph.txt") for p in tmp_path.rglob("*"))


def test_dump_folder_of_many_inputs_fits_a_file_name(tmp_path):
    """A signature of 300 inputs names its dump folder with a shortened, hashed id."""
    from onnx import TensorProto, helper

    n = 300
    names = [f"x{i}" for i in range(n)]
    g = helper.make_graph([helper.make_node("Sum", names, ["y"])], "g",
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [3])
                           for x in names],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    fn = onnxjit.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
                         dump_ir=tmp_path, cache_dir=False)
    y, = fn(*[np.ones(3, np.float32)] * n)
    assert y.tolist() == [300.0] * 3
    (sig,) = [p for p in tmp_path.iterdir() if p.name != "graph"]
    assert len(sig.name) <= 120 and any(sig.glob("*asm.s"))
