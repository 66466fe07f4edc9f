"""Native code for tree ensembles: a walk over node records, interleaved across lanes.

The trees are data, not code: their node records (`tree_layout`: 16 bytes a node, preorder),
leaf weights, roots and depths are constant buffers, and one small kernel walks them. Compile
time is therefore the same for 5 trees or 5,000 (no per-tree code, no giant function).

Algorithm (kernel `trees`):
1) rows are cut into blocks of R rows, blocks run in parallel (the worker pool; one block
   runs in the calling thread);
2) trees, sorted by depth and padded with one-leaf trees, are cut into groups of G; a group's
   lanes are its (row, tree) pairs, R x G of them, each holding a node index in a per-block
   lane array;
3) every lane starts at its tree's root and takes `depth` steps (the group's deepest tree):
   `x = X[row, feature]`, `go = x <= threshold` (or <, == per the node's mode; a NaN x takes
   the node's NaN bit), next node = record word 1 + go. Leaves are their own children, so
   extra steps stay on the leaf. The lanes are independent, so the CPU overlaps their load
   chains instead of waiting on one walk at a time (a single row still has G lanes);
4) each lane adds its leaf's weights (a dense [nodes, targets] table) to the row's
   accumulator (float64); MIN/MAX aggregates take min/max instead.
Every loop but the depth loop has a constant trip count, so LLVM unrolls the lane loops.
Kernel `finish` (rows in parallel) adds base values, applies the post transform and, for
classifiers, the label (see `tree_ops` for the conventions).
Specialisation: the mode test is emitted only for modes the forest has, and the NaN test only
when some node sends NaN to its true child.
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit.errors import InputError
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Operand, i64
from onnxjit.ir.ops.ml import forest as F
from onnxjit.ir.ops.ml import tree_layout
from onnxjit.ir.ops.ml.post import post_row
from onnxjit.ir.ops.ml.tree_info import classifier_info, forest_of, post_name
from onnxjit.ir.types import DType

F64 = DType.DOUBLE


def _shape_rf(shape: tuple) -> tuple[int, int]:
    return (1, int(shape[0])) if len(shape) == 1 else (int(shape[0]), int(shape[1]))


#: trees per group (one row, many rows) and rows per block: measured on the 500-tree
#: benchmark (`onnxjit/bench/trees.py`)
GROUP = (32, 32)
ROWS = 4


def block_sizes(n_rows: int, n_trees: int) -> tuple[int, int]:
    """(rows per block R, trees per group G): enough lanes to hide load latency, few enough
    that a block's lane array stays in L1."""
    g = min(n_trees, GROUP[0] if n_rows == 1 else GROUP[1])
    r = 1 if n_rows == 1 else min(ROWS, n_rows)
    return max(r, 1), max(g, 1)


def lower_trees(ctx, node: Node) -> None:
    f, _ = forest_of(node)
    xb = ctx.buf(node.inputs[0])
    n, nf = _shape_rf(xb.shape)
    if f.n_features_used > nf:
        raise InputError(f"node '{node.name}' ({node.op}): input X has {nf} features but the "
                         f"trees read feature {f.n_features_used - 1}")
    nt = f.n_targets
    r_blk, _ = block_sizes(n, len(f.roots))
    acc = ctx.scratch("tree_acc", F64, (max(math.ceil(n / r_blk) * r_blk, 1), nt))
    if n > 0:
        _walk_kernel(ctx, f, xb, acc, n, nf)
        _finish_kernel(ctx, node, f, acc, n)


