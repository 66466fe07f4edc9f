"""The ai.onnx.ml lookup ops: LabelEncoder, CategoryMapper, OneHotEncoder, ZipMap,
DictVectorizer.

They map keys (strings, ints, floats) to values through tables given as attributes, so they
run on the host through numpy `evaluate` (a dict lookup per element), as every string op does.

- LabelEncoder (1, 2, 4): keys_{strings,int64s,floats} or keys_tensor -> values_* or
  values_tensor; a missing key gives the default (default_string "_Unused", default_int64 -1,
  default_float -0.0, or default_tensor). Float keys match NaN to a NaN key (ml 4 semantics).
  Version 1 uses classes_strings with default_string / default_int64 and maps strings <-> ints
  by position.
- CategoryMapper: cats_strings[i] <-> cats_int64s[i], either direction by input type.
- OneHotEncoder: a trailing dim of len(cats) with 1.0 at the category's position; an unknown
  category is an error unless zeros=1 (then an all-zero row).
- ZipMap: [N, C] probabilities -> a sequence of N maps {class label: probability} (each
  row's map by a dict display generated for the labels: twice as fast as dict(zip(...));
  many rows walked by zipping the columns, so that no per-row container wakes the collector).
- DictVectorizer: a map {key: value} -> a [1, len(vocabulary)] tensor of the values at their
  key's position (0 for a missing key).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxjit.errors import InputError, ModelError
from onnxjit.ir.graph import Node
from onnxjit.ir.host_eval import host_op, host_prepare
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType, MapType, SequenceType, TensorType, ValueType

ML = "ai.onnx.ml"


def _tensor_attr(node: Node, name: str) -> np.ndarray | None:
    v = node.attr(name)
    return None if v is None else np.asarray(v).reshape(-1)


def label_table(node: Node) -> tuple[list, list, object, DType]:
    """(keys, values, default, value dtype) of a LabelEncoder."""
    if node.version < 2:
        classes = list(node.attr("classes_strings", ()))
        if tensor_input(node, 0).dtype == DType.STRING:
            return classes, list(range(len(classes))), int(node.attr("default_int64", -1)), \
                DType.INT64
        return list(range(len(classes))), classes, node.attr("default_string", "_Unused"), \
            DType.STRING
    keys = None
    for name in ("keys_strings", "keys_int64s", "keys_floats"):
        if node.attr(name) is not None:
            keys = list(node.attr(name))
    if keys is None and node.attr("keys_tensor") is not None:
        keys = _tensor_attr(node, "keys_tensor").tolist()
    vals, vdt, default = None, None, None
    for name, dt, dflt in (("values_strings", DType.STRING, "default_string"),
                           ("values_int64s", DType.INT64, "default_int64"),
                           ("values_floats", DType.FLOAT, "default_float")):
        if node.attr(name) is not None:
            vals, vdt = list(node.attr(name)), dt
            default = node.attr(dflt, {"default_string": "_Unused", "default_int64": -1,
                                       "default_float": -0.0}[dflt])
    if vals is None and node.attr("values_tensor") is not None:
        arr = np.asarray(node.attr("values_tensor"))
        vals, vdt = arr.reshape(-1).tolist(), DType.from_numpy(arr.dtype)
        dt_ = node.attr("default_tensor")
        default = np.asarray(dt_).reshape(-1)[0].item() if dt_ is not None else \
            ("_Unused" if vdt == DType.STRING else 0)
    if keys is None or vals is None:
        raise ModelError("LabelEncoder needs one keys_* and one values_* attribute", where=node)
    if len(keys) != len(vals):
        raise ModelError(f"LabelEncoder has {len(keys)} keys and {len(vals)} values",
                         where=node)
    return keys, vals, default, vdt


def _key(v):
    """Dict key of an element: NaN floats match each other."""
    if isinstance(v, float) and math.isnan(v):
        return "__nan__"
    return v


def _le_infer(node: Node) -> list[ValueType | None]:
    t = tensor_input(node, 0)
    return [TensorType(label_table(node)[3], t.shape)]


def _le_eval(node: Node, ins: list) -> list[np.ndarray]:
    keys, vals, default, vdt = label_table(node)
    table = {_key(k): v for k, v in zip(keys, vals)}
    x = np.asarray(ins[0])
    out = [table.get(_key(v.item() if hasattr(v, "item") else v), default)
           for v in x.reshape(-1)]
    dt = object if vdt == DType.STRING else vdt.numpy
    return [np.array(out, dtype=dt).reshape(x.shape)]


def _cm_infer(node: Node) -> list[ValueType | None]:
    t = tensor_input(node, 0)
    return [TensorType(DType.INT64 if t.dtype == DType.STRING else DType.STRING, t.shape)]


def _cm_eval(node: Node, ins: list) -> list[np.ndarray]:
    strs = list(node.attr("cats_strings", ()))
    ints = [int(v) for v in node.attr("cats_int64s", ())]
    if len(strs) != len(ints):
        raise ModelError("cats_strings and cats_int64s must have one entry each", where=node)
    x = np.asarray(ins[0])
    if x.dtype == object or x.dtype.kind in "US":
        table, default = dict(zip(strs, ints)), int(node.attr("default_int64", -1))
        out = np.array([table.get(v, default) for v in x.reshape(-1)], dtype=np.int64)
    else:
        table, default = dict(zip(ints, strs)), node.attr("default_string", "_Unused")
        out = np.array([table.get(int(v), default) for v in x.reshape(-1)], dtype=object)
    return [out.reshape(x.shape)]


def _ohe_cats(node: Node) -> list:
    cats = node.attr("cats_int64s") or node.attr("cats_strings")
    if not cats:
        raise ModelError("OneHotEncoder needs cats_int64s or cats_strings", where=node)
    return list(cats)


def _ohe_infer(node: Node) -> list[ValueType | None]:
    t = tensor_input(node, 0)
    n = len(_ohe_cats(node))
    return [TensorType(DType.FLOAT, None if t.shape is None else tuple(t.shape) + (n,))]


def _ohe_eval(node: Node, ins: list) -> list[np.ndarray]:
    cats = _ohe_cats(node)
    table = {(c if isinstance(c, str) else int(c)): i for i, c in enumerate(cats)}
    x = np.asarray(ins[0])
    flat = x.reshape(-1)
    out = np.zeros((flat.size, len(cats)), dtype=np.float32)
    for i, v in enumerate(flat):
        key = v if isinstance(v, str) else int(v)
        j = table.get(key)
        if j is not None:
            out[i, j] = 1.0
        elif not node.attr("zeros", 1):
            raise InputError(f"node '{node.name}' (OneHotEncoder): category {v!r} is not one "
                             "of cats and zeros=0")
    return [out.reshape(x.shape + (len(cats),))]


def _zipmap_labels(node: Node) -> list:
    ints, strs = node.attr("classlabels_int64s"), node.attr("classlabels_strings")
    if not ints and not strs:
        raise ModelError("ZipMap needs classlabels_int64s or classlabels_strings", where=node)
    return [int(v) for v in ints] if ints else list(strs)


def _zipmap_infer(node: Node) -> list[ValueType | None]:
    tensor_input(node, 0)
    key = DType.STRING if isinstance(_zipmap_labels(node)[0], str) else DType.INT64
    return [SequenceType(MapType(key, TensorType(DType.FLOAT, ())))]


#: node -> its prepared step: ZipMap ends a classifier and runs on every call (one row: a
#: microsecond matters)
_STEPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


#: ZipMaps of at most this many labels build each row's map from a dict display generated
#: for their labels (`_row_maps`): 10000 rows of 3 labels 3.9 ms, dict(zip(...)) 7.6 ms
DISPLAY_LABELS = 64


#: Above this many rows ZipMap walks the rows by zipping the columns, never making them lists:
#: 10000 row lists are tracked by the garbage collector and survive its young collections while
#: the result is built, so in a process with a large heap they trigger full collections (23 ms
#: a call for 10000 rows beside scikit-learn and onnx, where the maps cost 4 ms; the maps hold
#: only floats and are not tracked). A zip costs 0.5 us more for one row.
ZIP_ROWS = 64


def _row_maps(labels: list) -> Callable[[Any], list]:
    """`rows -> [{label: value} for each row]` (rows: an iterable of sequences of floats)."""
    n = len(labels)
    if n > DISPLAY_LABELS:
        return lambda rows: [dict(zip(labels, row)) for row in rows]
    # the labels are bound as names (k0, k1...), never written into the source
    keys = {f"k{i}": label for i, label in enumerate(labels)}
    values = ", ".join(f"v{i}" for i in range(n))
    display = ", ".join(f"k{i}: v{i}" for i in range(n))
    return eval(f"lambda rows: [{{{display}}} for ({values},) in rows]", keys)  # noqa: S307


def _zipmap_prepare(node: Node) -> Callable[[list], list]:
    labels = _zipmap_labels(node)
    n = len(labels)
    maps = _row_maps(labels)

    def step(ins: list) -> list:
        x = ins[0]
        if x.__class__ is not np.ndarray or x.dtype != np.float32:
            x = np.asarray(x, dtype=np.float32)
        if x.ndim == 1:
            x = x.reshape(1, -1)
        if x.ndim != 2 or x.shape[1] != n:
            raise InputError(f"node '{node.name}' (ZipMap): X of shape {list(x.shape)} for "
                             f"{n} labels")
        rows = x.tolist() if x.shape[0] <= ZIP_ROWS else zip(*x.T.tolist())
        return [maps(rows)]  # Python floats, as onnxruntime
    return step


def _zipmap_eval(node: Node, ins: list) -> list:
    step = _STEPS.get(node)
    if step is None:
        step = _STEPS[node] = _zipmap_prepare(node)
    return step(ins)


def _dv_infer(node: Node) -> list[ValueType | None]:
    vocab = node.attr("string_vocabulary") or node.attr("int64_vocabulary") or ()
    t = node.inputs[0].type if node.inputs and node.inputs[0] is not None else None
    dt = t.value.dtype if isinstance(t, MapType) and isinstance(t.value, TensorType) \
        else DType.FLOAT
    return [TensorType(dt, (1, len(vocab)))]


def _dv_eval(node: Node, ins: list) -> list[np.ndarray]:
    vocab = list(node.attr("string_vocabulary") or node.attr("int64_vocabulary") or ())
    m = ins[0]
    if not isinstance(m, dict):
        raise InputError(f"node '{node.name}' (DictVectorizer): input must be a map")
    pos = {k: i for i, k in enumerate(vocab)}
    vals = list(m.values())
    out = np.zeros((1, len(vocab)), dtype=np.asarray(vals[:1] or [0.0], np.float32).dtype
                   if not vals else np.asarray(vals).dtype)
    for k, v in m.items():
        if k in pos:
            out[0, pos[k]] = v
    return [out]


op("LabelEncoder", (1, 2, 4), domain=ML, infer=_le_infer, evaluate=_le_eval,
   doc="key -> value table lookup (strings, ints, floats, tensors); host")
op("CategoryMapper", (1,), domain=ML, infer=_cm_infer, evaluate=_cm_eval,
   doc="strings <-> int64 by position in the category lists; host")
op("OneHotEncoder", (1,), domain=ML, infer=_ohe_infer, evaluate=_ohe_eval,
   doc="category -> one-hot float row; host")
op("ZipMap", (1,), domain=ML, infer=_zipmap_infer, evaluate=_zipmap_eval,
   doc="probabilities -> a sequence of {label: probability} maps; host")
# Run straight from the values (no inferred copy of the node per call): a classifier's last
# node, on every call of a one-row model.
host_op("ZipMap", domain=ML)(lambda node, ins, lookup: _zipmap_eval(node, ins))
host_prepare("ZipMap", domain=ML)(_zipmap_prepare)
op("DictVectorizer", (1,), domain=ML, infer=_dv_infer, evaluate=_dv_eval,
   doc="a map -> a dense row over the vocabulary; host")
