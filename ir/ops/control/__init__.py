"""Control flow and the values it carries.

    if_loop_scan  If, Loop, Scan: shape inference through regions, host evaluation
    native_loop   Loop and Scan of fixed shapes lowered into one serial native loop
    unroll        short Loops/Scans unrolled into straight-line nodes (the staged phase)
    sequences     sequence and optional ops (host-only: Python lists and None)
"""
