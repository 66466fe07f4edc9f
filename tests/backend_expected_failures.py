"""Expected failures of the ONNX backend suite: regex over test names -> reason.

Only ever shrinks: a listed case that passes fails the run (strict expectedFailure).
"""

EXPECTED_FAILURES: dict[str, str] = {
}
