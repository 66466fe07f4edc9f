"""onnxjit: an ONNX compiler for CPUs.

    fn = onnxjit.compile("model.onnx")
    y, = fn(x)
    sess = onnxjit.InferenceSession("model.onnx")      # onnxruntime's API

See README.md and docs/architecture.md. The heavy parts (importer, passes, code generator) are
imported on first use, so `import onnxjit` stays cheap.
"""

from __future__ import annotations

from onnxjit.errors import (
    CompileError,
    InputError,
    InputTypeError,
    ModelError,
    OnnxJitError,
    UnsupportedError,
)
from onnxjit.version import __version__

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


def compile(model, **options):  # noqa: A001 - the public name DESIGN §1 asks for
    """Compile an ONNX model (path, bytes, ModelProto, or parsed text) to a `CompiledModel`.

    Options are those of `onnxjit.options.CompileOptions`.
    """
    from onnxjit.runtime import compile_model

    return compile_model(model, **options)
