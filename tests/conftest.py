"""Test-wide settings: a private disk cache folder per test process, so tests never touch the
user's cache and never see entries from another run; removed when the process exits (each run
writes hundreds of MB there). Every compile verifies the IR after every pass
(ONNXJIT_VERIFY=1), so a pass that breaks the IR is named where it happens. A user's
ONNXJIT_PROGRESS is dropped: tests read stderr."""

import atexit
import os
import shutil
import tempfile

_CACHE = tempfile.mkdtemp(prefix="onnxjit-test-cache-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["ONNXJIT_CACHE_DIR"] = _CACHE
os.environ.pop("ONNXJIT_DUMP_IR", None)
os.environ.setdefault("ONNXJIT_VERIFY", "1")
os.environ.pop("ONNXJIT_PROGRESS", None)
