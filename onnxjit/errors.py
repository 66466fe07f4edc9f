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


class SizeLimitError(ModelError):
    """A value would be larger than any process can hold. Shape inference raises it; when the
    shape came from a call's input shapes or values, the runtime re-raises it as an
    `InputError` (the call, not the model, is at fault)."""


class UnsupportedError(OnnxJitError, NotImplementedError):
    """The model is valid but uses an op, opset version, domain or dtype onnxjit does not
    implement yet."""


class InputError(OnnxJitError, ValueError):
    """A call of a compiled model got wrong input names, dtypes, ranks or sizes."""


class InputTypeError(InputError, TypeError):
    """An input has the wrong type or dtype."""


def format_size(nbytes: int) -> str:
    """`nbytes` for a message: '4.0 TiB (4398046511104 bytes)'."""
    size, unit = float(nbytes), "bytes"
    for u in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024:
            break
        size, unit = size / 1024, u
    return f"{nbytes} bytes" if unit == "bytes" else f"{size:.1f} {unit} ({nbytes} bytes)"


class CompileError(OnnxJitError, RuntimeError):
    """A bug in the compiler: a pass broke an invariant. Names the pass."""


def add_context(e: OnnxJitError, context: str) -> OnnxJitError:
    """An error like `e` (same type and `where`), its message extended by '; in <context>'.
    Importer and verifier add one clause per enclosing subgraph as an error leaves it, so a
    message from deep inside nested control flow names the whole chain of owners."""
    err = type(e)(f"{e}; in {context}")
    err.where = e.where
    return err
