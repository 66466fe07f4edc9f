"""Convolutions: one geometry, several lowerings chosen per node at compile time.

    attrs              attributes, pads, output shapes, shape inference, numpy semantics
    geometry           `Geometry` of a bound conv, and the loop helpers every lowering shares
    conv               Conv: registration and the im2col + Matmul lowering (the general path)
    blocking           how the im2col path cuts its work into blocks (panels, threads)
    input_phases       where panels read X: X itself, or X's rows split into stride phases
    packed_panels      im2col panels written in the tiled GEMM's packed-B layout
    strided_pointwise  1x1 strided convs: subsample, then the pointwise forms
    few_positions      convs over few positions as T = X^T W^T (positions become rows)
    strided_windows    1-D long-kernel convs as products over overlapping windows of X
    winograd           3x3 stride-1 convs as Winograd F(2x2, 3x3)
    depthwise_direct   depthwise convs (C/G == 1): the direct nest, and the dispatch to
    depthwise_phased   ... a zero-padded, stride-phased copy of each plane, or
    depthwise_tiny     ... tiny planes vectorized across channels
    integer            ConvInteger, QLinearConv (the im2col path on integers)
    transpose          ConvTranspose (Matmul + col2im) and Col2Im
    deform             DeformConv
    causal_state       CausalConvWithState (streaming depthwise causal 1-D conv)
"""
