"""String ops: StringNormalizer, StringSplit, StringConcat, RegexFullMatch.

A string tensor is a numpy object array holding Python `str`; every node that reads or writes
one runs on the host (`host_eval.is_host_only`), through the numpy `evaluate` below, so these
ops have no lowering. Output shapes that depend on the strings (how many stop words were
dropped, the longest split) are unknown at inference; the run-time shape phase specialises
what follows on the actual sizes.

- StringNormalizer (10): X is [C] or [1, C]. Elements equal to a stop word are dropped
  (compared case-insensitively, through `str.lower`, unless is_case_sensitive), then the rest
  is lower- or upper-cased (`case_change_action` LOWER/UPPER/NONE). Dropping everything gives
  [""] ([1, 1] for [1, C]). Case mapping is Python's locale-independent Unicode mapping; the
  `locale` attribute is accepted and not used.
- StringSplit (20): Python's `str.split(delimiter, maxsplit)`: an empty or absent delimiter
  splits on runs of whitespace and drops leading/trailing whitespace; Y is X's shape plus the
  longest split count, padded with ""; Z holds each element's count.
- StringConcat (20): elementwise `x + y` with numpy broadcasting.
- RegexFullMatch (20): `re.fullmatch` of the RE2 pattern translated by `ir.ops.strings.re2`.

Cast to and from strings (`elementwise.cast`) uses `to_strings` and `parse_numbers` below: numbers
print as numpy prints them; text parses as an exact integer when it is one, else as a float,
and then follows the numeric Cast rules.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from onnxjit.errors import InputError, ModelError, OnnxJitError
from onnxjit.ir.graph import Node
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.elementwise.arithmetic import arity, int_attr
from onnxjit.ir.ops.elementwise.inference import out_shape, tensor
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.ops.strings.re2 import compile_re2
from onnxjit.ir.types import DType, TensorType, ValueType


def string_input(node: Node, i: int) -> TensorType:
    """Input i's type, which must be a string tensor (ModelError otherwise)."""
    t = tensor_input(node, i)
    if t.dtype != DType.STRING:
        raise ModelError(f"input {i} must be a string tensor, got {t.dtype.short}", where=node)
    return t


def strings(shape: tuple[int, ...], items: list[str] | None = None) -> np.ndarray:
    """An object array of `shape` holding `items` (default: empty strings)."""
    out = np.empty(shape, dtype=object)
    flat = out.reshape(-1)
    flat[:] = [""] * flat.size if items is None else items
    return out


def _str_attr(node: Node, name: str, default: str | None = None) -> str | None:
    v = node.attr(name, default)
    if v is not None and not isinstance(v, str):
        raise ModelError(f"attribute '{name}' must be a string, got {v!r}", where=node)
    return v


# --------------------------------------------------------------------------- StringNormalizer


def _strnorm_params(node: Node) -> tuple[str, bool, tuple[str, ...]]:
    action = _str_attr(node, "case_change_action", "NONE")
    if action not in ("LOWER", "UPPER", "NONE"):
        raise ModelError(f"attribute 'case_change_action' must be LOWER, UPPER or NONE, got "
                         f"{action!r}", where=node)
    sensitive = bool(int_attr(node, "is_case_sensitive", 0, (0, 1)))
    stops = node.attr("stopwords", ())
    if not all(isinstance(s, str) for s in stops):
        raise ModelError("attribute 'stopwords' must be a list of strings", where=node)
    _str_attr(node, "locale")
    return action, sensitive, tuple(stops)


def _strnorm_infer(node: Node) -> list[ValueType | None]:
    arity(node, 1)
    shape = string_input(node, 0).shape
    _, _, stops = _strnorm_params(node)
    if shape is not None and (len(shape) not in (1, 2) or (
            len(shape) == 2 and isinstance(shape[0], int) and shape[0] != 1)):
        raise ModelError(f"input must have shape [C] or [1, C], got {list(shape)}", where=node)
    if shape is None or stops:
        shape = None if shape is None else (None,) if len(shape) == 1 else (1, None)
    return tensor(DType.STRING, shape)  # type: ignore[return-value]


def _strnorm_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    action, sensitive, stops = _strnorm_params(node)
    if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
        raise ModelError(f"input must have shape [C] or [1, C], got {list(x.shape)}",
                         where=node)
    words = list(x.reshape(-1))
    if stops and sensitive:
        drop = set(stops)
        words = [w for w in words if w not in drop]
    elif stops:
        drop = {s.lower() for s in stops}
        words = [w for w in words if w.lower() not in drop]
    if action == "LOWER":
        words = [w.lower() for w in words]
    elif action == "UPPER":
        words = [w.upper() for w in words]
    if not words and (stops or x.size == 0):
        words = [""]
    shape = (len(words),) if x.ndim == 1 else (1, len(words))
    return [strings(shape, words)]


op("StringNormalizer", (10,), infer=_strnorm_infer, evaluate=_strnorm_eval,
   doc="drop stop words, change case (host, object arrays)")


