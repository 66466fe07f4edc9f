"""Regenerate ir/op_index.py (which modules register each op) from the registrations.

Imports every op family (`opdef.load_all`), reads which module's import made each entry of the
op tables (`opdef.REGISTERED_BY`: OPS and the host tables of `ir.host_eval`) and writes the
part of ir/op_index.py below its marker, which `opdef.ensure` reads. Run it after adding,
moving or renaming an op; tests/test_op_index.py fails until then.
"""

from __future__ import annotations

from pathlib import Path

from onnxjit.ir.op_index import MARKER, PREFIX

TARGET = Path(__file__).resolve().parents[1] / "ir" / "op_index.py"


def computed() -> dict[str, tuple[str, ...]]:
    """`op_index.MODULES` as the registrations give it now (every family imported)."""
    from onnxjit.ir import host_eval  # noqa: F401  (its tables are registries too)
    from onnxjit.ir.opdef import REGISTERED_BY, load_all

    load_all()
    out: dict[str, list[str]] = {}
    for (domain, op), modules in REGISTERED_BY.items():
        for m in modules:
            if m.startswith(PREFIX):
                out.setdefault(m[len(PREFIX):], []).append(f"{domain}:{op}" if domain else op)
    return {m: tuple(sorted(out[m])) for m in sorted(out)}


def render() -> str:
    """The generated part of ir/op_index.py, from `MARKER` on."""
    lines = [MARKER, "MODULES: dict[str, tuple[str, ...]] = {"]
    for module, ops in computed().items():
        items = [f'"{name}",' for name in ops]
        if len(items) > 1:
            items[-1] = items[-1][:-1]  # a trailing comma only makes one-element tuples
        line = f'    "{module}": ('
        for item in items:
            if len(line) + len(item) + 3 > 99:
                lines.append(line.rstrip())
                line = "        "
            line += item + " "
        lines.append(line.rstrip() + "),")
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = TARGET.read_text()
    TARGET.write_text(text[:text.index(MARKER)] + render())
    print(f"wrote {TARGET}")
