"""Pooling: windowed pools (MaxPool, AveragePool, LpPool), their Global forms, MaxUnpool.

    semantics   geometry, shape rules and numpy semantics
    lowering    the loop nests (row loops per window row), and the ops' registration
    fused_rows  2-D rows folding all of a window's taps at once
    flat        small 2-D pools as one flat loop per plane
"""
