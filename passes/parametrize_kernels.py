"""parametrize-kernels: kernels equal but for some integer constants share one function.

A CNN's layers are the same loops over other sizes: DenseNet-121's 1x1 convolutions differ
only in their depth (the channels concatenated so far), its batch-norm + ReLU kernels in their
channel counts. Code generation already gives kernels with equal canonical text one function
(`codegen.modules.KernelPlan`: twins differing only in the buffers they touch); this pass
makes such layers twins, so LLVM compiles one function where it compiled one per layer.

Algorithm (the last pass on the loop IR):
1) the slots of a kernel are its i64 constants that may become run-time values without changing
   how well LLVM compiles it: outside innermost loops (INNER_CONSTANT), the bounds of loops of
   MIN_TRIP trips or more, Load/Store indices and the operands of index arithmetic and
   comparisons (`PARAM_OPS`), and divisors at most DIVIDE_DEPTH loops deep (a division by a
   run-time value is a real division, not a shift or a multiply: once per channel plane, where a
   symbolic program's depthwise conv takes the channel back from its batch x channels loop, it
   costs nothing; per element it would). An innermost loop keeps its bounds and body: its trip
   count decides its vector form, and its clamps and strides fold away when constant (measured,
   Inception-v2, one thread: with those as parameters its Winograd input transforms ran 2.1x and
   its max pools 1.5x slower). Of a float Matmul, the depth, leading dims and offsets are slots
   (`MATMUL_FIELDS`: the tiled GEMM runs its depth in blocks whatever it is, and its row split
   estimates a run-time depth by its hint), never m and n (the driver's tiles and tails are
   chosen for them) unless n is counted at run time already (a symbolic program's pointwise
   convs: then m is a slot too, `RUNTIME_M`; the loop of the product's epilogue over its rows
   has to be one, MIN_TRIP rows or more, for two layers to share a function); integer
   products are left alone (their AMX and VNNI kernels want a constant depth);
2) a kernel's skeleton is its canonical text (`ir.loop_canon.kernel_key`, buffers named by
   argument, no shapes) with every slot replaced by a placeholder variable; kernels without a
   `Check` and with equal skeletons form a group;
3) in a group of two or more, a slot whose value differs between members becomes a parameter
   (slots whose values agree in every member share one): each member gets a small i64 const
   buffer holding its values, loaded into variables at the kernel's start, which replace the
   slots; slots equal in every member stay constants. The members' canonical texts are then
   equal, and `KernelPlan` gives them one function called with each member's own buffers.
The parameters' values are the members' size hints (`Kernel.size_hints`), so cost estimates
(the parallel grain) stay those of the first member, whose function the group calls.
Measured (this Intel guest, fresh processes): DenseNet-121 137 -> 30 kernel functions, LLVM IR
3.3 -> 1.6 MB, cold compile + first call 7.0-8.5 s -> 4.6-5.0 s; steady state within 2% on
DenseNet-121 and Inception-v1/v2 (same process, alternated). Divisors as parameters (this
Zen 3 guest, symbolic programs): an OCR recognizer's 7 depthwise kernels become 2 functions,
its compile 4.7-5.6 -> 3.2 s, an OCR detector's 8.2-10.0 -> 6.3-7.1 s; steady state of both,
MiniLM and the decoder within noise (0.96-1.04x, alternated).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxjit.ir.loop_canon import kernel_key
from onnxjit.ir.loops import (
    Buffer,
    Check,
    Const,
    Kernel,
    Load,
    Loop,
    Matmul,
    Op,
    Program,
    Stmt,
    Store,
    Var,
    i64,
    walk,
)
from onnxjit.ir.types import DType
from onnxjit.passes import PassContext, PassResult

name = "parametrize-kernels"
level = "loops"

#: ops whose i64 constant operands may be parameters: index arithmetic and comparisons
#: (div/rem only as DIVIDE_OPS below; not bitwise ops, casts or math)
PARAM_OPS = frozenset({"add", "sub", "mul", "min", "max", "select", "copy",
                       "eq", "ne", "lt", "le", "gt", "ge"})
#: div/rem whose constant operands may be parameters when at most DIVIDE_DEPTH loops enclose
#: them, never in an innermost loop (a run-time divisor is a real division: fine once per
#: plane or row block, not per element)
DIVIDE_OPS, DIVIDE_DEPTH = frozenset({"div", "rem"}), 2
#: members a group needs before it is worth a parameter buffer per member
MIN_GROUP = 2
#: a loop of fewer constant trips keeps its bounds: LLVM unrolls such loops, and a vector
#: loop of few trips runs as masked vectors when they are constants but in the scalar
#: remainder when they are not (measured, Inception-v2, one thread: its Winograd input
#: transforms 2.1x and max pools 1.5x slower with every bound a parameter)
MIN_TRIP = 64
#: innermost loops keep their bounds and bodies (see the module docstring; False: measured
#: slower)
INNER_CONSTANT = True
#: the fields of a float Matmul that are slots (see the module docstring)
MATMUL_FIELDS = ("k", "lda", "ldb", "ldc", "c_off", "a_off", "b_off")
MATMUL = True
#: a product whose n is counted at run time (a symbolic program's) also has m as a slot
RUNTIME_M = True
_SIZE_FIELDS = ("m", "k", "lda", "ldb", "ldc")  # ints, not operands, when constant


class _Slot:
    """One i64 constant of a statement, and how to put another operand in its place."""

    __slots__ = ("value", "put")

    def __init__(self, value: Const, put: Callable[[object], None]):
        self.value = value
        self.put = put


def _is_slot(x: object) -> bool:
    return isinstance(x, Const) and x.dtype == DType.INT64 and not isinstance(x.value, bool)


def _op_slots(s: Op, out: list[_Slot], depth: int) -> None:
    if s.op not in PARAM_OPS and not (s.op in DIVIDE_OPS and depth <= DIVIDE_DEPTH):
        return
    for i, a in enumerate(s.args):
        if _is_slot(a):
            def put(v: object, s: Op = s, i: int = i) -> None:
                s.args = s.args[:i] + (v,) + s.args[i + 1:]
            out.append(_Slot(a, put))  # type: ignore[arg-type]


def _innermost(loop: Loop) -> bool:
    return not any(isinstance(s, Loop) for s in loop.body)


def _slots(body: list[Stmt], out: list[_Slot], inner: bool = False, depth: int = 0) -> None:
    """The slots of `body` in program order (loop bounds before the loop's body); nothing
    in or bounding an innermost loop when INNER_CONSTANT (`inner`: body is one)."""
    for s in body:
        if inner and INNER_CONSTANT:
            if isinstance(s, Loop):
                _slots(s.body, out, _innermost(s), depth + 1)
            continue
        if isinstance(s, Op):
            _op_slots(s, out, depth)
        elif isinstance(s, (Load, Store)) and _is_slot(s.index):
            out.append(_Slot(s.index, lambda v, s=s: setattr(s, "index", v)))  # type: ignore[arg-type]
        elif isinstance(s, Loop):
            short = _is_slot(s.start) and _is_slot(s.stop) and \
                s.stop.value - s.start.value < MIN_TRIP  # type: ignore[union-attr]
            innermost = _innermost(s)
            for f in () if short or innermost and INNER_CONSTANT else ("start", "stop"):
                x = getattr(s, f)
                if _is_slot(x):
                    out.append(_Slot(x, lambda v, s=s, f=f: setattr(s, f, v)))
            _slots(s.body, out, innermost, depth + 1)


def _runtime_m(s: Matmul) -> bool:
    return RUNTIME_M and not isinstance(s.n, int) and isinstance(s.m, int)


def _matmul_slots(products: list[Matmul], out: list[_Slot]) -> None:
    for s in products:
        for f in (*MATMUL_FIELDS, "m") if _runtime_m(s) else MATMUL_FIELDS:
            x = getattr(s, f)
            if isinstance(x, int) and not isinstance(x, bool):
                x = i64(x)
            if _is_slot(x):
                out.append(_Slot(x, lambda v, s=s, f=f: setattr(
                    s, f, v.value if isinstance(v, Const) and f in _SIZE_FIELDS else v)))


def _skeleton(kernel: Kernel, slots: list[_Slot]) -> str | None:
    """The kernel's canonical text with a placeholder in every slot (the kernel is left as
    it was)."""
    for sl in slots:
        sl.put(Var(DType.INT64, "slot"))
    try:
        return kernel_key(kernel)
    finally:
        for sl in slots:
            sl.put(sl.value)


def _print(kernel: Kernel, stmts: list[Stmt], slots: list[_Slot]) -> tuple:
    """What kernels of equal skeletons have in common (cheap): statement count, flags,
    buffer dtypes in order of first use, slot count."""
    return (len(stmts), kernel.contract, kernel.gather, len(slots),
            tuple(b.dtype for b in kernel.buffers()))


def run(program: Program, ctx: PassContext) -> PassResult:
    candidates: dict[tuple, list[tuple[Kernel, list[_Slot]]]] = {}
    for n, k in enumerate(program.kernels):
        k.share_key = f"\0own {n}"  # shares with no other kernel (unless set below)
        stmts = list(walk(k.body))
        if any(isinstance(s, Check) for s in stmts):
            continue
        slots: list[_Slot] = []
        products = [s for s in stmts if isinstance(s, Matmul)]
        if not products or MATMUL and not any(s.rank1 or not s.c.dtype.is_float
                                              for s in products):
            _matmul_slots(products, slots)  # (integer products: exact twins only)
            _slots(k.body, slots)
        candidates.setdefault(_print(k, stmts, slots), []).append((k, slots))
    groups: dict[str, list[tuple[Kernel, list[_Slot]]]] = {}
    for same in candidates.values():
        if len(same) < 2:
            continue  # no other kernel can have its skeleton: no printing
        for k, slots in same:
            key = _skeleton(k, slots)
            if key is not None:
                groups.setdefault(key, []).append((k, slots))
    next_slot = max((b.slot for b in program.buffers if b.kind == "const"), default=-1) + 1
    changed = False
    for key, members in groups.items():
        values = [[sl.value.value for sl in slots] for _, slots in members]
        params: dict[tuple, int] = {}  # the members' values of a parameter -> its index
        param_of: dict[int, int] = {}  # slot position -> parameter
        for p in range(len(values[0])):
            col = tuple(v[p] for v in values)
            if len(set(col)) > 1:
                param_of[p] = params.setdefault(col, len(params))
        if not params or len(members) < MIN_GROUP:
            for (k, _), v in zip(members, values):  # twins where every value agrees
                k.share_key = f"{key}\0{v}"
            continue
        cols = sorted(params, key=params.__getitem__)
        for m, (k, slots) in enumerate(members):
            k.share_key = key  # equal canonical texts once the parameters are in
            data = np.array([col[m] for col in cols], dtype=np.int64)
            buf = Buffer(f"{k.name}_params", DType.INT64, (len(cols),), "const",
                         slot=next_slot, data=data)
            next_slot += 1
            program.buffers.append(buf)
            pvars = [Var(DType.INT64, f"kp{i}") for i in range(len(cols))]
            for p, i in param_of.items():
                slots[p].put(pvars[i])
            k.body[:0] = [Load(v, buf, i64(i)) for i, v in enumerate(pvars)]
            for v, x in zip(pvars, data.tolist()):
                k.size_hints[v] = x
        changed = True
    return PassResult(program, changed)