def _layout(f: F.Forest, g: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(roots in walk order, padded to a multiple of g; depth of each group of g trees;
    padding trees). Trees are sorted by depth so a group's walk wastes few steps on trees
    already at their leaves (the sum is float64, so its order does not show in a float32
    result); a padding tree is one extra leaf node holding the aggregate's neutral element."""
    order = np.argsort(f.depth, kind="stable")
    roots, depth = f.roots[order], f.depth[order]
    pad = (-len(roots)) % g
    roots = np.concatenate([roots, np.full(pad, len(f.true_child), dtype=np.int64)])
    depth = np.concatenate([depth, np.zeros(pad, dtype=np.int64)])
    return roots, depth.reshape(-1, g).max(axis=1), pad


def _records(ctx, f: F.Forest, roots: np.ndarray):
    """Constant buffers: node records (as i32 words and as thresholds), leaf weights, roots
    in walk order (a padding root is one extra leaf holding the aggregate's neutral value)."""
    real = roots < len(f.true_child)
    rec, w, new_roots = tree_layout.preorder(f, roots[real])
    pad = len(rec)
    leaf = np.zeros((1, rec.shape[1]), np.int32)
    leaf[0, 1:3] = pad
    if f.thr_dtype == np.float64:
        leaf[0, 4:6] = np.array([np.nan]).view(np.int32)
    else:
        leaf[0, 3] = np.array([np.nan], np.float32).view(np.int32)[0]
    neutral = {"MIN": math.inf, "MAX": -math.inf}.get(f.aggregate, 0.0)
    rec = np.concatenate([rec, leaf])
    w = np.concatenate([w, np.full((1, f.n_targets), neutral)])
    walk_roots = np.full(len(roots), pad, dtype=np.int32)
    walk_roots[real] = new_roots
    words = ctx.constant("tree_nodes", rec.reshape(-1))
    thr_dt = DType.DOUBLE if f.thr_dtype == np.float64 else DType.FLOAT
    return (words, ctx.reinterpret(words, thr_dt, "tree_thresholds"),
            ctx.constant("tree_weights", w.astype(np.float64)),
            ctx.constant("tree_roots", walk_roots))


def _walk_kernel(ctx, f: F.Forest, xb, acc, n: int, nf: int) -> None:
    nt = f.n_targets
    r_blk, g = block_sizes(n, len(f.roots))
    n_blocks = math.ceil(n / r_blk)
    roots, depths, _ = _layout(f, g)
    words, thr, wts, roots_c = _records(ctx, f, roots)
    double = f.thr_dtype == np.float64
    rw = tree_layout.RECORD_WORDS[double]  # record size in i32 words
    thr_words = 2 if double else 1  # threshold size in i32 words
    thr_at = 2 if double else 3  # threshold's index in its record, in thresholds
    depth_c = ctx.constant("tree_group_depth", depths)
    inner = f.true_child != np.arange(len(f.mode))
    modes = sorted(set(f.mode[inner].tolist())) or [F.LE]
    any_nan = bool(f.nan_true[inner].any())
    lanes = ctx.workspace("tree_lanes", DType.INT32, n_blocks * r_blk * g)
    neutral = {"MIN": math.inf, "MAX": -math.inf}.get(f.aggregate, 0.0)
    combine = {"MIN": "min", "MAX": "max"}.get(f.aggregate, "add")

    # Every loop but the depth one has a constant trip count (LLVM unrolls the lane loops):
    # the last block's rows past n read row n - 1 and accumulate into padding rows of `acc`
    # that nothing reads.
    b = Builder()
    # one block (a single row): no trip through the worker pool
    with b.loop(0, n_blocks, parallel=n_blocks > 1, hint="blk") as blk:
        r0 = b.imul(blk, r_blk)
        lane0 = b.imul(blk, r_blk * g)
        with b.loop(0, r_blk * nt, hint="a") as a:
            b.store(acc, b.iadd(b.imul(r0, nt), a), const(neutral, F64))
        with b.loop(0, len(depths), hint="grp") as grp:
            t0 = b.imul(grp, g)
            # 1) every lane at its tree's root
            with b.loop(0, r_blk, hint="r") as r:
                lr = b.iadd(lane0, b.imul(r, g))
                with b.loop(0, g, hint="j") as j:
                    b.store(lanes, b.iadd(lr, j), b.load(roots_c, b.iadd(t0, j)))
            # 2) `depth` steps of every lane
            depth = b.load(depth_c, grp, hint="depth")
            with b.loop(0, depth, hint="d"):
                with b.loop(0, r_blk, hint="r") as r:
                    lr = b.iadd(lane0, b.imul(r, g))
                    row = b.op("min", b.iadd(r0, r), i64(n - 1), hint="row")
                    xrow = b.imul(row, nf)
                    with b.loop(0, g, hint="j") as j:
                        li = b.iadd(lr, j)
                        nd32 = b.load(lanes, li, hint="node")
                        nd = b.cast(nd32, DType.INT64)
                        at = b.imul(nd, rw)
                        packed = b.load(words, at, hint="packed")
                        t = b.load(thr, b.iadd(b.imul(nd, rw // thr_words), i64(thr_at)))
                        fi = b.op("and", packed, const(tree_layout.FEATURE_MASK, DType.INT32))
                        x = b.load(xb, b.iadd(xrow, b.cast(fi, DType.INT64)))
                        go = _test(b, b.cast(x, t.dtype), t, modes, any_nan, packed)
                        # the child is word 1 + go: an address, not a select (tree_layout)
                        child = b.iadd(b.iadd(at, i64(1)), b.cast(go, DType.INT64))
                        nxt = b.load(words, child, hint="next")
                        b.store(lanes, li, nxt)
            # 3) leaves into the accumulators
            with b.loop(0, r_blk, hint="r") as r:
                lr = b.iadd(lane0, b.imul(r, g))
                arow = b.imul(b.iadd(r0, r), nt)
                with b.loop(0, g, hint="j") as j:
                    leaf = b.cast(b.load(lanes, b.iadd(lr, j), hint="leaf"), DType.INT64)
                    wrow = b.imul(leaf, nt)
                    with b.loop(0, nt, hint="k") as k:
                        ai = b.iadd(arow, k)
                        w = b.load(wts, b.iadd(wrow, k))
                        b.store(acc, ai, b.op(combine, b.load(acc, ai), w))
    ctx.kernel("trees", b.body)


def _test(b: Builder, x: Operand, t: Operand, modes: list[int], any_nan: bool,
          packed: Operand) -> Operand:
    """The bool "go to the true child" for feature value x against threshold t; the mode
    and NaN rule are bits of the node's packed word (`tree_layout`)."""
    ops = {F.LE: "le", F.LT: "lt", F.EQ: "eq"}
    go = b.op(ops[modes[0]], x, t)
    if len(modes) > 1:
        m = b.op("and", packed, const(3 << tree_layout.MODE_SHIFT, DType.INT32), hint="mode")
        for mode in modes[1:]:
            hit = b.op("eq", m, const(mode << tree_layout.MODE_SHIFT, DType.INT32))
            go = b.op("select", hit, b.op(ops[mode], x, t), go)
    if any_nan:
        bit = b.op("and", packed, const(tree_layout.NAN_BIT, DType.INT32))
        go = b.op("select", b.op("isnan", x), b.op("ne", bit, const(0, DType.INT32)), go)
    return go


def _finish_kernel(ctx, node: Node, f: F.Forest, acc, n: int) -> None:
    nt = f.n_targets
    b = Builder()
    minmax = f.aggregate in ("MIN", "MAX")
    if node.op != "TreeEnsembleClassifier":
        yb = ctx.buf(node.outputs[0])
        base = None if f.base_values is None else \
            ctx.constant("tree_base", _base(f.base_values, nt))
        with b.loop(0, n, parallel=n > 64, hint="row") as row:
            arow = b.imul(row, nt)

            def load(k: Operand) -> Operand:
                v = b.load(acc, b.iadd(arow, k))
                if minmax:
                    v = b.op("select", b.op("eq", b.op("abs", v), const(math.inf, F64)),
                             const(0.0, F64), v)
                if base is not None:
                    v = b.op("add", v, b.load(base, k))
                return v

            post_row(b, load, lambda k, v: b.store(yb, b.iadd(arow, k), b.cast(v, yb.dtype)),
                     nt, post_name(node))
        ctx.kernel("tree_finish", b.body)
        return
    _finish_classifier(ctx, b, node, f, acc, n)


def _base(base: np.ndarray, nt: int) -> np.ndarray:
    out = np.zeros(nt)
    out[:min(nt, len(base))] = base[:nt]
    return out


def _finish_classifier(ctx, b: Builder, node: Node, f: F.Forest, acc, n: int) -> None:
    cls = classifier_info(node)
    lab_b, z_b = ctx.buf(node.outputs[0]), ctx.buf(node.outputs[1])
    nt = f.n_targets
    labels = ctx.constant("tree_labels", np.array(cls.labels, dtype=np.int64))
    with b.loop(0, n, parallel=n > 64, hint="row") as row:
        arow = b.imul(row, nt)
        zrow = b.imul(row, 2 if cls.binary and cls.column == 0 else nt)
        if cls.binary and cls.column == 0:
            s = b.op("add", b.load(acc, arow), const(cls.base, F64), hint="s")
            cut = 0.5 if cls.all_positive else 0.0
            pos = b.op("gt", s, const(cut, F64))
            if cls.all_positive:
                z0, z1 = b.op("sub", const(1.0, F64), s), s
            elif cls.post == "LOGISTIC":
                z0, z1 = b.op("sigmoid", b.op("neg", s)), b.op("sigmoid", s)
            else:
                z0, z1 = b.op("neg", s), s
            b.store(z_b, zrow, b.cast(z0, DType.FLOAT))
            b.store(z_b, b.iadd(zrow, i64(1)), b.cast(z1, DType.FLOAT))
            idx = b.op("select", pos, i64(1), i64(0))
        else:
            base = ctx.constant("tree_base", _base(f.base_values, nt)) \
                if f.base_values is not None else None

            def load(k: Operand) -> Operand:
                v = b.load(acc, b.iadd(arow, k))
                return b.op("add", v, b.load(base, k)) if base is not None else v

            best = b.var(load(i64(0)), hint="best")
            idx = b.var(i64(0), hint="arg")
            with b.loop(1, nt, hint="k") as k:
                v = load(k)
                better = b.op("gt", v, best)
                b.assign(best, "select", better, v, best)
                b.assign(idx, "select", better, k, idx)
            post_row(b, load, lambda k, v: b.store(z_b, b.iadd(zrow, k), b.cast(v, z_b.dtype)),
                     nt, cls.post)
        b.store(lab_b, row, b.load(labels, idx))
    ctx.kernel("tree_finish", b.body)
