"""Expansions of onnxruntime's dynamically quantized and 4-bit contrib ops (com.microsoft) into
standard ONNX ops, for the `expand-contrib` pass.

    DynamicQuantizeMatMul(A, B, b_scale, b_zp, bias)
        -> DynamicQuantizeLinear(A) -> MatMulInteger(Aq, B, a_zp, b_zp) -> Cast
           -> * (a_scale * b_scale) [+ bias]      (exact, as onnxruntime's int32 products; a
           float product would be faster today but flips the next layer's quantization on
           near-ties)
    MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp, b_zp, bias)
        -> MatMulInteger -> Cast -> * (a_scale * b_scale) [+ bias]
    MatMulNBits(A, B, scales, zero_points, g_idx, bias; K, N, bits, block_size)
        -> MatMul(A, W) [+ bias], W the float weights dequantized here, at compile time, from
           the packed blocks (values low bits first, zero point 2^(bits-1) when omitted), so
           the product runs on the float kernels with W prepacked like any weight; 4 bits
           (whole blocks, float32 A): onnxjit.NBitsMatMul(A, W, the 4-bit weights repacked)
           instead, whose few-row (decode) products read the 4-bit weights (`linalg.nbits`)
    DynamicQuantizeLSTM(X, W, R, B, seq_lens, h0, c0, P, W_scale, W_zp, R_scale, R_zp)
        -> DynamicQuantizeLinear(X) -> per direction MatMulInteger(Xq, W[d]) -> Cast
           -> * (x_scale * W_scale[d]) -> onnxjit.QuantizedLSTM(projections, R, ...), which
           quantizes h at every step as onnxruntime does (`recurrent.quantized`)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node, Value
from onnxjit.ir.ops.fused.region import FUSED_DOMAIN
from onnxjit.ir.ops.linalg.nbits import pack_nbits
from onnxjit.ir.types import DType

__all__ = ["EXPANSIONS"]


def _req(node: Node, i: int, what: str) -> Value:
    v = node.input(i)
    if v is None:
        raise ModelError(f"input {i} ({what}) is required", where=node)
    return v


def _const(node: Node, i: int, what: str) -> np.ndarray:
    v = _req(node, i, what)
    if v.const is None:
        raise UnsupportedError(f"{node.op} needs a constant {what} (input {i})", where=node)
    return np.asarray(v.const)


def _scaled(e: Any, acc: Value, a_scale: Value, b_scale: Value, bias: Value | None) -> None:
    n = e.node
    f = e.emit("Cast", 13, [acc], "acc_float", to=1)
    scale = e.emit("Mul", 14, [a_scale, b_scale], "scale")
    if bias is None:
        e.emit("Mul", 14, [f, scale], "scaled", out=n.outputs[0])
        return
    y = e.emit("Mul", 14, [f, scale], "scaled")
    e.emit("Add", 14, [y, bias], "bias", out=n.outputs[0])


def _dynamic_quantize_matmul(e: Any) -> None:
    n = e.node
    aq, a_scale, a_zp = (e.value(p) for p in ("a_q", "a_scale", "a_zp"))
    e.nodes.append(Node("DynamicQuantizeLinear", [_req(n, 0, "A")], [aq, a_scale, a_zp], {},
                        "", 11, e.name("quantize_a")))
    acc = e.emit("MatMulInteger", 10, [aq, _req(n, 1, "B"), a_zp, n.input(3)], "matmul")
    _scaled(e, acc, a_scale, _req(n, 2, "b_scale"), n.input(4))


def _matmul_integer_to_float(e: Any) -> None:
    n = e.node
    acc = e.emit("MatMulInteger", 10, [_req(n, 0, "A"), _req(n, 1, "B"), n.input(4),
                                       n.input(5)], "matmul")
    _scaled(e, acc, _req(n, 2, "a_scale"), _req(n, 3, "b_scale"), n.input(6))


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Values of `bits` bits packed low bits first along the last axis -> `count` of them."""
    per = 8 // bits
    b = packed.astype(np.uint8)[..., None] >> (np.arange(per, dtype=np.uint8) * bits)
    vals = (b & ((1 << bits) - 1)).reshape(*packed.shape[:-1], -1)
    return vals[..., :count]


