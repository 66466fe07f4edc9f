"""Constants in IR text: exact scalars, inline array literals, and the trailing resources section.

Scalars print so that they parse back bit for bit: ints in decimal, bools `true`/`false`,
floats as the shortest decimal that converts back to the same value of their own width
(checked, else the longer repr of the double), `inf`/`-inf`, `nan`/`-nan` for the quiet NaN
of each sign and `nan(0x...)` with the raw bits for any other NaN; complex numbers as
`(re, im)`; strings as `"..."` (str) or `b"..."` (bytes).

Arrays with at most `INLINE_MAX` elements (and every string array) print inline as nested
lists (a 0-d array as its scalar). Larger ones print as a reference `blobN` into the
`resources { blobN = "<base64 of the raw little-endian bytes>" ... }` section that ends the
text; `Blobs` numbers the arrays in print order (one blob per array object, so arrays shared
by several values stay shared after parsing). The parser reads that section before the rest
of the text (`BlobRefs`), so each reference resolves where it stands.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np

from onnxjit.ir.text_lexer import Cursor, Token, quote, unquote

INLINE_MAX = 16

_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _nan_bits(width: int, negative: bool) -> int:
    """Bits of the canonical quiet NaN of a float width in bytes."""
    mant = {2: 10, 4: 23, 8: 52}[width]
    exp = {2: 5, 4: 8, 8: 11}[width]
    return (int(negative) << (exp + mant)) | (((1 << exp) - 1) << mant) | (1 << (mant - 1))


def format_float(x: Any, width: int = 8) -> str:
    """Exact text of a float of `width` bytes (2, 4 or 8); x is a Python or numpy float."""
    if math.isnan(x):
        utype = _UINT[width]
        bits = int(np.array(x, dtype=_float_type(width)).view(utype))
        for neg in (False, True):
            if bits == _nan_bits(width, neg):
                return "-nan" if neg else "nan"
        return f"nan(0x{bits:x})"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if width == 8:
        return repr(float(x))
    ftype = _float_type(width)
    short = str(ftype(x))
    if "." not in short and "e" not in short:
        short += ".0"
    if _bits_equal(ftype(float(short)), ftype(x)):
        return short
    return repr(float(x))


def _float_type(width: int) -> type:
    return {2: np.float16, 4: np.float32, 8: np.float64}[width]


def _bits_equal(a: Any, b: Any) -> bool:
    return np.array(a).tobytes() == np.array(b).tobytes()


def parse_float(text: str, width: int = 8) -> Any:
    """The value of a float token of `width` bytes: a Python float for 8, else numpy."""
    ftype = _float_type(width)
    if text.lstrip("-").startswith("nan"):
        utype = _UINT[width]
        if "(" in text:
            bits = int(text[text.index("(") + 1:-1], 16)
        else:
            bits = _nan_bits(width, text.startswith("-"))
        value = np.array(bits, dtype=utype).view(ftype)[()]
        return float(value) if width == 8 else value
    value = float(text)
    return value if width == 8 else ftype(value)


def is_float_text(text: str) -> bool:
    return any(c in text for c in ".eEn") and not text.lstrip("-").startswith("0x")


def format_scalar(x: Any, dtype: np.dtype) -> str:
    """One element of an array of numpy `dtype`."""
    kind = dtype.kind
    if kind == "b":
        return "true" if x else "false"
    if kind in "iu":
        return str(int(x))
    if kind == "f":
        return format_float(x, dtype.itemsize)
    if kind == "c":
        w = dtype.itemsize // 2
        return f"({format_float(x.real, w)}, {format_float(x.imag, w)})"
    if isinstance(x, (str, bytes)):
        return quote(x)
    raise ValueError(f"cannot print an array element {x!r} of dtype {dtype}")


def format_array(arr: np.ndarray) -> str:
    """Nested-list text of a small array (a 0-d array prints as its scalar)."""
    if arr.ndim == 0:
        return format_scalar(arr[()], arr.dtype)
    # arr[i, ...] stays an array (a 0-d one at the last axis), even for object arrays.
    return "[" + ", ".join(format_array(arr[i, ...]) for i in range(len(arr))) + "]"


def raw_bytes(arr: np.ndarray) -> bytes:
    return np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()


class Blobs:
    """The large arrays of one printed text, numbered in print order."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.arrays: list[np.ndarray] = []  # keeps the arrays alive so ids stay unique

    def ref(self, arr: np.ndarray) -> str:
        name = self.names.get(id(arr))
        if name is None:
            name = f"blob{len(self.arrays)}"
            self.names[id(arr)] = name
            self.arrays.append(arr)
        return name

    def section(self) -> str:
        if not self.arrays:
            return ""
        lines = ["resources {"]
        for k, arr in enumerate(self.arrays):
            data = base64.b64encode(raw_bytes(arr)).decode("ascii")
            lines.append(f'  blob{k} = "{data}"')
        return "\n".join(lines) + "\n}\n"


