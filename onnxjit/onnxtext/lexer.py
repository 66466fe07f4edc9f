"""Tokenizer and token cursor for the ONNX textual syntax (spec/003_...).

Algorithm: one compiled regular expression with a named group per token kind is run over the
whole text with `finditer`; whitespace and `#` comments (to end of line) are skipped. Tokens go
into three parallel lists (kind, value, offset) that the recursive-descent parser walks with an
index, so the hot path is list indexing, not object creation. Line and column are computed from
the offset only when an error is reported.

Token kinds: `id` (identifiers, keywords and type names alike: the grammar is context-sensitive,
so the parser decides), `int`, `float` (including `-inf`/`-nan`; a bare `inf`/`nan` stays an `id`
because it can be a name), `str` (value already unescaped), `p` (punctuation: one of
`( ) [ ] { } < > , : = @ ? .` or the arrow `=>`), and `eof`.

String literals follow the onnx reference parser: a backslash makes the next character literal
(`\\"` is a quote, `\\\\` a backslash, `\\n` the letter n), and raw newlines are allowed inside.
"""

from __future__ import annotations

import re
from typing import NoReturn

from onnxjit.errors import ModelError

_TOKEN = re.compile(
    r"""
    (?P<ws>(?:[ \t\r\n\v\f]+|\#[^\n]*)+)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<num>-?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)
  | (?P<negspecial>-(?:[iI][nN][fF](?:[iI][nN][iI][tT][yY])?|[nN][aA][nN])(?![A-Za-z0-9_]))
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<p>=>|[()\[\]{}<>,:=@?.])
    """,
    re.VERBOSE | re.DOTALL,
)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of a character offset."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def describe(kind: str, value: object) -> str:
    """A token as an error message shows it."""
    if kind == "eof":
        return "end of input"
    if kind == "str":
        s = str(value)
        s = s if len(s) <= 30 else s[:27] + "..."
        return '"' + s.replace("\n", "\\n") + '"'
    return f"'{value}'"


def fail(text: str, offset: int, message: str) -> NoReturn:
    """Raise the one-line ModelError every syntax error uses."""
    line, col = line_col(text, offset)
    message = message.replace("\n", " ")
    raise ModelError(f"ONNX text, line {line}, column {col}: {message}")


def tokenize(text: str) -> tuple[list[str], list[object], list[int]]:
    """(kinds, values, offsets) of the tokens of `text`, ending with an `eof` token."""
    kinds: list[str] = []
    values: list[object] = []
    offsets: list[int] = []
    pos = 0
    n = len(text)
    match = _TOKEN.match
    while pos < n:
        m = match(text, pos)
        if m is None:
            _bad_char(text, pos)
        kind = m.lastgroup
        if kind != "ws":
            s = m.group()
            if kind == "num":
                is_float = "." in s or "e" in s or "E" in s
                kinds.append("float" if is_float else "int")
                values.append(s)
            elif kind == "str":
                body = s[1:-1]
                kinds.append("str")
                values.append(_ESCAPE.sub(r"\1", body) if "\\" in body else body)
            elif kind == "negspecial":
                kinds.append("float")
                values.append(s)
            else:
                kinds.append(kind)  # type: ignore[arg-type]
                values.append(s)
            offsets.append(pos)
        pos = m.end()
    kinds.append("eof")
    values.append("")
    offsets.append(n)
    return kinds, values, offsets


def _bad_char(text: str, pos: int) -> NoReturn:
    ch = text[pos]
    if ch == '"':
        fail(text, pos, "unterminated string literal; expected a closing '\"' before the end "
                        "of the input")
    if ch == "-":
        fail(text, pos, "unexpected '-'; expected a number after a minus sign")
    fail(text, pos, f"unexpected character {ch!r}; expected an identifier, a number, a string "
                    "or one of ( ) [ ] { } < > , : = => @ ? .")


class Cursor:
    """The token stream with one-token lookahead and the error helpers the parsers share."""

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise ModelError(f"ONNX text must be a str, not {type(text).__name__}")
        self.text = text
        self.kinds, self.vals, self.offs = tokenize(text)
        self.i = 0

    # -- looking -----------------------------------------------------------------------------
    def kind(self, k: int = 0) -> str:
        return self.kinds[min(self.i + k, len(self.kinds) - 1)]

    def val(self, k: int = 0) -> object:
        return self.vals[min(self.i + k, len(self.vals) - 1)]

    def at(self, p: str) -> bool:
        """Is the current token the punctuation `p`?"""
        return self.kinds[self.i] == "p" and self.vals[self.i] == p

    def at_id(self) -> bool:
        return self.kinds[self.i] == "id"

    # -- consuming ---------------------------------------------------------------------------
    def accept(self, p: str) -> bool:
        if self.kinds[self.i] == "p" and self.vals[self.i] == p:
            self.i += 1
            return True
        return False

    def expect(self, p: str, context: str = "") -> None:
        if not self.accept(p):
            self.error(f"'{p}'" + (f" {context}" if context else ""))

    def ident(self, what: str = "an identifier") -> str:
        if self.kinds[self.i] != "id":
            self.error(what)
        v = self.vals[self.i]
        self.i += 1
        return v  # type: ignore[return-value]

    def quotable_ident(self, what: str = "a name") -> str:
        """An identifier or a quoted string (names that are not identifiers are quoted)."""
        if self.kinds[self.i] not in ("id", "str"):
            self.error(what)
        v = self.vals[self.i]
        self.i += 1
        return v  # type: ignore[return-value]

    def string(self, what: str = "a string literal") -> str:
        if self.kinds[self.i] != "str":
            self.error(what)
        v = self.vals[self.i]
        self.i += 1
        return v  # type: ignore[return-value]

    def integer(self, what: str = "an integer") -> int:
        if self.kinds[self.i] != "int":
            self.error(what)
        v = int(self.vals[self.i])  # type: ignore[arg-type]
        self.i += 1
        return v

    # -- errors ------------------------------------------------------------------------------
    def error(self, expected: str, at: int | None = None) -> NoReturn:
        """Raise: the token at index `at` (default: the current one) is not what was expected."""
        j = self.i if at is None else at
        tok = describe(self.kinds[j], self.vals[j])
        fail(self.text, self.offs[j], f"unexpected {tok}; expected {expected}")

    def error_here(self, message: str, at: int | None = None) -> NoReturn:
        """Raise a free-form message positioned at token `at` (default: the current one)."""
        j = self.i if at is None else at
        fail(self.text, self.offs[j], message)

    def at_end(self) -> bool:
        return self.kinds[self.i] == "eof"
