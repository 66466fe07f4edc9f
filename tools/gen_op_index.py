"""Regenerate ir/ops/index.py (which modules register each op) from the registrations.

Imports every op family (`opdef.load_all`), reads which module's import made each entry of the
op tables (`opdef.REGISTERED_BY`) and writes the index that `opdef.ensure` reads. Run it after
adding, moving or renaming an op; tests/test_op_index.py fails until then.
"""

from pathlib import Path

from onnxjit.ir.ops.index import MARKER, render

if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / "ir" / "ops" / "index.py"
    text = target.read_text()
    head = text[:text.index(MARKER)]
    target.write_text(head + render())
    print(f"wrote {target}")
