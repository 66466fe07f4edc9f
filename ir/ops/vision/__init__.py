"""Image and detection ops.

    resize         Resize, Upsample (per-axis tables in resize_tables)
    grid_sample    GridSample
    roi            RoiAlign, MaxRoiPool, AffineGrid
    nms            NonMaxSuppression
    image_decoder  ImageDecoder (Pillow, on the host)
"""
