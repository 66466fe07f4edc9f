"""ConvInteger and QLinearConv: the im2col + `Matmul` lowering of `conv.conv` on integers.

ConvInteger: the panel holds (x - x_zero_point) as i32 (zeros in the padding, as onnxruntime
and the reference do), the weights are converted once per call into an i32 scratch
(w - w_zero_point, per tensor or per output channel) and the `Matmul` is an i32 product.
QLinearConv: that product into an i32 scratch, then per output channel
y = saturate(rint((acc + B) * (x_scale * w_scale / y_scale)) + y_zero_point), the scale in
f32 and the rest in f64, as the reference computes it (rint rounds half to even).
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.opdef import LowerContext, op
from onnxjit.ir.ops.conv.attrs import conv_numpy, infer_conv_shape
from onnxjit.ir.ops.conv.conv import conv_attrs_of, lower_gemm_conv
from onnxjit.ir.ops.conv.geometry import Geometry, fill_channels
from onnxjit.ir.ops.elementwise.arithmetic import Types, accept, arity
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType

_BYTES: Types = ((10, frozenset({DType.UINT8, DType.INT8})),)

# --------------------------------------------------------------------------- ConvInteger


def _zero_point_shape(node: Node, i: int, per_channel: int | None) -> None:
    if node.input(i) is None:
        return
    accept(node, i, _BYTES)
    if tensor_input(node, i).dtype != tensor_input(node, i - 2).dtype:
        raise ModelError(f"input {i} (zero point) must have the element type of input {i - 2}",
                         where=node)
    s = tensor_input(node, i).shape
    if s is None or all(d == 1 or not isinstance(d, int) for d in s):
        return
    if per_channel is not None and len(s) == 1 and s[0] in (per_channel, None):
        return
    what = "a scalar" if i == 2 else "a scalar or one value per output channel"
    raise ModelError(f"input {i} (zero point) must be {what}, got shape "
                     f"[{','.join(str(d) for d in s)}]", where=node)


def _ci_infer(node: Node) -> list:
    arity(node, 2, 4)
    accept(node, 0, _BYTES)
    accept(node, 1, _BYTES)
    w = tensor_input(node, 1).shape
    _, shape = infer_conv_shape(node, tensor_input(node, 0).shape, w, None)
    _zero_point_shape(node, 2, None)
    _zero_point_shape(node, 3, None if w is None else w[0])
    return tensor(DType.INT32, shape)


def _ci_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, w = inputs[0].astype(np.int32), inputs[1].astype(np.int32)
    if len(inputs) > 2 and inputs[2] is not None:
        x = x - inputs[2].astype(np.int32).reshape(())
    if len(inputs) > 3 and inputs[3] is not None:
        zp = inputs[3].astype(np.int32)
        w = w - (zp.reshape(-1, *([1] * (w.ndim - 1))) if zp.size > 1 else zp.reshape(()))
    return [conv_numpy(x, w, None, conv_attrs_of(node, x, w), acc=np.int32)]


def integer_conv(ctx: LowerContext, node: Node, ins: tuple, y: Buffer) -> None:
    """y (i32) = conv(x - x_zero_point, w - w_zero_point); ins = (x, w, xzp, wzp) values."""
    x, w = ctx.buf(ins[0]), ctx.buf(ins[1])
    xzp, wzp = (None if v is None else ctx.buf(v) for v in ins[2:])
    gm = Geometry(conv_attrs_of(node, x, w), x.shape, w.shape, y.shape)
    if y.numel == 0:
        return
    from onnxjit.ir.ops.conv.integer_vnni import lower_vnni_conv, vnni_applies

    if vnni_applies(gm, node, ins, y):
        lower_vnni_conv(ctx, node, gm, ins, y)
        return
    i32 = DType.INT32
    b = Builder()
    if gm.kk == 0:
        fill_channels(b, y, None, gm.m, gm.p)
        ctx.kernel("convinteger_zero", b.body)
        return
    # The weights minus their zero point, as i32 (per tensor or per output channel).
    wq = ctx.scratch("wq", i32, (gm.m, gm.kk))
    with b.loop(0, gm.m, parallel=True, hint="m") as m:
        zp: Operand = const(0, i32)
        if wzp is not None:
            zp = b.cast(b.load(wzp, m if wzp.numel > 1 else i64(0)), i32)
        with b.loop(0, gm.kk, hint="k") as k:
            at = b.iadd(b.imul(m, gm.kk), k)
            b.store(wq, at, b.op("sub", b.cast(b.load(w, at), i32), zp))
    ctx.kernel("convinteger_weights", b.body)

    def load(bb: Builder, i: Operand) -> Operand:
        v = bb.cast(bb.load(x, i), i32)
        if xzp is None:
            return v
        return bb.op("sub", v, bb.cast(bb.load(xzp, i64(0)), i32))

    gm.pointwise = False  # the panel must hold i32 values: never read x directly
    lower_gemm_conv(ctx, gm, x, wq, y, False, i32, load)


def _ci_lower(ctx: LowerContext, node: Node) -> None:
    integer_conv(ctx, node, (node.inputs[0], node.inputs[1], node.input(2), node.input(3)),
                 ctx.buf(node.outputs[0]))


op("ConvInteger", (10,), infer=_ci_infer, evaluate=_ci_evaluate, lower=_ci_lower,
   doc="int32 convolution of (x - x_zero_point) and (w - w_zero_point), 8-bit inputs")

# --------------------------------------------------------------------------- QLinearConv


def _qlc_infer(node: Node) -> list:
    arity(node, 8, 9)
    for i, zp in ((0, 2), (3, 5)):
        accept(node, i, _BYTES)
        if accept(node, zp, _BYTES) != tensor_input(node, i).dtype:
            raise ModelError(f"input {zp} (zero point) must have the element type of input {i}",
                             where=node)
    out = accept(node, 7, _BYTES)
    w = tensor_input(node, 3).shape
    m = None if w is None else w[0]
    for i in (1, 4, 6):
        if tensor_input(node, i).dtype != DType.FLOAT:
            raise ModelError(f"input {i} (scale) must be f32, got "
                             f"{tensor_input(node, i).dtype.short}", where=node)
    for i in (1, 2, 4, 5, 6, 7):
        s = tensor_input(node, i).shape
        if s is not None and not all(d == 1 or not isinstance(d, int) for d in s) and not (
                i in (4, 5) and len(s) == 1 and s[0] in (m, None)):
            what = "per output channel" if i in (4, 5) else "per tensor"
            raise ModelError(f"input {i} must be a scalar ({what}), got shape {list(s)}",
                             where=node)
    b = None
    if node.input(8) is not None:
        if tensor_input(node, 8).dtype != DType.INT32:
            raise ModelError("input 8 (bias) must be i32", where=node)
        b = tensor_input(node, 8).shape
    _, shape = infer_conv_shape(node, tensor_input(node, 0).shape, w, b)
    return tensor(out, shape)


def _qlc_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x, xs, xz, w, ws, wz, ys, yz = inputs[:8]
    acc = _ci_evaluate(node, [x, w, xz, wz])[0]
    if len(inputs) > 8 and inputs[8] is not None:
        acc = acc + inputs[8].astype(np.int32).reshape(1, -1, *([1] * (acc.ndim - 2)))
    scale = (xs.reshape(()) * ws.reshape(1, -1, *([1] * (acc.ndim - 2))) / ys.reshape(()))
    v = acc.astype(np.float64) * scale.astype(np.float64) + yz.astype(np.float64).reshape(())
    info = np.iinfo(yz.dtype)
    return [np.clip(np.rint(v), info.min, info.max).astype(yz.dtype)]


def _rint(b: Builder, v: Operand) -> Operand:
    """Round half to even: floor, plus 1 above a half or at a half from an odd floor."""
    dt = v.dtype
    r = b.op("floor", v)
    frac, half = b.op("sub", v, r), const(0.5, dt)
    odd = b.op("ne", b.op("sub", r, b.op("mul", const(2, dt),
                                         b.op("floor", b.op("mul", r, half)))), const(0, dt))
    up = b.op("or", b.op("gt", frac, half), b.op("and", b.op("eq", frac, half), odd))
    return b.op("select", up, b.op("add", r, const(1, dt)), r)


def _qlc_lower(ctx: LowerContext, node: Node) -> None:
    """The integer conv into an i32 scratch, then per channel: y = saturate(rint((acc + B) *
    (x_scale * w_scale / y_scale)) + y_zero_point), in f64 like the reference."""
    y = ctx.buf(node.outputs[0])
    if y.numel == 0:
        return
    acc = ctx.scratch("acc", DType.INT32, y.shape)
    integer_conv(ctx, node, (node.inputs[0], node.inputs[3], node.input(2), node.input(5)), acc)
    xs, ws, ys, yz = (ctx.buf(node.inputs[i]) for i in (1, 4, 6, 7))
    bias = ctx.buf(node.inputs[8]) if node.input(8) is not None else None
    m, f64 = y.shape[1], DType.DOUBLE
    p = y.numel // (y.shape[0] * m)
    info = np.iinfo(y.dtype.numpy)
    b = Builder()
    with b.loop(0, y.numel // p, parallel=True, hint="q") as q:
        ch = b.op("rem", q, i64(m))
        wsv = b.load(ws, ch if ws.numel > 1 else i64(0))
        scale = b.cast(b.op("div", b.op("mul", b.load(xs, i64(0)), wsv), b.load(ys, i64(0))), f64)
        add = b.cast(b.load(bias, ch), f64) if bias is not None else const(0, f64)
        zp = b.cast(b.load(yz, i64(0)), f64)
        with b.loop(0, p, hint="p") as i:
            at = b.iadd(b.imul(q, p), i)
            v = b.op("mul", b.op("add", b.cast(b.load(acc, at), f64), add), scale)
            v = _rint(b, b.op("add", v, zp))
            v = b.op("min", b.op("max", v, const(info.min, f64)), const(info.max, f64))
            b.store(y, at, b.cast(v, y.dtype))
    ctx.kernel("qlinearconv_requantize", b.body)


op("QLinearConv", (10,), infer=_qlc_infer, evaluate=_qlc_evaluate, lower=_qlc_lower,
   doc="quantized convolution: integer conv, bias, requantized to y_scale/y_zero_point")
