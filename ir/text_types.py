"""Value types and symbolic dims in IR text (shared by the graph and loop text forms).

Types print as `str(type)` does: `f32[N,(N + 1),?]`, `f32[*]` (unknown rank), `seq(f32[3])`,
`seq(?)`, `optional(...)`, `map(i64, f32[])`, `sparse_f32[2,2]`. Dims print as
`types.dim_str` does (`3`, `N`, `(2*N + 1)`, `(N // 2)`, `(max(A, B))`, `?`), with two
differences that keep the text unambiguous: a symbol whose name is not an identifier is quoted,
and a product used as a divisor is parenthesised (`N // (2*M)`).

Parsing builds dims with the Sym operators (`sym_add`, `sym_mul`, `sym_floordiv`, `sym_max`), so
a printed canonical expression parses back to an equal canonical `Sym`. Grammar:
    dim    := '?' | expr
    expr   := term ('+' term)*
    term   := factor (('*' | '//') factor)*
    factor := INT | NAME | ('max' | 'min') '(' expr ',' expr ')' | '(' expr ')'
"""

from __future__ import annotations

from onnxjit.ir.text_lexer import Cursor, name_text
from onnxjit.ir.types import (
    Dim,
    DType,
    MapType,
    OptionalType,
    SequenceType,
    SparseTensorType,
    Sym,
    TensorType,
    ValueType,
    sym_add,
    sym_floordiv,
    sym_max,
    sym_min,
    sym_mul,
)


def dim_text(d: Dim) -> str:
    if d is None:
        return "?"
    if isinstance(d, Sym) and d.op != "var":
        return f"({_sym_text(d)})"
    return _sym_text(d)


def expr_text(d: int | Sym) -> str:
    """A size expression without the outer parentheses `dim_text` puts on compound ones."""
    return _sym_text(d)


def parse_expr(cur: Cursor) -> int | Sym:
    """A size expression (`expr` of the grammar above)."""
    return _expr(cur)


def _sym_text(d: int | Sym) -> str:
    if isinstance(d, int):
        return str(d)
    if d.op == "var":
        return name_text(d.args[0])
    if d.op in ("max", "min"):
        return f"{d.op}({', '.join(_sym_text(a) for a in d.args)})"
    if d.op == "floordiv":
        a, b = d.args
        return f"{_operand(a)} // {_operand(b, divisor=True)}"
    return (" + " if d.op == "add" else "*").join(_operand(a) for a in d.args)


def _operand(a: int | Sym, divisor: bool = False) -> str:
    # As Sym.__str__ (sums and quotients in parentheses), plus a product used as a divisor.
    if isinstance(a, Sym) and (a.op in ("add", "floordiv") or divisor and a.op == "mul"):
        return f"({_sym_text(a)})"
    return _sym_text(a)


def shape_text(shape: tuple | None) -> str:
    if shape is None:
        return "[*]"
    return "[" + ",".join(dim_text(d) for d in shape) + "]"


def type_text(t: ValueType | None) -> str:
    if t is None:
        return "?"
    if isinstance(t, TensorType):
        return t.dtype.short + shape_text(t.shape)
    if isinstance(t, SparseTensorType):
        return "sparse_" + t.dtype.short + shape_text(t.shape)
    if isinstance(t, SequenceType):
        return f"seq({type_text(t.elem)})"
    if isinstance(t, OptionalType):
        return f"optional({type_text(t.elem)})"
    if isinstance(t, MapType):
        return f"map({t.key.short}, {type_text(t.value)})"
    raise ValueError(f"cannot print type {t!r}")


# --------------------------------------------------------------------------- parsing


def parse_dtype(cur: Cursor) -> DType:
    tok = cur.tok
    if tok.kind == "ident":
        try:
            d = DType.from_short(tok.text)
        except ValueError:
            pass
        else:
            cur.next()
            return d
    raise cur.error("an element type (f32, i64, bool, ...)")


def is_dtype_name(text: str) -> bool:
    try:
        DType.from_short(text)
    except ValueError:
        return False
    return True


def parse_shape(cur: Cursor) -> tuple | None:
    cur.expect("[")
    if cur.accept("*"):
        cur.expect("]")
        return None
    dims: list[Dim] = []
    if not cur.accept("]"):
        dims.append(parse_dim(cur))
        while cur.accept(","):
            dims.append(parse_dim(cur))
        cur.expect("]")
    return tuple(dims)


def parse_dim(cur: Cursor) -> Dim:
    if cur.accept("?"):
        return None
    return _expr(cur)


def _expr(cur: Cursor) -> int | Sym:
    out = _term(cur)
    while cur.accept("+"):
        out = sym_add(out, _term(cur))
    return out


def _term(cur: Cursor) -> int | Sym:
    out = _factor(cur)
    while True:
        if cur.accept("*"):
            out = sym_mul(out, _factor(cur))
        elif cur.accept("//"):
            out = sym_floordiv(out, _factor(cur))
        else:
            return out


def _factor(cur: Cursor) -> int | Sym:
    tok = cur.tok
    if tok.kind == "number":
        return cur.integer("an integer dim")
    if cur.accept("("):
        out = _expr(cur)
        cur.expect(")")
        return out
    if tok.kind == "ident" and tok.text in ("max", "min") and cur.peek().text == "(":
        cur.next()
        cur.expect("(")
        a = _expr(cur)
        cur.expect(",")
        b = _expr(cur)
        cur.expect(")")
        return (sym_max if tok.text == "max" else sym_min)(a, b)
    if tok.kind in ("ident", "string"):
        return Sym.var(cur.name())
    raise cur.error("a dim (an integer, a symbol, '?' or an expression)")


def parse_type(cur: Cursor) -> ValueType | None:
    """A value type; `?` (no type) gives None."""
    if cur.accept("?"):
        return None
    tok = cur.tok
    if tok.kind == "ident" and cur.peek().text == "(" and tok.text in ("seq", "optional",
                                                                       "map"):
        cur.next()
        cur.expect("(")
        if tok.text == "map":
            key = parse_dtype(cur)
            cur.expect(",")
            value = parse_type(cur)
            if value is None:
                raise cur.error("a map value type")
            cur.expect(")")
            return MapType(key, value)
        elem = parse_type(cur)
        cur.expect(")")
        return SequenceType(elem) if tok.text == "seq" else OptionalType(elem)
    if tok.kind == "ident" and tok.text.startswith("sparse_") and is_dtype_name(tok.text[7:]):
        cur.next()
        return SparseTensorType(DType.from_short(tok.text[7:]), parse_shape(cur))
    dtype = parse_dtype(cur)
    return TensorType(dtype, parse_shape(cur))
