"""Linear algebra: products lowered to the loop IR's `Matmul` (the tiled microkernel).

    matmul         MatMul, Gemm, MatMulInteger (numpy.matmul broadcasting over batch dims)
    strassen       one Strassen level for large products by a constant B
    nbits          NBitsMatMul: MatMulNBits' 4-bit weights, a 4-bit kernel for few rows
    strided_views  FusedMatMul operands read through batch-dim transposes in place
    einsum         Einsum, lowered to Matmul or a loop nest
    det            Det (LU with partial pivoting)
"""
