"""Native control flow: Loop and Scan lowered into one serial loop over their iterations.

A Loop or Scan whose carried values keep their shapes (the body's carried outputs have exactly
the types of its carried inputs, every value in the body has a static shape, and every body
node lowers natively) compiles like any other node (`loop_native`, `scan_native`); the others
run through the run-time shape phase (`onnxjit.staged`: unrolled or on the host interpreter).

Lowering (`lower_loop`, `lower_scan`), for a Loop with carried values S, a trip count M (a
constant, read from its buffer at run time, or none) and condition c:

    kernel init:  S_k = copy(initial value k)          (S_k is the Loop's output buffer k)
    kernel loop:  stop = M (or INT64_MAX); if c is given: stop = c ? stop : 0
                  store cond_in = true                  (an iteration only runs on true)
                  for it in [0, stop):
                      store iter = it
                      <the body's nodes, lowered as usual: body inputs are the buffers iter,
                       cond_in, S_k; outer values are the outer graph's buffers>
                      go = load cond_out               (before any state is overwritten)
                      T_k = copy(out_k)  for each carried output whose storage is some S_j
                      Y_s[it] = copy(scan_out_s)        (a slice of the Loop's output s)
                      S_k = copy(out_k or T_k)         (skipped when out_k is S_k itself)
                      break if not go                   (only when the body can end the loop)

Reading the old state while writing the new one is safe because every body value other than
the body inputs has its own buffer, and outputs that alias a state buffer are staged through
T_k before any state is written (a body that swaps two carried values). A Loop with scan
outputs needs a fixed number of iterations (a constant M and a condition that cannot end it)
since its outputs' shape is (M, ...); with a run-time M the staged phase binds M first. A Scan
is the same with each scan input's slice copied into the body input's buffer at the start of
an iteration (index it, or L-1-it in reverse), and each scan output copied into its slice along
its axis. Everything runs in one kernel, so plan-memory keeps every body buffer live across the
iterations; the body's parallel loops sit directly in the serial loop, where codegen may still
hand large ones to the worker pool.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnxjit.errors import UnsupportedError
from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ir.host_eval import NATIVE_WHEN, is_host_only
from onnxjit.ir.loop_builder import Builder
from onnxjit.ir.loops import Break, Buffer, Const, Operand, Stmt, Var, i64
from onnxjit.ir.types import STORAGE_DTYPES, DType, TensorType

INT64_MAX = (1 << 63) - 1
_ZERO = i64(0)


# ---------------------------------------------------------------------------- eligibility


def _tensor(v: Value | None) -> bool:
    t = None if v is None else v.type
    return (isinstance(t, TensorType) and t.is_static and t.dtype in STORAGE_DTYPES
            and t.dtype != DType.STRING)


def _scalar(v: Value, dtype: DType) -> bool:
    return _tensor(v) and v.type.dtype == dtype and math.prod(v.type.shape) == 1


def body_lowerable(body: Graph) -> bool:
    """Every node of the region compiles natively for its (static) shapes."""
    from onnxjit.ir.opdef import resolve

    if not all(_tensor(v) for v in list(body.inputs) + list(body.outputs)):
        return False
    for n in body.nodes:
        if not all(v is None or _tensor(v) for v in list(n.inputs) + list(n.outputs)):
            return False
        if is_host_only(n):  # a nested Loop/Scan answers through `loop_native`/`scan_native`
            return False
        try:
            d = resolve(n)
        except Exception:  # an op or version the table refuses: the host path reports it
            return False
        if d.lower is None and d.scalar is None:
            return False
        if any(n.input(k) is not None and n.input(k).const is None for k in d.value_inputs):
            return False
    return True


def _same(a: Value, b: Value) -> bool:
    return a.type == b.type


def loop_native(node: Node, trip: int | None = None) -> bool:
    """A Loop whose carried shapes are fixed and whose body lowers natively. `trip`: the trip
    count a stage is about to bind (its scan outputs' length is not inferred yet)."""
    from onnxjit.ir.ops.control.unroll import loop_unrollable

    body = node.attr("body")
    if not isinstance(body, Graph) or node.domain not in ("", "ai.onnx"):
        return False
    n_car = len(node.inputs) - 2
    if n_car < 0 or len(body.inputs) != n_car + 2 or len(body.outputs) != len(node.outputs) + 1:
        return False
    m, c = node.input(0), node.input(1)
    if m is not None and not _scalar(m, DType.INT64):
        return False
    if c is not None and not _scalar(c, DType.BOOL):
        return False
    if not _scalar(body.outputs[0], DType.BOOL):
        return False
    for k in range(n_car):
        init = node.inputs[2 + k]
        if not _tensor(init) or not all(_same(init, v) for v in
                                        (node.outputs[k], body.inputs[2 + k],
                                         body.outputs[1 + k])):
            return False
    scans = list(zip(node.outputs[n_car:], body.outputs[1 + n_car:]))
    if scans:
        # (M, ...) outputs: the iterations must be exactly M, known now
        if m is None or (m.const is None and trip is None) or not loop_unrollable(node):
            return False
        bound = trip is not None
        trip = int(np.asarray(m.const).reshape(-1)[0]) if trip is None else trip
        if trip < 1:
            return False
        for out, elem in scans:
            t = out.type
            if not (_tensor(elem) and isinstance(t, TensorType) and t.dtype == elem.type.dtype
                    and t.shape is not None and len(t.shape) == len(elem.type.shape) + 1
                    and tuple(t.shape[1:]) == tuple(elem.type.shape)
                    and (bound or t.shape[0] == trip)):
                return False
    return body_lowerable(body)


def scan_length(node: Node) -> int | None:
    """Iterations of a Scan (opset 9+) whose scan inputs have static shapes."""
    if node.version < 9:
        return None
    n_scan = int(node.attr("num_scan_inputs", 0))
    n_state = len(node.inputs) - n_scan
    axes = node.attr("scan_input_axes") or (0,) * n_scan
    if n_scan < 1 or n_state < 0 or len(axes) != n_scan:
        return None
    lengths = set()
    for x, a in zip(node.inputs[n_state:], axes):
        if not _tensor(x) or not x.type.shape or not -len(x.type.shape) <= a < len(x.type.shape):
            return None
        lengths.add(x.type.shape[a % len(x.type.shape)])
    return lengths.pop() if len(lengths) == 1 else None


def scan_native(node: Node) -> bool:
    """A Scan (opset 9+) whose states keep their shapes and whose body lowers natively."""
    body = node.attr("body")
    if not isinstance(body, Graph) or node.domain not in ("", "ai.onnx"):
        return False
    length = scan_length(node)
    if length is None or length < 1:
        return False
    n_scan = int(node.attr("num_scan_inputs"))
    n_state = len(node.inputs) - n_scan
    n_out = len(node.outputs) - n_state
    if len(body.inputs) != n_state + n_scan or len(body.outputs) != len(node.outputs):
        return False
    out_axes = node.attr("scan_output_axes") or (0,) * n_out
    if len(out_axes) != n_out:
        return False
    for k in range(n_state):
        s = node.inputs[k]
        if not _tensor(s) or not all(_same(s, v) for v in
                                     (node.outputs[k], body.inputs[k], body.outputs[k])):
            return False
    for out, elem, a in zip(node.outputs[n_state:], body.outputs[n_state:], out_axes):
        if not (_tensor(out) and _tensor(elem)):
            return False
        e = tuple(elem.type.shape)
        if not -len(e) - 1 <= a <= len(e):
            return False
        a %= len(e) + 1
        if tuple(out.type.shape) != e[:a] + (length,) + e[a:]:
            return False
    return body_lowerable(body)


# ------------------------------------------------------------------------------- lowering


def _copy(b: Builder, dst: Buffer, src: Buffer, dst_off: Operand = _ZERO,
          src_off: Operand = _ZERO, n: int | None = None) -> None:
    """dst[dst_off + i] = src[src_off + i] for i < n (default: all of dst)."""
    n = dst.numel if n is None else n
    if n == 0:
        return
    with b.loop(0, n, parallel=True) as i:
        b.store(dst, b.iadd(i, dst_off), b.load(src, b.iadd(i, src_off)))


def _strided(b: Builder, dst: Buffer, src: Buffer, outer: int, length: int, inner: int,
             pos: Operand, into_slice: bool) -> None:
    """Copy between a dense (outer, inner) buffer and the slice `pos` of an (outer, length,
    inner) one: into it (`into_slice`) or out of it."""
    if outer == 1:
        off = b.imul(pos, inner)
        if into_slice:
            _copy(b, dst, src, dst_off=off, n=inner)
        else:
            _copy(b, dst, src, src_off=off, n=inner)
        return
    if inner == 0:
        return
    with b.loop(0, outer, parallel=True, hint="o") as o:
        dense = b.imul(o, inner)
        sliced = b.imul(b.iadd(b.imul(o, length), pos), inner)
        with b.loop(0, inner) as i:
            if into_slice:
                b.store(dst, b.iadd(sliced, i), b.load(src, b.iadd(dense, i)))
            else:
                b.store(dst, b.iadd(dense, i), b.load(src, b.iadd(sliced, i)))


def _lower_body(ctx: Any, body: Graph) -> list[Stmt]:
    """The statements of the region's nodes, lowered like top-level nodes (body inputs must
    already have buffers in `ctx.of`); their kernels are taken back out of the program."""
    from onnxjit.ir.opdef import resolve
    from onnxjit.ir.ops.fused.region import lower_elementwise_nodes

    start = len(ctx.kernels)
    for n in body.nodes:
        d = resolve(n)
        if d.lower is not None:
            d.lower(ctx, n)
        else:
            ins = [v for v in n.inputs if v is not None]
            lower_elementwise_nodes(ctx, [n], ins, ins, n.outputs[:1], n.outputs[:1],
                                    n.op.lower())
    stmts = [s for k in ctx.kernels[start:] for s in k.body]
    del ctx.kernels[start:]
    return stmts


def _update_state(ctx: Any, b: Builder, states: list[Buffer], outs: list[Value],
                  scan_copies: list) -> None:
    """Copy the body's carried outputs into the state buffers, staging those whose storage is
    a state buffer first; `scan_copies` (callables) run between, reading the old state."""
    roots = {id(s.root()) for s in states}
    sources = []
    for s, v in zip(states, outs):
        src = ctx.buf(v)
        if src.root() is s.root():
            sources.append(None)  # the value passes through unchanged
        elif id(src.root()) in roots:
            tmp = ctx.scratch(f"{s.name}_next", s.dtype, s.shape)
            _copy(b, tmp, src)
            sources.append(tmp)
        else:
            sources.append(src)
    for emit in scan_copies:
        emit()
    for s, src in zip(states, sources):
        if src is not None:
            _copy(b, s, src)


def _init_states(ctx: Any, node: Node, inits: list[Value], outs: list[Value]) -> list[Buffer]:
    states = [ctx.buf(v) for v in outs]
    b = Builder()
    for s, v in zip(states, inits):
        _copy(b, s, ctx.buf(v))
    if b.body:
        ctx.kernel(f"{node.op.lower()}_init", b.body)
    return states


def _native_body(node: Node, native: bool) -> Graph:
    """The body of a Loop/Scan that `loop_native`/`scan_native` accepted (`native`)."""
    if not native:
        raise UnsupportedError(f"this {node.op} changes shapes between iterations or has a "
                               "body that does not compile natively; it runs in the run-time "
                               "shape phase", where=node)
    return node.attr("body")


def lower_loop(ctx: Any, node: Node) -> None:
    """Emit the kernels of a native Loop (see the module docstring)."""
    body = _native_body(node, loop_native(node))
    n_car = len(node.inputs) - 2
    states = _init_states(ctx, node, node.inputs[2:], node.outputs[:n_car])
    it_buf = ctx.scratch("iter", DType.INT64, ())
    cond_buf = ctx.scratch("cond_in", DType.BOOL, ())
    ctx.of[body.inputs[0]] = it_buf
    ctx.of[body.inputs[1]] = cond_buf
    for s, v in zip(states, body.inputs[2:]):
        ctx.of[v] = s
    b = Builder()
    m, c = node.input(0), node.input(1)
    stop: Operand = i64(INT64_MAX)
    if m is not None:
        stop = (i64(int(np.asarray(m.const).reshape(-1)[0])) if m.const is not None
                else b.load(ctx.buf(m), i64(0), hint="trip"))
    if c is not None:
        if c.const is not None:
            stop = stop if bool(np.asarray(c.const).reshape(-1)[0]) else i64(0)
        else:
            stop = b.op("select", b.load(ctx.buf(c), i64(0), hint="cond0"), stop, i64(0))
    b.store(cond_buf, i64(0), Const(True, DType.BOOL))
    from onnxjit.ir.ops.control.unroll import loop_unrollable

    may_exit = m is None or not loop_unrollable(node)
    with b.loop(0, stop, hint="iter") as it:
        b.store(it_buf, i64(0), it)
        for s in _lower_body(ctx, body):
            b.emit(s)
        go = b.load(ctx.buf(body.outputs[0]), i64(0), hint="go") if may_exit else None
        scan_copies = []
        for out, v in zip(node.outputs[n_car:], body.outputs[1 + n_car:]):
            def emit(out: Value = out, v: Value = v, it: Var = it) -> None:
                src = ctx.buf(v)
                _copy(b, ctx.buf(out), src, dst_off=b.imul(it, src.numel), n=src.numel)
            scan_copies.append(emit)
        _update_state(ctx, b, states, body.outputs[1:1 + n_car], scan_copies)
        if go is not None:
            b.emit(Break(b.op("not", go)))
    ctx.kernel("loop", b.body)


def lower_scan(ctx: Any, node: Node) -> None:
    """Emit the kernels of a native Scan (see the module docstring)."""
    from onnxjit.ir.ops.control.unroll import scan_layout

    body = _native_body(node, scan_native(node))
    length = scan_length(node)
    assert length is not None
    n_scan, n_state, n_out, in_dirs, in_axes, out_dirs, out_axes = scan_layout(node)
    states = _init_states(ctx, node, node.inputs[:n_state], node.outputs[:n_state])
    for s, v in zip(states, body.inputs[:n_state]):
        ctx.of[v] = s
    slices = []
    for j, (x, v) in enumerate(zip(node.inputs[n_state:], body.inputs[n_state:])):
        buf = ctx.scratch(f"{x.name or 'x'}_t", v.type.dtype, tuple(v.type.shape))
        ctx.of[v] = buf
        shape = x.type.shape
        a = int(in_axes[j]) % len(shape)
        slices.append((ctx.buf(x), buf, math.prod(shape[:a]), math.prod(shape[a + 1:]),
                       bool(in_dirs[j])))
    b = Builder()

    def position(it: Var, reverse: bool) -> Operand:
        return b.op("sub", i64(length - 1), it) if reverse else it

    with b.loop(0, length, hint="iter") as it:
        for src, dst, outer, inner, rev in slices:
            _strided(b, dst, src, outer, length, inner, position(it, rev), into_slice=False)
        for s in _lower_body(ctx, body):
            b.emit(s)
        scan_copies = []
        for k, (out, v) in enumerate(zip(node.outputs[n_state:], body.outputs[n_state:])):
            def emit(out: Value = out, v: Value = v, k: int = k, it: Var = it) -> None:
                e = tuple(v.type.shape)
                a = int(out_axes[k]) % (len(e) + 1)
                _strided(b, ctx.buf(out), ctx.buf(v), math.prod(e[:a]), length,
                         math.prod(e[a:]), position(it, bool(out_dirs[k])), into_slice=True)
            scan_copies.append(emit)
        _update_state(ctx, b, states, body.outputs[:n_state], scan_copies)
    ctx.kernel("scan", b.body)


# A Loop or Scan is a host op (`if_loop_scan`) unless these say it compiles natively.
NATIVE_WHEN[("", "Loop")] = loop_native
NATIVE_WHEN[("", "Scan")] = scan_native
