"""The official ONNX backend test suite, run through `onnxjit.backend`.

Every case of the suite runs (node, simple, real (the nine light CNNs), pytorch-converted,
pytorch-operator) on the CPU device; CUDA variants are not generated since onnxjit has no GPU
device.
Cases expected to fail are listed in `backend_expected_failures.py`, each pattern with its reason;
they run as `unittest.expectedFailure`, so a case that starts passing fails the run until its
entry is removed: the list only shrinks.
"""

import re
import warnings

import numpy as np
import onnx.backend.test
import pytest
from backend_expected_failures import EXPECTED_FAILURES

import onnxjit.backend

warnings.filterwarnings("ignore", category=RuntimeWarning)


class _BackendTest(onnx.backend.test.BackendTest):
    @classmethod
    def assert_similar_outputs(cls, ref_outputs, outputs, rtol, atol, model_dir=None):
        # onnx's comparison recurses into a sequence output with bare elements and takes their
        # len(), which fails on a 0-d element (test_loop16_seq_none): compare one element as a
        # one-output list instead (the same checks: shape, dtype, values)
        if isinstance(ref_outputs, np.ndarray) and isinstance(outputs, np.ndarray):
            ref_outputs, outputs = [ref_outputs], [outputs]
        super().assert_similar_outputs(ref_outputs, outputs, rtol, atol, model_dir=model_dir)


#: Cases whose expected outputs are random draws: onnx generated them with an unseeded global
#: numpy generator (onnx/backend/test/case/node/bernoulli.py: "non-deterministic and may not
#: produce the same values in different implementations even if a seed is specified"), so no
#: implementation matches them except by chance. Non-strict expected failures: reported as
#: XFAIL, or XPASS when the draws happen to coincide (a strict one would fail CI at random).
#: tests/test_ops_extra.py checks Bernoulli's semantics (seeded reproducibility, statistics).
RANDOM_OUTPUTS = {r"^test_bernoulli(_double|_seed)?(_expanded)?_cpu$":
                  "expected outputs are unseeded random draws"}

backend_test = _BackendTest(onnxjit.backend, __name__)
for pattern in EXPECTED_FAILURES:
    re.compile(pattern)
    backend_test.xfail(pattern)

# onnxjit is a CPU compiler: the CUDA variants are not generated at all (rather than skipped),
# so the report counts only cases that ran.
test_cases = backend_test.test_cases  # a property that builds fresh classes on every access
for case_class in test_cases.values():
    for attr in [a for a in vars(case_class) if a.endswith("_cuda")]:
        delattr(case_class, attr)
    for attr in list(vars(case_class)):
        for pattern, reason in RANDOM_OUTPUTS.items():
            if re.match(pattern, attr):
                setattr(case_class, attr, pytest.mark.xfail(reason=reason, strict=False)(
                    getattr(case_class, attr)))
globals().update(test_cases)
