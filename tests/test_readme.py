"""README's two set-up commands come first, and .ci/run runs exactly the test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block and text.index(block.group(0)) < text.index("## "), "commands come first"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_two_commands():
    install_run, test = _readme_commands()
    assert install_run == "pip install -e . && onnxjit demo"
    assert test.startswith('pip install -e ".[test]"') and "pytest" in test


def test_ci_runs_the_readme_test_command():
    _, test = _readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci
    assert any("venv" in line for line in ci)
