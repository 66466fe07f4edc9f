"""Native code for tree ensembles: a flattened node-array walk, interleaved across lanes.

The trees are data, not code: the `Forest` arrays (feature, threshold, children, leaf
weights, roots, depths) are constant buffers, and one small kernel walks them. Compile time is
therefore the same for 5 trees or 5,000 (no per-tree code, no giant function).

Algorithm (kernel `trees`):
1) rows are cut into blocks of R rows, blocks run in parallel (the worker pool);
2) trees are cut into groups of G consecutive trees; a group's lanes are its (row, tree)
   pairs, R x G of them, each holding a node index in a per-block lane array;
3) every lane starts at its tree's root and takes `depth` steps (the group's deepest tree):
   `x = X[row, feature[n]]`, `go = x <= threshold[n]` (or <, == per the node's mode; a NaN x
   takes `nan_true[n]`), `n = go ? true_child[n] : false_child[n]`. Leaves are their own
   children, so extra steps stay on the leaf. The lanes are independent, so the CPU overlaps
   their load chains instead of waiting on one walk at a time (a single row still has G
   lanes);
4) each lane adds its leaf's weights (a dense [nodes, targets] table) to the row's
   accumulator (float64), in tree order; MIN/MAX aggregates take min/max instead.
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
from onnxjit.ir.ops.ml.post import post_row
from onnxjit.ir.ops.ml.tree_ops import classifier_info, forest_of, post_name
from onnxjit.ir.types import DType

F64 = DType.DOUBLE


def _shape_rf(shape: tuple) -> tuple[int, int]:
    return (1, int(shape[0])) if len(shape) == 1 else (int(shape[0]), int(shape[1]))


def block_sizes(n_rows: int, n_trees: int) -> tuple[int, int]:
    """(rows per block R, trees per group G): enough lanes to hide load latency, few enough
    that a block's lane array stays in L1."""
    g = min(n_trees, 32 if n_rows == 1 else 16)
    r = 1 if n_rows == 1 else min(8, n_rows)
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


def _tables(ctx, f: F.Forest, pad: int) -> dict:
    """The node arrays as constant buffers (plus the padding leaf when there is one)."""
    k = 1 if pad else 0
    me = np.arange(len(f.true_child), len(f.true_child) + k)
    neutral = {"MIN": math.inf, "MAX": -math.inf}.get(f.aggregate, 0.0)
    return {
        "feat": ctx.constant("tree_feature", np.concatenate([f.feature, [0] * k]).astype(
            np.int32)),
        "thr": ctx.constant("tree_threshold", np.concatenate([f.threshold, [0] * k]).astype(
            f.thr_dtype)),
        "tc": ctx.constant("tree_true", np.concatenate([f.true_child, me]).astype(np.int32)),
        "fc": ctx.constant("tree_false", np.concatenate([f.false_child, me]).astype(np.int32)),
        "w": ctx.constant("tree_weights", np.concatenate(
            [f.weights, np.full((k, f.n_targets), neutral)]).astype(np.float64)),
        "mode": ctx.constant("tree_mode", np.concatenate([f.mode, [0] * k]).astype(np.int32)),
        "nan": ctx.constant("tree_nan", np.concatenate([f.nan_true, [False] * k]).astype(
            np.int32)) if f.nan_true.any() else None,
    }


def _walk_kernel(ctx, f: F.Forest, xb, acc, n: int, nf: int) -> None:
    nt = f.n_targets
    r_blk, g = block_sizes(n, len(f.roots))
    n_blocks = math.ceil(n / r_blk)
    thr_dt = DType.DOUBLE if f.thr_dtype == np.float64 else DType.FLOAT
    roots, depths, pad = _layout(f, g)
    tb = _tables(ctx, f, pad)
    roots_c = ctx.constant("tree_roots", roots.astype(np.int32))
    depth_c = ctx.constant("tree_group_depth", depths)
    modes = sorted(set(f.mode[f.true_child != np.arange(len(f.mode))].tolist())) or [F.LE]
    mode_c = tb["mode"] if len(modes) > 1 else None
    lanes = ctx.workspace("tree_lanes", DType.INT32, n_blocks * r_blk * g)
    neutral = {"MIN": math.inf, "MAX": -math.inf}.get(f.aggregate, 0.0)
    combine = {"MIN": "min", "MAX": "max"}.get(f.aggregate, "add")

    # Every loop but the depth one has a constant trip count (LLVM unrolls the lane loops):
    # the last block's rows past n read row n - 1 and accumulate into padding rows of `acc`
    # that nothing reads.
    b = Builder()
    with b.loop(0, n_blocks, parallel=True, hint="blk") as blk:
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
                        nd = b.cast(b.load(lanes, li, hint="node"), DType.INT64)
                        fi = b.cast(b.load(tb["feat"], nd), DType.INT64)
                        x = b.cast(b.load(xb, b.iadd(xrow, fi)), thr_dt)
                        go = _test(b, x, b.load(tb["thr"], nd), modes, mode_c, tb["nan"], nd)
                        nxt = b.op("select", go, b.load(tb["tc"], nd), b.load(tb["fc"], nd))
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
                        w = b.load(tb["w"], b.iadd(wrow, k))
                        b.store(acc, ai, b.op(combine, b.load(acc, ai), w))
    ctx.kernel("trees", b.body)


def _test(b: Builder, x: Operand, t: Operand, modes: list[int], mode_c, nan_c,
          nd: Operand) -> Operand:
    """The bool "go to the true child" of node `nd` for feature value x."""
    ops = {F.LE: "le", F.LT: "lt", F.EQ: "eq"}
    go = b.op(ops[modes[0]], x, t)
    if mode_c is not None:
        m = b.load(mode_c, nd, hint="mode")
        for mode in modes[1:]:
            go = b.op("select", b.op("eq", m, const(mode, DType.INT32)), b.op(ops[mode], x, t),
                      go)
    if nan_c is not None:
        nan_go = b.op("ne", b.load(nan_c, nd), const(0, DType.INT32))
        go = b.op("select", b.op("isnan", x), nan_go, go)
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
