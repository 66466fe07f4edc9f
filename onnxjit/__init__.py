"""onnxjit: an ONNX compiler for CPUs.

    fn = onnxjit.compile("model.onnx")
    y, = fn(x)
    sess = onnxjit.InferenceSession("model.onnx")      # onnxruntime's API

See README.md and docs/architecture.md. The heavy parts (importer, passes, code generator) are
imported on first use, so `import onnxjit` stays cheap.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from onnxjit import bytecode as _bytecode

_bytecode.install()  # before the other modules: they then load from its cache

from onnxjit.errors import (  # noqa: E402
    CompileError,
    InputError,
    InputTypeError,
    ModelError,
    OnnxJitError,
    UnsupportedError,
)
from onnxjit.version import __version__  # noqa: E402

if TYPE_CHECKING:
    from onnxjit.runtime import CompiledModel

__all__ = [
    "CompileError", "InputError", "InputTypeError", "ModelError", "OnnxJitError",
    "UnsupportedError", "compile", "__version__",
    "parse", "parse_graph", "parse_function", "parse_node", "to_text", "supported_ops",
    "InferenceSession", "SessionOptions", "RunOptions", "GraphOptimizationLevel",
    "get_available_providers", "get_device", "NodeArg", "ModelMetadata",
]

# The ONNX textual syntax (onnxjit.onnxtext), bound on first use so `import onnxjit` stays cheap.
_TEXT_API = ("parse", "parse_graph", "parse_function", "parse_node", "to_text")
# onnxruntime's session API (onnxjit.session), also bound on first use.
_SESSION_API = ("InferenceSession", "SessionOptions", "RunOptions", "GraphOptimizationLevel",
                "get_available_providers", "get_device", "NodeArg", "ModelMetadata")


def __getattr__(name: str):  # noqa: ANN202 - PEP 562 lazy attributes
    if name in _TEXT_API:
        from onnxjit import onnxtext

        value = getattr(onnxtext, name)
        globals()[name] = value
        return value
    if name in _SESSION_API:
        from onnxjit import model_info, session

        value = getattr(session if hasattr(session, name) else model_info, name)
        globals()[name] = value
        return value
    if name == "supported_ops":
        from onnxjit.supported import supported_ops

        globals()[name] = supported_ops
        return supported_ops
    raise AttributeError(f"module 'onnxjit' has no attribute '{name}'")


def compile(  # noqa: A001 - the public name DESIGN §1 asks for
    model: Any,
    *,
    cache_dir: str | os.PathLike | Literal[False] | None = None,
    dump_ir: str | os.PathLike | None = None,
    num_threads: int = 0,
    specialize: Literal["auto", "shape", "dynamic"] | None = None,
    opt_level: int = 3,
    base_dir: str | os.PathLike | None = None,
    verify: bool | None = None,
    fast_algorithms: bool = True,
    progress: bool | Literal["auto"] | Callable[[str, int, int], None] | None = None,
    cache_max_bytes: int | str | None = None,
    tiered: bool | None = None,
) -> CompiledModel:
    """Compile an ONNX model to a `CompiledModel`, a callable that compiles each new input
    signature on its first call (and finds it in memory or the disk cache after that).

    model: a path to a `.onnx` or `.onnxtxt` file, the model's bytes, an `onnx.ModelProto`,
        or model text in the ONNX textual syntax.
    cache_dir: the disk-cache folder; False for none; None: `$ONNXJIT_CACHE_DIR`, else
        `$XDG_CACHE_HOME/onnxjit` or `~/.cache/onnxjit`.
    dump_ir: a folder receiving the IR after every pass, the LLVM IR and the assembly;
        None: `$ONNXJIT_DUMP_IR`, else no dumps.
    num_threads: worker threads of parallel loops; 0: every core this process may use.
    specialize: "auto" (default; also `$ONNXJIT_SPECIALIZE`): code for the first shapes, then
        one program with the dims seen varying symbolic; "dynamic": the dims the model
        declares symbolic stay symbolic from the first call; "shape": a program per shape.
    opt_level: LLVM optimisation level, 0..3.
    base_dir: the folder of external data for a model given as bytes or an object (a model
        file's own folder otherwise).
    verify: when the IR verifiers run (a failure is a `CompileError` naming the pass): True
        after every pass; None (`$ONNXJIT_VERIFY`: 1 True, 0 False) on the imported model
        and each pipeline's result, about a tenth less compile time; False never.
    fast_algorithms: 3x3 convs may use Winograd F(2x2,3x3) (and products by constant
        weights Strassen, when `strassen.STRASSEN` is on: off by default, measured slower),
        whose rounding is bounded by the operands' magnitudes rather than element by
        element; False: direct sums only.
    progress: reporting of compiles: None (`$ONNXJIT_PROGRESS`: 0 off, 1 on; default "auto":
        a one-line display on stderr for compiles over a second when stderr is a terminal),
        True, False, or a callable `fn(stage, done, total)` called as each stage begins.
    cache_max_bytes: the disk cache's size cap (bytes, or text like "500M", "2G"; 0: none);
        None: `$ONNXJIT_CACHE_MAX_SIZE`, else 5 GiB. A write past it removes the least
        recently used entries.
    tiered: a call whose program is not compiled yet is answered by tier 0 (the graph run
        with numpy) while a background process compiles the program into the disk cache;
        later calls run the native code once it is there (`fn.tier_info()`,
        `fn.wait_compiled()`). None: `$ONNXJIT_TIERED` (0 off), else on. Needs the disk cache;
        graphs under 16 nodes always compile at once.

    These are the fields of `onnxjit.options.CompileOptions` (`fn.options`).
    """
    from onnxjit.runtime import compile_model

    return compile_model(model, cache_dir=cache_dir, dump_ir=dump_ir, num_threads=num_threads,
                         specialize=specialize, opt_level=opt_level, base_dir=base_dir,
                         verify=verify, fast_algorithms=fast_algorithms, progress=progress,
                         cache_max_bytes=cache_max_bytes, tiered=tiered)
