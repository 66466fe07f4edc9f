"""The host target: LLVM initialisation, target machines for this CPU, and the target's identity.

Code is generated for the CPU this process runs on (`get_host_cpu_name`, `get_host_cpu_features`),
so the disk cache key must name the triple, the CPU, its features and the LLVM/llvmlite versions:
`target_id()` is that name. `llvm.initialize()` raises on LLVM 22, so only the native target,
asm printer and asm parser are initialised, once.
"""

from __future__ import annotations

import functools
import threading

import llvmlite
import llvmlite.binding as llvm

_init_lock = threading.Lock()
_initialised = False


def init() -> None:
    """Initialise LLVM's native target once per process."""
    global _initialised
    if _initialised:
        return
    with _init_lock:
        if not _initialised:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            llvm.initialize_native_asmparser()  # inline assembly (`amx_gemm.granted`)
            _initialised = True


@functools.lru_cache(maxsize=None)
def host() -> tuple[str, str, str]:
    """(triple, cpu name, feature string) of this machine."""
    init()
    triple = llvm.get_process_triple()
    cpu = llvm.get_host_cpu_name()
    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # some hosts cannot report features; the CPU name implies them
        features = ""
    return triple, cpu, features


#: Tuning flags added to the host's features: the vectorizers must not use gathers and
#: scatters (microcoded on Zen 4, some cycles an element). Unrolled strided loops (a 2x2
#: stride-2 average pool over 20 columns) were SLP-vectorized into vgatherqps/vscatterqps:
#: 3.3x slower than with shuffles; models alike or 1-2% faster (DenseNet-121, LSTM, SqueezeNet).
#: And loops vectorize to the widest registers: LLVM's tuning for Intel's AVX-512 cores
#: (Ice Lake to Emerald Rapids) prefers 256-bit vectors, which left plain loops at half width
#: beside the 512-bit microkernels (Zen 4 prefers 512 already: no change there). Measured on
#: Emerald Rapids, two threads, interleaved against 256: elementwise chain 1.32x, MLP-tanh
#: 1.26x, depthwise 3x3 1.16x, LSTM 1.12x, MobileNetV2-like 1.10x, MLP b32 1.05x, BERT-tiny
#: 1.03x, ResNet-like and conv 3x3 even.
TUNING = "+prefer-no-gather,+prefer-no-scatter,-prefer-256-bit"


def gather_features() -> str:
    """The features of a function that may use gathers (`Kernel.gather`: independent table
    lookups, where a gather loads what a scalar loop would, with a sixth of the
    instructions): the host's and `TUNING`, but gathers allowed. Measured on a tree walk
    (500 LightGBM trees, 10,000 rows, one thread): 1.9-2.5x faster than the same loop
    vectorized with one insert per element."""
    return ",".join(f for f in (host()[2], TUNING.replace("+prefer-no-gather", "-prefer-no-gather"))
                    if f)


def create_target_machine(opt_level: int = 3) -> llvm.TargetMachine:
    """A fresh target machine for the host (an execution engine takes ownership of one), with
    the host's features and `TUNING`."""
    triple, cpu, features = host()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=",".join(f for f in (features, TUNING)
                                                                    if f),
                                        opt=min(opt_level, 3),
                                        reloc="pic", codemodel="jitdefault")


@functools.lru_cache(maxsize=None)
def data_layout() -> str:
    return str(create_target_machine().target_data)


@functools.lru_cache(maxsize=None)
def vector_bytes() -> int:
    """Width of the widest vector registers the host's features enable (16, 32 or 64)."""
    features = host()[2].split(",")
    if "+avx512f" in features:
        return 64
    if "+avx" in features:
        return 32
    return 16


@functools.lru_cache(maxsize=None)
def target_id() -> str:
    """Everything about the host and the toolchain that changes the object code we emit."""
    triple, cpu, features = host()
    major, minor, patch = llvm.llvm_version_info
    return (f"{triple}|{cpu}|{features}|llvm{major}.{minor}.{patch}"
            f"|llvmlite{llvmlite.__version__}")
