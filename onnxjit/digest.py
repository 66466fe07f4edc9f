"""Content digests for cache keys: BLAKE2b with a 256-bit digest; big data by SHA-256 in parallel.

Taken from CPython's builtin `_blake2` module when it is there: `import hashlib` loads
OpenSSL's libcrypto (about 2.5-5 ms), a tenth of a process's warm start from the disk cache,
while `_blake2` costs 0.2 ms. BLAKE2b is as collision-resistant as SHA-256; keys only need to
be stable for one installed compiler, whose sources are part of every key anyway.

Model bytes are hashed at every `compile` (the key of everything cached for the model), and
BLAKE2b runs at about 0.5-0.8 GB/s: 25-45 ms for a 19 MB decoder, a third of its warm start.
`hexdigest` of data of `BIG` bytes or more is therefore a tree hash: SHA-256 (with the CPU's
SHA instructions, 1+ GB/s, and OpenSSL's import amortised) of `CHUNK`-sized pieces, hashed on
a thread per core (hashlib releases the GIL), then SHA-256 of their digests, prefixed "t" so the
two kinds can never be equal.
"""

from __future__ import annotations

from typing import Any

try:
    from _blake2 import blake2b as _blake2b
except ImportError:  # an interpreter built without it
    from hashlib import blake2b as _blake2b


def new(data: bytes | memoryview = b"") -> Any:
    """A hash object (`update`, `hexdigest`) over `data`."""
    return _blake2b(data, digest_size=32)


BIG = 4 << 20
CHUNK = 4 << 20


def hexdigest(data: bytes | memoryview) -> str:
    """The 64-hex-digit digest of `data` (see the module docstring)."""
    if len(data) < BIG:
        return _blake2b(data, digest_size=32).hexdigest()
    import hashlib
    import os
    import threading

    view = memoryview(data).cast("B")
    pieces = [view[i:i + CHUNK] for i in range(0, len(view), CHUNK)]
    digests = [b""] * len(pieces)
    # a thread per core (at most 4), this one among them; plain threads: importing
    # concurrent.futures alone costs 5-7 ms, half the hashing of a 19 MB model on 2 cores
    workers = max(1, min(4, os.cpu_count() or 1, len(pieces)))

    def hash_every(first: int) -> None:
        for i in range(first, len(pieces), workers):
            digests[i] = hashlib.sha256(pieces[i]).digest()

    helpers = [threading.Thread(target=hash_every, args=(k,), daemon=True)
               for k in range(1, workers)]
    for t in helpers:
        t.start()
    hash_every(0)
    for t in helpers:
        t.join()
    return "t" + hashlib.sha256(b"".join(digests)).hexdigest()[1:]
