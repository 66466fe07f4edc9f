"""Strided views of `onnxjit.FusedMatMul` operands: batch-dim transposes read in place.

Three optional int-list attributes of a FusedMatMul (fold-transpose sets them):
- `a_perm` / `b_perm`: the operand is `Transpose(input, perm)` (applied before `trans_a` /
  `trans_b`), e.g. attention's Q = Transpose(Reshape(x, [B,S,H,D]), [0,2,1,3]);
- `y_perm`: the node's output is `Transpose(product, y_perm)`, the product's last dim kept
  last (`y_perm[-1] == rank-1`), e.g. attention's context written straight into [B,S,H,D].
The inputs and the output are contiguous buffers; a view only changes the strides at which
the product's operands are read or its result written, never the arithmetic: each output
element is the same sum over k, in the same order, as the plain MatMul.

Lowering (`lower_view_matmul`):
1) strides: an operand's logical dims (*batch, rows, cols) get the row-major strides of its
   stored input permuted by its perm, the last two swapped under trans; the product's dims get
   the output buffer's row-major strides permuted back through y_perm;
2) windows (`window`): a (rows, cols) pair of strides is a 2-D `Matmul` window when the column
   stride is 1 (plain, ld = row stride) or the row stride is 1 (read transposed, ld = column
   stride; A and B only). A size-1 dim's stride does not matter. A view whose window has no
   unit stride is not foldable (the pass checks `foldable` before building the node);
3) batch: each operand's batch dims broadcast numpy-style (stride 0 where it broadcasts);
   dims are coalesced, and a nest over them (outer loop parallel) emits one Matmul per batch
   element at offsets linear in the indexes, then the epilogue on that C window. The epilogue's
   "full" extras have the output's shape, so they are read at the same physical index; its
   "chan" extras (the output's last dim) are read at the window's column, which is the
   output's last-dim index because y_perm keeps the last dim last.
"""

from __future__ import annotations

from collections.abc import Sequence

from onnxjit.errors import CompileError, ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, coalesce, row_major_strides
from onnxjit.ir.loops import Buffer, Matmul, i64
from onnxjit.ir.types import sym_max

VIEW_ATTRS = ("a_perm", "b_perm", "y_perm")


def has_views(node: Node) -> bool:
    """Whether a FusedMatMul reads or writes any operand through a view."""
    return any(node.attr(k) is not None for k in VIEW_ATTRS)


def checked_perm(node: Node, attr: str, rank: int) -> tuple[int, ...] | None:
    """The node's `attr` perm, validated against `rank` (None when absent)."""
    perm = node.attr(attr)
    if perm is None:
        return None
    perm = tuple(int(p) for p in perm)
    if sorted(perm) != list(range(rank)):
        raise ModelError(f"{attr} {list(perm)} is not a permutation of {rank} dims", where=node)
    return perm


def permute(shape: Sequence, perm: Sequence[int] | None) -> tuple:
    return tuple(shape) if perm is None else tuple(shape[p] for p in perm)


def operand_view(shape: Sequence[int], perm: Sequence[int] | None, trans: bool
                 ) -> tuple[tuple[int, ...], list[int]]:
    """(logical shape, element strides) of an operand stored contiguously with `shape`."""
    lshape = list(permute(shape, perm))
    strides = list(permute(row_major_strides(shape), perm))
    if trans:
        lshape[-2:] = lshape[-1], lshape[-2]
        strides[-2:] = strides[-1], strides[-2]
    return tuple(lshape), strides


def _at_most_one(x: object) -> bool:
    """A size known to be 0 or 1 (a symbolic one may be anything)."""
    return isinstance(x, int) and x <= 1


def window(rows: object, cols: object, rs: object, cs: object) -> tuple[bool, object] | None:
    """(read transposed, leading dim) of the window with these sizes and strides, or None.
    Sizes and strides may be symbolic."""
    if _at_most_one(cols) or cs == 1:
        return False, rs if not _at_most_one(rows) else sym_max(cols, 1)  # type: ignore
    if _at_most_one(rows) or rs == 1:
        return True, cs if not _at_most_one(cols) else sym_max(rows, 1)  # type: ignore
    return None


def foldable(shape: Sequence[int], perm: Sequence[int]) -> bool:
    """Whether `Transpose(x, perm)` of a contiguous x of static `shape` is a MatMul operand
    view (rank >= 2, and one of its last two dims is contiguous)."""
    if len(shape) < 2:
        return False
    lshape, st = operand_view(shape, perm, False)
    return window(lshape[-2], lshape[-1], st[-2], st[-1]) is not None


