"""Regenerate docs/supported_ops.md from the op registry (see onnxjit/supported.py)."""

from pathlib import Path

from onnxjit.supported import markdown

if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / "docs" / "supported_ops.md"
    target.write_text(markdown())
    print(f"wrote {target}")
