"""`onnxjit.InferenceSession`: onnxruntime's session API over a `CompiledModel`.

Code written for onnxruntime runs by swapping the import:

    sess = onnxjit.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    y, = sess.run(None, {name: x})

Algorithm: the constructor compiles the model (`onnxjit.compile`, with the keyword options it
is given, and `intra_op_num_threads` of `sess_options` as `num_threads`); every method
forwards to the compiled model or reads its interface (`onnxjit.model_info`). onnxruntime's
own option objects are accepted: `SessionOptions`/`RunOptions` here are plain attribute bags
with its field names, read where onnxjit has the matching notion and otherwise ignored.
Providers: onnxjit is one CPU provider; a list naming others runs on the CPU with a warning,
as onnxruntime does when a listed provider is not available.

`run_async` runs `run` on a thread of its own and reports through the callback.
Not supported: `io_binding`, `run_with_ort_values`/`OrtValue`, profiling,
`set_providers` to another device, and `sess_options` fields that change onnxruntime's own
graph optimisations or logging (onnxjit optimises with its own pipeline).
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from onnxjit.errors import UnsupportedError

__all__ = ["GraphOptimizationLevel", "InferenceSession", "RunOptions", "SessionOptions",
           "get_available_providers", "get_device"]

CPU = "CPUExecutionProvider"


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's optimisation levels (accepted; onnxjit always runs its own pipeline)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class SessionOptions:
    """onnxruntime's SessionOptions fields; `intra_op_num_threads` > 0 sets `num_threads`."""

    def __init__(self) -> None:
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_profiling = False
        self.optimized_model_filepath = ""
        self.execution_mode = 0
        self._configs: dict[str, str] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._configs[key] = value

    def get_session_config_entry(self, key: str) -> str:
        return self._configs[key]


class RunOptions:
    """onnxruntime's RunOptions fields (accepted and ignored)."""

    def __init__(self) -> None:
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.terminate = False


def get_available_providers() -> list[str]:
    """The execution providers: onnxjit compiles for the CPU."""
    return [CPU]


def get_device() -> str:
    return "CPU"


def _providers(providers: Any, provider_options: Any) -> tuple[list[str], list[dict]]:
    """Names and options of the providers asked for, reduced to the CPU one."""
    names: list[str] = []
    for p in providers or [CPU]:
        names.append(p[0] if isinstance(p, (tuple, list)) else str(p))
    others = [n for n in names if n != CPU]
    if others:
        warnings.warn(f"onnxjit runs on the CPU only; providers {others} are not available "
                      f"and {CPU} is used instead", RuntimeWarning, stacklevel=3)
    opts: dict = {}
    for p, o in zip(providers or [], provider_options or [{}] * len(providers or [])):
        name = p[0] if isinstance(p, (tuple, list)) else str(p)
        if name == CPU:
            opts = dict(p[1]) if isinstance(p, (tuple, list)) else dict(o or {})
    return [CPU], [{k: str(v) for k, v in opts.items()}]


class InferenceSession:
    """onnxruntime's `InferenceSession` API over an onnxjit compiled model.

    `path_or_bytes`: a path, serialized bytes, or an `onnx.ModelProto`. Keyword options are
    `onnxjit.compile`'s (cache_dir, num_threads, specialize, ...)."""

    def __init__(self, path_or_bytes: Any, sess_options: Any = None, providers: Any = None,
                 provider_options: Sequence[dict] | None = None, **compile_options: Any):
        from onnxjit.runtime import compile_model

        self._providers, self._provider_options = _providers(providers, provider_options)
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        threads = int(getattr(self._sess_options, "intra_op_num_threads", 0) or 0)
        if threads > 0:
            compile_options.setdefault("num_threads", threads)
        self._compiled = compile_model(path_or_bytes, **compile_options)

    @property
    def compiled(self) -> Any:
        """The underlying `onnxjit.CompiledModel`."""
        return self._compiled

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None) -> list:
        """Outputs (all when `output_names` is None or empty, else those named) as a list."""
        return self._compiled.run(output_names or None, input_feed)

    def run_async(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
                  callback: Any, user_data: Any, run_options: Any = None) -> None:
        """`run` on a thread of its own; then `callback(outputs, user_data, error)`, the
        error message "" on success (outputs None on failure), as onnxruntime calls it. A
        feed that lacks or misnames an input raises here, as onnxruntime's does."""
        import threading

        self._compiled._order((), dict(input_feed))

        def work() -> None:
            try:
                out = self.run(output_names, input_feed, run_options)
            except Exception as e:  # noqa: BLE001 - onnxruntime reports through the callback
                callback(None, user_data, f"{type(e).__name__}: {e}")
                return
            callback(out, user_data, "")

        threading.Thread(target=work, name="onnxjit-run-async", daemon=True).start()

    def get_inputs(self) -> list:
        """The required inputs (not those with an initializer) as NodeArgs."""
        return self._compiled.inputs

    def get_outputs(self) -> list:
        return self._compiled.outputs

    def get_overridable_initializers(self) -> list:
        """Inputs with an initializer (IR >= 4): a feed may override them by name."""
        return self._compiled.overridable_inputs

    def get_modelmeta(self) -> Any:
        from onnxjit.model_info import model_metadata

        return model_metadata(self._compiled._graph())

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_provider_options(self) -> dict[str, dict]:
        return dict(zip(self._providers, self._provider_options))

    def get_session_options(self) -> Any:
        return self._sess_options

    def set_providers(self, providers: Any = None, provider_options: Any = None) -> None:
        self._providers, self._provider_options = _providers(providers, provider_options)

    def io_binding(self) -> Any:
        raise UnsupportedError("InferenceSession.io_binding is not supported by onnxjit; "
                               "pass arrays to run()")

    def run_with_ort_values(self, *args: Any, **kwargs: Any) -> Any:
        raise UnsupportedError("InferenceSession.run_with_ort_values is not supported by "
                               "onnxjit; pass numpy arrays to run()")

    def end_profiling(self) -> str:
        return ""

    def get_profiling_start_time_ns(self) -> int:
        return 0

    def disable_fallback(self) -> None:
        """Accepted: onnxjit has no other provider to fall back to."""

    def enable_fallback(self) -> None:
        """Accepted: onnxjit has no other provider to fall back to."""

    def __repr__(self) -> str:
        return f"<onnxjit.InferenceSession over {self._compiled!r}>"
