"""im2col + GEMM over a run-time batch: `conv.conv.lower_gemm_conv`'s blocks per image for a
symbolic program whose conv has static channels and spatial sizes and only N symbolic.

The blocks u = (image, group, block of output rows) (`blocking.block_rows`), their packed
panels (`packed_panels.emit_packed_panel`, tap ranges compile-time pairs) and products are the
specialised lowering's (`im2col_blocks.ImageBlocks`); only the block count N * G * nblk is
run-time. The blocks are dealt to `parts` parallel iterations (`winograd_batch.slot_count`),
each building
its share in order in a panel slot of its own, so the scratch does not grow with N. The
general symbolic lowering (`conv.runtime_sizes`: blocks of flat positions, tap ranges from
the dims table) measured 0.50x of specialised code on a 3->32 3x3 stride-2 stem at 224x224,
where building the panel (K = 27) is most of the work. `applies` takes what the general path
loses on: few input channels per group (K <= MAX_K), enough blocks for the threads by the
batch hint (the split-channel kernels stay with `conv.runtime_sizes`).
"""

from __future__ import annotations

from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Buffer
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv import im2col_blocks
from onnxjit.ir.ops.conv.blocking import MIN_TASKS, block_rows
from onnxjit.ir.ops.conv.geometry import EpilogueHook, Geometry, Load, smin
from onnxjit.ir.ops.conv.im2col_blocks import ImageBlocks
from onnxjit.ir.ops.conv.input_phases import input_source
from onnxjit.ir.ops.conv.packed_panels import packed_width
from onnxjit.ir.ops.conv.winograd_batch import in_parts, slot_count
from onnxjit.ir.symbolic import hint

#: Largest K = C/G * prod(kernel) this lowering takes (the general one is as fast or faster
#: on deeper convs: 64->128 3x3 stride 2 at 56x56 1.1x, 32->32 3x3 at 28x28 1.15x).
MAX_K = 64


def _shape(gm: Geometry, itemsize: int) -> tuple[int, int, int]:
    """(rows, blocks, cols) of an image's output as `lower_gemm_conv` cuts it."""
    rows = block_rows(gm, itemsize)
    nblk = gm.out[0] // rows if len(gm.out) > 1 else 1
    return rows, nblk, gm.p // nblk


def applies(gm: Geometry, itemsize: int) -> bool:
    """True when this lowering takes the conv (see the module docstring)."""
    if gm.pointwise or gm.cg == 1 or gm.kk > MAX_K:
        return False
    return hint(gm.n) * gm.g * _shape(gm, itemsize)[1] >= MIN_TASKS


def lower_im2col_batch(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                       load: Load, epilogue: EpilogueHook | None,
                       parts_per_thread: int) -> None:
    """The kernel of the module docstring (`applies` must hold); Y is overwritten (bias
    through the epilogue)."""
    dt = y.dtype
    rows, nblk, cols = _shape(gm, dt.itemsize)
    nr = packed_width(dt, gm.mg, cols, gm.kk) if im2col_blocks.PACKED_PANELS else None
    panel = gm.kk * cols
    tasks = gm.n * gm.g * nblk
    slots = slot_count(ctx, hint(tasks), panel * dt.itemsize, parts_per_thread)
    col = ctx.scratch("col", dt, (slots, panel))
    src = input_source(ctx, gm, x, load, dt)
    blocks = ImageBlocks(gm, 0, nblk, rows, cols, panel, nr)
    parts = smin(tasks, slots)
    b = Builder()
    with in_parts(b, tasks, parts) as (p, u):
        blocks.build(b, u, col, x, src, None, slot=p)
        blocks.multiply(b, u, y, w, col, False, epilogue, 0, gm.mg, slot=p)
    ctx.kernel("conv_im2col_gemm", b.body)
