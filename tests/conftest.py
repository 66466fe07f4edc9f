"""Test-wide settings: a private disk cache folder per test process, so tests never touch the
user's cache and never see entries from another run."""

import os
import tempfile

os.environ["ONNXJIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="onnxjit-test-cache-")
os.environ.pop("ONNXJIT_DUMP_IR", None)
