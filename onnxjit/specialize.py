"""The `specialize` policy: which dims of a call stay symbolic, and the programs that serve them.

`specialize="shape"` compiles one program per concrete signature. `"dynamic"` compiles one
program per dtypes and ranks in which every dim the model declares symbolic stays symbolic
(`onnxjit.dynamic`). `"auto"` (the default) compiles the first shapes as they come, and once a
declared-symbolic dim shows a second size compiles one program with the dims seen varying
symbolic; every later size of those dims binds to it without compiling. The dims seen varying
are kept with the model's metadata in the disk cache, so a fresh process starts with them
symbolic and, when a symbolic program is stored too, compiles nothing whatever sizes arrive.

Algorithm of `Specializer.artifact(sig)` (None: the caller compiles `sig` on its own):
1) the symbols of the call (declared-symbolic dims) and, for "auto", which have varied;
2) the symbolic signature (`dynamic.symbolic_signature`) and its cache key; the program from
   memory, then disk, then compiled with the call's sizes as hints. A compile that cannot take
   symbolic sizes (an op that needs concrete ones, a data-dependent shape) is remembered under
   that key with its reason (`not_symbolic`), and the signatures it would serve go to the
   shape-specialised path;
3) `bind(sig)`: the Artifact of this call's shapes, or None when they violate a size relation
   the program assumes (that signature is then compiled on its own).

`precompile` builds the program with every declared-symbolic dim symbolic before any call (a
server starting warm; `onnxjit compile` on the command line), and records those dims as varying
so that "auto" serves the first call from it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from onnxjit import cache as cache_mod
from onnxjit.dynamic import (
    SymbolicArtifact,
    symbol_name,
    symbol_positions,
    symbolic_signature,
)
from onnxjit.errors import OnnxJitError
from onnxjit.ir.types import DType
from onnxjit.signature import signature_id
from onnxjit.tiered.pending import Pending

#: the size a symbol is taken to have usually when `precompile` is given no hint for it
DEFAULT_HINT = 16


class Specializer:
    """The symbolic programs of one `CompiledModel` (its `_symbolic` attribute)."""

    def __init__(self, owner: Any):
        self.owner = owner
        self.mode = owner.options.specialize
        self.programs: dict[str, SymbolicArtifact | None] = {}
        #: (dtypes and ranks, chosen symbols, sizes of the others) -> program: most calls
        #: find theirs here without building the symbolic signature
        self.by_pattern: dict[tuple, SymbolicArtifact | None] = {}
        self.positions: dict[tuple, list[tuple[int, int, str]]] = {}
        #: why a symbolic signature has no program (key -> reason), for `onnxjit info`
        self.not_symbolic: dict[str, str] = {}
        self.seen: dict[str, set[int]] = {}
        self.varying: set[str] = set(owner._varying_stored())
        self.lock = threading.Lock()

    def enabled(self) -> bool:
        return self.mode in ("dynamic", "auto") and self.owner._call_sized()

    def artifact(self, sig: tuple, compile: bool = True) -> Any:
        """The Artifact of `sig` from a symbolic program, or None (see the module docstring);
        without `compile`, a program not built yet is a `Pending` (what to build)."""
        # (dtype, rank) of tensors; sequences and optionals enter by their kind only
        pattern = tuple([(d, len(s)) if d.__class__ is DType else (d, None) for d, s in sig])
        positions = self.positions.get(pattern)
        if positions is None:
            positions = self.positions[pattern] = symbol_positions(self.owner._declared, sig)
        if not positions:
            return None
        symbols: dict[str, int] = {}
        for k, axis, name in positions:
            symbols.setdefault(name, sig[k][1][axis])
        if self.mode == "auto":
            chosen = self._observe(symbols)
            if not chosen:
                return None
            rest = tuple([n for name, n in symbols.items() if name not in chosen])
            memo = (pattern, frozenset(chosen), rest)
        else:
            chosen, memo = None, (pattern, None, ())
        try:
            program = self.by_pattern[memo]
        except KeyError:
            ssig, hints = symbolic_signature(self.owner._declared, sig, chosen)
            program = None if ssig == sig else self.program(ssig, hints, compile)
            if program.__class__ is Pending:
                return program
            self.by_pattern[memo] = program
        return None if program is None else program.bind(sig)

    def _observe(self, symbols: dict[str, int]) -> set[str]:
        """Record the sizes of this call's symbols; the ones seen with two sizes (now or in a
        process that stored them) are symbolic."""
        grew = False
        with self.lock:
            for name, n in symbols.items():
                vals = self.seen.setdefault(name, set())
                vals.add(n)
                if len(vals) > 1 and name not in self.varying:
                    self.varying.add(name)
                    grew = True
            chosen = self.varying & set(symbols)
        if grew:
            self.owner._store_varying(sorted(self.varying))
        return chosen

    def program(self, ssig: tuple, hints: dict[str, int], compile: bool = True) -> Any:
        """The symbolic program of `ssig`: memory, disk, then compiled (None if it cannot;
        a `Pending` when it is not built and `compile` is off)."""
        owner = self.owner
        key = owner._artifact_key(ssig)
        if key in self.programs:
            return self.programs[key]
        with owner._lock:
            if key in self.programs:
                return self.programs[key]
            entry = owner._disk.get(key)
            prog = owner._symbolic_from_entry(entry) if entry is not None else None
            if prog is not None:
                cache_mod.STATS.disk_hits += 1
            elif entry is not None and "not_symbolic" in entry.meta:
                self.not_symbolic[key] = str(entry.meta["not_symbolic"])
            elif not compile:
                return Pending(ssig, hints, key)
            else:
                cache_mod.STATS.misses += 1
                t0 = time.perf_counter()
                try:
                    prog = self._compile(ssig, hints, key)
                    prog.compile_seconds = time.perf_counter() - t0
                except OnnxJitError as e:
                    self.not_symbolic[key] = str(e)
                    owner._disk.put(key, cache_mod.Entry({"not_symbolic": str(e)}))
            if prog is not None:
                prog.signature, prog.hints = ssig, dict(hints)
            self.programs[key] = prog
            return prog

    def _compile(self, ssig: tuple, hints: dict[str, int], key: str) -> SymbolicArtifact:
        """Compile the symbolic program of `ssig`, link it and store it in the disk cache."""
        from onnxjit.driver import SIGNATURE_PIPELINE, Dumper, lower_symbolic
        from onnxjit.entries import layout_ok, symbolic_entry
        from onnxjit.progress import compiling
        from onnxjit.timings import timed

        owner = self.owner
        compiling(len(SIGNATURE_PIPELINE) + 7)
        dumper = Dumper(owner._dump_folder("symbolic-" + _safe(signature_id(ssig))))
        program = lower_symbolic(owner._graph(), ssig, hints, owner._with_base(), dumper)
        obj, lib, pool_code = owner._codegen(program, dumper, key)
        threads = owner.options.num_threads
        sym = SymbolicArtifact.of_program(program, lib, layout_ok(), threads)
        sym.program = program
        with timed("cache-write"):
            owner._disk.put_later(key, symbolic_entry(sym, obj, pool_code))
        return sym

    def precompile(self, hints: dict[str, int]) -> dict[str, Any]:
        """Build (or find in the disk cache) the program in which every dim the model declares
        symbolic stays symbolic, before any call; `hints` are the usual sizes of symbols
        (tiling and splitting decisions; DEFAULT_HINT otherwise). The symbols are then kept as
        varying, so that "auto" serves every call from this program from the first one on."""
        owner = self.owner
        if self.mode == "shape":
            raise OnnxJitError("precompile builds the program of every size, which "
                               "specialize='shape' never uses: compile with specialize="
                               "'auto' (the default) or 'dynamic'")
        sig = []
        for name, kind, dims in owner._declared:
            if not isinstance(kind, DType) or dims is None:
                raise OnnxJitError(f"input '{name}' has no declared rank (or is not a tensor): "
                                   "precompile needs the model to declare every input's rank")
            sig.append((kind, tuple(
                d if isinstance(d, int) else int(hints.get(
                    d if isinstance(d, str) else symbol_name(name, a), DEFAULT_HINT))
                for a, d in enumerate(dims))))
        positions = symbol_positions(owner._declared, tuple(sig))
        symbols = sorted({name for _, _, name in positions})
        if not symbols:
            art = owner._artifact(tuple(sig))  # every size fixed: the one program there is
            return {"symbolic": False, "symbols": [],
                    "compile_seconds": getattr(art, "compile_seconds", 0.0)}
        unknown = sorted(set(hints) - set(symbols))
        if unknown:
            raise OnnxJitError(f"unknown symbol(s) {unknown} in hints; the model's symbolic "
                               f"dims are {symbols}")
        ssig, sizes = symbolic_signature(owner._declared, tuple(sig), None)
        prog = self.program(ssig, sizes)
        if prog is not None:
            with self.lock:
                grew = not set(symbols) <= self.varying
                self.varying |= set(symbols)
            if grew:
                owner._store_varying(sorted(self.varying))
        key = owner._artifact_key(ssig)
        return {"symbolic": prog is not None, "symbols": symbols,
                "reason": self.not_symbolic.get(key),
                "compile_seconds": 0.0 if prog is None else prog.compile_seconds}

    def reasons(self) -> list[str]:
        """Why symbolic programs could not be built, one line each."""
        return sorted(set(self.not_symbolic.values()))


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
