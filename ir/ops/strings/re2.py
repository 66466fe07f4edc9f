"""RE2 patterns (the syntax of ONNX RegexFullMatch) run with Python's `re`.

Python's `re` reads most RE2 syntax the same way. The differences that change results or fail
are handled by one left-to-right rewrite of the pattern, tracking whether we are inside a
character class:

- Perl classes are ASCII in RE2 (`\\d` = [0-9], `\\w` = [0-9A-Za-z_], `\\s` = [\\t\\n\\f\\r ])
  but Unicode in Python: they are spelled out (inside a class, the positive ones only; a
  negated one inside a class keeps Python's Unicode meaning);
- `\\z` (end of text) is Python's `\\Z`; `\\Q...\\E` quotes literally; `\\x{263a}` is a
  code point; `(?<name>...)` is Python's `(?P<name>...)`;
- POSIX classes inside a class (`[[:alpha:]]`) are spelled out (ASCII, as RE2);
- Unicode classes (`\\pN`, `\\p{Greek}`) and `\\C` have no `re` equivalent: UnsupportedError.

Python accepts more than RE2 (backreferences, lookaround, possessive quantifiers); such patterns
are run with Python's meaning rather than refused. `\\b` stays Unicode-aware (RE2: ASCII).
"""

from __future__ import annotations

import re

from onnxjit.errors import ModelError, UnsupportedError

_PERL = {"d": "0-9", "w": "0-9A-Za-z_", "s": "\\t\\n\\f\\r "}
_POSIX = {"alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ",
          "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9", "graph": "!-~", "lower": "a-z",
          "print": " -~", "punct": "!-/:-@\\[-`{-~", "space": "\\t\\n\\v\\f\\r ",
          "upper": "A-Z", "word": "0-9A-Za-z_", "xdigit": "0-9A-Fa-f"}


def translate(pattern: str, where: object = None) -> str:
    """The Python `re` spelling of an RE2 pattern (see the module docstring)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            e = pattern[i + 1]
            if e == "Q":
                end = pattern.find("\\E", i + 2)
                end = n if end < 0 else end
                out.append(re.escape(pattern[i + 2:end]))
                i = end + 2
                continue
            if e in "pPC":
                raise UnsupportedError(f"RegexFullMatch pattern {pattern!r}: RE2 escape '\\{e}' "
                                       "(Unicode classes / single bytes) is not supported",
                                       where=where)
            if e.lower() in _PERL and not (in_class and e.isupper()):
                body = _PERL[e.lower()]
                out.append(body if in_class else f"[{'^' if e.isupper() else ''}{body}]")
            elif e == "z":
                out.append("\\Z")
            elif e == "x" and pattern.startswith("{", i + 2) and "}" in pattern[i + 3:]:
                end = pattern.index("}", i + 3)  # \x{263a}: a code point of any width
                try:
                    out.append(f"\\U{int(pattern[i + 3:end], 16):08x}")
                except ValueError:
                    raise ModelError(f"RegexFullMatch pattern {pattern!r}: bad escape "
                                     f"{pattern[i:end + 1]!r}", where=where) from None
                i = end + 1
                continue
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            m = re.match(r"\[:(\^?)([a-z]+):\]", pattern[i:])
            if m:
                body = _POSIX.get(m.group(2))
                if body is None or m.group(1):
                    raise UnsupportedError(f"RegexFullMatch pattern {pattern!r}: POSIX class "
                                           f"{m.group(0)} is not supported", where=where)
                out.append(body)
                i += m.end()
                continue
            if ch == "]":
                in_class = False
            out.append(ch)
            i += 1
            continue
        if ch == "[":
            in_class = True
            out.append(ch)
            i += 1
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < n and pattern[i] == "]":  # a leading ']' is a literal member
                out.append("\\]")
                i += 1
            continue
        if pattern.startswith("(?<", i) and not pattern.startswith(("(?<=", "(?<!"), i):
            out.append("(?P<")  # RE2's (?<name>...) is Python's (?P<name>...)
            i += 3
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def compile_re2(pattern: str, where: object = None) -> re.Pattern:
    """`translate` then `re.compile`; an invalid pattern is a ModelError naming it."""
    try:
        return re.compile(translate(pattern, where))
    except re.error as e:
        raise ModelError(f"RegexFullMatch pattern {pattern!r} is invalid: {e}",
                         where=where) from None
