"""ConvTranspose (a `Matmul` into a panel plus a col2im scatter-add) and Col2Im (the scatter-add).

Shapes, pads, output_padding, output_shape and auto_pad: `conv.attrs.transpose_geometry`.
Lowering of X (N, C, *in), W (C, M/G, *k), Y (N, M, *out), with P = prod(in):
1) Y is filled with zeros (the bias B, per output channel, is added once the taps are summed
   (step 4), as the references round);
2) per image and group one `Matmul` computes col (M/G * prod(k), P) = W_g^T x X_g, W_g the
   (C/G, M/G * prod(k)) window read transposed (`a_trans`), X_g the image's (C/G, P) channels;
   panels of several images share one scratch while it stays under `PANEL_BYTES`,
   else the batch is processed in chunks;
3) col2im, parallel over (image, output channel) (each owns its output plane, so there are
   no write races): for every kernel tap, input row position i scatters to output
   `i*s - pad + tap*dl`; the innermost kernel dim is unrolled (up to `MAX_UNROLL` taps, wider
   kernels loop and compute the ranges at run time) so each tap's valid range of input
   columns is a compile-time pair, an outer dim outside the output empties the range
   (a `select` on the loop bounds), and the innermost loop adds a contiguous panel row into
   the output row (stride s);
4) Y += B per output channel.
float16/bfloat16 operands are widened to f32 scratch copies first and Y is rounded once from an
f32 result, so no tap's partial sum is rounded (the fold computes the same way).
Sizes may be `Sym`s (a symbolic program; explicit pads): then every image's panel is built
in one pass, and the tap ranges are expressions of the input sizes (`geometry.valid_range`).
Col2Im (opset 18) is step 3 alone on its input, after zero-filling the output: input
(N, C * prod(block), L) is the panel of N*C channels, L the positions of the block grid
(`image_shape` and `block_shape` must be constants, or shape values known at compile time).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, row_major_strides
from onnxjit.ir.loops import Buffer, Matmul, Operand, Size, i64
from onnxjit.ir.narrow import is_narrow_array, widen
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.conv.attrs import (
    ConvAttrs,
    conv_out_dims,
    infer_conv_shape,
    ints_attr,
    transpose_geometry,
)
from onnxjit.ir.ops.conv.geometry import (
    PANEL_BYTES,
    Nest,
    fill_channels,
    for_each_block,
    operand,
    outer_positions,
    tap_bounds,
    tap_shift,
    taps,
)
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, Types, accept_same, arity
from onnxjit.ir.ops.elementwise.inference import check_dtype, dims_of, tensor
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import NARROW_FLOATS, DType

_TYPES: Types = ((1, FLOATS), (22, FLOATS | BF16))


def conv_transpose_numpy(node: Node, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                         a: ConvAttrs) -> np.ndarray:
    """ConvTranspose of concrete arrays: per kernel tap, scatter-add x @ w into the output
    (float16/bfloat16 computed in f32, rounded once)."""
    dt = x.dtype
    if is_narrow_array(x):
        x, w = widen(x), widen(w)
    n, c = x.shape[:2]
    g, mg, kshape = a.group, w.shape[1], w.shape[2:]
    out, begin = transpose_geometry(node, a, x.shape[2:])
    assert begin is not None
    ins = x.shape[2:]
    ext, at, crop = scatter_plan(a, ins, kshape, out, begin)
    y = np.zeros((n, g * mg, *ext), dtype=np.float64 if x.dtype.kind == "f" else x.dtype)
    xg = x.reshape(n, g, c // g, *ins)
    wg = w.reshape(g, c // g, mg, *kshape)
    for koff, tap in zip(np.ndindex(*kshape), at):
        wk = wg[(slice(None), slice(None), slice(None), *koff)]
        y[tap] += np.einsum("ngc...,gcm->ngm...", xg, wk).reshape(n, g * mg, *ins)
    y = y[crop]
    if bias is not None:
        y = y + bias.reshape(1, -1, *([1] * len(ins)))
    return np.ascontiguousarray(y, dtype=dt)


def scatter_plan(a: ConvAttrs, ins: Sequence[int], kshape: Sequence[int],
                 out: Sequence[int], begin: Sequence[int]) -> tuple[list[int], list, tuple]:
    """How a ConvTranspose scatters its taps: (the full output's spatial extent, each tap's
    index into it in `np.ndindex(*kshape)` order, the crop to the output), the first two
    axes (N, M) whole in every index."""
    ext = [max(int(o) + int(b), s * (d - 1) + dl * (k - 1) + 1)  # type: ignore[arg-type]
           for o, b, s, d, dl, k in zip(out, begin, a.strides, ins, a.dilations, kshape)]
    whole = (slice(None), slice(None))
    at = [whole + tuple(slice(kk * dl, kk * dl + (d - 1) * s + 1, s) for kk, dl, d, s
                        in zip(koff, a.dilations, ins, a.strides))
          for koff in np.ndindex(*kshape)]
    crop = whole + tuple(slice(b, b + o) for b, o in zip(begin, out))  # type: ignore[misc]
    return ext, at, crop


def _infer(node: Node) -> list:
    idx = arity(node, 2, 3)
    dt = accept_same(node, idx, _TYPES)
    b = tensor_input(node, 2).shape if node.input(2) is not None else None
    _, shape = infer_conv_shape(node, tensor_input(node, 0).shape, tensor_input(node, 1).shape,
                                b, transpose=True)
    return tensor(dt, shape)


def _attrs(node: Node, x_shape: tuple, w_shape: tuple) -> ConvAttrs:
    a, _ = infer_conv_shape(node, x_shape, w_shape, None, transpose=True)
    assert a is not None
    return a


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    return [conv_transpose_numpy(node, x, w, bias, _attrs(node, x.shape, w.shape))]


def _col2im(b: Builder, y: Buffer, col: Buffer, a: ConvAttrs, begin: list[int], ins: list[int],
            k: list[int], out: list[int], m: int, n0: int, nimg: int) -> None:
    """y[n, m, i*s - pad + t*dl] += col[(n*M + m)*prod(k) + t, i] over every tap t and i."""
    kprod, pin, pout = math.prod(k), math.prod(ins), math.prod(out)
    iw, kw, sw, dw, pw, ow = ins[-1], k[-1], a.strides[-1], a.dilations[-1], begin[-1], out[-1]
    with b.loop(0, nimg * m, parallel=True, hint="q") as q:
        colbase = b.imul(q, kprod * pin)
        ybase = b.imul(b.iadd(q, i64(n0 * m)), pout)
        with Nest(b, k[:-1], "t") as t, Nest(b, ins[:-1], "i") as i:
            valid, off = outer_positions(b, i, t, a, begin, out, ins, k)
            yrow = b.iadd(ybase, off)
            tap = b.linear(t, row_major_strides(k[:-1]))
            irow = b.linear(i, row_major_strides(ins[:-1]))
            for tw in taps(b, kw):
                shift = tap_shift(b, tw, dw, pw)
                crow = b.iadd(colbase, b.iadd(b.imul(b.iadd(b.imul(tap, kw), operand(tw)), pin),
                                              b.imul(irow, iw)))
                lo, hi = tap_bounds(b, valid, shift, sw, ow, iw)
                with b.loop(lo, hi, hint="w") as j:
                    at = b.iadd(b.iadd(yrow, operand(shift)), b.imul(j, sw))
                    b.store(y, at, b.op("add", b.load(y, at), b.load(col, b.iadd(crow, j))))


def _cast_copy(ctx: LowerContext, src: Buffer, dst: Buffer, hint: str) -> None:
    """dst[i] = src[i] converted to dst's element type (one parallel loop)."""
    b = Builder()
    with b.loop(0, src.numel, parallel=True, hint="i") as i:
        b.store(dst, i, b.cast(b.load(src, i), dst.dtype))
    ctx.kernel(hint, b.body)


