"""`Pending`: a symbolic program that would serve a call but is not built yet.

`Specializer.artifact(sig, compile=False)` returns one instead of compiling; tier 0
(`tier.Tier`) compiles it in the background under `key`, the program's cache key.
"""

from __future__ import annotations

__all__ = ["Pending"]


class Pending:
    __slots__ = ("ssig", "hints", "key")

    def __init__(self, ssig: tuple, hints: dict[str, int], key: str):
        self.ssig, self.hints, self.key = ssig, hints, key
