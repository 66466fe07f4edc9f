"""Content digests for cache keys: BLAKE2b with a 256-bit digest.

Taken from CPython's builtin `_blake2` module when it is there: `import hashlib` loads
OpenSSL's libcrypto (about 2.5 ms), a tenth of a process's warm start from the disk cache,
while `_blake2` costs 0.2 ms. BLAKE2b is as collision-resistant as SHA-256; keys only need to
be stable for one installed compiler, whose sources are part of every key anyway.
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


def hexdigest(data: bytes | memoryview) -> str:
    """The 64-hex-digit digest of `data`."""
    return _blake2b(data, digest_size=32).hexdigest()
