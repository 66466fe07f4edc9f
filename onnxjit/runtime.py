"""`CompiledModel`: the callable a user gets from `onnxjit.compile`.

Lookups of a signature go: this object's own dict (the fast path: a tuple of (dtype, shape) per
argument) -> the process-wide memory cache -> the disk cache -> compile. Compiling imports the
model lazily: a process whose artifacts all come from the disk cache never parses the model or
runs a pass, and never invokes LLVM (object code is only linked). One lock serialises
compilation; calls of already-compiled signatures never take it. Artifacts whose code dispatches
parallel loops need the process's worker pool (`_ensure_pool`): its object code (a few KB) is
stored in each such artifact's disk-cache entry, so a warm start links it instead of compiling,
and in an entry of its own, so a compile in a fresh process (a background worker) links it too.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxjit import cache as cache_mod
from onnxjit import digest
from onnxjit.artifact import Artifact, sized_for_call
from onnxjit.blas import park_spinners
from onnxjit.entries import ensure_pool, layout_ok
from onnxjit.errors import InputError, OnnxJitError, add_context
from onnxjit.ir.types import DType
from onnxjit.memory_cache import LIMIT, LOCK, MEMORY, StageLookups
from onnxjit.model_info import Interface
from onnxjit.options import CompileOptions
from onnxjit.progress import LazyText, Session, cache_event, compiling
from onnxjit.signature import (
    Declared,
    check,
    declared_of,
    describe,
    fast_key,
    signature_id,
    to_array,
)
from onnxjit.timings import record, timed

if TYPE_CHECKING:
    from onnxjit.ir.graph import Model

__all__ = ["CompiledModel", "compile_model"]

_MEMORY, _MEMORY_LIMIT, _MEMORY_LOCK = MEMORY, LIMIT, LOCK  # onnxjit.memory_cache


def _no_fastcall(*args: Any) -> int:
    return -2


_NO_FASTCALL: tuple[Any, list[str], Any] = (_no_fastcall, [], None)


def _declared(model: Model) -> list[Declared]:
    # Tensors declare (name, DType, dims); sequences and optionals (name, their type, None).
    return [declared_of(v.name, v.type) for v in model.graph.inputs]


class CompiledModel(Interface, StageLookups):
    """A compiled ONNX model; call it like a function. See DESIGN §1."""

    def __init__(self, data: bytes, model_hash: str, options: CompileOptions,
                 base_dir: Path | None, source_name: str = "<bytes>",
                 meta: dict[str, Any] | None = None):
        self.options = options
        self._data = data
        self._hash = model_hash
        self._base_dir = base_dir
        self._source_name = source_name
        self._disk = cache_mod.DiskCache(options.cache_dir, options.cache_max_bytes)
        self._lock = threading.RLock()
        self._model: Model | None = None
        self._fast: dict[tuple, Artifact] = {}
        self._last: Artifact | None = None
        self._fastcall = _NO_FASTCALL
        self._defaults: dict[int, np.ndarray] = {}
        self._timings: dict[str, dict[str, float]] = {}
        with Session(source_name, options.progress, ("importing", "imported")) as session:
            meta = self._model_meta() if meta is None else meta
        if session.stages():
            self._timings["model"] = session.stages()
        # Graph inputs in order (the signature's); the public, positional ones are those
        # without an initializer: one with an initializer is overridable by name only.
        self._all_names: list[str] = meta["inputs"]
        self.input_names: list[str] = meta["required"]
        self.output_names: list[str] = meta["outputs"]
        self._declared: list[Declared] = meta.get("declared") or [
            (n, DType(d), None if s is None else tuple(s))
            for n, d, s in zip(meta["inputs"], meta["input_dtypes"], meta["input_shapes"])]
        self._n_in = len(self._all_names)
        self._index = {n: i for i, n in enumerate(self._all_names)}
        self._positions = [self._index[n] for n in self.input_names]
        from onnxjit.specialize import Specializer

        self._symbolic = Specializer(self)
        from onnxjit.tiered.tier import tier_of

        self._tier = tier_of(self)

    # model-level metadata ------------------------------------------------------------------
    def _model_key(self) -> str:
        from onnxjit.version import __version__

        return cache_mod.make_key("model", self._hash, str(cache_mod.FORMAT), __version__,
                                  str(self._base_dir))

    def _model_meta(self) -> dict[str, Any]:
        entry = self._disk.get(self._model_key())
        if entry is not None and "required" in entry.meta:
            return entry.meta
        model = self._graph()
        decl = _declared(model)
        meta = {"inputs": [n for n, _, _ in decl], "outputs": list(model.graph.output_names),
                "required": [v.name for v in model.graph.inputs if v.const is None],
                "input_dtypes": [d.value if isinstance(d, DType) else None for _, d, _ in decl],
                "input_shapes": [None if s is None else list(s) for _, _, s in decl]}
        if all(isinstance(d, DType) for _, d, _ in decl):
            self._disk.put(self._model_key(), cache_mod.Entry(meta))
        else:  # sequence/optional inputs: their types are not stored; the model is imported
            meta["declared"] = decl
        return meta

    def _graph(self) -> Model:
        with self._lock:
            if self._model is None:
                from onnxjit.driver import GRAPH_PIPELINE, Dumper, import_model

                dumper = Dumper(self.options.dump_ir / "graph" if self.options.dump_ir else None)
                compiling(1 + len(GRAPH_PIPELINE))
                src: Any = self._data
                try:
                    self._model = import_model(src, self._with_base(), dumper)
                except OnnxJitError as e:  # the bytes have no name: say which file they are
                    if self._source_name.startswith("<"):
                        raise
                    raise add_context(e, f"model file '{self._source_name}'") from None
                for i, v in enumerate(self._model.graph.inputs):
                    if v.const is not None:
                        self._defaults[i] = v.const
            return self._model

    def _load_defaults(self) -> None:
        """Default values of inputs (initializers that are inputs) from the model bytes: a warm
        start needs these but not the imported graph."""
        from onnxjit.importer import input_defaults

        with self._lock:
            if self._model is None and not self._defaults:
                values = input_defaults(self._data, self._base_dir)
                self._defaults = {i: values[n] for i, n in enumerate(self._all_names)
                                  if n in values}

    def _with_base(self) -> CompileOptions:
        return self.options.replace(base_dir=self._base_dir)

    # calling ----------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> tuple:
        """Run with inputs by position (graph-input order) and/or by name -> tuple of arrays."""
        if kwargs and not args and len(kwargs) == self._n_in:
            try:  # every input by name: the fast path takes them in graph-input order
                args, kwargs = tuple(map(kwargs.__getitem__, self._all_names)), {}
            except KeyError:  # an unknown name: `_order` says which
                pass
        if not kwargs:
            # The builtin of the last signature (`onnxjit.fastcall`): a tuple when the arrays
            # match it exactly, else -2 (take the checked path) or a failed check's number.
            fast, messages, art = self._fastcall
            try:
                r = fast(*args)
            except MemoryError as e:  # its outputs
                raise art._out_of_memory(e) from None
            if r.__class__ is tuple:
                return r
            if r > 0:
                raise InputError(messages[r - 1])
        if kwargs or len(args) != self._n_in:
            args = self._order(args, kwargs)
        try:
            art = self._fast[tuple([(a.dtype, a.shape) for a in args])]
        except (AttributeError, KeyError, TypeError):
            args, art = self._prepare(args)
            return art.run(args)  # a new signature: its builtin is built if it comes again
        # The builtin serves the next call only if it is this signature's: `_last` (what
        # `ir()` shows) is then the signature of every call, whichever path served it.
        self._last = art
        fast = getattr(art, "fast", None)
        # art keeps the builtin's context alive
        self._fastcall = _NO_FASTCALL if fast is None else (fast.fn, art.messages, art)
        return art.run(args)

    def _order(self, args: tuple, kwargs: dict) -> tuple:
        """All graph inputs in order: positional arguments are the required inputs, keywords
        any input (an overridable one too); omitted ones take their initializer."""
        if len(args) > len(self._positions):
            raise InputError(f"model takes {len(self._positions)} inputs {self.input_names}, "
                             f"got {len(args)} positional arguments")
        out: list[Any] = [None] * self._n_in
        given = [False] * self._n_in
        for i, x in zip(self._positions, args):
            out[i], given[i] = x, True
        for name, x in kwargs.items():
            i = self._index.get(name)
            if i is None:
                raise InputError(f"unknown input name '{name}'; inputs are {self._all_names}")
            if given[i]:
                raise InputError(f"input '{name}' given twice (by position and by name)")
            out[i], given[i] = x, True
        for i, g in enumerate(given):
            if not g:
                if i not in self._defaults and self._model is None:
                    self._load_defaults()
                if i in self._defaults:
                    out[i] = self._defaults[i]
                else:
                    raise InputError(f"missing input '{self._all_names[i]}'; inputs are "
                                     f"{self.input_names}")
        return tuple(out)

    def _prepare(self, args: tuple) -> tuple[list[np.ndarray], Artifact]:
        arrays = [to_array(n, a, d) for (n, d, _), a in zip(self._declared, args)]
        sig = check(self._declared, arrays)
        key = fast_key(arrays)  # lists (sequences) and None (optionals) included
        art = self._fast.get(key)
        if art is None:
            tier = self._tier
            art = self._artifact(sig) if tier is None else tier.artifact(sig)
            if tier is not None and art.__class__ is tier.Interpreted:
                return arrays, art  # tier 0 for this call: the next one looks again
            park_spinners()  # numpy's idle BLAS threads off the cores (once a process)
            self._fast[key] = art
        self._last, self._fastcall = art, _NO_FASTCALL
        return arrays, art

    # compiling ----------------------------------------------------------------------------------
    def _artifact_key(self, sig: tuple) -> str:
        from onnxjit.hostinfo import compiler_id, host_id
        from onnxjit.version import __version__

        return cache_mod.make_key("artifact", self._hash, str(self._base_dir),
                                  signature_id(sig), self.options.code_key(), __version__,
                                  str(cache_mod.FORMAT), host_id(), compiler_id())

    def _artifact(self, sig: tuple) -> Any:
        """The artifact of a new signature, its stages timed (`timings`) and reported."""
        # texts made only when logged or timed: a symbolic program binds sizes in microseconds
        what = LazyText(lambda: f"{self._source_name} for {describe(self.input_names, sig)}")
        with Session(what, self.options.progress) as session:
            art = self._lookup(sig, what)
        stages = session.stages() or getattr(art, "timings", None)
        if stages:
            self._timings[describe(self.input_names, sig)] = art.timings = stages
        return art

    def _lookup(self, sig: tuple, what: Any, compile: bool = True) -> Any:
        """The artifact of `sig`: symbolic program, memory, disk, else compiled; without
        `compile`, None (or the symbolic program's `tiered.pending.Pending`) instead."""
        if self._symbolic.enabled():
            art = self._symbolic.artifact(sig, compile)
            if art is not None:
                return art
        key = self._artifact_key(sig)
        with _MEMORY_LOCK:
            art = _MEMORY.get(key)
            if art is not None:
                _MEMORY.move_to_end(key)
                cache_mod.STATS.memory_hits += 1
                cache_event("memory hit", what)
                return art
        with self._lock:
            t0 = time.perf_counter()
            entry = self._disk.get(key)
            art = self._from_entry(sig, entry) if entry is not None else None
            if art is not None:
                record("load", time.perf_counter() - t0)
                cache_mod.STATS.disk_hits += 1
                cache_event("disk hit", what)
            elif not compile:
                return None
            else:
                cache_mod.STATS.misses += 1
                cache_event("miss", what)
                art = self._compile(sig, key)
            with _MEMORY_LOCK:
                _MEMORY[key] = art
                while len(_MEMORY) > _MEMORY_LIMIT:
                    _MEMORY.popitem(last=False)
            return art

    def _compile(self, sig: tuple, key: str) -> Any:
        from onnxjit.driver import SIGNATURE_PIPELINE

        compiling(len(SIGNATURE_PIPELINE) + 6)
        t0 = time.perf_counter()
        model = self._graph()
        from onnxjit.driver import Dumper, bind_signature
        from onnxjit.staged import Stage, Staged, first_dynamic

        dumper = Dumper(self._dump_folder(signature_id(sig)))
        with sized_for_call(describe(self._all_names, sig), shapes=self._call_sized()):
            bound = bind_signature(model, sig, self._with_base(), dumper)
            if first_dynamic(bound) is not None:
                self._disk.put(key, cache_mod.Entry({"staged": True}))
                return Staged(sig, Stage(self, bound, key))
            art = self._native(sig, key, bound, dumper)
        art.compile_seconds = time.perf_counter() - t0
        return art

    def _call_sized(self) -> bool:
        """Does some declared input leave a size (or the rank) to the call?"""
        return any(s is None or not all(isinstance(d, int) for d in s)
                   for _, _, s in self._declared)

    def _dump_folder(self, name: str) -> Path | None:
        """The dump folder of a signature: its id, shortened with a hash of the whole id when
        it would exceed file-name limits (a model with hundreds of inputs)."""
        if self.options.dump_ir is None:
            return None
        if len(name) > 120:
            name = f"{name[:100]}..{digest.hexdigest(name.encode())[:16]}"
        return self.options.dump_ir / name

    def _native(self, sig: tuple, key: str, bound: Model, dumper: Any) -> Artifact:
        """Lower a specialised graph, generate and load its code, and store it in the cache."""
        from onnxjit.driver import lower_bound

        program = lower_bound(bound, self._with_base(), dumper)
        obj, lib, pool_code = self._codegen(program, dumper, key)
        art = Artifact(
            signature=sig,
            out_specs=[(tuple(b.shape), b.dtype.numpy) for b in program.outputs],
            consts=[b.data for b in program.consts],
            arena_size=program.arena_size,
            messages=program.messages(),
            library=lib,
            use_py_entry=layout_ok(),
            program=program,
            num_threads=self.options.num_threads,
            out_names=[b.name for b in program.outputs],
        )
        self._store(key, art, obj, pool_code)
        return art

    def _codegen(self, program: Any, dumper: Any, key: str) -> tuple[Any, Any, bytes | None]:
        """(object code, its linked library, the worker pool's code) of a loop program;
        `key` (its cache key) names its symbols."""
        from onnxjit.codegen import compile_program, load_object
        from onnxjit.entries import MicroStore, pool_wanted

        obj = compile_program(program, opt_level=self.options.opt_level,
                              dump=dumper.write if dumper.folder is not None else None,
                              salt=key, side=pool_wanted(program, self.options.num_threads,
                                                         self._disk),
                              store=MicroStore(self._disk))
        with timed("link"):
            return obj, load_object(obj), ensure_pool(obj.uses_pool, self.options.num_threads,
                                                      disk=self._disk, built=obj.side)

    def _store(self, key: str, art: Artifact, obj: Any, pool_code: bytes | None) -> None:
        from onnxjit.entries import native_entry

        with timed("cache-write"):
            self._disk.put_later(key, native_entry(art, obj, pool_code))

    def _from_entry(self, sig: tuple, entry: cache_mod.Entry) -> Artifact | None:
        from onnxjit.entries import native_from_entry

        if entry.meta.get("staged"):  # the structure of the stages comes from the model
            from onnxjit.driver import bind_signature
            from onnxjit.staged import Stage, Staged

            bound = bind_signature(self._graph(), sig, self._with_base())
            return Staged(sig, Stage(self, bound, self._artifact_key(sig)))
        return native_from_entry(sig, entry, self._pool_for, layout_ok(),
                                 self.options.num_threads)

    def _pool_for(self, uses_pool: bool, stored: bytes | None) -> None:
        ensure_pool(uses_pool, self.options.num_threads, stored, self._disk)

    # symbolic programs (onnxjit.specialize, onnxjit.dynamic) ---------------------------------
    def _varying_stored(self) -> list[str]:
        entry = self._disk.get(self._model_key())
        return list(entry.meta.get("varying", [])) if entry is not None else []

    def _store_varying(self, names: list[str]) -> None:
        entry = self._disk.get(self._model_key())
        if entry is not None and "required" in entry.meta:
            self._disk.put(self._model_key(), cache_mod.Entry(dict(entry.meta, varying=names)))

    def _symbolic_from_entry(self, entry: cache_mod.Entry) -> Any:
        from onnxjit.entries import symbolic_from_entry

        return symbolic_from_entry(entry, self._pool_for, layout_ok(), self.options.num_threads)

    # introspection ------------------------------------------------------------------------------
    @property
    def required_inputs(self) -> list[str]:
        """Names of the inputs without a default value (graph inputs that are not also
        initializers), in graph-input order."""
        return list(self.input_names)

    def timings(self) -> dict[str, dict[str, float]]:
        """Seconds per compile stage: {what: {stage: seconds}}, in the order things ran;
        `what` is "model" (the import and graph pipeline, when this object imported the
        model), a signature's text (as in `signatures`), or "every size" (`precompile`).
        Stage names are listed in `onnxjit.timings`; a signature served from the disk cache
        shows only its `load`, one from this process's memory the compile that made it."""
        return {k: dict(v) for k, v in self._timings.items()}

    @property
    def signatures(self) -> list[str]:
        """The signatures compiled (or loaded) so far, as text."""
        return [describe(self._all_names, a.signature) for a in self._fast.values()]

    def ir(self, stage: str = "loops", signature: Any = None) -> str:
        """IR text of a stage ("graph", "loops", "llvm", "llvm-opt", "asm") for the last
        signature called, or for `signature`: input shapes of an earlier call, as a dict
        name -> shape or a tuple of shapes in input order (`onnxjit.introspect`)."""
        from onnxjit.introspect import ir_text

        return ir_text(self, stage, signature)

    def precompile(self, **hints: int) -> dict[str, Any]:
        """Compile now the program that serves every size of the dims the model declares
        symbolic, and store it in the disk cache: later calls, in this process or a fresh one
        sharing the cache, compile nothing. Keywords give symbols' usual sizes (`batch=8`),
        which tiling decisions use. Returns {"symbolic": built or not, "symbols", "reason" (why
        not), "compile_seconds"}; a model whose sizes are all fixed gets its one program."""
        with Session(f"{self._source_name} for every size", self.options.progress) as session:
            out = self._symbolic.precompile(hints)
        if session.stages():
            self._timings["every size"] = session.stages()
        return out

    def tier_info(self) -> dict[str, Any]:
        """Tier 0 here: on (else why not), calls it answered, compiles (`tiered.tier.info`)."""
        from onnxjit.tiered.tier import info
        return info(self)

    def wait_compiled(self, timeout: float | None = None) -> bool:
        """Wait for this model's background compiles (tier 0's); True when none is left."""
        return True if self._tier is None else self._tier.wait(timeout)

    @staticmethod
    def cache_info() -> dict[str, int]:
        """Process-wide cache counters: memory_hits, disk_hits, misses, disk_errors, writes."""
        return cache_mod.STATS.as_dict()

    def __reduce__(self) -> tuple:
        """Pickles as the model and its options; rebuilt without compiling (`onnxjit.portable`)."""
        from onnxjit.portable import state

        return (_unpickle, (state(self),))

    def __repr__(self) -> str:
        return (f"<onnxjit.CompiledModel {self._source_name} inputs={self.input_names} "
                f"outputs={self.output_names} signatures={len(self._fast)}>")


def _unpickle(state: dict[str, Any]) -> CompiledModel:
    from onnxjit.portable import restore

    return restore(CompiledModel, state)


def compile_model(source: Any, **options: Any) -> CompiledModel:
    """`onnxjit.compile`: read the model, then build the CompiledModel (which imports the model,
    or finds its metadata in the disk cache)."""
    import os

    from onnxjit.model_source import is_model_text, model_folder, model_hash

    opts = CompileOptions.from_user(options)
    memo = (cache_mod.DiskCache(opts.cache_dir, opts.cache_max_bytes)
            if opts.cache_dir is not None else None)
    data, model_digest = model_hash(source, opts.base_dir, memo)
    base_dir = opts.base_dir
    text = isinstance(source, str) and is_model_text(source)
    if base_dir is None and isinstance(source, (str, os.PathLike)) and not text:
        base_dir = model_folder(source)  # external data lives beside the model file
    if text:
        name = "<model text>"
    elif isinstance(source, (str, os.PathLike)):
        name = str(source)
    else:
        name = f"<{type(source).__name__}>"
    return CompiledModel(data, model_digest, opts, base_dir, name)
