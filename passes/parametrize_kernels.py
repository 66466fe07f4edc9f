"""parametrize-kernels: kernels equal but for some integer constants share one function.

A CNN's layers are the same loops over other sizes: DenseNet-121's 58 batch-norm + ReLU
kernels differ only in their channel counts, a text recognizer's seven depthwise convs in
channels and widths. Code generation already gives kernels with equal canonical text one
function (`codegen.modules.KernelPlan`: twins differing only in the buffers they touch); this
pass makes such layers twins, so LLVM compiles one function where it compiled one per layer.

Algorithm (the last pass on the loop IR):
1) the slots of a kernel are its i64 constants that may become run-time values without
   changing what the code does or how LLVM can compile it: loop bounds, Load/Store indices,
   and the operands of index arithmetic and comparisons (`PARAM_OPS`); a divisor is never one
   (a division by a run-time value is a real division, not a shift or a multiply) and kernels
   with a Matmul are left alone (the GEMM driver specialises on its constant sizes and the
   epilogue it fuses);
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
#: (not div/rem: see the module docstring; not bitwise ops, casts or math)
PARAM_OPS = frozenset({"add", "sub", "mul", "min", "max", "select", "copy",
                       "eq", "ne", "lt", "le", "gt", "ge"})
#: members a group needs before it is worth a parameter buffer per member
MIN_GROUP = 2


class _Slot:
    """One i64 constant of a statement, and how to put another operand in its place."""

    __slots__ = ("value", "put")

    def __init__(self, value: Const, put: Callable[[object], None]):
        self.value = value
        self.put = put


def _is_slot(x: object) -> bool:
    return isinstance(x, Const) and x.dtype == DType.INT64 and not isinstance(x.value, bool)


def _op_slots(s: Op, out: list[_Slot]) -> None:
    if s.op not in PARAM_OPS:
        return
    for i, a in enumerate(s.args):
        if _is_slot(a):
            def put(v: object, s: Op = s, i: int = i) -> None:
                s.args = s.args[:i] + (v,) + s.args[i + 1:]
            out.append(_Slot(a, put))  # type: ignore[arg-type]


def _slots(body: list[Stmt], out: list[_Slot]) -> None:
    """The slots of `body` in program order (loop bounds before the loop's body)."""
    for s in body:
        if isinstance(s, Op):
            _op_slots(s, out)
        elif isinstance(s, (Load, Store)) and _is_slot(s.index):
            out.append(_Slot(s.index, lambda v, s=s: setattr(s, "index", v)))  # type: ignore[arg-type]
        elif isinstance(s, Loop):
            for f in ("start", "stop"):
                x = getattr(s, f)
                if _is_slot(x):
                    out.append(_Slot(x, lambda v, s=s, f=f: setattr(s, f, v)))
            _slots(s.body, out)


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


def run(program: Program, ctx: PassContext) -> PassResult:
    groups: dict[str, list[tuple[Kernel, list[_Slot]]]] = {}
    for k in program.kernels:
        if any(isinstance(s, (Check, Matmul)) for s in walk(k.body)):
            continue
        slots: list[_Slot] = []
        _slots(k.body, slots)
        if not slots:
            continue
        key = _skeleton(k, slots)
        if key is not None:
            groups.setdefault(key, []).append((k, slots))
    next_slot = max((b.slot for b in program.buffers if b.kind == "const"), default=-1) + 1
    changed = False
    for members in groups.values():
        if len(members) < MIN_GROUP:
            continue
        values = [[sl.value.value for sl in slots] for _, slots in members]
        params: dict[tuple, int] = {}  # the members' values of a parameter -> its index
        param_of: dict[int, int] = {}  # slot position -> parameter
        for p in range(len(values[0])):
            col = tuple(v[p] for v in values)
            if len(set(col)) > 1:
                param_of[p] = params.setdefault(col, len(params))
        if not params:
            continue  # already twins
        cols = sorted(params, key=params.__getitem__)
        for m, (k, slots) in enumerate(members):
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
