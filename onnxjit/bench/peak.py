"""The core's single-thread FMA peak in GFLOP/s, measured with a generated kernel.

Algorithm: 1) write an LLVM IR function `void fma_peak(i64 n, ptr out)` whose loop body
updates `ACC[lanes]` independent vector accumulators with `llvm.fma` (`acc = acc * m + c`): enough
independent chains to cover the FMA latency times the number of FMA pipes, so the loop is
throughput-bound and touches no memory; the sum of the accumulators is stored to `out` so
nothing is dead; 2) compile it to object code with onnxjit's own codegen machinery (target
machine for the host CPU, the same optimisation pipeline: `jit.object_code`) and link it with
`link.load_object`;
3) call it through ctypes for `n` iterations (~2 ms), alternating 256-bit and, when the host has
them, 512-bit vectors, best of many calls (on a shared machine the least disturbed call);
the peak is the larger figure: `n * ACC[lanes] * lanes * 2 / seconds`.
"""

from __future__ import annotations

import ctypes
import time

#: independent accumulators per vector width: latency (4) x FMA pipes (2) x 2 for slack; the
#: 512-bit form needs half as many (and more would spill if LLVM splits them into halves)
ACC = {8: 16, 16: 8}


def kernel_ir(lanes: int, triple: str, layout: str) -> str:
    """LLVM IR text of `fma_peak` on `<lanes x float>` vectors."""
    acc = ACC[lanes]
    vt = f"<{lanes} x float>"
    splat = lambda v: f"<{', '.join([f'float {v}'] * lanes)}>"  # noqa: E731
    init = splat("1.000000e+00")
    m, c = splat("0x3FEFFFFFE0000000"), splat("0x3F1A36E2E0000000")  # 0.99999994, 1e-4
    phis, body, sums = [], [], []
    for i in range(acc):
        phis.append(f"  %a{i} = phi {vt} [ {init}, %entry ], [ %b{i}, %loop ]")
        body.append(f"  %b{i} = call {vt} @llvm.fma.v{lanes}f32({vt} %a{i}, {vt} {m}, "
                    f"{vt} {c})")
    prev = "%b0"
    for i in range(1, acc):
        sums.append(f"  %s{i} = fadd {vt} {prev}, %b{i}")
        prev = f"%s{i}"
    return "\n".join([
        f'target triple = "{triple}"', f'target datalayout = "{layout}"',
        f"declare {vt} @llvm.fma.v{lanes}f32({vt}, {vt}, {vt})",
        "define void @fma_peak(i64 %n, ptr noalias %out) {",
        "entry:", "  br label %loop", "loop:",
        "  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]", *phis, *body,
        "  %i1 = add i64 %i, 1", "  %done = icmp sge i64 %i1, %n",
        "  br i1 %done, label %exit, label %loop", "exit:", *sums,
        f"  store {vt} {prev}, ptr %out, align 4", "  ret void", "}", ""])


def _compile(lanes: int) -> tuple[object, int]:
    from onnxjit.codegen.jit import object_code
    from onnxjit.codegen.link import load_object
    from onnxjit.codegen.objects import CompiledObject

    code = object_code(lambda triple, layout: kernel_ir(lanes, triple, layout), 2)
    lib = load_object(CompiledObject(code, "fma_peak", "fma_peak", 0, 0, False))
    return lib, lib.entry_addr


def measure(seconds: float = 0.3) -> dict[str, float]:
    """Measured single-thread FMA peak: {"gflops", "gflops_256", "gflops_512" (0 if no
    512-bit vectors), "lanes"} (lanes of the faster width). Calls of ~2 ms, alternating the
    widths, best of each: short calls are the likeliest to run undisturbed by other jobs."""
    from onnxjit.codegen import target

    target.init()
    widths = [8] + ([16] if target.vector_bytes() >= 64 else [])
    out = (ctypes.c_float * 16)()
    libs, calls, best = [], {}, {}
    for lanes in widths:
        lib, addr = _compile(lanes)
        libs.append(lib)  # keeps the code mapped until the last call
        fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(addr)
        n = 1000
        while True:  # calibrate to ~2 ms a call
            t0 = time.perf_counter()
            fn(n, ctypes.addressof(out))
            dt = time.perf_counter() - t0
            if dt > 0.002:
                break
            n *= 2
        calls[lanes], best[lanes] = (fn, n), dt
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for lanes, (fn, n) in calls.items():
            t0 = time.perf_counter()
            fn(n, ctypes.addressof(out))
            best[lanes] = min(best[lanes], time.perf_counter() - t0)
    res = {f"gflops_{lanes * 32}": calls[lanes][1] * ACC[lanes] * lanes * 2 / best[lanes] / 1e9
           for lanes in widths}
    res.setdefault("gflops_512", 0.0)
    res["gflops"] = max(res["gflops_256"], res["gflops_512"])
    res["lanes"] = 16.0 if res["gflops_512"] > res["gflops_256"] else 8.0
    del libs
    return res


if __name__ == "__main__":
    print(measure(1.0))
