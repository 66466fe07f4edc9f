"""Winograd F(2x2, 3x3) over a run-time batch: `conv.winograd`'s code per image for a symbolic
program whose conv has static channels, height and width and only N symbolic (torch's
`dynamic_axes={0: "batch"}`, the common deployment).

The tile grid, the blocks of R tile rows (`winograd.block_tile_rows`), the transforms, the 16
products and the epilogue are the specialised lowering's (`winograd._Block`, same arithmetic:
results equal the specialised program's bit for bit); only the count of blocks u = (image,
block of tile rows), N * nblk, is run-time. The general symbolic lowering
(`conv.winograd_runtime`, blocks of T tiles in run-time segments of tile rows) measured 0.67x
of specialised code at 64->64 3x3 56x56 and 0.81x at 128->128 28x28; this one matches it.
Scratch stays independent of N: the blocks are dealt to `parts` parallel iterations (one per
block at the hinted batch, within PANEL_BYTES, at least `runtime_sizes.PARTS_PER_THREAD` per
thread: `slot_count`), each running its share in order on its own V and M slot. With fewer
blocks than `blocking.MIN_TASKS` by the batch hint, the input transforms run as a kernel of
their own over (block, chunk of input channels) and the products, output transforms and
epilogues over (block, chunk of output channels), as `conv.winograd` does; V
and M then have a slot per block (N * nblk of them, few by the hint).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Buffer, Operand, Size, i64
from onnxjit.ir.opdef import LowerContext
from onnxjit.ir.ops.conv.blocking import MIN_TASKS, c_split, for_chunk, m_split
from onnxjit.ir.ops.conv.geometry import (
    PANEL_BYTES,
    EpilogueHook,
    Geometry,
    Load,
    operand,
    smin,
)
from onnxjit.ir.ops.conv.winograd import (
    _panel_width,
    _Plan,
    _tiles,
    block_tile_rows,
    weight_transform,
    xi_stride,
)
from onnxjit.ir.symbolic import hint


def batch_only(x: Buffer, y: Buffer) -> bool:
    """True when only dim 0 (the batch) of X and Y is run-time."""
    return all(isinstance(d, int) for d in (*x.shape[1:], *y.shape[1:]))


def slot_count(ctx: LowerContext, tasks_hint: int, slot_bytes: int,
               parts_per_thread: int) -> int:
    """Scratch slots (= most parallel parts): one per block at the hinted batch, as the
    specialised lowering has (4 parts for 14 blocks left one thread 8 blocks, the other 6:
    0.93x of specialised code), at least `parts_per_thread` per thread, at most what fits
    PANEL_BYTES."""
    least = parts_per_thread * ctx.num_threads
    return max(least, min(tasks_hint, PANEL_BYTES // max(1, slot_bytes)))


@contextmanager
def in_parts(b: Builder, tasks: Size, parts: Size) -> Iterator[tuple[Operand, Operand]]:
    """A parallel loop over `parts` iterations, each running an even, contiguous share of
    the `tasks` in order: yields (part p, task u); p names the part's scratch slot."""
    with b.loop(0, parts, parallel=True, hint="t") as p:
        u0 = b.op("div", b.op("mul", p, operand(tasks)), operand(parts))
        u1 = b.op("div", b.op("mul", b.iadd(p, i64(1)), operand(tasks)), operand(parts))
        with b.loop(u0, u1, hint="u") as u:
            yield p, u


def lower_winograd_batch(ctx: LowerContext, gm: Geometry, x: Buffer, w: Buffer, y: Buffer,
                         load: Load, epilogue: EpilogueHook | None,
                         parts_per_thread: int) -> None:
    """The kernels of the module docstring (`winograd.applies` and `batch_only` must hold);
    Y is overwritten (bias through the epilogue)."""
    dt = x.dtype
    th, tw = _tiles(gm)
    nr = _panel_width(gm, dt)
    assert nr is not None and w.data is not None
    rows = block_tile_rows(gm, nr)
    nblk = -(-th // rows)
    t = rows * tw
    tasks = gm.n * nblk
    tasks_hint = hint(tasks)
    ms, mc = m_split(gm, tasks_hint, hint(gm.n) * gm.m * gm.p * gm.c * 9, dt.itemsize)
    vsize = 16 * xi_stride(gm.c * t, dt.itemsize)
    msize = 16 * xi_stride(gm.m * t, dt.itemsize)
    u_buf = ctx.constant("wino_u", weight_transform(w.data))
    if ms == 1 or tasks_hint >= MIN_TASKS:
        slots = slot_count(ctx, tasks_hint, (vsize + msize) * dt.itemsize, parts_per_thread)
        v_buf = ctx.scratch("wino_v", dt, (slots, vsize))
        m_buf = ctx.scratch("wino_m", dt, (slots, msize))
        plan = _Plan(gm, x, y, load, 0, nblk, rows, tw, nr, False, epilogue, u_buf, v_buf,
                     m_buf)
        parts = smin(tasks, slots)
        b = Builder()
        with in_parts(b, tasks, parts) as (p, u):
            block = plan.block(b, u, p)
            block.input(0, gm.c)
            block.product(0, gm.m)
        ctx.kernel("conv_winograd", b.body)
        return
    v_buf = ctx.scratch("wino_v", dt, (tasks, vsize))  # type: ignore[arg-type]
    m_buf = ctx.scratch("wino_m", dt, (tasks, msize))  # type: ignore[arg-type]
    plan = _Plan(gm, x, y, load, 0, nblk, rows, tw, nr, False, epilogue, u_buf, v_buf, m_buf)
    _split_kernels(ctx, plan, gm, operand(tasks), tasks_hint, ms, mc)


def _split_kernels(ctx: LowerContext, plan: _Plan, gm: Geometry, tasks: Operand,
                   tasks_hint: int, ms: int, mc: int) -> None:
    """Few blocks: input transforms over (block, channel chunk), then the rest over (block,
    output-channel chunk)."""
    cs = c_split(gm, tasks_hint)
    cc = gm.c // cs
    b = Builder()
    with b.loop(0, b.imul(tasks, cs), parallel=True, hint="v") as v:
        block = plan.block(b, b.op("div", v, i64(cs)))
        c0 = b.imul(b.op("rem", v, i64(cs)), cc)
        block.input(c0, b.iadd(c0, i64(cc)))
    ctx.kernel("conv_winograd_in", b.body)
    b = Builder()
    with b.loop(0, b.imul(tasks, ms), parallel=True, hint="v") as v:
        block = plan.block(b, b.op("div", v, i64(ms)))
        for_chunk(b, b.op("rem", v, i64(ms)), ms, mc, gm.m, block.product)
    ctx.kernel("conv_winograd", b.body)
