"""prepack-weights: pack constant B operands of matrix products once, at compile time.

The tiled GEMM kernel (`codegen/matmul_kernel.py`) reads B in column panels of NR columns,
each a k x NR row-major block; for a B it packs a copy of every depth block on every call (and
again in every row block of a product split over threads). When B is a weight, that copy can
be made here, once, and stored with the other constants (passed by pointer, kept in the disk
cache).

Contract: loop IR -> loop IR, before plan-memory; requires nothing else. Ensures that every
f32/f64 Matmul large enough for the tiled kernel (`codegen.kernel_shapes.packs_b`) that reads a
constant window at a constant offset reads a packed constant instead (`Matmul.b_packed`, ldb =
the host's panel width, `codegen.kernel_shapes.panel_width`), which the tiled kernel then reads
whatever m is. Products that packed B per call anyway (m >= PACK_MIN_M) give bit-identical
results; smaller ones move from the forms reading B in place to the tiled kernel.

Algorithm:
1) walk every kernel's statements. A Matmul whose constant B' is already one panel (ldb == n,
   n whole vectors and at most the host's panel width: an RNN's recurrent weights, laid out
   per block of hidden units by its lowering) is marked packed in place, whatever its offset:
   k*n contiguous elements at b_off are their own packed form. Only from PACK_MIN_M rows,
   where the product packed B per call (the same sums); under it another form reads B in
   place, and stays. For any other eligible Matmul, take B' (k x n: the window, transposed if
   `b_trans`) from the root constant's array, pack it (`loops.pack_panels`) into a new const
   buffer, shared by Matmuls reading the same window, and point the Matmul at it;
2) drop the const buffers (and their views) no statement reads any more (packed here, or
   replaced by a lowering's own form of them), and renumber the const slots densely in their
   old order.
Other products with a varying B offset (batched products) are left alone.
"""

from __future__ import annotations

import numpy as np

from onnxjit.ir.loops import Buffer, Const, Load, Matmul, Program, Store, pack_panels, walk
from onnxjit.passes import PassContext, PassResult

name = "prepack-weights"
level = "loops"

#: False restores packing B on every call (the generated code of before this pass)
PREPACK = True
#: a constant B already laid out as one panel is read in place, whatever its offset (step 1).
#: Measured, two threads: LSTM seq 16, batch 32, hidden 512 1.11x (each step packed its 4 MB
#: of recurrent weights again); under PACK_MIN_M rows (the bench LSTM's 8) the tiled kernel
#: was 1-3% slower than the form it replaced, so those are left alone
IN_PLACE = True


def _b_matrix(s: Matmul) -> np.ndarray:
    """B' (k x n) of `s`, read from its constant root's array."""
    root = s.b.root()
    flat = np.ascontiguousarray(root.data).reshape(-1)  # type: ignore[union-attr]
    rows, cols = (s.n, s.k) if s.b_trans else (s.k, s.n)
    start = int(s.b_off.value)  # type: ignore[union-attr]
    win = np.lib.stride_tricks.as_strided(flat[start:], (rows, cols),
                                          (s.ldb * flat.itemsize, flat.itemsize),
                                          writeable=False)
    return win.T if s.b_trans else win


def _eligible(s: Matmul) -> bool:
    from onnxjit.codegen.kernel_shapes import packs_b

    root = s.b.root()
    return (not s.b_packed and root.kind == "const" and root.data is not None
            and isinstance(s.b_off, Const) and isinstance(s.k, int) and isinstance(s.n, int)
            and isinstance(s.ldb, int) and packs_b(s))


def _one_panel(s: Matmul) -> bool:
    """Whether `s` reads a constant B' that is already one packed panel: k rows of n
    contiguous columns (ldb == n), n whole vectors and at most the host's panel width."""
    from onnxjit.codegen.kernel_shapes import PACK_MIN_M, packs_b, panel_width, tile_shape

    isz = s.b.dtype.itemsize
    if not all(isinstance(x, int) for x in (s.m, s.n, s.k, s.ldb)):
        return False
    return (not s.b_packed and not s.b_trans and s.b.root().kind == "const" and s.ldb == s.n
            and s.n % tile_shape(isz)[0] == 0 and s.n <= panel_width(isz)
            and s.m >= PACK_MIN_M and packs_b(s))


def run(program: Program, ctx: PassContext) -> PassResult:
    if not PREPACK:
        return PassResult(program, False)
    from onnxjit.codegen.kernel_shapes import panel_width

    changed = False
    names = {b.name for b in program.buffers}
    next_slot = len(program.consts)
    packed: dict[tuple, Buffer] = {}
    for kernel in program.kernels:
        for s in walk(kernel.body):
            if not isinstance(s, Matmul):
                continue
            if IN_PLACE and _one_panel(s):
                s.b_packed, changed = True, True
                continue
            if not _eligible(s):
                continue
            width = panel_width(s.b.dtype.itemsize)
            off = int(s.b_off.value)  # type: ignore[union-attr]
            key = (id(s.b.root()), s.b.dtype, off, s.ldb, s.b_trans, s.k, s.n, width)
            buf = packed.get(key)
            if buf is None:
                data = pack_panels(_b_matrix(s), width)
                hint = f"{s.b.root().name}_packed"
                bname, q = hint, 1
                while bname in names:
                    bname, q = f"{hint}_{q}", q + 1
                names.add(bname)
                buf = Buffer(bname, s.b.dtype, (data.size,), "const", slot=next_slot, data=data)
                next_slot += 1
                program.buffers.append(buf)
                packed[key] = buf
            s.b, s.b_off, s.ldb, s.b_trans, s.b_packed = buf, Const(0, s.b_off.dtype), width, \
                False, True
    dropped = _drop_unused_consts(program)
    return PassResult(program, changed or bool(packed) or dropped)


def _drop_unused_consts(program: Program) -> bool:
    """Drop the const buffers no statement reads (packed here, or replaced by a lowering's
    repacked form such as `linalg.strassen`'s right operands); whether any was."""
    used: set[int] = set()
    for kernel in program.kernels:
        for s in walk(kernel.body):
            bufs = (s.buf,) if isinstance(s, (Load, Store)) else \
                s.buffers() if isinstance(s, Matmul) else ()
            for b in bufs:
                while b is not None:
                    used.add(id(b))
                    b = b.base
    dead = {id(b) for b in program.buffers if b.kind == "const" and id(b) not in used}
    if not dead:
        return False
    program.buffers = [b for b in program.buffers
                       if id(b) not in dead and id(b.root()) not in dead]
    for slot, b in enumerate(program.consts):
        b.slot = slot
    return True
