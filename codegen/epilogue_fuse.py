"""A Matmul's epilogue applied in the tiled kernel's stores instead of in a pass over C.

The fused producers (`ir.ops.fused.epilogue.Epilogue.emit`) follow a Matmul with a nest over the
same window of C (off = the Matmul's c_off, ld = its ldc, m rows, n columns):

    for r in [0, m): prelude (scalar Ops and Loads: base = off + r*ld, per-row values)
        for c in [0, n): at = base + c; acc = C[at]; ... scalar Ops and Loads ...; C[at] = v

Run as its own pass it loads and stores every element of the block a second time (from L2; a
fifth of a small-depth pointwise conv's time, measured). Algorithm:
1) `match` recognizes exactly that nest: the loop bounds equal the window's (constants, or the
   run-time sizes of a symbolic program's product: the same variables), the prelude's and
   body's index arithmetic is evaluated as affine forms over the row, the column and the
   variables defined before the nest (so `base` must be off + r*ld and every load of C must be
   at `at`), loads elsewhere are at `at` (an extra of C's shape), at `c` (one value per
   column) or independent of c (a scalar, splat), the body's ops have a vector form
   (`VECTOR_OPS`), and the only store is the last statement, of C at `at`;
2) the tiled kernel (`matmul_kernel.TileGemm`) then, after each tile of the last depth block
   (KC; the earlier blocks store partial sums as before) is stored by the shared microkernel
   (`gemm_micro`), runs over the tile's rows while they are in L1: `Fused.row` once per row
   (the prelude, translated by the kernel's translator with r = the row) and `Fused.apply` on
   each vector of the row as loaded back (the body on vectors: loads at `at` / `c` become
   (masked) vector loads at the vector's columns, scalars are splat, ops go through the same
   `ScalarEmitter` rules, so results are bit-identical).
Anything else keeps the separate pass (`llvmgen` translates the nest as usual): the
small-product and narrow-float kernels. A top-level product split over threads takes its nest
into its blocks (`split_matmul.split_matmul`: `er = row + r`); `outer_forms` expands the block's
offsets so the block's window and nest still match here.
Measured, one thread, against the separate pass: pointwise conv + Clip 16->96 at 112x112
1.13x, 24->144 at 56x56 1.09x; 96->24 at 56x56 (bias only) 1.05x; MobileNetV2-like 1.044x
on one thread, 1.043x on two (the same bits).
"""

from __future__ import annotations

from llvmlite import ir

from onnxjit.codegen.irutil import splat
from onnxjit.codegen.scalar import compute_type, constant
from onnxjit.ir.loop_ranges import magnitude
from onnxjit.ir.loops import Const, Load, Loop, Matmul, Op, Operand, Stmt, Store, Var, walk

#: Ops the body may use on vectors: the ScalarEmitter's IRBuilder forms take vector operands.
VECTOR_OPS = frozenset({"add", "sub", "mul", "div", "max", "min", "select", "lt", "le", "gt",
                        "ge", "eq", "ne", "isnan", "and", "or", "copy", "cast", "neg", "abs"})

#: atom (a Var's id, "r", "c", 1 for the constant, or ("r", a Var's id): the row times a
#: run-time leading dim) -> int coefficient
Affine = dict


