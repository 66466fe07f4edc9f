"""onnxjit: an ONNX compiler for CPUs.

    fn = onnxjit.compile("model.onnx")
    y, = fn(x)

See README.md and DESIGN.md. The heavy parts (importer, passes, code generator) are imported
on first use, so `import onnxjit` stays cheap.
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

__version__ = "0.1.0"

__all__ = [
    "CompileError", "InputError", "InputTypeError", "ModelError", "OnnxJitError",
    "UnsupportedError", "compile", "__version__",
]


def compile(model, **options):  # noqa: A001 - the public name DESIGN §1 asks for
    """Compile an ONNX model (path, bytes, ModelProto, or parsed text) to a `CompiledModel`.

    Options are those of `onnxjit.options.CompileOptions`.
    """
    from onnxjit.driver import compile_model

    return compile_model(model, **options)
