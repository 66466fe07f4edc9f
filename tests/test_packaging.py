"""The installed (non-editable) wheel holds every module under `onnxjit.*` and imports.

`ir/`, `passes/` and `codegen/` sit at the top level of the repository and are mapped into the
package with setuptools `package-dir`; this checks the mapping from a built wheel, in a
subprocess whose sys.path sees only the unpacked wheel (plus the dependencies), never the
source tree or the editable install.
"""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import importlib, pkgutil, sys
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path = [p for p in sys.path if "__editable__" not in p]
sys.path.insert(0, sys.argv[1])
import onnxjit
assert onnxjit.__file__.startswith(sys.argv[1]), onnxjit.__file__
names = [m.name for m in pkgutil.walk_packages(onnxjit.__path__, "onnxjit.")]
for n in names:
    importlib.import_module(n)
print(len(names))
"""


def test_wheel_contains_and_imports_every_module(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "-q", "-w", str(tmp_path), str(ROOT)], check=True, timeout=300)
    (wheel,) = tmp_path.glob("onnxjit-*.whl")
    with zipfile.ZipFile(wheel) as z:
        files = z.namelist()
        z.extractall(tmp_path / "site")
    top = {f.split("/")[0] for f in files}
    assert not top & {"ir", "passes", "codegen"}, top
    for sub in ("ir", "ir/ops", "ir/ops/conv", "passes", "codegen", "proto", "bench"):
        assert f"onnxjit/{sub}/__init__.py" in files
    # every module of the tree, subpackages included (an unlisted package would be missing)
    for source, installed in (("ir", "onnxjit/ir"), ("passes", "onnxjit/passes"),
                              ("codegen", "onnxjit/codegen"), ("onnxjit", "onnxjit")):
        for py in (ROOT / source).rglob("*.py"):
            rel = py.relative_to(ROOT / source).as_posix()
            assert f"{installed}/{rel}" in files, py
    assert "onnxjit/examples/mlp.onnx" in files
    assert "onnxjit/py.typed" in files  # PEP 561: type checkers read the inline hints
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "site")],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) >= 150
