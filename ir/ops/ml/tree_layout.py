"""The node records the native tree walk reads: preorder, one record per node.

Each tree is laid out in preorder with the true child right after its parent (it shares its
parent's cache line or the next one). A record holds everything a step reads, so a step
touches one cache line instead of one per array:

    float32 thresholds (16 bytes): [packed: i32, false child: i32, true child: i32, thr: f32]
    float64 thresholds (32 bytes): [packed, false child, true child, 0, thr: f64, 0]

The next node is `word[1 + go]` of the record: an address computed from the comparison, not
a select between two loads (LLVM turns such a select into a branch, and a mispredicted
branch per step costs more than the step). `packed` holds the feature index in its low 28
bits, the mode in bits 28-29 (LE 0, LT 1, EQ 2), the NaN rule in bit 30 (NaN goes to the
true child) and "leaf" in bit 31 (the word is negative: the walk's second phase tests it), so
these tests are masks of the word already loaded. A leaf is a record whose threshold is NaN
(every compare is false, its NaN bit is clear) and whose children are itself: a walk that
reached it stays.

Algorithm (vectorized over all trees, level by level): 1) breadth-first from the roots, giving
every reached node an entry (a node reached twice in a malformed DAG gets two, so the layout
is always a forest); 2) subtree sizes bottom-up; 3) positions top-down: a root at the sum of
the earlier trees' sizes, a true child at parent + 1, a false child after the true subtree.
"""

from __future__ import annotations

import numpy as np

from onnxjit.ir.ops.ml.forest import Forest

FEATURE_MASK = (1 << 28) - 1
MODE_SHIFT = 28
NAN_BIT = 1 << 30
LEAF_BIT = -(1 << 31)  # bit 31 of the int32 word: a leaf's word is negative
#: record size in i32 words, by "thresholds are float64"
RECORD_WORDS = {False: 4, True: 8}


def preorder(f: Forest, roots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(record words as int32 [M, RECORD_WORDS], leaf weights [M, targets], new roots) for the trees
    at `roots` (in that order)."""
    leaf = f.true_child == np.arange(len(f.true_child))
    orig, parent, is_true = [roots.astype(np.int64)], [np.full(len(roots), -1)], \
        [np.zeros(len(roots), bool)]
    start = 0
    while True:
        cur = orig[-1]
        inner = ~leaf[cur]
        ids = np.flatnonzero(inner) + start
        start += len(cur)
        if not len(ids):
            break
        o = cur[inner]
        orig.append(np.concatenate([f.true_child[o], f.false_child[o]]))
        parent.append(np.concatenate([ids, ids]))
        is_true.append(np.concatenate([np.ones(len(o), bool), np.zeros(len(o), bool)]))
    level_of = np.concatenate([np.full(len(a), k) for k, a in enumerate(orig)])
    orig_a, parent_a, true_a = np.concatenate(orig), np.concatenate(parent), \
        np.concatenate(is_true)
    n = len(orig_a)
    size = np.ones(n, dtype=np.int64)
    for lv in range(len(orig) - 1, 0, -1):
        e = np.flatnonzero(level_of == lv)
        np.add.at(size, parent_a[e], size[e])
    true_kid = np.full(n, -1)
    false_kid = np.full(n, -1)
    kids = np.flatnonzero(parent_a >= 0)
    true_kid[parent_a[kids[true_a[kids]]]] = kids[true_a[kids]]
    false_kid[parent_a[kids[~true_a[kids]]]] = kids[~true_a[kids]]
    pos = np.zeros(n, dtype=np.int64)
    r = len(roots)
    pos[:r] = np.concatenate([[0], np.cumsum(size[:r])[:-1]])
    for lv in range(1, len(orig)):
        e = np.flatnonzero(level_of == lv)
        p = parent_a[e]
        pos[e] = np.where(true_a[e], pos[p] + 1, pos[p] + 1 + size[true_kid[p]])
    return _records(f, orig_a, pos, false_kid, leaf), _weights(f, orig_a, pos), pos[:r]


def _records(f: Forest, orig: np.ndarray, pos: np.ndarray, false_kid: np.ndarray,
             leaf: np.ndarray) -> np.ndarray:
    n = len(orig)
    is_leaf = leaf[orig]
    packed = np.where(is_leaf, LEAF_BIT,
                      f.feature[orig] | (f.mode[orig].astype(np.int64) << MODE_SHIFT)
                      | np.where(f.nan_true[orig], NAN_BIT, 0))
    fc = np.where(is_leaf, pos, pos[np.maximum(false_kid, 0)])
    tc = np.where(is_leaf, pos, pos + 1)
    thr = np.where(is_leaf, np.nan, f.threshold[orig].astype(np.float64))
    double = f.thr_dtype == np.float64
    rec = np.zeros((n, RECORD_WORDS[double]), dtype=np.int32)
    rec[pos, 0] = packed
    rec[pos, 1] = fc
    rec[pos, 2] = tc
    if double:
        rec[pos, 4:6] = thr.astype(np.float64).view(np.int32).reshape(n, 2)
    else:
        rec[pos, 3] = thr.astype(np.float32).view(np.int32)
    return rec


def _weights(f: Forest, orig: np.ndarray, pos: np.ndarray) -> np.ndarray:
    out = np.empty((len(orig), f.n_targets))
    out[pos] = f.weights[orig]
    return out