# --------------------------------------------------------------------------- StringSplit


def _split_params(node: Node) -> tuple[str | None, int]:
    delim = _str_attr(node, "delimiter", "") or None
    maxsplit = node.attr("maxsplit")
    if maxsplit is None:
        return delim, -1
    return delim, int_attr(node, "maxsplit", 0)


def _split_infer(node: Node) -> list[ValueType | None]:
    arity(node, 1)
    shape = string_input(node, 0).shape
    _split_params(node)
    return [TensorType(DType.STRING, None if shape is None else tuple(shape) + (None,)),
            TensorType(DType.INT64, shape)]


def _split_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    delim, maxsplit = _split_params(node)
    # A negative maxsplit (Python's "no limit") is what ONNX's absent attribute means.
    parts = [s.split(delim, maxsplit) for s in x.reshape(-1)]
    counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
    width = max((len(p) for p in parts), default=0)
    y = strings(x.shape + (width,), [s for p in parts for s in p + [""] * (width - len(p))])
    return [y, counts]


op("StringSplit", (20,), infer=_split_infer, evaluate=_split_eval,
   doc="split each string on a delimiter, pad with empty strings (host)")


# --------------------------------------------------------------------------- StringConcat


def _concat_infer(node: Node) -> list[ValueType | None]:
    arity(node, 2)
    string_input(node, 0)
    string_input(node, 1)
    return tensor(DType.STRING, out_shape(node, (0, 1)))  # type: ignore[return-value]


def _concat_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x, y = np.broadcast_arrays(np.asarray(inputs[0], object), np.asarray(inputs[1], object))
    flat = [a + b for a, b in zip(x.reshape(-1), y.reshape(-1))]
    return [strings(x.shape, flat)]


op("StringConcat", (20,), infer=_concat_infer, evaluate=_concat_eval,
   doc="elementwise x + y on strings, broadcasting (host)")


# --------------------------------------------------------------------------- RegexFullMatch


@functools.lru_cache(maxsize=64)
def _regex(pattern: str) -> re.Pattern:
    return compile_re2(pattern)


def _pattern(node: Node) -> re.Pattern:
    pattern = _str_attr(node, "pattern")
    if pattern is None:
        raise ModelError("attribute 'pattern' is required", where=node)
    try:
        return _regex(pattern)
    except OnnxJitError as e:  # raised without the node: compiled patterns are shared
        raise type(e)(str(e), where=node) from None


def _regex_infer(node: Node) -> list[ValueType | None]:
    arity(node, 1)
    shape = string_input(node, 0).shape
    _pattern(node)
    return tensor(DType.BOOL, shape)  # type: ignore[return-value]


def _regex_eval(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    rx = _pattern(node)
    flat = [rx.fullmatch(s) is not None for s in x.reshape(-1)]
    return [np.array(flat, dtype=np.bool_).reshape(x.shape)]


op("RegexFullMatch", (20,), infer=_regex_infer, evaluate=_regex_eval,
   doc="re.fullmatch of an RE2 pattern on each string (host)")


# --------------------------------------------------------------------------- Cast helpers


def to_strings(x: np.ndarray) -> np.ndarray:
    """Numbers -> strings as numpy prints each value in its own type ("1.5", "0.001" for a
    float32 0.001, "-2", "nan", "inf", "True"): plain notation, shortest round-trip text."""
    return strings(x.shape, [str(v) for v in x.reshape(-1)])


_BOOL_WORDS = {"true": 1, "false": 0}


def parse_numbers(x: np.ndarray, target: DType, where: object = None) -> np.ndarray:
    """Strings -> an int64, uint64 or float64 array to be cast on to `target` with the numeric
    Cast rules. Integer text stays exact; other text is read as a float ("100.5", "1e-5",
    "INF", "-inf", "NaN", case-insensitively), which an integer target then truncates;
    "True"/"False" read as 1/0. Text that is not a number is an InputError."""
    flat = list(x.reshape(-1))
    ints: list[int] = []
    for s in flat:
        t = s.strip()
        try:
            ints.append(int(t))
            continue
        except ValueError:
            pass
        if t.lower() in _BOOL_WORDS:
            ints.append(_BOOL_WORDS[t.lower()])
            continue
        break
    else:
        if not target.is_float:
            for dt in (np.int64, np.uint64):
                try:
                    return np.array(ints, dtype=dt).reshape(x.shape)
                except OverflowError:
                    pass
    values: list[float] = []
    for k, s in enumerate(flat):
        t = s.strip()
        if t.lower() in _BOOL_WORDS:
            values.append(float(_BOOL_WORDS[t.lower()]))
            continue
        try:
            values.append(float(t))
        except ValueError:
            raise InputError(f"cannot convert string {s!r} (element {k}) to "
                             f"{target.short}", where=where) from None
    return np.array(values, dtype=np.float64).reshape(x.shape)
