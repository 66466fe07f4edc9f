"""The error types a user of onnxjit can see (DESIGN §6).

Every error a user can cause derives from `OnnxJitError`. Messages name the node, value or input
involved and what was expected; `where` (a node or value description) is prepended when given, so
raising sites stay short: ``raise ModelError("input 'x' is not defined", where=node)``.
"""

from __future__ import annotations


def _describe(where: object) -> str:
    describe = getattr(where, "describe", None)
    return describe() if callable(describe) else str(where)


class OnnxJitError(Exception):
    """Base class of every error onnxjit raises on purpose."""

    def __init__(self, message: str, *, where: object = None):
        self.where = where
        if where is not None:
            message = f"{_describe(where)}: {message}"
        super().__init__(message)


class ModelError(OnnxJitError, ValueError):
    """The model is invalid: undecodable bytes, SSA or order violations, undefined names, bad
    attributes, or external data outside the model's folder."""


class UnsupportedError(OnnxJitError, NotImplementedError):
    """The model is valid but uses an op, opset version, domain or dtype onnxjit does not
    implement yet."""


class InputError(OnnxJitError, ValueError):
    """A call of a compiled model got wrong input names, dtypes, ranks or sizes."""


class InputTypeError(InputError, TypeError):
    """An input has the wrong type or dtype."""


class CompileError(OnnxJitError, RuntimeError):
    """A bug in the compiler: a pass broke an invariant. Names the pass."""
