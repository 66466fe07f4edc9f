"""Native code for tree ensembles: a walk over node records, interleaved across lanes.

The trees are data, not code: their node records (`tree_layout`: 8 bytes a node, preorder),
leaf weights, roots and depths are constant buffers, and one small kernel walks them. Compile
time is therefore the same for 5 trees or 5,000 (no per-tree code, no giant function).

Algorithm (kernel `trees`):
1) rows are cut into chunks of C rows (C * features * 4 bytes of X stay in L1), chunks run
   in parallel (the worker pool). The row count may be symbolic (one program for every batch
   size): nothing but the chunk loop's bound and the last chunk's size depends on it, and a
   single-row call is one chunk of one row. With PART_GROUPS groups of trees or more (step
   2), the groups are also cut into PARTS parts: a task is a (chunk, part) pair with its own
   accumulators, so a single row walks its trees on two threads (as onnxruntime splits the
   trees of one row), and `tree_finish` combines the parts;
2) trees, sorted by depth and padded with one-leaf trees, are cut into groups of G; a chunk
   runs group after group, each over all its rows (blocks of R rows, then the rows left one
   at a time), so a group's records are read from L1 after its first rows; a block's lanes
   are its (row, tree) pairs, R x G of them, each holding a node index in a lane array;
3) every lane starts at its tree's root and takes `cut` steps: `x = X[row, feature]`,
   `go = x <= threshold` (or <, == per the node's mode; a NaN x takes the node's NaN bit),
   next node = node + 1 if go, else node + the record's false distance (wide records: record
   word 1 + go). Leaves are their own false children and never go true, so extra steps stay
   on the leaf. The lanes are independent, so the CPU overlaps their load chains instead of
   waiting on one walk at a time (a single row still has G lanes). `cut` is the group's
   depth (its deepest tree) when the trees are balanced; for trees grown leaf-wise (LightGBM:
   63 leaves reach depth 15-25 while a row's path is ~5-8 nodes) it is the group's mean leaf
   depth less CUT_SLACK, and a second phase gathers the lanes not yet on a leaf (a leaf's word
   has its sign bit set) into contiguous lists (lane, row offset, node), branch-free, then
   steps the list like the lanes (a loop that vectorizes as the first phase's does) and after
   each step writes the nodes back to their lanes and compacts the list to the lanes still
   inside: most lanes no longer spend half their steps standing on a leaf, and the few deep
   paths cost only their own steps;
4) each lane adds its leaf's weights (a dense [nodes, targets] table) to the row's
   accumulator (float64); MIN/MAX aggregates take min/max instead.
The step is branch-free (its select is a cmov: loop-IR selects are unpredictable), and the
kernel may use gathers (`Kernel.gather`): a block's lane loop vectorizes, 16 lanes a step with
three gathers (record word, threshold, x), 2-3x faster than scalar steps on 10,000 rows.
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
from onnxjit.ir.loops import Operand, Size, i64, size_operand
from onnxjit.ir.ops.ml import forest as F
from onnxjit.ir.ops.ml import tree_layout
from onnxjit.ir.ops.ml.post import post_row
from onnxjit.ir.ops.ml.tree_info import classifier_info, forest_of, post_name
from onnxjit.ir.types import DType, Sym

F64 = DType.DOUBLE


def _shape_rf(shape: tuple) -> tuple[Size, int]:
    """(rows, features) of X; the rows may be symbolic, the features must not (a `TypeError`
    sends the node to the shape-specialised path)."""
    n, nf = (1, shape[0]) if len(shape) == 1 else (shape[0], shape[1])
    return (n if isinstance(n, Sym) else int(n)), int(nf)


#: trees per group and rows per block: measured on the 500-tree benchmark
#: (`onnxjit/bench/trees.py`)
GROUP = 32
ROWS = 4
#: steps past a group's mean leaf depth before the second phase, in groups that have one
#: (the mean is below the deepest tree's depth; balanced trees walk their depth in one
#: phase). With the second phase stepping a compacted list (`_second_phase`), -2 against 0,
#: 10,000 rows on 2 threads, interleaved on a Zen 3 host: trained LightGBM regressor (500
#: trees, 63 leaves) 1.05-1.12x faster, binary classifier (300 trees) 1.03-1.3x, 3-class (200
#: trees) even, ExtraTrees 1.1-1.2x, the bench's 500-tree model 1.1-1.15x; XGBoost (depth
#: 6) and random forests unchanged (one phase). -1 and -3 were within noise of -2, -4 slower
CUT_SLACK = -2
#: tree parts: with at least PART_GROUPS groups, the groups are cut into PARTS halves, each a
#: parallel task with its own accumulators (combined by `tree_finish`), so a single row uses
#: both cores as onnxruntime does. Measured on a 900-tree LightGBM at one row, 2 threads, on
#: an Intel guest whose two vCPUs share one core's gather throughput: neutral (each half
#: 10-13 us, the whole walk 12 us on one thread); the gain needs two real cores
PARTS = 2
PART_GROUPS = 8
#: rows per chunk (a parallel task): every group of trees walks the whole chunk, so its
#: records are read from L1 after the first rows; the chunk's X rows should stay there too
CHUNK_X_BYTES = 16384
CHUNK_MAX = 256


def lower_trees(ctx, node: Node) -> None:
    f, _ = forest_of(node)
    xb = ctx.buf(node.inputs[0])
    n, nf = _shape_rf(xb.shape)
    if f.n_features_used > nf:
        raise InputError(f"node '{node.name}' ({node.op}): input X has {nf} features but the "
                         f"trees read feature {f.n_features_used - 1}")
    if isinstance(n, int) and n == 0:
        return
    parts = _parts(f)
    acc = ctx.scratch("tree_acc", F64, (parts, n, f.n_targets))
    _walk_kernel(ctx, f, xb, acc, n, nf, parts)
    _finish_kernel(ctx, node, f, _PartSum(acc, n, f, parts), n)


def _group_size(f: F.Forest) -> int:
    """Trees per group: GROUP, or all of a smaller forest."""
    return max(min(len(f.roots), GROUP), 1)


def _combine(f: F.Forest) -> str:
    """The op adding a tree's leaf value (or another part's sum) to an accumulator."""
    return {"MIN": "min", "MAX": "max"}.get(f.aggregate, "add")


def _parts(f: F.Forest) -> int:
    """Tree parts: PARTS when the forest has enough groups to be worth a second task."""
    return PARTS if -(-len(f.roots) // _group_size(f)) >= PART_GROUPS else 1


class _PartSum:
    """Loads of a row's accumulator summed over the tree parts (combined with the aggregate:
    min/max for MIN/MAX)."""

    def __init__(self, acc, n: Size, f: F.Forest, parts: int):
        self.acc, self.n, self.nt, self.parts = acc, n, f.n_targets, parts
        self.combine = _combine(f)

    def load(self, b: Builder, at: Operand) -> Operand:
        v = b.load(self.acc, at)
        for p in range(1, self.parts):
            part = b.imul(size_operand(self.n), self.nt * p)
            v = b.op(self.combine, v, b.load(self.acc, b.iadd(part, at)))
        return v


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
    neutral = {"MIN": math.inf, "MAX": -math.inf}.get(f.aggregate, 0.0)
    lay = tree_layout.preorder(f, roots[real], neutral)
    walk_roots = np.full(len(roots), len(lay.records) - 1, dtype=np.int32)
    walk_roots[real] = lay.roots
    words = ctx.constant("tree_nodes", lay.records.reshape(-1))
    thr_dt = DType.DOUBLE if f.thr_dtype == np.float64 else DType.FLOAT
    return (lay, words, ctx.reinterpret(words, thr_dt, "tree_thresholds"),
            ctx.constant("tree_weights", lay.weights.astype(np.float64)),
            ctx.constant("tree_roots", walk_roots))


class _Walk:
    """What every block's walk reads: the constant buffers and the forest's specialisation."""

    def __init__(self, ctx, f: F.Forest, xb, acc, nf: int, g: int):
        roots, self.depths, _ = _layout(f, g)
        lay, self.words, self.thr, self.wts, self.roots = _records(ctx, f, roots)
        self.double = f.thr_dtype == np.float64
        self.rw, self.fbits = lay.words, lay.fbits  # record size in i32 words; compact?
        self.depth_c = ctx.constant("tree_group_depth", self.depths)
        cuts = _group_cuts(f, roots, g)  # CUT_SLACK only where the group has a second phase
        self.cuts = np.where(cuts < self.depths, np.maximum(cuts + CUT_SLACK, 1), self.depths)
        self.cut_c = ctx.constant("tree_group_cut", self.cuts)
        self.two_phase = bool((self.cuts < self.depths).any())
        inner = f.true_child != np.arange(len(f.mode))
        self.modes = sorted(set(f.mode[inner].tolist())) or [F.LE]
        self.any_nan = bool(f.nan_true[inner].any())
        self.neutral = {"MIN": math.inf, "MAX": -math.inf}.get(f.aggregate, 0.0)
        self.combine = _combine(f)
        self.acc0: Operand = i64(0)  # this task's part's first accumulator (`_walk_kernel`)
        self.xb, self.acc, self.nf, self.nt, self.g = xb, acc, nf, f.n_targets, g


def _group_cuts(f: F.Forest, roots: np.ndarray, g: int) -> np.ndarray:
    """The group's mean leaf depth, rounded up (leaf depths level by level from the roots,
    like `forest._depths`): where it is below the group's depth, the steps every lane takes
    (with CUT_SLACK) before the lanes still inside their trees are walked on alone."""
    leaf = f.true_child == np.arange(len(f.true_child))
    depth = np.zeros(len(leaf), dtype=np.int64)
    tree = np.full(len(leaf), -1)
    real = roots < len(leaf)
    frontier = roots[real]
    tree[frontier] = np.flatnonzero(real)
    level = 0
    while len(frontier) and level <= len(leaf):
        inner = frontier[~leaf[frontier]]
        kids = np.concatenate([f.true_child[inner], f.false_child[inner]])
        level += 1
        tree[kids] = np.concatenate([tree[inner], tree[inner]])
        depth[kids] = level
        frontier = kids
    on = leaf & (tree >= 0)
    sums = np.bincount(tree[on], depth[on], minlength=len(roots))
    counts = np.bincount(tree[on], minlength=len(roots))
    grp = np.arange(len(roots)) // g
    mean = np.bincount(grp, sums, minlength=len(roots) // g) / np.maximum(
        np.bincount(grp, counts, minlength=len(roots) // g), 1)
    return np.ceil(mean).astype(np.int64)


def _walk_kernel(ctx, f: F.Forest, xb, acc, n: Size, nf: int, parts: int) -> None:
    """(chunk, tree part) pairs in parallel; in a chunk, each group of trees of the part walks
    all its rows (blocks of ROWS rows, then the rows left one at a time) while the group's
    records stay in L1; a part adds into its own accumulators."""
    g = _group_size(f)
    w = _Walk(ctx, f, xb, acc, nf, g)
    c = _chunk_rows(nf)
    chunks = (n + (c - 1)) // c * parts
    per = ROWS * g  # lanes of one (chunk, part)
    ng = len(w.depths)
    if isinstance(n, int):  # the same lanes for a part of the rows every call (`workspace`)
        def lane_buf(hint: str, dt: DType):
            return ctx.workspace(hint, dt, max(chunks, 1) * per)
    else:
        def lane_buf(hint: str, dt: DType):
            return ctx.scratch(hint, dt, (chunks * per,))
    lanes = lane_buf("tree_lanes", DType.INT32)
    if w.two_phase:
        w.open, w.open_x = lane_buf("tree_open", DType.INT32), lane_buf("tree_open_x", DType.INT64)
        w.open_node = lane_buf("tree_open_node", DType.INT32)
    b = Builder()
    with b.loop(0, chunks, parallel=True, hint="task") as task:
        ch = b.op("div", task, i64(parts), hint="chunk") if parts > 1 else task
        r0 = b.imul(ch, c)
        cnt = b.op("min", i64(c), b.op("sub", size_operand(n), r0), hint="rows")
        lane0 = b.imul(task, per)
        if parts > 1:
            part = b.op("rem", task, i64(parts), hint="part")
            w.acc0 = b.imul(b.op("mul", part, size_operand(n)), w.nt)
            g_lo = b.op("div", b.imul(part, ng), i64(parts), hint="g_lo")
            g_hi = b.op("div", b.imul(b.iadd(part, i64(1)), ng), i64(parts), hint="g_hi")
        else:
            g_lo, g_hi = 0, ng
        with b.loop(0, b.imul(cnt, w.nt), hint="a") as a:
            b.store(w.acc, b.iadd(w.acc0, b.iadd(b.imul(r0, w.nt), a)), const(w.neutral, F64))
        blocks = b.op("div", cnt, i64(ROWS), hint="blocks")
        with b.loop(g_lo, g_hi, hint="grp") as grp:
            with b.loop(0, blocks, hint="blk") as blk:
                _walk_group(b, w, lanes, b.iadd(r0, b.imul(blk, ROWS)), ROWS, lane0, grp)
            with b.loop(b.imul(blocks, ROWS), cnt, hint="row") as row:
                _walk_group(b, w, lanes, b.iadd(r0, row), 1, lane0, grp)
    ctx.kernel("trees", b.body, gather=True)


def _chunk_rows(nf: int) -> int:
    """Rows per chunk: a multiple of ROWS whose X rows take about CHUNK_X_BYTES."""
    return max(ROWS, min(CHUNK_MAX, CHUNK_X_BYTES // (4 * nf)) // ROWS * ROWS)


def _walk_group(b: Builder, w: _Walk, lanes, r0: Operand, r_blk: int, lane0: Operand,
                grp: Operand) -> None:
    """Rows r0 .. r0 + r_blk - 1 through the trees of group `grp`, into their accumulators.
    Every loop but the depth one has a constant trip count, so LLVM unrolls the lane loops."""
    g, nt = w.g, w.nt
    t0 = b.imul(grp, g)
    # 1) every lane at its tree's root
    with b.loop(0, r_blk, hint="r") as r:
        lr = b.iadd(lane0, b.imul(r, g))
        with b.loop(0, g, hint="j") as j:
            b.store(lanes, b.iadd(lr, j), b.load(w.roots, b.iadd(t0, j)))
    # 2) `cut` steps of every lane, then the lanes still inside their trees alone
    cut = b.load(w.cut_c if w.two_phase else w.depth_c, grp, hint="cut")
    # rolled: the loop vectorizer makes it 16 lanes a step with gathers (unrolled, the SLP
    # vectorizer packed the lanes' loads into vectors one element at a time)
    with b.loop(0, cut, hint="d"), b.keep_rolled():
        with b.loop(0, r_blk, hint="r") as r:
            lr = b.iadd(lane0, b.imul(r, g))
            xrow = b.imul(b.iadd(r0, r), w.nf)
            with b.loop(0, g, hint="j") as j:
                _step(b, w, lanes, b.iadd(lr, j), xrow)
    if w.two_phase:
        _second_phase(b, w, lanes, r0, r_blk, lane0, grp)
    # 3) leaves into the accumulators
    with b.loop(0, r_blk, hint="r") as r:
        lr = b.iadd(lane0, b.imul(r, g))
        arow = b.iadd(w.acc0, b.imul(b.iadd(r0, r), nt))
        with b.loop(0, g, hint="j") as j:
            leaf = b.cast(b.load(lanes, b.iadd(lr, j), hint="leaf"), DType.INT64)
            wrow = b.imul(leaf, nt)
            with b.loop(0, nt, hint="k") as k:
                ai = b.iadd(arow, k)
                v = b.load(w.wts, b.iadd(wrow, k))
                b.store(w.acc, ai, b.op(w.combine, b.load(w.acc, ai), v))


def _step(b: Builder, w: _Walk, lanes, li: Operand, xrow: Operand) -> None:
    """One step of lane `li` (its row starts at element `xrow` of X)."""
    b.store(lanes, li, _next(b, w, b.load(lanes, li, hint="node"), xrow))


def _next(b: Builder, w: _Walk, nd32: Operand, xrow: Operand) -> Operand:
    """The node (i32) after node `nd32` for the row starting at element `xrow` of X."""
    thr_words = 2 if w.double else 1  # threshold size in i32 words
    thr_at = 1 if w.fbits is not None else 2 if w.double else 3  # in thresholds
    nd = b.cast(nd32, DType.INT64)
    at = b.imul(nd, w.rw)
    packed = b.load(w.words, at, hint="packed")
    t = b.load(w.thr, b.iadd(b.imul(nd, w.rw // thr_words), i64(thr_at)))
    fmask = tree_layout.FEATURE_MASK if w.fbits is None else (1 << w.fbits) - 1
    fi = b.op("and", packed, const(fmask, DType.INT32))
    x = b.load(w.xb, b.iadd(xrow, b.cast(fi, DType.INT64)))
    go = _test(b, b.cast(x, t.dtype), t, w.modes, w.any_nan, packed)
    if w.fbits is not None:  # true child: the next record; false: `distance` records on
        bits = b.op("and", packed, const(tree_layout.FEATURE_MASK, DType.INT32))
        dist = b.op("div", bits, const(1 << w.fbits, DType.INT32))  # a shift: bits >= 0
        hop = b.op("select", go, const(1, DType.INT32), dist, hint="hop")
        return b.op("add", nd32, hop)
    # the child is word 1 + go: an address, not a select (tree_layout)
    child = b.iadd(b.iadd(at, i64(1)), b.cast(go, DType.INT64))
    return b.load(w.words, child, hint="next")


def _second_phase(b: Builder, w: _Walk, lanes, r0: Operand, r_blk: int, lane0: Operand,
                  grp: Operand) -> None:
    """Gather the lanes not on a leaf into lists (lane, row offset, node; appended branch-free:
    always written, the count advances only for an open lane), then for the group's remaining
    depth: step every listed node (contiguous, so the loop vectorizes), then write each node
    back to its lane and keep in the list only those still inside their trees."""
    g = w.g
    count = b.var(i64(0), hint="open")
    with b.loop(0, r_blk, hint="r") as r:
        lr = b.iadd(lane0, b.imul(r, g))
        xrow = b.imul(b.iadd(r0, r), w.nf)
        with b.loop(0, g, hint="j") as j:
            li = b.iadd(lr, j)
            nd = b.load(lanes, li, hint="node")
            at = b.iadd(lane0, count)
            b.store(w.open, at, b.cast(li, DType.INT32))
            b.store(w.open_x, at, xrow)
            b.store(w.open_node, at, nd)
            b.assign(count, "add", count, b.cast(_inside(b, w, nd), DType.INT64))
    depth = b.load(w.depth_c, grp, hint="depth")
    cut = b.load(w.cut_c, grp, hint="cut")
    with b.loop(cut, depth, hint="d"):
        with b.loop(0, count, hint="k") as k, b.keep_rolled():
            at = b.iadd(lane0, k)
            b.store(w.open_node, at, _next(b, w, b.load(w.open_node, at),
                                           b.load(w.open_x, at)))
        kept = b.var(i64(0), hint="kept")
        with b.loop(0, count, hint="k") as k:
            at = b.iadd(lane0, k)
            nd, li = b.load(w.open_node, at), b.load(w.open, at)
            b.store(lanes, b.cast(li, DType.INT64), nd)
            to = b.iadd(lane0, kept)
            b.store(w.open, to, li)
            b.store(w.open_x, to, b.load(w.open_x, at))
            b.store(w.open_node, to, nd)
            b.assign(kept, "add", kept, b.cast(_inside(b, w, nd), DType.INT64))
        b.assign(count, "copy", kept)


def _inside(b: Builder, w: _Walk, nd32: Operand) -> Operand:
    """Whether node `nd32` is not a leaf (a leaf's packed word has its sign bit set)."""
    packed = b.load(w.words, b.imul(b.cast(nd32, DType.INT64), w.rw), hint="packed")
    return b.op("ge", packed, const(0, DType.INT32))


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


def _finish_kernel(ctx, node: Node, f: F.Forest, acc: _PartSum, n: Size) -> None:
    nt = f.n_targets
    b = Builder()
    minmax = f.aggregate in ("MIN", "MAX")
    if node.op != "TreeEnsembleClassifier":
        yb = ctx.buf(node.outputs[0])
        base = None if f.base_values is None else \
            ctx.constant("tree_base", _base(f.base_values, nt))
        with b.loop(0, n, parallel=True, hint="row") as row:
            arow = b.imul(row, nt)

            def load(k: Operand) -> Operand:
                v = acc.load(b, b.iadd(arow, k))
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


def _finish_classifier(ctx, b: Builder, node: Node, f: F.Forest, acc: _PartSum,
                       n: Size) -> None:
    cls = classifier_info(node)
    lab_b, z_b = ctx.buf(node.outputs[0]), ctx.buf(node.outputs[1])
    nt = f.n_targets
    labels = ctx.constant("tree_labels", np.array(cls.labels, dtype=np.int64))
    with b.loop(0, n, parallel=True, hint="row") as row:
        arow = b.imul(row, nt)
        zrow = b.imul(row, 2 if cls.binary and cls.column == 0 else nt)
        if cls.binary and cls.column == 0:
            s = b.op("add", acc.load(b, arow), const(cls.base, F64), hint="s")
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
                v = acc.load(b, b.iadd(arow, k))
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
