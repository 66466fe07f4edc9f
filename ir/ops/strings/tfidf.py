"""TfIdfVectorizer (opset 9): n-gram counts of int or string token rows, as TF, IDF or TFIDF.

The pool (`pool_int64s` or `pool_strings`) lists n-grams by length: `ngram_counts[k]` is where
the grams of length k+1 start; grams are numbered in pool order over all lengths, and gram g
counts into output column `ngram_indexes[g]` (a later duplicate wins). Only lengths in
[min_gram_length, max_gram_length] count. In each row, a gram of length n >= 2 is the tokens
at i, i+d, ..., i+(n-1)d for every start i and every distance d in 1..max_skip_count+1;
unigrams count once.

Algorithm (vectorized over rows and starts, a trie flattened into sorted key tables):
1) tokens -> ids in the pool's vocabulary (V tokens; -1 for tokens the pool lacks);
2) level k of the trie holds the distinct length-k prefixes of pool grams, keyed
   `parent * V + token` (the parent: the prefix's index at level k-1), sorted, so that
   `searchsorted` walks all windows one level at a time; `col[k]` gives the output column of
   the gram ending at each level-k entry (-1: a prefix only);
3) for each distance d: prefix ids of all windows grow one level per step; every window whose
   level-k entry is a counted gram adds 1 to its row's column (`np.add.at`);
4) TF: the counts; IDF: weights[column] (or 1) where the count is positive; TFIDF:
   weights[column] * count (or the counts). Rows are [C] -> [out] or [B, C] -> [B, out].

The node runs on the host (its output counts depend on the token values); no lowering.
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.elementwise.arithmetic import arity, int_attr
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType, ValueType


class _Spec:
    """The validated attributes of one node, and its pool as trie tables."""

    def __init__(self, node: Node):
        self.mode = node.attr("mode")
        if self.mode not in ("TF", "IDF", "TFIDF"):
            raise ModelError(f"attribute 'mode' must be TF, IDF or TFIDF, got {self.mode!r}",
                             where=node)
        self.lo = int_attr(node, "min_gram_length", 0)
        self.hi = int_attr(node, "max_gram_length", 0)
        self.skips = int_attr(node, "max_skip_count", -1)
        if not 1 <= self.lo <= self.hi or self.skips < 0:
            raise ModelError(f"need 1 <= min_gram_length ({self.lo}) <= max_gram_length "
                             f"({self.hi}) and max_skip_count ({self.skips}) >= 0", where=node)
        ints, strs = node.attr("pool_int64s"), node.attr("pool_strings")
        if (ints is None) == (strs is None):
            raise ModelError("exactly one of 'pool_int64s' and 'pool_strings' must be given",
                             where=node)
        self.strings = strs is not None
        pool = list(strs if self.strings else ints)
        starts = [int(s) for s in node.attr("ngram_counts", ())]
        cols = [int(i) for i in node.attr("ngram_indexes", ())]
        if not cols or min(cols) < 0:
            raise ModelError("attribute 'ngram_indexes' must be non-empty and non-negative",
                             where=node)
        self.width = max(cols) + 1
        w = node.attr("weights")
        self.weights = None if w is None or len(w) == 0 else np.asarray(w, np.float32)
        if self.weights is not None and len(self.weights) < self.width:
            raise ModelError(f"attribute 'weights' has {len(self.weights)} entries; the "
                             f"output has {self.width} columns", where=node)
        grams: dict[tuple, int] = {}
        g = 0
        for k, start in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else len(pool)
            n = k + 1
            if not 0 <= start <= end <= len(pool):
                raise ModelError(f"'ngram_counts' {starts} do not fit a pool of {len(pool)}",
                                 where=node)
            for s in range(start, end - n + 1, n):
                if g >= len(cols):
                    raise ModelError(f"the pool holds more n-grams than the {len(cols)} "
                                     "entries of 'ngram_indexes'", where=node)
                if self.lo <= n <= self.hi:
                    grams[tuple(pool[s:s + n])] = cols[g]
                g += 1
        self._build(grams)

    def _build(self, grams: dict[tuple, int]) -> None:
        vocab = sorted({t for gram in grams for t in gram})
        self.vocab = vocab
        self.v = max(len(vocab), 1)
        index = {t: i for i, t in enumerate(vocab)}
        #: Per level k >= 1: sorted keys, and the output column of each entry (-1: prefix).
        self.keys: list[np.ndarray] = [np.zeros(0, np.int64)]
        self.cols: list[np.ndarray] = [np.zeros(0, np.int64)]
        parent = {(): 0}
        for k in range(1, self.hi + 1):
            found: dict[int, int] = {}
            ids: dict[tuple, int] = {}
            for gram, col in grams.items():
                if len(gram) < k:
                    continue
                key = parent[gram[:k - 1]] * self.v + index[gram[k - 1]]
                ids[gram[:k]] = key
                if len(gram) == k:
                    found[key] = col
                else:
                    found.setdefault(key, -1)
            keys = np.array(sorted(found), dtype=np.int64)
            self.keys.append(keys)
            self.cols.append(np.array([found[int(x)] for x in keys], dtype=np.int64))
            rank = {int(x): i for i, x in enumerate(keys)}
            parent = {p: rank[key] for p, key in ids.items()}

    def token_ids(self, x: np.ndarray) -> np.ndarray:
        if self.strings:
            index = {t: i for i, t in enumerate(self.vocab)}
            flat = [index.get(t, -1) for t in x.reshape(-1)]
            return np.array(flat, dtype=np.int64).reshape(x.shape)
        voc = np.array(self.vocab, dtype=np.int64)
        xs = x.astype(np.int64)
        pos = np.clip(np.searchsorted(voc, xs), 0, max(len(voc) - 1, 0))
        hit = voc[pos] == xs if len(voc) else np.zeros(xs.shape, bool)
        return np.where(hit, pos, -1)

    def _level(self, k: int, parent: np.ndarray, tok: np.ndarray) -> np.ndarray:
        """Level-k entry of each window (parent at level k-1, next token); -1 if none."""
        keys = self.keys[k]
        ok = (parent >= 0) & (tok >= 0)
        key = np.where(ok, parent * self.v + tok, 0)
        pos = np.clip(np.searchsorted(keys, key), 0, max(len(keys) - 1, 0))
        hit = ok & (keys[pos] == key) if len(keys) else np.zeros(key.shape, bool)
        return np.where(hit, pos, -1)

    def counts(self, ids: np.ndarray) -> np.ndarray:
        """[B, C] token ids -> [B, width] counts."""
        b, c = ids.shape
        out = np.zeros((b, self.width), dtype=np.int64)
        rows = np.arange(b)[:, None]
        for d in range(1, self.skips + 2):
            pid = self._level(1, np.zeros_like(ids), ids)  # windows starting at every i
            for k in range(1, self.hi + 1):
                if k > 1:
                    span = d * (k - 1)
                    if span >= c:
                        break
                    pid = self._level(k, pid[:, :c - span], ids[:, span:])
                if k < self.lo or (k == 1 and d > 1):
                    continue  # unigrams are not affected by the distance: count them once
                col = np.where(pid >= 0, self.cols[k][np.maximum(pid, 0)], -1)
                hit = col >= 0
                np.add.at(out, (np.broadcast_to(rows, col.shape)[hit], col[hit]), 1)
        return out

    def weigh(self, counts: np.ndarray) -> np.ndarray:
        w = self.weights
        if self.mode == "TF" or (self.mode == "TFIDF" and w is None):
            return counts.astype(np.float32)
        if self.mode == "IDF":
            return np.where(counts > 0, w[:self.width] if w is not None else 1,
                            0).astype(np.float32)
        return (w[:self.width] * counts).astype(np.float32)  # type: ignore[index]


_SPECS: dict[tuple, _Spec] = {}


def _spec(node: Node) -> _Spec:
    """The node's `_Spec`, cached by its attributes: the host evaluation runs on a fresh proxy
    node per call, and a real vocabulary holds thousands of grams."""
    try:
        key = tuple(sorted(node.attrs.items()))
        hash(key)
    except TypeError:
        return _Spec(node)
    spec = _SPECS.get(key)
    if spec is None:
        if len(_SPECS) >= 32:
            _SPECS.clear()
        spec = _SPECS[key] = _Spec(node)
    return spec


def _infer(node: Node) -> list[ValueType | None]:
    arity(node, 1)
    t = tensor_input(node, 0)
    spec = _spec(node)
    want = (DType.STRING,) if spec.strings else (DType.INT32, DType.INT64)
    if t.dtype not in want:
        raise ModelError(f"input 0 is {t.dtype.short}; with "
                         f"{'pool_strings' if spec.strings else 'pool_int64s'} it must be "
                         f"{' or '.join(d.short for d in want)}", where=node)
    shape = t.shape
    if shape is None:
        return tensor(DType.FLOAT, None)  # type: ignore[return-value]
    if len(shape) > 2:
        raise ModelError(f"input must have shape [C] or [B, C], got rank {len(shape)}",
                         where=node)
    lead = tuple(shape[:1]) if len(shape) == 2 else ()
    return tensor(DType.FLOAT, lead + (spec.width,))  # type: ignore[return-value]


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    spec = _spec(node)
    rows = x.reshape(1, -1) if x.ndim < 2 else x
    y = spec.weigh(spec.counts(spec.token_ids(rows)))
    return [y.reshape(spec.width) if x.ndim < 2 else y]


op("TfIdfVectorizer", (9,), infer=_infer, evaluate=_evaluate,
   doc="n-gram counts of token rows as TF/IDF/TFIDF (host)")
