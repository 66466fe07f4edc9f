"""Expected failures of the ONNX backend suite: regex over test names -> reason.

Only ever shrinks: a listed case that passes fails the run (strict expectedFailure).
Regenerate with `tools/expected_failures.py` from a junit report; each reason is the error
the case raised when the list was made.
"""

EXPECTED_FAILURES: dict[str, str] = {
    '^test_adagrad_cpu$': "UnsupportedError: node (ai.onnx.preview.training.Adagrad): op 'Adagrad' in domain 'ai.onnx.preview.training' is not supported",
    '^test_adagrad_multiple_cpu$': "UnsupportedError: node (ai.onnx.preview.training.Adagrad): op 'Adagrad' in domain 'ai.onnx.preview.training' is not supported",
    '^test_adam_cpu$': "UnsupportedError: node (ai.onnx.preview.training.Adam): op 'Adam' in domain 'ai.onnx.preview.training' is not supported",
    '^test_adam_multiple_cpu$': "UnsupportedError: node (ai.onnx.preview.training.Adam): op 'Adam' in domain 'ai.onnx.preview.training' is not supported",
    '^test_gradient_of_add_and_mul_cpu$': "UnsupportedError: node 'my_gradient' (ai.onnx.preview.training.Gradient): op 'Gradient' in domain 'ai.onnx.preview.training' is not supported",
    '^test_gradient_of_add_cpu$': "UnsupportedError: node 'my_gradient' (ai.onnx.preview.training.Gradient): op 'Gradient' in domain 'ai.onnx.preview.training' is not supported",
    '^test_momentum_cpu$': "UnsupportedError: node (ai.onnx.preview.training.Momentum): op 'Momentum' in domain 'ai.onnx.preview.training' is not supported",
    '^test_momentum_multiple_cpu$': "UnsupportedError: node (ai.onnx.preview.training.Momentum): op 'Momentum' in domain 'ai.onnx.preview.training' is not supported",
    '^test_nesterov_momentum_cpu$': "UnsupportedError: node (ai.onnx.preview.training.Momentum): op 'Momentum' in domain 'ai.onnx.preview.training' is not supported",
}
