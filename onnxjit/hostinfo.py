"""The identity of this host and toolchain for cache keys, without importing LLVM.

A warm start (every artifact found in the disk cache) must not pay for loading LLVM, so the
cache key cannot ask llvmlite for the CPU name and features. Algorithm: hash what determines
the code LLVM emits and can run here: the machine architecture, the CPU model name and its
feature flags as the kernel reports them (`/proc/cpuinfo`, the same CPUID bits LLVM's host
detection reads), and the exact llvmlite build (the path, size and mtime of its shared library,
found with `importlib.util.find_spec`, which does not import it). Off Linux, or when
`/proc/cpuinfo` is unreadable, the CPU part is `platform.processor()`.

`compiler_id()` names the compiler itself: the name, size and mtime of every source file of the
packages that decide what code is generated (onnxjit, ir, passes, codegen, and their
subpackages: the op families under ir/ops/ hold the folding and lowering rules), so a changed
compiler never reuses a stale entry even when its version string did not change (a few hundred
`stat` calls, no reads).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform

from onnxjit import digest


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read(1 << 16)
    except OSError:
        return platform.processor()
    keep = []
    for line in text.splitlines():
        key = line.split(":", 1)[0].strip()
        if key in ("vendor_id", "cpu family", "model", "model name", "flags"):
            keep.append(line.strip())
        elif not line.strip() and keep:
            break  # the first processor's block is enough: cores are alike
    return "\n".join(keep)


def _llvmlite_build() -> str:
    spec = importlib.util.find_spec("llvmlite")
    if spec is None or spec.origin is None:
        return "no-llvmlite"
    folder = os.path.join(os.path.dirname(spec.origin), "binding")
    parts = [folder]
    try:
        for name in sorted(os.listdir(folder)):
            if name.endswith((".so", ".dylib", ".dll")):
                st = os.stat(os.path.join(folder, name))
                parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    except OSError:
        pass
    return "|".join(parts)


@functools.lru_cache(maxsize=None)
def host_id() -> str:
    """A short hash naming this CPU and LLVM build (part of every artifact's cache key)."""
    text = f"{platform.machine()}\n{_cpu()}\n{_llvmlite_build()}"
    return digest.hexdigest(text.encode())[:32]


@functools.lru_cache(maxsize=None)
def compiler_id() -> str:
    """A short hash of the compiler's own sources (part of every artifact's cache key): each
    .py file's path, size and mtime, subpackages included (the op semantics and lowerings live
    in ir/ops/<family>/). `os.scandir` hands over names and types without a stat, so only the
    sources are stat'ed: 2.4 ms for the whole tree instead of os.walk's 4.5 (it is part of
    every warm start)."""
    parts: list[str] = []

    def scan(folder: str, rel: str) -> None:
        try:
            with os.scandir(folder) as it:
                found = sorted(it, key=lambda e: e.name)
        except OSError:
            return
        for e in found:
            if e.name.endswith(".py") and e.is_file():
                try:
                    st = os.stat(e.path)
                except OSError:
                    continue
                parts.append(f"{rel}/{e.name}:{st.st_size}:{st.st_mtime_ns}")
            elif e.is_dir() and not e.name.startswith((".", "__")):
                scan(e.path, f"{rel}/{e.name}")

    for package in ("onnxjit", "onnxjit.ir", "onnxjit.passes", "onnxjit.codegen"):
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            scan(folder, f"{package}/.")
    return digest.hexdigest("\n".join(parts).encode())[:32]
