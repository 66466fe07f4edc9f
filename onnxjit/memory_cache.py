"""The in-memory artifact cache (DESIGN §5: memory -> disk -> compile), shared by every
CompiledModel of the process, and the lookups of a staged signature's prefixes.

`MEMORY` maps a cache key to its loaded artifact, least recently used first, at most `LIMIT`
entries; `LOCK` guards it. `StageLookups` is the part of `CompiledModel` that `onnxjit.staged`
calls for the static prefix of a data-dependent graph: its passes, and its artifact from
memory, then the disk cache, then a compile.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

MEMORY: OrderedDict[str, Any] = OrderedDict()
LIMIT = 256
LOCK = threading.Lock()


class StageLookups:
    """Methods of `CompiledModel` for `onnxjit.staged` (it provides `_with_base`,
    `_dump_folder`, `_disk`, `_from_entry` and `_native`)."""

    def _stage_passes(self: Any, model: Any, key: str) -> Any:
        from onnxjit.driver import Dumper, specialize

        return specialize(model, self._with_base(), Dumper(self._dump_folder(key[:16])))

    def _stage_artifact(self: Any, stage_key: str, model: Any) -> Any:
        """The native artifact of a stage's static prefix: memory, then disk, then compile."""
        from onnxjit import cache as cache_mod
        from onnxjit.driver import Dumper

        sig = tuple((v.dtype, tuple(v.shape)) for v in model.graph.inputs)
        key = cache_mod.make_key("stage", stage_key)
        with LOCK:
            art = MEMORY.get(key)
        if art is not None:
            cache_mod.STATS.memory_hits += 1
            return art
        entry = self._disk.get(key)
        art = self._from_entry(sig, entry) if entry is not None else None
        if art is None:
            cache_mod.STATS.misses += 1
            art = self._native(sig, key, model, Dumper(self._dump_folder(key[:16])))
        else:
            cache_mod.STATS.disk_hits += 1
        with LOCK:
            MEMORY[key] = art
        return art
