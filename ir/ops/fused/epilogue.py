"""The epilogue of a fused product (`fused.linear`), bound to its buffers.

An epilogue is a graph of elementwise nodes (the `epilogue` attribute of a FusedConv or
FusedMatMul): its first input stands for the product's result, the others for the node's
extra inputs, each read as one of three kinds relative to the output (`extra_kind`): "full"
(the output's own shape), "chan" (one value per channel: dim 1 of a Conv output, the last dim
of a MatMul output) or "scalar" (one element). `Epilogue.emit` runs it in place over one 2-D
block of the output: one row loop (per-channel values loaded once per row for Conv) around a
contiguous column loop that loads the product, adds the conv bias, runs the members' scalar
rules and stores the result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from onnxjit.errors import CompileError
from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Buffer, Operand, i64
from onnxjit.ir.opdef import LowerContext, resolve


def extra_kind(shape: Sequence[int], out: Sequence[int], chan_axis: int) -> str | None:
    """How an extra input of static `shape` is read against the output shape `out`."""
    if math.prod(shape) == 1 and len(shape) <= len(out):
        return "scalar"
    if tuple(shape) == tuple(out):
        return "full"
    if len(shape) > len(out):
        return None
    full = (1,) * (len(out) - len(shape)) + tuple(shape)
    axis = chan_axis % len(out)
    if full[axis] == out[axis] and all(d == 1 for k, d in enumerate(full) if k != axis):
        return "chan"
    return None


#: Column loops of at most this many (compile-time) trips stay rolled (`Builder.keep_rolled`).
#: Fully unrolled, a short row (a Winograd block of a 14x14 map: 56 columns) left the channel
#: loop innermost, and LLVM vectorized that across channels with strided gathers and scatters:
#: one loop of 225 loads and 77 stores, whose LoopLoadElimination took 0.6 s of LLVM time (a
#: quadratic walk over its accesses). Rolled, the columns vectorize. Measured against 0 on a
#: Zen 3 host: ResNet-50 LLVM CPU 5.75 -> 4.30 s (its worst kernel 1.39 -> 0.27 s), cold
#: compile + first call 4.98 -> 4.70 s, Inception v1 10.9 -> 9.4 s, DenseNet-121 even;
#: steady, interleaved both orders: DenseNet-121 1.04-1.09x, Inception v1 1.03-1.04x,
#: ResNet-50 0.98-1.03x, MobileNetV2-like, LCNet-like, ResNet blocks within 1%
ROLL_COLS = 128


class Epilogue:
    """The epilogue of one fused node, bound to its buffers; `emit` runs it over a block."""

    def __init__(self, ctx: LowerContext, node: Node, extras: Sequence[Value], y: Buffer,
                 chan_axis: int, bias: Buffer | None = None):
        self.y = y
        self.bias = bias
        self.body: Graph | None = node.attr("epilogue")
        self.chan_on_rows = chan_axis == 1  # Conv blocks are (channels, positions)
        self.extras: list[tuple[str, Buffer | Operand]] = []
        for v in extras:
            buf = ctx.buf(v)
            kind = extra_kind(buf.shape, y.shape, chan_axis)
            if kind is None:
                raise CompileError(f"epilogue input {v.describe()} of shape {list(buf.shape)} "
                                   f"does not broadcast per channel to {list(y.shape)}",
                                   where=node)
            if kind == "scalar" and buf.kind == "const" and buf.data is not None:
                self.extras.append(("const", const(buf.data.reshape(-1)[0].item(), buf.dtype)))
            else:
                self.extras.append((kind, buf))
        self.rules = [resolve(n).scalar for n in (self.body.nodes if self.body else [])]

    def emit(self, b: Builder, off: Operand, ld: int, rows: int, cols: int,
             row0: Operand, parallel: bool = False) -> None:
        """Apply the epilogue in place to y[off + r*ld + c], r < rows, c < cols; row r holds
        channel row0 + r (Conv) or the columns are the channels (MatMul). `parallel` marks
        the row loop parallel (only when the caller is not inside a parallel loop)."""
        y = self.y
        with b.loop(0, rows, hint="er", parallel=parallel) as r:
            base = b.iadd(off, b.imul(r, ld))
            per_row = self.per_row(b, b.iadd(row0, r)) if self.chan_on_rows else {}
            with b.keep_rolled(isinstance(cols, int) and cols <= ROLL_COLS), \
                    b.loop(0, cols, hint="ec") as c:
                at = b.iadd(base, c)
                b.store(y, at, self.value(b, b.load(y, at), at, c, per_row))

    def per_row(self, b: Builder, chan: Operand) -> dict:
        """The per-channel values of channel `chan` (Conv): the "chan" extras and the bias."""
        out: dict = {k: b.load(buf, chan) for k, (kind, buf) in enumerate(self.extras)
                     if kind == "chan"}  # type: ignore[arg-type]
        if self.bias is not None:
            out["bias"] = b.load(self.bias, chan)
        return out

    def value(self, b: Builder, acc: Operand, at: Operand, c: Operand, per_row: dict
              ) -> Operand:
        """The epilogue of one element: `acc` is the product at flat index `at` of Y (column
        c of its block); `per_row` comes from `per_row` for its channel (Conv)."""
        if "bias" in per_row:
            acc = b.op("add", acc, per_row["bias"])
        args: list[Operand] = []
        for k, (kind, src) in enumerate(self.extras):
            if kind == "const":
                args.append(src)  # type: ignore[arg-type]
            elif kind == "scalar":
                args.append(b.load(src, i64(0)))  # type: ignore[arg-type]
            elif kind == "full":
                args.append(b.load(src, at))  # type: ignore[arg-type]
            elif k in per_row:
                args.append(per_row[k])
            else:
                args.append(b.load(src, c))  # type: ignore[arg-type]
        return b.cast(self._scalar(b, acc, args), self.y.dtype)

    def _scalar(self, b: Builder, acc: Operand, args: list[Operand]) -> Operand:
        if self.body is None:
            return acc
        env: dict[Value, Operand] = dict(zip(self.body.inputs, [acc, *args]))
        for n, rule in zip(self.body.nodes, self.rules):
            if rule is None:
                raise CompileError("epilogue holds a non-elementwise node", where=n)
            env[n.outputs[0]] = rule(b, n, [None if v is None else env[v] for v in n.inputs])
        return env[self.body.outputs[0]]
