"""Per-kernel profile of a compiled model from `perf` samples and onnxjit's perf map.

    ONNXJIT_PERF_MAP=1 python my_script.py &        # compiles, then calls the model in a loop
    perf record -F 4000 -p PID -o perf.data -- sleep 5
    python tools/perf_kernels.py perf.data /tmp/perf-PID.map [--top N]

Run the model on one thread (`num_threads=1`) for shares that add up to the call's time.
Algorithm: 1) read the perf map (address, size, name per JIT function, written by
`codegen/elf_loader.py` when $ONNXJIT_PERF_MAP is set) and sort it by address; 2) take every
sample's instruction pointer from `perf script` and find the function holding it by bisection;
3) count samples per function: kernels (`<prefix>.kN.<name>` and their `.parN` bodies) by their
name; shared GEMM microkernels (`onnxjit.gemm.*`, one copy per object module, called by every
product of that module) by their name and the nearest kernel below them in the address space,
which names the module they belong to, not necessarily the kernel that called them (the JIT
code keeps no frame pointers, so perf has no call chains into it); anything else (libc,
Python, the kernel) under its own symbol. 4) print the shares, largest first.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import subprocess


def read_map(path: str) -> list[tuple[int, int, str]]:
    """(start, size, name) of every JIT function, sorted by start."""
    rows = []
    with open(path) as f:
        for line in f:
            addr, size, name = line.split(maxsplit=2)
            rows.append((int(addr, 16), int(size, 16), name.strip()))
    return sorted(rows)


def label(rows: list[tuple[int, int, str]], i: int) -> str:
    """The report's name of function `i`: a kernel's own name, or a microkernel's name with
    the nearest kernel below it (its object module)."""
    name = rows[i][2]
    if name.startswith("onnxjit_main"):
        return name.split(".", 1)[1] if "." in name else name
    j = i
    while j > 0 and not rows[j][2].startswith("onnxjit_main"):
        j -= 1
    owner = rows[j][2].split(".")
    return f"{name}  (module of {owner[1] if len(owner) > 1 else '?'})"


def count(data: str, rows: list[tuple[int, int, str]]) -> tuple[collections.Counter, int]:
    """Samples per reported name, and the total."""
    starts = [r[0] for r in rows]
    out = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym"], capture_output=True,
                         text=True, check=True).stdout
    counts: collections.Counter = collections.Counter()
    total = 0
    for line in out.splitlines():
        parts = line.split()
        try:
            ip = int(parts[0], 16)
        except (ValueError, IndexError):
            continue
        total += 1
        i = bisect.bisect_right(starts, ip) - 1
        if i >= 0 and ip < rows[i][0] + rows[i][1]:
            counts[label(rows, i)] += 1
        else:
            counts["[not JIT] " + (parts[1] if len(parts) > 1 else "?")] += 1
    return counts, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", help="perf.data of `perf record -p PID`")
    ap.add_argument("perf_map", help="/tmp/perf-PID.map of the same process")
    ap.add_argument("--top", type=int, default=40, help="rows printed")
    args = ap.parse_args()
    counts, total = count(args.data, read_map(args.perf_map))
    print(f"{total} samples")
    for name, n in counts.most_common(args.top):
        print(f"{100 * n / max(total, 1):6.2f}%  {name}")


if __name__ == "__main__":
    main()