class Fused:
    """A matched epilogue (see the module docstring), bound to a kernel translator."""

    def __init__(self, mm: Matmul, nest: Loop, prelude: list[Stmt], inner: Loop,
                 at: Var, base: Operand, kinds: dict[int, str]):
        self.mm, self.nest, self.prelude, self.inner, self.at = mm, nest, prelude, inner, at
        self.base = base  # at = base + c
        self.kinds = kinds  # id(Load) in the body -> "acc", "at", "c" or "scalar"
        self.kt = None

    def bind(self, kt) -> Fused:
        self.kt = kt
        return self

    def row(self, b: ir.IRBuilder, r: ir.Value) -> None:
        """Emit the prelude for window row r (an i64)."""
        kt = self.kt
        kt.assign(self.nest.var, r)
        for s in self.prelude:
            kt.stmt(s)

    def apply(self, b: ir.IRBuilder, col: ir.Value, acc: ir.Value, lanes: int, vload
              ) -> ir.Value:
        """The epilogue of the vector `acc` (C's window columns col .. col + lanes - 1 of the
        row `row` set up) as the vector to store."""
        kt = self.kt
        vl = acc.type.count
        vals: dict[Var, ir.Value] = {}
        base = kt.index(self.base)

        def vec(x: Operand) -> ir.Value:
            if isinstance(x, Var) and x in vals:
                return vals[x]
            v = constant(x.value, x.dtype) if isinstance(x, Const) else kt.operand(x)
            return splat(b, v, vl)

        out = None
        for s in self.inner.body:
            if isinstance(s, Op) and s.dst is self.at:
                continue
            if isinstance(s, Load):
                kind = self.kinds[id(s)]
                if kind == "acc":
                    vals[s.dst] = acc
                elif kind == "scalar":
                    kt.stmt(s)
                else:
                    start = b.add(base, col) if kind == "at" else col
                    ptr = b.gep(kt.pointer(s.buf), [start], inbounds=True,
                                source_etype=compute_type(s.buf.dtype))
                    vals[s.dst] = vload(ptr, lanes, s.buf.dtype.itemsize)
            elif isinstance(s, Op):
                if not any(isinstance(a, Var) and a in vals for a in s.args):
                    kt.stmt(s)  # scalar: every operand is a scalar
                    continue
                args = [vec(a) for a in s.args]
                vals[s.dst] = kt.scalar.op(b, s.op, args, [a.dtype for a in s.args],
                                           s.dst.dtype, magnitude(kt.ranges, s.args[0]))
            else:  # the final Store
                out = vec(s.value)
        assert out is not None
        return out


def match(mm: Matmul, nest: Stmt, outer: dict[int, Affine] | None = None,
          vector: bool = True) -> Fused | None:
    """The epilogue nest `nest` following `mm`, when it has the exact form the tiled kernel can
    apply in its stores (see the module docstring), else None. `outer`: affine forms of
    variables defined before the nest (`outer_forms`), which are atoms otherwise. With
    `vector` False, any scalar op may compute the value (the nest then only has the form: row
    r of the nest touches row r of the product alone; `split_matmul.split_matmul` relies on it)."""
    if not (isinstance(nest, Loop) and not nest.parallel and nest.step == 1
            and _const(nest.start) == 0 and _same(nest.stop, mm.m) and nest.body
            and isinstance(mm.n, (int, Var)) and isinstance(mm.ldc, (int, Var))
            and mm.c.dtype.is_float and mm.c.dtype.itemsize in (4, 8)):
        return None
    *prelude, inner = nest.body
    if not (isinstance(inner, Loop) and not inner.parallel and inner.step == 1
            and _const(inner.start) == 0 and _same(inner.stop, mm.n) and inner.body):
        return None
    forms: dict[int, Affine | None] = dict(outer or {})
    forms.update({id(nest.var): {"r": 1}, id(inner.var): {"c": 1}})
    for s in prelude:
        if isinstance(s, Op):
            forms_of(s, forms)
        elif isinstance(s, Load) and s.buf is not mm.c:
            forms[id(s.dst)] = None
        else:
            return None
    body = inner.body
    for s in body:
        if isinstance(s, Op):
            forms_of(s, forms)
        elif isinstance(s, Load):
            forms[id(s.dst)] = None
    row_step = {"r": mm.ldc} if isinstance(mm.ldc, int) else {("r", id(mm.ldc)): 1}
    want_at = _add(_affine(mm.c_off, forms), {**row_step, "c": 1})
    last = body[-1]
    if want_at is None or not (isinstance(last, Store) and last.buf is mm.c
                               and isinstance(last.index, Var)
                               and _affine(last.index, forms) == want_at):
        return None
    at = last.index
    base = _base(at, body, forms)
    if base is None:
        return None
    kinds: dict[int, str] = {}
    local: set[int] = set()  # the body's vector values
    for s in body[:-1]:
        if isinstance(s, Op) and s.dst is at:
            continue
        if isinstance(s, Load):
            form = _affine(s.index, forms)
            if form == want_at:
                kind = "acc" if s.buf is mm.c else "at"
            elif s.buf is mm.c:
                return None
            elif form == {"c": 1}:
                kind = "c"
            elif form is not None and "c" not in form and not _uses_any([s.index], local):
                kind = "scalar"
            else:
                return None
            if kind in ("at", "c") and s.buf.dtype != mm.c.dtype:
                return None
            kinds[id(s)] = kind
            if kind != "scalar":
                local.add(id(s.dst))
        elif isinstance(s, Op):
            if any(a is inner.var or a is at or a is nest.var for a in s.args):
                return None
            if _uses_any(s.args, local):
                if (vector and s.op not in VECTOR_OPS) or s.dst.dtype.is_int or any(
                        a.dtype.is_int for a in s.args) or (
                        s.op == "cast" and s.args[0].dtype != s.dst.dtype):
                    return None  # integer lanes: the scalar rules' guards are not vectors
                local.add(id(s.dst))
        else:
            return None
    if last.value.dtype != mm.c.dtype or not _uses_any([last.value], local):
        return None
    return Fused(mm, nest, prelude, inner, at, base, kinds)


