"""The op index (ir/op_index.py) matches the registrations, and lookups load only what they
need: a compile imports the families of its ops, and a stale or missing index entry costs time
(every family loads), never an op."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

from onnxjit.ir import op_index

TOOL = Path(__file__).resolve().parents[1] / "tools" / "gen_op_index.py"


def test_the_index_matches_the_registrations():
    spec = importlib.util.spec_from_file_location("gen_op_index", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert op_index.MODULES == tool.computed(), \
        "ir/op_index.py is stale: run `python tools/gen_op_index.py`"
    text = TOOL.parent.parent.joinpath("ir", "op_index.py").read_text()
    assert text[text.index(op_index.MARKER):] == tool.render()  # as the tool writes it


def test_every_registration_comes_from_an_op_module():
    from onnxjit.ir.opdef import REGISTERED_BY, load_all

    load_all()
    strays = {k: m for k, m in REGISTERED_BY.items()
              if not all(x.startswith("onnxjit.ir.ops.") for x in m)}
    assert not strays, f"registered outside onnxjit.ir.ops (not indexable): {strays}"


def _fresh(code: str) -> str:
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_a_compile_imports_only_the_families_it_uses():
    out = _fresh("""
        import sys
        import numpy as np
        import onnxjit
        fn = onnxjit.compile('''<ir_version: 8, opset_import: ["" : 17]>
            g (float[N, 8] x) => (float[N, 8] y) { t = Relu(x)  y = Add(t, x) }''',
            cache_dir=False)
        x = np.arange(-8, 8, dtype=np.float32).reshape(2, 8)
        assert np.array_equal(fn(x)[0], np.maximum(x, 0) + x)
        from onnxjit.ir import opdef
        mods = [m for m in sys.modules if m.startswith("onnxjit.ir.ops.")]
        print(opdef._loaded, "onnxjit.ir.ops.conv.winograd" in sys.modules,
              "onnxjit.ir.ops.ml.forest" in sys.modules, len(mods))
    """)
    loaded, conv, ml, n = out.split()
    assert (loaded, conv, ml) == ("False", "False", "False"), out
    assert int(n) < 60


def test_an_op_the_index_misplaces_is_still_found():
    out = _fresh("""
        from onnxjit.ir import opdef
        from onnxjit.ir import op_index as index
        index.modules_of(("", "Add"))  # builds the inverse, which we then spoil
        index._BY_KEY[("", "Relu")] = ("onnxjit.ir.ops.tensor.slice",)
        del index._BY_KEY[("", "Erf")]
        relu, erf = opdef.lookup("", "Relu"), opdef.lookup("", "Erf")
        print(relu.op, erf.op, opdef._loaded, opdef.lookup("", "NoSuchOp"))
    """)
    assert out == "Relu Erf True None"
