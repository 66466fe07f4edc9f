"""onnxjit's version: one source for the package metadata (pyproject reads it), `__version__`
and the cache keys, which change with it (an entry of another version is never loaded)."""

__version__ = "0.1.0"
