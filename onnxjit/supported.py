"""The supported-operator table, generated from the op registry (`onnxjit.ir.opdef`).

`supported_ops()` lists every registered op with its domain, the ONNX since-versions whose
semantics are implemented, how it executes, and its one-line description. "How it executes":
`fused` (an elementwise scalar rule: fusible into one loop with its neighbours), `native` (its
own loop-nest lowering), `host` (evaluated in numpy at run time by the shape phase: ops whose
output size depends on data, or which have no lowering). Element types: every type the op's
ONNX schema allows among `types.COMPUTE_DTYPES` (f16/bf16 stored narrow, computed in f32);
anything else raises UnsupportedError naming the op, node and dtype. `markdown()` renders
`docs/supported_ops.md` (regenerate with `python tools/gen_op_table.py`; a test checks the
committed file is current).
"""

from __future__ import annotations

from typing import Any

__all__ = ["contrib_ops", "expanded", "markdown", "supported_ops"]


def supported_ops() -> list[dict[str, Any]]:
    """One dict per registered op: op, domain, versions, execution, doc."""
    from onnxjit.ir import opdef

    opdef.load_all()
    rows = []
    for (domain, name), d in sorted(opdef.OPS.items()):
        if name.startswith("Fused") or domain == "onnxjit":  # internal ops passes create
            continue
        execution = "fused" if d.scalar is not None else ("native" if d.lower is not None
                                                          else "host")
        rows.append({"op": name, "domain": domain or "ai.onnx", "versions": tuple(d.versions),
                     "execution": execution, "doc": d.doc})
    return rows


def markdown() -> str:
    from onnxjit.ir.types import COMPUTE_DTYPES, supported_dtypes_text

    rows = supported_ops()
    lines = [
        "# Supported operators",
        "",
        "Generated from the op registry by `tools/gen_op_table.py`; do not edit by hand.",
        "",
        f"{len(rows)} operators. Element types: those each op's ONNX schema allows among "
        f"{supported_dtypes_text(COMPUTE_DTYPES)} (f16/bf16 are stored narrow and computed in "
        "f32); others raise `UnsupportedError` naming the op, node and dtype.",
        "Execution: `fused` = elementwise rule fused with neighbours into one loop; `native` = "
        "its own loop nests; `host` = evaluated in numpy by the run-time shape phase.",
        "",
        "| op | domain | since-versions | execution | notes |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        doc = r["doc"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r['op']} | {r['domain']} | {', '.join(map(str, r['versions']))} | "
                     f"{r['execution']} | {doc} |")
    lines += ["", "## onnxruntime contrib ops", "",
              "Rewritten by the `expand-contrib` pass into the standard ops above (so they run "
              "on the same kernels); a com.microsoft op not listed raises `UnsupportedError`.",
              "", "| op | domain | becomes |", "|---|---|---|"]
    for op, domain, note in contrib_ops():
        lines.append(f"| {op} | {domain} | {note} |")
    return "\n".join(lines) + "\n"


def contrib_ops() -> list[tuple[str, str, str]]:
    """(op, domain, what it is rewritten into) of every contrib op `expand-contrib` handles."""
    from onnxjit.passes import contrib_gqa, contrib_quant, contrib_transformer, expand_contrib

    rows = [(op, "com.microsoft", "DequantizeLinear, the float op, QuantizeLinear")
            for op in expand_contrib.EXPANSIONS]
    for mod in (contrib_transformer, contrib_gqa, contrib_quant):
        rows += [(op, "com.microsoft", mod.NOTES[op]) for op in mod.EXPANSIONS]
    rows += [(op, "ai.onnx", contrib_transformer.NOTES[op])
             for op in contrib_transformer.ONNX_DOMAIN_EXPANSIONS]
    return sorted(rows)


def expanded(domain: str, op: str) -> bool:
    """Does `expand-contrib` rewrite this (domain, op) into standard ops?"""
    domain = "ai.onnx" if domain in ("", "ai.onnx") else domain
    return any(o == op and d == domain for o, d, _ in contrib_ops())
