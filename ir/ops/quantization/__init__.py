"""Linear quantization.

    quantize_linear   QuantizeLinear, DequantizeLinear (and the rounding the others reuse)
    quantized_matmul  DynamicQuantizeLinear, QLinearMatMul
(ConvInteger and QLinearConv are convolutions: `conv.integer`; MatMulInteger is in
`linalg.matmul`.)
"""
