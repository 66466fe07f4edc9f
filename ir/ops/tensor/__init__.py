"""Tensor ops: shapes, data movement and index-driven ops.

    shape           Identity, Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze
    movement        Transpose, Concat, Split, Expand, Gather, GatherElements
    slice           Slice
    pad             Pad, CenterCropPad (index tables in pad_tables)
    generate        Constant, ConstantOfShape, EyeLike, Range, Tile, Trilu
    rearrange       DepthToSpace, SpaceToDepth, ReverseSequence, OneHot
    gather_scatter  GatherND, ScatterElements, Scatter, ScatterND, TensorScatter
    data_dependent  NonZero, Compress, Unique (output sizes known only at run time)
    indexing        helpers: integer operands, symbolic dim arithmetic, the strided copy nest
"""
