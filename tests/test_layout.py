"""The source tree keeps its architecture: no import cycles, one-way layers, fences, small files.

The import graph is read from the source with `ast` (nothing is imported), counting every
import statement: at module level, inside functions, and under `TYPE_CHECKING`. A module is
named as installed (`ir/ops/conv/conv.py` is `onnxjit.ir.ops.conv.conv`); `from P import m`
is an edge to the module `P.m` when there is one, else to `P`. Importing a module runs its
package's `__init__`, but that implicit edge is not counted: a cycle needs explicit imports.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: source folder -> installed package (pyproject's package-dir)
SOURCES = {"onnxjit": "onnxjit", "ir": "onnxjit.ir", "passes": "onnxjit.passes",
           "codegen": "onnxjit.codegen"}
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in SOURCES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package, *parts])] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module of `onnxjit` that `name` imports, and every other top-level name."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    return out


GRAPH = {m: {i for i in _imports(m, p) if i in MODULES and i != m} for m, p in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(GRAPH):
        if root in index:
            continue
        work = [(root, iter(sorted(GRAPH[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(GRAPH[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_graph_sees_the_tree():
    assert len(MODULES) > 150
    assert "onnxjit.ir.ops.conv.conv" in GRAPH["onnxjit.ir.ops.fused.linear"]
    assert "onnxjit.ir.graph" in GRAPH["onnxjit.passes.lower_to_loops"]
    # a function-level import counts: runtime imports the driver inside methods
    assert "onnxjit.driver" in GRAPH["onnxjit.runtime"]


def test_no_import_cycles():
    assert _cycles() == []


def test_cycle_finder_finds_a_cycle(monkeypatch):
    monkeypatch.setitem(GRAPH, "onnxjit.ir.graph", GRAPH["onnxjit.ir.graph"] | {"onnxjit.driver"})
    assert any("onnxjit.driver" in c and "onnxjit.ir.graph" in c for c in _cycles())


def test_ir_core_imports_no_op_family():
    """The IR and its tools (ir/*.py) do not depend on the families; `opdef` only names the
    `ir.ops` package, whose modules it imports by walking it."""
    for name in GRAPH:
        if name.startswith("onnxjit.ir.") and not name.startswith("onnxjit.ir.ops"):
            families = {m for m in GRAPH[name] if m.startswith("onnxjit.ir.ops.")}
            assert not families, (name, families)


def test_layers_point_down():
    """ir imports neither passes, the runtime nor codegen, and passes no codegen, except
    `codegen.kernel_shapes` (the GEMM microkernel's geometry, which lowering sizes blocks and
    packs weights for); codegen imports no pass."""
    def under(name: str, *prefixes: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in prefixes)

    target_query = "onnxjit.codegen.kernel_shapes"
    for name, deps in GRAPH.items():
        deps = deps - {target_query}
        if under(name, "onnxjit.ir"):
            bad = {d for d in deps if under(d, "onnxjit.passes", "onnxjit.codegen",
                                               "onnxjit.driver", "onnxjit.runtime",
                                               "onnxjit.importer")}
            assert not bad, (name, bad)
        if under(name, "onnxjit.codegen"):
            assert not {d for d in deps if under(d, "onnxjit.passes")}, name
        if under(name, "onnxjit.passes"):
            assert not {d for d in deps if under(d, "onnxjit.codegen")}, name
    assert not {d for d in GRAPH[target_query] if under(d, "onnxjit.codegen")} - {
        "onnxjit.codegen.target"}


#: third-party package -> where it may be imported (source paths relative to the root)
FENCES = {
    "llvmlite": ("codegen/",),
    "google": ("onnxjit/importer.py", "onnxjit/importer_graph.py", "onnxjit/tensors.py",
               "onnxjit/external_data.py", "onnxjit/proto/"),
    "onnx": ("onnxjit/bench/",),  # benchmarks build models with the test extra
}


@pytest.mark.parametrize("package", sorted(FENCES))
def test_import_fences(package):
    allowed = FENCES[package]
    for name, path in MODULES.items():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(allowed) or rel == "onnxjit/proto/onnx_pb2.py":
            continue
        tops = {i.split(".")[0] for i in _imports(name, path)}
        assert package not in tops, f"{rel} imports {package}"


def test_op_families_live_under_ir_ops():
    """Every module that registers ops (calls `op(...)` or `register_op`) is in ir/ops/."""
    for name, path in MODULES.items():
        if name.startswith("onnxjit.ir.ops") or name == "onnxjit.ir.opdef":
            continue
        tree = ast.parse(path.read_text())
        calls = {n.func.id for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert not calls & {"op", "register_op"}, name


def test_files_stay_small():
    paths = [p for folder in ("onnxjit", "ir", "passes", "codegen", "tests", "tools", "examples")
             for p in (ROOT / folder).rglob("*.py") if p.name != "onnx_pb2.py"]
    big = {p.relative_to(ROOT).as_posix(): n for p in paths
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, big


def test_every_module_states_its_purpose():
    missing = [n for n, p in MODULES.items()
               if p.name != "onnx_pb2.py" and not ast.get_docstring(ast.parse(p.read_text()))]
    assert not missing, missing