def _lower(ctx: LowerContext, node: Node) -> None:
    x, w, y = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.outputs[0])
    bias = ctx.buf(node.inputs[2]) if node.input(2) is not None else None
    if y.numel == 0:
        return
    if y.dtype not in NARROW_FLOATS:
        _lower_into(ctx, node, x, w, bias, y)
        return
    # float16/bfloat16: the products and every tap's sum in f32, one rounding at the end (as
    # the fold and onnxruntime do; a narrow col2im would round at each tap)
    wide = []
    for buf in (x, w, bias):
        if buf is not None:
            f = ctx.scratch("convtranspose_f32", DType.FLOAT, buf.shape)
            _cast_copy(ctx, buf, f, "convtranspose_widen")
            buf = f
        wide.append(buf)
    y32 = ctx.scratch("convtranspose_y32", DType.FLOAT, y.shape)
    _lower_into(ctx, node, wide[0], wide[1], wide[2], y32)
    _cast_copy(ctx, y32, y, "convtranspose_round")


def _lower_into(ctx: LowerContext, node: Node, x: Buffer, w: Buffer, bias: Buffer | None,
                y: Buffer) -> None:
    """Steps 1-3 of the module docstring; all four buffers of one dtype."""
    a = _attrs(node, x.shape, w.shape)
    ins, k, out = list(x.shape[2:]), list(w.shape[2:]), list(y.shape[2:])
    _, begin = transpose_geometry(node, a, ins)
    assert begin is not None
    n, c, m = x.shape[0], x.shape[1], y.shape[1]
    g = a.group
    cg, mg = c // g, m // g
    rows, pin = mg * math.prod(k), math.prod(ins)
    b = Builder()
    fill_channels(b, y, None, m, math.prod(out))
    ctx.kernel("convtranspose_zero", b.body)
    if cg == 0 or rows * pin == 0:
        _add_bias(ctx, y, bias, m, math.prod(out))
        return
    per_image = g * rows * pin * y.dtype.itemsize
    # a symbolic program's run-time batch or sizes: every image's panel in one pass
    chunk = max(1, min(n, PANEL_BYTES // max(1, per_image))) if y.is_static else n
    col = ctx.scratch("col", y.dtype, (chunk * g * rows, pin))
    for n0 in range(0, n, chunk) if y.is_static else [0]:
        nimg = min(chunk, n - n0) if y.is_static else n
        b = Builder()

        def product(bb: Builder, img: Operand, gi: Operand, n0: int = n0) -> None:
            c_off = bb.imul(bb.iadd(bb.imul(img, g), gi), rows * pin)
            x_off = bb.iadd(bb.imul(bb.iadd(img, i64(n0)), c * pin), bb.imul(gi, cg * pin))
            bb.emit(Matmul(col, c_off, pin, w, bb.imul(gi, cg * rows), rows, x, x_off, pin,
                           rows, pin, cg, a_trans=True))

        for_each_block(b, nimg, g, product)
        ctx.kernel("convtranspose_gemm", b.body)
        b = Builder()
        _col2im(b, y, col, a, [int(v) for v in begin], ins, k, out, m, n0, nimg)  # type: ignore
        ctx.kernel("convtranspose_col2im", b.body)
    _add_bias(ctx, y, bias, m, math.prod(out))


def _add_bias(ctx: LowerContext, y: Buffer, bias: Buffer | None, m: int, p: Size) -> None:
    """y[(n, m), :] += bias[m], after the taps are summed (from zero): the references add
    the bias last, and a sum started from it rounds differently."""
    if bias is None:
        return
    b = Builder()
    rows = (y.numel // p if p else 0) if y.is_static else y.shape[0] * y.shape[1]
    with b.loop(0, rows, parallel=True, hint="q") as q:
        v = b.load(bias, b.op("rem", q, i64(m)))
        with b.loop(0, p, hint="p") as i:
            at = b.iadd(b.imul(q, p), i)
            b.store(y, at, b.op("add", b.load(y, at), v))
    ctx.kernel("convtranspose_bias", b.body)


op("ConvTranspose", (1, 11, 22), infer=_infer, evaluate=_evaluate, lower=_lower,
   symbolic=True, doc="N-D transposed convolution with groups, strides, dilations, output_padding, "
       "output_shape and auto_pad")

# --------------------------------------------------------------------------- Col2Im


def _c2i_attrs(node: Node) -> tuple[ConvAttrs | None, tuple | None]:
    """(attributes with the block as kernel, image shape); None where not known."""
    image, block = dims_of(node.input(1)), dims_of(node.input(2))
    rank = None
    for i in (1, 2):
        s = tensor_input(node, i).shape
        if s is not None and len(s) == 1 and isinstance(s[0], int):
            rank = s[0]
    if block is not None:
        rank = len(block)
    if rank is None:
        return None, image
    kernel = tuple(block) if block is not None else (None,) * rank
    if block is not None and any(not isinstance(k, int) or k < 1 for k in block):
        raise ModelError(f"block_shape must hold positive ints, got {list(block)}", where=node)
    a = ConvAttrs(kernel, ints_attr(node, "strides", rank, 1, 1),  # type: ignore[arg-type]
                  ints_attr(node, "dilations", rank, 1, 1),  # type: ignore[arg-type]
                  ints_attr(node, "pads", 2 * rank, 0, 0), "NOTSET", 1)  # type: ignore[arg-type]
    return a, image


def _c2i_infer(node: Node) -> list:
    arity(node, 3)
    dt = check_dtype(node, 0, "num")
    for i in (1, 2):
        if tensor_input(node, i).dtype != DType.INT64:
            raise ModelError(f"input {i} must be i64", where=node)
    x = tensor_input(node, 0).shape
    if x is not None and len(x) != 3:
        raise ModelError(f"input must have rank 3 (N, C*prod(block), L), got {list(x)}",
                         where=node)
    a, image = _c2i_attrs(node)
    if a is None:
        return tensor(dt, None)
    n = None if x is None else x[0]
    if image is None or any(k is None for k in a.kernel) or x is None:
        return tensor(dt, (n, None, *(image or (None,) * a.rank)))
    kprod = math.prod(a.kernel)  # type: ignore[arg-type]
    grid = conv_out_dims(node, a, image)
    if isinstance(x[1], int) and x[1] % kprod:
        raise ModelError(f"input dim 1 ({x[1]}) is not a multiple of prod(block_shape) = "
                         f"{kprod}", where=node)
    total = math.prod(grid) if all(isinstance(d, int) for d in grid) else None
    if isinstance(x[2], int) and total is not None and x[2] != total:
        raise ModelError(f"input has {x[2]} blocks, but image {list(image)} with block "
                         f"{list(a.kernel)} has {total}", where=node)
    c = x[1] // kprod if x[1] is not None else None
    return tensor(dt, (n, c, *image))


def _c2i_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    a, image = _c2i_attrs(node)
    assert a is not None and image is not None
    k = [int(v) for v in a.kernel]  # type: ignore[arg-type]
    grid = conv_out_dims(node, a, image)
    n, c = x.shape[0], x.shape[1] // math.prod(k)
    ext = [int(i) + a.pads[j] + a.pads[j + a.rank] for j, i in enumerate(image)]
    y = np.zeros((n, c, *ext), dtype=x.dtype)
    cols = x.reshape(n, c, *k, *grid)  # type: ignore[misc]
    for t in np.ndindex(*k):
        sl = tuple(slice(tj * dl, tj * dl + (g - 1) * s + 1, s) for tj, dl, g, s
                   in zip(t, a.dilations, grid, a.strides))  # type: ignore[operator]
        y[(slice(None), slice(None), *sl)] += cols[(slice(None), slice(None), *t)]
    crop = tuple(slice(a.pads[j], a.pads[j] + int(i)) for j, i in enumerate(image))
    return [np.ascontiguousarray(y[(slice(None), slice(None), *crop)])]


def _c2i_lower(ctx: LowerContext, node: Node) -> None:
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    if y.numel == 0:
        return
    a, image = _c2i_attrs(node)
    if a is None or image is None or any(k is None for k in a.kernel):
        _c2i_lower_dynamic(ctx, node, x, y)
        return
    k, out = [int(v) for v in a.kernel], list(y.shape[2:])  # type: ignore[arg-type]
    grid = [int(d) for d in conv_out_dims(node, a, image)]  # type: ignore[arg-type]
    b = Builder()
    fill_channels(b, y, None, y.shape[1], math.prod(out))
    if x.numel:
        _col2im(b, y, x, a, list(a.pads[:a.rank]), grid, k, out, y.shape[1], 0, y.shape[0])
    ctx.kernel("col2im", b.body)


op("Col2Im", (18,), infer=_c2i_infer, evaluate=_c2i_evaluate, lower=_c2i_lower,
   doc="scatter-add blocks (N, C*prod(block), L) back into images (N, C, *image_shape)")


def _c2i_lower_dynamic(ctx: LowerContext, node: Node, x: Buffer, y: Buffer) -> None:
    """Col2Im whose image_shape/block_shape are read at run time (inputs, not constants): the
    same scatter with run-time loop bounds and a per-element bounds test (a loop of 0 or 1
    iteration); a shape that does not match the declared tensors fails a Check."""
    rank = len(y.shape) - 2
    a = ConvAttrs((None,) * rank, ints_attr(node, "strides", rank, 1, 1),  # type: ignore
                  ints_attr(node, "dilations", rank, 1, 1),  # type: ignore[arg-type]
                  ints_attr(node, "pads", 2 * rank, 0, 0), "NOTSET", 1)  # type: ignore
    image, block = ctx.buf(node.inputs[1]), ctx.buf(node.inputs[2])
    out = list(y.shape[2:])
    b = Builder()
    fill_channels(b, y, None, y.shape[1], math.prod(out))
    k = [b.load(block, i64(j), hint="k") for j in range(rank)]
    grid = []
    kprod: Operand = i64(1)
    lprod: Operand = i64(1)
    for j in range(rank):
        b.check(b.op("eq", b.load(image, i64(j)), i64(out[j])),
                f"Col2Im: image_shape[{j}] must equal the output's dim {out[j]}")
        b.check(b.op("ge", k[j], i64(1)), f"Col2Im: block_shape[{j}] must be >= 1")
        span = b.op("add", b.op("mul", b.op("sub", k[j], i64(1)), i64(a.dilations[j])), i64(1))
        room = b.op("sub", i64(out[j] + a.pads[j] + a.pads[j + rank]), span)
        b.check(b.op("ge", room, i64(0)), f"Col2Im: block_shape[{j}] does not fit the image")
        grid.append(b.op("add", b.op("div", room, i64(a.strides[j])), i64(1), hint="l"))
        kprod, lprod = b.op("mul", kprod, k[j]), b.op("mul", lprod, grid[-1])
    b.check(b.op("eq", b.op("mul", kprod, i64(y.shape[1])), i64(x.shape[1])),
            f"Col2Im: input dim 1 ({x.shape[1]}) must be C ({y.shape[1]}) * prod(block_shape)")
    b.check(b.op("eq", lprod, i64(x.shape[2])),
            f"Col2Im: input dim 2 ({x.shape[2]}) must be the number of blocks in the image")
    ostr = row_major_strides(out)
    with b.loop(0, y.shape[0] * y.shape[1], hint="q") as q:
        with Nest(b, k, "t") as t, Nest(b, grid, "g") as g:
            tap, cell = _runtime_linear(b, t, k), _runtime_linear(b, g, grid)
            valid: Operand | None = None
            at = b.imul(q, math.prod(out))
            for j in range(rank):
                pos = b.op("add", b.op("mul", g[j], i64(a.strides[j])),
                           b.op("sub", b.op("mul", t[j], i64(a.dilations[j])), i64(a.pads[j])))
                v = b.op("and", b.op("ge", pos, i64(0)), b.op("lt", pos, i64(out[j])))
                valid = v if valid is None else b.op("and", valid, v)
                at = b.iadd(at, b.imul(pos, ostr[j]))
            src = b.op("add", b.op("mul", b.op("add", b.op("mul", q, kprod), tap), lprod), cell)
            assert valid is not None
            with b.loop(0, b.op("select", valid, i64(1), i64(0)), hint="inside"):
                b.store(y, at, b.op("add", b.load(y, at), b.load(x, src)))
    ctx.kernel("col2im", b.body)


def _runtime_linear(b: Builder, idx: list, dims: list) -> Operand:
    out: Operand = i64(0)
    for i, d in zip(idx, dims):
        out = b.op("add", b.op("mul", out, d), i)
    return out
