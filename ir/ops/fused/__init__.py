"""onnxjit's own ops (domain `onnxjit`), built by the fusion passes, never by exporters.

    region    Fused: a region of elementwise/broadcast nodes run as one loop nest
    linear    FusedConv, FusedMatMul: a conv or product with an elementwise epilogue
    epilogue  the epilogue of a fused product, run on each block of its output
"""
