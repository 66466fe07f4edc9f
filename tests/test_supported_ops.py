"""The supported-operator table: generated from the registry, and the committed docs current."""

from pathlib import Path

import onnxjit
from onnxjit.supported import markdown

ROOT = Path(__file__).resolve().parents[1]


def test_table_lists_registered_ops_with_versions():
    rows = {(r["domain"], r["op"]): r for r in onnxjit.supported_ops()}
    assert rows[("ai.onnx", "Add")]["execution"] == "fused"
    assert rows[("ai.onnx", "Conv")]["execution"] == "native"
    assert rows[("ai.onnx", "NonZero")]["execution"] == "host"
    assert 13 in rows[("ai.onnx", "Softmax")]["versions"]
    assert not any(op.startswith("Fused") for _, op in rows)  # internal ops are not listed


def test_committed_docs_are_current():
    committed = (ROOT / "docs" / "supported_ops.md").read_text()
    assert committed == markdown(), "run: python tools/gen_op_table.py"
