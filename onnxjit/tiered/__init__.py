"""Tiered execution: a first result before the native code exists.

A call whose signature has no compiled program yet runs on tier 0 (`interpreter.Plan`: the graph
with numpy) while the program compiles in a background process (`background`), which stores it in
the disk cache; the first call after it is stored loads it and runs native code from then on.
"""
