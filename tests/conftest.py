"""Test-wide settings: a private disk cache folder per test process, so tests never touch the
user's cache and never see entries from another run; removed when the process exits (each run
writes hundreds of MB there). Compiles verify the IR as a user's do (the imported model and
each pipeline's result; tests that want every pass checked pass verify=True, and
ONNXJIT_VERIFY=1 does it for a whole run). A user's ONNXJIT_PROGRESS is dropped: tests read
stderr. Tiered execution is off (ONNXJIT_TIERED=0) so that a test's calls run the native code it
compiles; tests/test_tiered.py turns it on where it checks it."""

import atexit
import os
import shutil
import tempfile

_CACHE = tempfile.mkdtemp(prefix="onnxjit-test-cache-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["ONNXJIT_CACHE_DIR"] = _CACHE
os.environ.pop("ONNXJIT_DUMP_IR", None)
os.environ.pop("ONNXJIT_PROGRESS", None)
os.environ["ONNXJIT_TIERED"] = "0"