def _const(x: Operand) -> int | None:
    return int(x.value) if isinstance(x, Const) else None


def _same(x: Operand, size: object) -> bool:
    """The loop bound `x` is the Matmul size `size`: equal constants, or one run-time variable
    (a symbolic program's m, which `materialize-dims` loads once per kernel)."""
    return _const(x) == size if isinstance(size, int) else x is size


def _affine(x: Operand, forms: dict[int, Affine]) -> Affine | None:
    """x as an affine form (atoms: the row, the column, outer variables by id, 1)."""
    if isinstance(x, Const):
        if not x.dtype.is_int:
            return None
        return {1: int(x.value)} if int(x.value) else {}
    if id(x) in forms:
        return forms[id(x)]
    return {id(x): 1}  # a variable defined before the nest


def _add(a: Affine | None, b: Affine | None) -> Affine | None:
    if a is None or b is None:
        return None
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
        if out[k] == 0:
            del out[k]
    return out


def forms_of(s: Op, forms: dict[int, Affine]) -> None:
    """Record the affine form of an integer add/sub/mul Op's result (others: none)."""
    if not s.dst.dtype.is_int or len(s.args) != 2:
        forms[id(s.dst)] = None  # type: ignore[assignment]
        return
    a, b = (_affine(x, forms) for x in s.args)
    if s.op == "add":
        forms[id(s.dst)] = _add(a, b)
    elif s.op == "sub" and b is not None:
        forms[id(s.dst)] = _add(a, {k: -v for k, v in b.items()})
    elif s.op == "mul" and a is not None and isinstance(s.args[1], Const):
        c = int(s.args[1].value)
        forms[id(s.dst)] = {k: v * c for k, v in a.items() if v * c}
    elif s.op == "mul" and a == {"r": 1} and isinstance(s.args[1], Var) \
            and b == {id(s.args[1]): 1}:  # the row times a run-time leading dim
        forms[id(s.dst)] = {("r", id(s.args[1])): 1}
    else:
        forms[id(s.dst)] = None  # type: ignore[assignment]


def outer_forms(before: list[Stmt]) -> dict[int, Affine]:
    """Affine forms of the integer variables that the statements `before` (those preceding a
    product in its body) define with an Op at their own level and nowhere else: a split
    product's block window (offset row * ldc) and its epilogue's rows (row + r) then compare
    equal. A variable also assigned elsewhere (a reduction) stays an atom."""
    defs: dict[int, int] = {}
    for s in walk(before):
        if isinstance(s, (Op, Load)):
            defs[id(s.dst)] = defs.get(id(s.dst), 0) + 1
    forms: dict[int, Affine] = {}
    for s in before:
        if isinstance(s, Op) and defs[id(s.dst)] == 1:
            forms_of(s, forms)
    return {k: v for k, v in forms.items() if v is not None}


def _uses(x: Operand, ids: set[int]) -> bool:
    return isinstance(x, Var) and id(x) in ids


def _uses_any(args, ids: set[int]) -> bool:
    return any(_uses(a, ids) for a in args)


def _base(at: Var, body: list[Stmt], forms: dict) -> Operand | None:
    """The c-independent operand of `at = add(base, c)` (base comes from the prelude)."""
    for s in body:
        if isinstance(s, Op) and s.dst is at and s.op == "add" and len(s.args) == 2:
            x, y = s.args
            if _affine(y, forms) == {"c": 1}:
                return x
            if _affine(x, forms) == {"c": 1}:
                return y
    return None