def output_foldable(shape: Sequence[int], perm: Sequence[int]) -> bool:
    """Whether a product of static `shape` can be written through `Transpose(., perm)`."""
    return len(shape) >= 2 and perm[-1] == len(shape) - 1


def view_shape(node: Node, a: Sequence, b: Sequence) -> tuple:
    """The output shape of a FusedMatMul with views (operand shapes as stored)."""
    from onnxjit.ir.ops.linalg.matmul import matmul_shape

    if len(a) < 2 or len(b) < 2:
        raise ModelError("a FusedMatMul with views needs operands of rank >= 2", where=node)
    la, lb = list(permute(a, checked_perm(node, "a_perm", len(a)))), \
        list(permute(b, checked_perm(node, "b_perm", len(b))))
    if node.attr("trans_a", 0):
        la[-2:] = la[-1], la[-2]
    if node.attr("trans_b", 0):
        lb[-2:] = lb[-1], lb[-2]
    prod = matmul_shape(node, tuple(la), tuple(lb))
    assert prod is not None
    y_perm = checked_perm(node, "y_perm", len(prod))
    if y_perm is not None and y_perm[-1] != len(prod) - 1:
        raise ModelError(f"y_perm {list(y_perm)} must keep the last dim last", where=node)
    return permute(prod, y_perm)


def _batch_strides(lshape: Sequence[int], strides: Sequence[int], batch: Sequence[int]
                   ) -> list[int]:
    """An operand's strides over the broadcast `batch` (0 where it broadcasts)."""
    own = list(lshape[:-2])
    pad = len(batch) - len(own)
    return [0] * pad + [0 if n == 1 else s for n, s in zip(own, strides[:-2])]


def lower_view_matmul(b: Builder, node: Node, y: Buffer, a: Buffer, bm: Buffer, epilogue
                      ) -> None:
    """Emit the FusedMatMul `node` (with views) into `b`; `epilogue` is an `Epilogue` or None."""
    ta, tb = bool(node.attr("trans_a", 0)), bool(node.attr("trans_b", 0))
    alpha = float(node.attr("alpha", 1.0))
    if len(a.shape) < 2 or len(bm.shape) < 2:
        raise CompileError("a FusedMatMul with views needs operands of rank >= 2", where=node)
    la, sa = operand_view(a.shape, checked_perm(node, "a_perm", len(a.shape)), ta)
    lb, sb = operand_view(bm.shape, checked_perm(node, "b_perm", len(bm.shape)), tb)
    m, k, n = la[-2], la[-1], lb[-1]
    if k == 0:
        raise CompileError("FusedMatMul with K = 0 (the pass must not build it)", where=node)
    from onnxjit.ir.ops.linalg.matmul import batch_shape

    batch = batch_shape(la[:-2], lb[:-2])
    prod = (*batch, m, n)
    y_perm = checked_perm(node, "y_perm", len(prod)) or tuple(range(len(prod)))
    if permute(prod, y_perm) != tuple(y.shape):
        raise CompileError(f"FusedMatMul output {list(y.shape)} is not its product "
                           f"{list(prod)} permuted by {list(y_perm)}", where=node)
    sy = [0] * len(prod)
    for i, st in enumerate(row_major_strides(y.shape)):
        sy[y_perm[i]] = st
    wa, wb, wc = window(m, k, sa[-2], sa[-1]), window(k, n, sb[-2], sb[-1]), \
        window(m, n, sy[-2], sy[-1])
    if wa is None or wb is None or wc is None or wc[0]:
        raise CompileError("a FusedMatMul view has no contiguous dim in its 2-D window",
                           where=node)
    shape, (cs, as_, bs) = coalesce(batch, [_batch_strides(prod, sy, batch),
                                            _batch_strides(la, sa, batch),
                                            _batch_strides(lb, sb, batch)])
    with b.nest(shape, parallel_outer=True) as idx:
        c_off, a_off, b_off = (b.linear(idx, st) for st in (cs, as_, bs))
        b.emit(Matmul(y, c_off, wc[1], a, a_off, wa[1], bm, b_off, wb[1], m, n, k,
                      a_trans=wa[0], b_trans=wb[0], alpha=alpha))
        if epilogue is not None:
            epilogue.emit(b, c_off, wc[1], m, n, i64(0))