def nbits_weights(node: Node) -> np.ndarray:
    """The float [K, N] weights of a MatMulNBits node."""
    k, n_out = int(node.attr("K", 0)), int(node.attr("N", 0))
    bits, block = int(node.attr("bits", 4)), int(node.attr("block_size", 0))
    if bits not in (2, 4, 8) or block <= 0 or k <= 0 or n_out <= 0:
        raise ModelError(f"MatMulNBits needs K, N, block_size > 0 and bits 2, 4 or 8 (got "
                         f"K={k}, N={n_out}, bits={bits}, block_size={block})", where=node)
    if node.input(4) is not None:
        raise UnsupportedError("MatMulNBits with g_idx (act-order) is not supported",
                               where=node)
    blocks = -(-k // block)
    q = _unpack(_const(node, 1, "B").reshape(n_out, blocks, -1), bits, block)
    scales = _const(node, 2, "scales").astype(np.float32).reshape(n_out, blocks, 1)
    if node.input(3) is None:
        zp: Any = np.float32(1 << (bits - 1))
    else:
        z = _const(node, 3, "zero_points")
        if z.dtype == np.uint8:  # packed like B, one value per block
            z = _unpack(z.reshape(n_out, -1), bits, blocks)
        zp = z.astype(np.float32).reshape(n_out, blocks, 1)
    w = ((q.astype(np.float32) - zp) * scales).reshape(n_out, -1)[:, :k]
    return np.ascontiguousarray(w.T)


def _matmul_nbits(e: Any) -> None:
    n = e.node
    w = e.const(nbits_weights(n), "weights")
    out = n.outputs[0] if n.input(5) is None else Value(None, e.name("matmul"))
    packed = _nbits_packed(n)
    if packed is None:
        e.emit("MatMul", 13, [_req(n, 0, "A"), w], "matmul", out=out)
    else:  # `linalg.nbits`: the 4-bit weights for few rows, the float ones for more
        ins = [_req(n, 0, "A"), w] + [e.const(p, h) for p, h in zip(packed, ("qw", "sc", "sz"))]
        attrs = {k: n.attrs[k] for k in ("K", "N", "block_size")}
        e.nodes.append(Node("NBitsMatMul", ins, [out], attrs, FUSED_DOMAIN, 1,
                            e.name("nbits_matmul")))
    if n.input(5) is not None:
        e.emit("Add", 14, [out, n.inputs[5]], "bias", out=n.outputs[0])


def _nbits_packed(node: Node) -> tuple[np.ndarray, ...] | None:
    """`linalg.nbits.pack_nbits` of a 4-bit MatMulNBits with float32 A and whole blocks of
    an even size, else None (the float product only)."""
    k, n_out = int(node.attr("K", 0)), int(node.attr("N", 0))
    bits, block = int(node.attr("bits", 4)), int(node.attr("block_size", 0))
    a = node.input(0)
    if bits != 4 or block % 2 or k % block or a is None or \
            getattr(a.type, "dtype", None) != DType.FLOAT:
        return None
    blocks = k // block
    q = _unpack(_const(node, 1, "B").reshape(n_out, blocks, -1), bits, block)
    scales = _const(node, 2, "scales").astype(np.float32).reshape(n_out, blocks)
    if node.input(3) is None:
        zp = np.full((n_out, blocks), 1 << (bits - 1), np.float32)
    else:
        z = _const(node, 3, "zero_points")
        if z.dtype == np.uint8:  # packed like B, one value per block
            z = _unpack(z.reshape(n_out, -1), bits, blocks)
        zp = z.astype(np.float32).reshape(n_out, blocks)
    return pack_nbits(q, zp, scales)


def _per_direction(node: Node, at: int, what: str, dirs: int) -> np.ndarray:
    """A scale or zero point of DynamicQuantizeLSTM as [dirs, 1 or 4*hidden] (per direction
    or per column); a zero point that is omitted is 0."""
    v = node.input(at)
    arr = np.zeros(dirs, np.int8) if v is None else _const(node, at, what)
    return arr.reshape(dirs, -1)


def _dynamic_quantize_lstm(e: Any) -> None:
    """DynamicQuantizeLSTM as onnxruntime computes it (`recurrent.quantized`): X quantized
    once (DynamicQuantizeLinear) for the input projection of every step, one MatMulInteger
    per direction scaled by x_scale * W_scale (onnxruntime's order: the scales' product,
    then times the int32 sum), then `QuantizedLSTM` on the projections."""
    n = e.node
    wq, rq = _const(n, 1, "W"), _const(n, 2, "R")
    if wq.ndim != 3 or rq.ndim != 3:
        raise ModelError(f"W and R must be 3-D, got shapes {wq.shape} and {rq.shape}",
                         where=n)
    dirs = wq.shape[0]
    w_scale = _per_direction(n, 8, "W_scale", dirs).astype(np.float32)
    # onnxruntime reads one zero point per direction (the first of a per-column vector)
    w_zp = _per_direction(n, 9, "W_zero_point", dirs)[:, :1].astype(wq.dtype)
    xq, xs, xz = (e.value(h) for h in ("x_q", "x_scale", "x_zp"))
    e.nodes.append(Node("DynamicQuantizeLinear", [_req(n, 0, "X")], [xq, xs, xz], {}, "", 11,
                        e.name("quantize_x")))
    parts = []
    for d in range(dirs):
        acc = e.emit("MatMulInteger", 10, [xq, e.const(wq[d], "w_q"), xz,
                                           e.const(w_zp[d, 0], "w_zp")], "projection")
        f = e.emit("Cast", 13, [acc], "projection_float", to=1)
        scale = e.emit("Mul", 14, [xs, e.const(w_scale[d], "w_scale")], "projection_scale")
        xw = e.emit("Mul", 14, [f, scale], "projection_scaled")
        parts.append(e.emit("Unsqueeze", 13, [xw, e.const(np.zeros(1, np.int64), "axis")],
                            "projection_dir"))
    xw = parts[0] if dirs == 1 else e.emit("Concat", 13, parts, "projections", axis=0)
    r_scale = e.const(_per_direction(n, 10, "R_scale", dirs).astype(np.float32), "r_scale")
    r_zp = e.const(_per_direction(n, 11, "R_zero_point", dirs)[:, :1].astype(rq.dtype),
                   "r_zp")
    keep = ("activation_alpha", "activation_beta", "activations", "clip", "direction",
            "hidden_size", "input_forget")
    ins = [xw, e.const(rq, "r_q"), r_scale, r_zp] + [n.input(k) for k in range(3, 8)]
    while ins and ins[-1] is None:
        ins.pop()
    e.nodes.append(Node("QuantizedLSTM", ins, list(n.outputs),
                        {k: n.attrs[k] for k in keep if k in n.attrs}, FUSED_DOMAIN, 1,
                        e.name("lstm")))


EXPANSIONS: dict[str, Callable[[Any], None]] = {
    "DynamicQuantizeMatMul": _dynamic_quantize_matmul,
    "MatMulIntegerToFloat": _matmul_integer_to_float,
    "MatMulNBits": _matmul_nbits,
    "DynamicQuantizeLSTM": _dynamic_quantize_lstm,
}

#: What each op becomes, for docs/supported_ops.md.
NOTES = {
    "DynamicQuantizeLSTM": "int8 projection of X, then an LSTM quantizing h at every step "
                           "(as onnxruntime)",
    "DynamicQuantizeMatMul": "DynamicQuantizeLinear + MatMulInteger, scaled [+ bias]",
    "MatMulIntegerToFloat": "MatMulInteger, scaled [+ bias]",
    "MatMulNBits": "MatMul by weights dequantized at compile time (2/4/8 bits; no g_idx); "
                   "4 bits: few rows read the 4-bit weights",
}
