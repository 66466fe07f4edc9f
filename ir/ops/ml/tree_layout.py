"""The node records the native tree walk reads: preorder, one record per node.

Each tree is laid out in preorder with the true child right after its parent (it shares its
parent's cache line or the next one). A record holds everything a step reads, so a step
touches one cache line instead of one per array. Two forms:

    compact (8 bytes; float32 thresholds): [packed: i32, thr: f32]
    wide (16 bytes; float32): [packed: i32, false child: i32, true child: i32, thr: f32]
    wide (32 bytes; float64): [packed, false child, true child, 0, thr: f64, 0]

`packed` holds the feature index in its low bits, the mode in bits 28-29 (LE 0, LT 1, EQ 2),
the NaN rule in bit 30 (NaN goes to the true child) and "leaf" in bit 31 (the word is
negative: the walk's second phase tests it), so these tests are masks of the word already
loaded. A compact record also packs the false child's distance in records (1 + the size of
the true subtree) above the feature's `fbits` bits; its true child is the next record, so a
step loads no child: next = node + (go ? 1 : distance), one load fewer on the step's
dependency chain and half the bytes of a wide record. The wide form (when the feature and
the distance do not fit 28 bits together, or for float64 thresholds) reads the next node as
`word[1 + go]` of the record: an address computed from the comparison, not a select between
two loads (LLVM turns such a select into a branch, and a mispredicted branch per step costs
more than the step).
A leaf is a record whose threshold is NaN (every compare is false, its NaN bit is clear) and
whose false child is itself (distance 0; a wide leaf's children are both itself): a walk that
reached it stays.

Algorithm (vectorized over all trees, level by level): 1) breadth-first from the roots, giving
every reached node an entry (a node reached twice in a malformed DAG gets two, so the layout
is always a forest); 2) subtree sizes bottom-up; 3) positions top-down: a root at the sum of
the earlier trees' sizes, a true child at parent + 1, a false child after the true subtree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onnxjit.ir.ops.ml.forest import Forest

FEATURE_MASK = (1 << 28) - 1
MODE_SHIFT = 28
NAN_BIT = 1 << 30
LEAF_BIT = -(1 << 31)  # bit 31 of the int32 word: a leaf's word is negative
#: wide record size in i32 words, by "thresholds are float64"
RECORD_WORDS = {False: 4, True: 8}
#: bits a compact record has for the feature and the false distance together
COMPACT_BITS = MODE_SHIFT


@dataclass
class Layout:
    """Records as int32 words [M, words], leaf weights [M, targets] (by record), the roots'
    records; `fbits` is the compact form's feature width (None: wide records)."""

    records: np.ndarray
    weights: np.ndarray
    roots: np.ndarray
    fbits: int | None

    @property
    def words(self) -> int:
        return self.records.shape[1]


def preorder(f: Forest, roots: np.ndarray, pad_value: float) -> Layout:
    """The trees at `roots` (in that order) laid out in preorder, then one more leaf record
    (weights `pad_value`) that padding trees point at."""
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
    # the padding leaf: one more entry at position n, a leaf of itself
    is_leaf = np.append(leaf[orig_a], True)
    pos = np.append(pos, n)
    fc = np.where(is_leaf, pos, pos[np.maximum(np.append(false_kid, 0), 0)])
    wts = np.empty((n + 1, f.n_targets))
    wts[pos[:n]] = f.weights[orig_a]
    wts[n] = pad_value
    orig_a = np.append(orig_a, 0)
    return Layout(_records(f, orig_a, pos, fc, is_leaf), wts, pos[:r], None) \
        if (fbits := _fbits(f, orig_a, pos, fc, is_leaf)) is None else \
        Layout(_compact(f, orig_a, pos, fc, is_leaf, fbits), wts, pos[:r], fbits)


def _fbits(f: Forest, orig, pos, fc, is_leaf) -> int | None:
    """The compact form's feature width, or None when feature and distance do not fit."""
    if f.thr_dtype == np.float64:
        return None
    fbits = max(int(f.feature[orig][~is_leaf].max(initial=0)).bit_length(), 1)
    dbits = int((fc - pos).max(initial=0)).bit_length()
    return fbits if fbits + dbits <= COMPACT_BITS else None


def _packed(f: Forest, orig, is_leaf) -> np.ndarray:
    return np.where(is_leaf, LEAF_BIT,
                    f.feature[orig] | (f.mode[orig].astype(np.int64) << MODE_SHIFT)
                    | np.where(f.nan_true[orig], NAN_BIT, 0))


def _compact(f: Forest, orig, pos, fc, is_leaf, fbits: int) -> np.ndarray:
    rec = np.zeros((len(orig), 2), dtype=np.int32)
    rec[pos, 0] = _packed(f, orig, is_leaf) | ((fc - pos) << fbits)
    thr = np.where(is_leaf, np.nan, f.threshold[orig].astype(np.float64))
    rec[pos, 1] = thr.astype(np.float32).view(np.int32)
    return rec


def _records(f: Forest, orig, pos, fc, is_leaf) -> np.ndarray:
    n = len(orig)
    tc = np.where(is_leaf, pos, pos + 1)
    thr = np.where(is_leaf, np.nan, f.threshold[orig].astype(np.float64))
    double = f.thr_dtype == np.float64
    rec = np.zeros((n, RECORD_WORDS[double]), dtype=np.int32)
    rec[pos, 0] = _packed(f, orig, is_leaf)
    rec[pos, 1] = fc
    rec[pos, 2] = tc
    if double:
        rec[pos, 4:6] = thr.astype(np.float64).view(np.int32).reshape(n, 2)
    else:
        rec[pos, 3] = thr.astype(np.float32).view(np.int32)
    return rec
