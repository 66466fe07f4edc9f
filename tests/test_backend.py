"""The official ONNX backend test suite, run through `onnxjit.backend`.

Every case of the suite runs (node, simple, real (the nine light CNNs), pytorch-converted,
pytorch-operator) on the CPU device; CUDA variants are excluded since onnxjit has no GPU device.
Cases expected to fail are listed in `backend_expected_failures.py`, each pattern with its reason;
they run as `unittest.expectedFailure`, so a case that starts passing fails the run until its
entry is removed: the list only shrinks.
"""

import re
import warnings

import onnx.backend.test
from backend_expected_failures import EXPECTED_FAILURES

import onnxjit.backend

warnings.filterwarnings("ignore", category=RuntimeWarning)

backend_test = onnx.backend.test.BackendTest(onnxjit.backend, __name__)
backend_test.exclude(r"_cuda$")  # onnxjit is a CPU compiler: no CUDA device
for pattern in EXPECTED_FAILURES:
    re.compile(pattern)
    backend_test.xfail(pattern)

globals().update(backend_test.test_cases)
