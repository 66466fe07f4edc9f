"""Normalization: LayerNormalization, RMSNormalization, InstanceNormalization,
GroupNormalization, BatchNormalization, LRN, MeanVarianceNormalization, LpNormalization.

    semantics   attributes, shape rules and numpy semantics
    lowering    the loop nests (row normalizers share one), and the ops' registration
"""