def array_text(arr: np.ndarray, blobs: Blobs) -> str:
    """The data part of a constant: inline literal or blob reference."""
    if arr.dtype != object and arr.size > INLINE_MAX:
        return blobs.ref(arr)
    return format_array(arr)


# --------------------------------------------------------------------------- parsing

class BlobRefs:
    """The blobs of a text's `resources` section, read before the rest of the text so that
    references resolve where they stand; equal references give one shared array."""

    def __init__(self, cur: Cursor):
        self.data: dict[str, tuple[Token, bytes]] = {}
        self.made: dict[tuple, np.ndarray] = {}
        depth = 0
        for k, tok in enumerate(cur.tokens):
            if tok.kind == "punct" and tok.text in "([{":
                depth += 1
            elif tok.kind == "punct" and tok.text in ")]}":
                depth -= 1
            elif depth == 0 and tok.kind == "ident" and tok.text == "resources" \
                    and cur.tokens[k + 1].text == "{":
                self._read(cur, k)
                return

    def _read(self, cur: Cursor, start: int) -> None:
        """Parse the section at token `start`, then cut it off the token list."""
        cur.pos = start + 1
        cur.expect("{")
        while not cur.accept("}"):
            key = cur.expect_kind("ident", "a blob name")
            cur.expect("=")
            tok = cur.expect_kind("string", "base64 data in quotes")
            try:
                raw = base64.b64decode(str(unquote(tok)), validate=True)
            except ValueError:
                raise cur.error("valid base64 data", tok) from None
            if key.text in self.data:
                raise cur.error(f"one definition of blob '{key.text}'", key)
            self.data[key.text] = (tok, raw)
        cur.finish()
        cur.tokens = cur.tokens[:start] + [cur.tokens[-1]]
        cur.pos = 0

    def get(self, cur: Cursor, tok: Token, dtype: np.dtype, shape: tuple[int, ...]
            ) -> np.ndarray:
        if dtype.kind == "O":
            raise cur.error("string data inline, not in a blob", tok)
        if tok.text not in self.data:
            raise cur.error(f"a blob named '{tok.text}' in the resources section", tok)
        key = (tok.text, dtype, shape)
        if key not in self.made:
            data_tok, raw = self.data[tok.text]
            n = int(np.prod(shape, dtype=np.int64))
            if len(raw) != n * dtype.itemsize:
                raise cur.error(f"{n * dtype.itemsize} bytes of data for {dtype}{list(shape)} "
                                f"in blob '{tok.text}' (it has {len(raw)})", tok)
            little = np.frombuffer(raw, dtype=dtype.newbyteorder("<"))
            self.made[key] = little.astype(dtype).reshape(shape)
        return self.made[key]


def parse_array(cur: Cursor, dtype: np.dtype, shape: tuple[int, ...], blobs: BlobRefs
                ) -> np.ndarray:
    """The data part of a constant of a known dtype and shape (inline or a blob)."""
    tok = cur.tok
    if tok.kind == "ident" and tok.text.startswith("blob"):
        cur.next()
        return blobs.get(cur, tok, dtype, shape)
    items: list[Any] = []
    _nested(cur, dtype, items)
    n = int(np.prod(shape, dtype=np.int64))
    if len(items) != n:
        raise cur.error(f"{n} elements for shape {list(shape)}, not {len(items)}", tok)
    arr = np.empty(n, dtype=dtype)
    for i, x in enumerate(items):
        arr[i] = x
    return arr.reshape(shape)


def _nested(cur: Cursor, dtype: np.dtype, out: list[Any]) -> None:
    if cur.accept("["):
        if cur.accept("]"):
            return
        _nested(cur, dtype, out)
        while cur.accept(","):
            _nested(cur, dtype, out)
        cur.expect("]")
        return
    out.append(parse_scalar(cur, dtype))


def parse_scalar(cur: Cursor, dtype: np.dtype) -> Any:
    """One element of an array of numpy `dtype`."""
    tok = cur.tok
    kind = dtype.kind
    if kind == "b":
        if cur.accept("true"):
            return True
        if cur.accept("false"):
            return False
        raise cur.error("true or false")
    if kind in "iu":
        return cur.integer()
    if kind == "f":
        return _float_token(cur, dtype.itemsize)
    if kind == "c":
        cur.expect("(")
        re_ = _float_token(cur, dtype.itemsize // 2)
        cur.expect(",")
        im = _float_token(cur, dtype.itemsize // 2)
        cur.expect(")")
        out = np.zeros((), dtype=dtype)
        out.real, out.imag = re_, im
        return out[()]
    if tok.kind in ("string", "bytes"):
        cur.next()
        return unquote(tok)
    raise cur.error("a string literal")


def _float_token(cur: Cursor, width: int) -> Any:
    tok = cur.tok
    if tok.kind != "number" or tok.text.lstrip("-").startswith("0x"):
        raise cur.error("a number")
    cur.next()
    return parse_float(tok.text, width)
