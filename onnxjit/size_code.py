"""Size arithmetic of a symbolic program as Python code, generated once per program.

Binding a symbolic program to a call (`dynamic.SymbolicArtifact.bind`) evaluates a few hundred
`Sym` expressions: the checks of the input dims, the assumed relations, the temps' sizes, the
dims table, the output shapes. Walking the expression trees costs about a millisecond a call,
which a decoder stream (a new shape every token) pays at every step. Like the guards a tracing
JIT generates, this module turns the expressions into the source of two functions, compiled
once with `compile`:

- `sizes(shapes) -> (symbols, temp sizes, output shapes) | None`: unpack the input shapes
  (ranks fixed by the program), take each symbol from its first occurrence, check every input
  dim and every assumption (None if one fails), then evaluate the temps' sizes and the outputs;
- `table(symbols, offsets) -> list[int]`: the dims table, given the temps' arena offsets
  (the `@name` symbols).

Expressions become Python arithmetic on local names; `floordiv` goes through `_fd`, which gives
0 for a division by a size that is 0 in this call (nothing is then computed with it).
"""

from __future__ import annotations

import marshal
from collections.abc import Callable, Sequence
from types import CodeType
from typing import Any

from onnxjit.ir.types import Sym

Size = Any  # int | Sym


def _fd(a: int, b: int) -> int:
    return a // b if b else 0


class _Namer:
    """Python identifiers for symbol names (which may be any string in a model)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def __call__(self, sym: str) -> str:
        if sym not in self.names:
            self.names[sym] = f"s{len(self.names)}"
        return self.names[sym]


def _expr(d: Size, name: Callable[[str], str]) -> str:
    if isinstance(d, int):
        return str(d)
    if d.op == "var":
        return name(d.args[0])
    args = [_expr(a, name) for a in d.args]
    if d.op == "add":
        return "(" + " + ".join(args) + ")"
    if d.op == "mul":
        return "(" + " * ".join(args) + ")"
    if d.op == "floordiv":
        return f"_fd({args[0]}, {args[1]})"
    if d.op in ("max", "min"):
        return f"{d.op}({', '.join(args)})"
    raise ValueError(f"bad Sym op {d.op}")


def _tuple(items: Sequence[str]) -> str:
    return "(" + "".join(f"{x}, " for x in items) + ")"


class SizeCode:
    """The compiled size functions of one symbolic program (see the module docstring)."""

    def __init__(self, inputs: Sequence[tuple[Size, ...]], assumptions: Sequence[tuple],
                 temps: Sequence[Size], outputs: Sequence[tuple[Size, ...]],
                 dims: Sequence[Size]) -> None:
        name = _Namer()
        unpack = [_tuple([f"i{k}_{a}" for a in range(len(s))]) for k, s in enumerate(inputs)]
        bound, checks = [], []
        for k, shape in enumerate(inputs):
            for a, d in enumerate(shape):
                if isinstance(d, Sym) and d.op == "var" and d.args[0] not in name.names:
                    bound.append(f"    {name(d.args[0])} = i{k}_{a}")
                else:
                    checks.append((f"i{k}_{a}", d))
        self.symbols = list(name.names)
        conds = [f"{here} != {_expr(d, name)}" for here, d in checks]
        conds += [f"{_expr(a, name)} != {_expr(b, name)}" for a, b, *_ in assumptions]
        result = (f"({_tuple([_expr(t, name) for t in temps])}, "
                  f"{_tuple([_tuple([_expr(d, name) for d in s]) for s in outputs])})")
        entries = [_expr(d, name) for d in dims]
        offsets = [s for s in name.names if s.startswith("@")]
        unbound = set(name.names) - set(self.symbols) - set(offsets)
        syms = _tuple([name(s) for s in self.symbols])
        lines = ["def sizes(shapes):", "    try:", f"        {_tuple(unpack)} = shapes",
                 "    except (TypeError, ValueError):", "        return None", *bound]
        if unbound:  # a size no input dim gives: no call can be bound to this program
            lines.append("    return None")
        elif conds:
            lines += [f"    if {' or '.join(conds)}:", "        return None"]
        lines += [f"    return ({syms}, *{result})", "def table(symbols, offsets):",
                  f"    {syms} = symbols"]
        lines += [f"    {name(s)} = offsets[{s[1:]!r}]" for s in offsets]
        lines.append(f"    return [{', '.join(entries)}]")
        self._load("\n".join(lines) + "\n")

    @classmethod
    def from_source(cls, source: str, symbols: list[str], compiled: bytes | None = None
                    ) -> SizeCode:
        """The functions of a program loaded from the disk cache (its `source` and `symbols`
        as stored): nothing is parsed but the Python source, and not that when `compiled`
        (`marshalled()` by this Python) is given (a detector's 38 KB of size code took 18
        ms to compile, 0.1 ms to unmarshal)."""
        code = cls.__new__(cls)
        code.symbols = list(symbols)
        code._load(source, compiled)
        return code

    def marshalled(self) -> bytes:
        """The compiled code object, for `from_source` in a later process of this Python."""
        return marshal.dumps(self.code_object)

    def _load(self, source: str, compiled: bytes | None = None) -> None:
        self.source = source
        self.code_object = None
        if compiled is not None:
            try:
                self.code_object = marshal.loads(compiled)
            except (EOFError, ValueError, TypeError):
                self.code_object = None
        if not isinstance(self.code_object, CodeType):
            self.code_object = compile(source, "<onnxjit size code>", "exec")
        scope: dict[str, Any] = {"_fd": _fd}
        exec(self.code_object, scope)
        self.sizes: Callable[[tuple], tuple | None] = scope["sizes"]
        self.table: Callable[[tuple, dict[str, int]], list[int]] = scope["table"]
