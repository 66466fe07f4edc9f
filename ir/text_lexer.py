r"""Shared pieces of the IR text forms: names, string escapes, the lexer and a token cursor.

Names. A printed name is `%` (values, variables, buffers) or `@` (graphs, kernels) followed by
an identifier (`[A-Za-z_][A-Za-z0-9_.]*`) or, for any other hint, a quoted string; a hint
that is not unique in its namespace gets a suffix `#k` (k = 1, 2, ...), and a value without a
hint is numbered `%0`, `%1`, ... So `%x#1` parses back to the hint "x" and `%0` to "": the
parsed IR has the same hints, and printing it again gives the same text. `Namer` hands out
these names deterministically in print order; reserved names (a model's interface) come first
and are printed exactly.

Strings are ASCII-only: `\\`, `\"`, `\n`, `\t`, `\r` and `\xNN` (bytes literals `b"..."`) or
`\u{N}` (text) for everything else outside printable ASCII.

Lexing is one regular expression tried at each position (whitespace and `;` comments to the end
of a line are skipped, so hand-written golden files may annotate); each token keeps its line and
column so that parse errors (`ModelError`) say where they are and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from onnxjit.errors import ModelError

IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
#: Words that mean a number, so names spelled like them are quoted.
NUMBER_WORDS = frozenset({"inf", "nan"})


def is_ident(name: str) -> bool:
    return bool(IDENT_RE.match(name)) and name not in NUMBER_WORDS


def quote(text: str | bytes) -> str:
    """A string literal: `"..."` for str, `b"..."` for bytes (see the module docstring)."""
    out = ['b"' if isinstance(text, bytes) else '"']
    for ch in (chr(c) for c in text) if isinstance(text, bytes) else text:
        code = ord(ch)
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif 32 <= code < 127:
            out.append(ch)
        elif isinstance(text, bytes):
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{{{code:x}}}")
    out.append('"')
    return "".join(out)


def name_text(name: str) -> str:
    """A name as printed after `%` or `@`: bare when an identifier, else quoted."""
    return name if is_ident(name) else quote(name)


class Namer:
    """Deterministic printed names for objects (compared by identity) from their hints."""

    def __init__(self, sigil: str = "%"):
        self.sigil = sigil
        self.names: dict[Any, str] = {}
        self.counts: dict[str, int] = {}
        self.unnamed = 0

    def reserve(self, obj: Any, hint: str) -> None:
        """Give `obj` exactly `hint` (an interface name) if no one holds it yet."""
        if obj not in self.names and hint and hint not in self.counts:
            self.counts[hint] = 0
            self.names[obj] = self.sigil + name_text(hint)

    def __call__(self, obj: Any, hint: str) -> str:
        got = self.names.get(obj)
        if got is not None:
            return got
        if not hint:
            text = f"{self.sigil}{self.unnamed}"
            self.unnamed += 1
        elif hint not in self.counts:
            self.counts[hint] = 0
            text = self.sigil + name_text(hint)
        else:
            self.counts[hint] += 1
            text = f"{self.sigil}{name_text(hint)}#{self.counts[hint]}"
        self.names[obj] = text
        return text

    def fork(self) -> Namer:
        """A namer for an inner namespace: it knows every name given so far."""
        out = Namer(self.sigil)
        out.names = dict(self.names)
        out.counts = dict(self.counts)
        out.unnamed = self.unnamed
        return out


# --------------------------------------------------------------------------- lexer

_STRING = r'"(?:[^"\\\n]|\\.)*"'
_NAME = rf"(?:[A-Za-z_][A-Za-z0-9_.]*|{_STRING}|\d+)"
_TOKEN = re.compile(rf"""
    (?P<ws>[ \t\r\n]+|;[^\n]*)
  | (?P<ref>[%@]{_NAME}(?:\#\d+)?)
  | (?P<bytes>b{_STRING})
  | (?P<string>{_STRING})
  | (?P<number>-?(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?
                 |inf(?![A-Za-z0-9_.])|nan(?:\(0x[0-9a-fA-F]+\))?(?![A-Za-z0-9_.])))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>->|::|//|\+=|[()\[\]{{}}<>,=:?*+^])
""", re.VERBOSE)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"'}


@dataclass(frozen=True)
class Token:
    kind: str  # ref | string | bytes | number | ident | punct | eof
    text: str
    line: int
    col: int

    def describe(self) -> str:
        return "end of text" if self.kind == "eof" else repr(self.text)


def unquote(tok: Token) -> str | bytes:
    """The value of a string or bytes token."""
    is_bytes = tok.kind == "bytes"
    body = tok.text[2:-1] if is_bytes else tok.text[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt == "x" and re.match(r"[0-9a-fA-F]{2}", body[i + 2:i + 4]):
            out.append(chr(int(body[i + 2:i + 4], 16)))
            i += 4
        elif nxt == "u" and not is_bytes and (m := re.match(r"\{([0-9a-fA-F]{1,6})\}",
                                                            body[i + 2:])):
            out.append(chr(int(m.group(1), 16)))
            i += 2 + m.end()
        else:
            raise ModelError(f"line {tok.line}, column {tok.col + i + 1}: unknown escape "
                             f"'\\{nxt}' in a string literal")
    text = "".join(out)
    if is_bytes:
        if any(ord(c) > 255 for c in text):
            raise ModelError(f"line {tok.line}, column {tok.col}: a bytes literal holds a "
                             "character above \\xff")
        return text.encode("latin-1")
    return text


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos, line, line_start = 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ModelError(f"line {line}, column {pos - line_start + 1}: unexpected "
                             f"character {text[pos]!r}")
        kind = m.lastgroup
        if kind != "ws":
            tokens.append(Token(kind, m.group(), line, pos - line_start + 1))  # type: ignore[arg-type]
        newlines = m.group().count("\n")
        if newlines:
            line += newlines
            line_start = m.start() + m.group().rindex("\n") + 1
        pos = m.end()
    tokens.append(Token("eof", "", line, pos - line_start + 1))
    return tokens


class Cursor:
    """A position in a token list with the usual recursive-descent helpers."""

    def __init__(self, text: str):
        self.tokens = tokenize(text)
        self.pos = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def peek(self, k: int = 1) -> Token:
        return self.tokens[min(self.pos + k, len(self.tokens) - 1)]

    def next(self) -> Token:
        t = self.tokens[self.pos]
        if t.kind != "eof":
            self.pos += 1
        return t

    def error(self, expected: str, tok: Token | None = None) -> ModelError:
        t = tok or self.tok
        return ModelError(f"line {t.line}, column {t.col}: expected {expected}, got "
                          f"{t.describe()}")

    def at(self, text: str) -> bool:
        t = self.tok
        return t.text == text and t.kind in ("punct", "ident")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.pos += 1
            return True
        return False

    def expect(self, text: str) -> Token:
        if not self.at(text):
            raise self.error(f"'{text}'")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind:
            raise self.error(what)
        return self.next()

    def name(self, what: str = "a name") -> str:
        """An identifier or a string literal (names that are not identifiers are quoted)."""
        t = self.tok
        if t.kind == "ident":
            self.pos += 1
            return t.text
        if t.kind == "string":
            self.pos += 1
            return unquote(t)  # type: ignore[return-value]
        raise self.error(what)

    def ref(self, sigil: str, what: str) -> tuple[str, str]:
        """A `%name#k` / `@name` reference: (full text as key, hint)."""
        t = self.tok
        if t.kind != "ref" or t.text[0] != sigil:
            raise self.error(what)
        self.pos += 1
        return t.text, ref_hint(t)

    def integer(self, what: str = "an integer") -> int:
        t = self.tok
        if t.kind != "number" or not re.fullmatch(r"-?\d+", t.text):
            raise self.error(what)
        self.pos += 1
        return int(t.text)

    def finish(self) -> None:
        if self.tok.kind != "eof":
            raise self.error("end of text")


def ref_hint(tok: Token) -> str:
    """The hint a `%`/`@` reference token stands for ("" for a numbered one)."""
    body = tok.text[1:]
    if body.startswith('"'):
        end = _match_string_end(body)
        return unquote(Token("string", body[:end], tok.line, tok.col + 1))  # type: ignore[return-value]
    base = body.split("#", 1)[0]
    return "" if base.isdigit() else base


def _match_string_end(body: str) -> int:
    m = re.match(_STRING, body)
    assert m is not None
    return m.end()
