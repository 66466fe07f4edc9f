"""The program's entry points: root buffer pointers, then the kernels in order.

`<prefix>_entry(io, consts, arena)` computes every root buffer's pointer (io[slot] for inputs
and outputs, consts[slot], arena + offset for temps) and calls the kernels in order, returning
the first nonzero status (a failed `Check`). The runtime appends two slots to the consts
table, `parallel_for`'s address and the thread count (`pool.pool_slots`): object code cached on
disk holds no address, and `Program.consts` slots keep their numbers. A symbolic program's
`dims` table (its sizes for this call: `Program.dims`) is the slot after those two; its temps
sit at the arena offsets the table holds (`"@<temp>"` slots).

`<prefix>_entry_py(a0, ..., consts, arena)` reads each numpy array's data pointer and flags
straight from the PyObject, returns -1 unless every array is C-contiguous and aligned (outputs
also writeable), and calls the entry.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from onnxjit.codegen.irutil import i64c, load_elem, store_elem
from onnxjit.codegen.scalar import I1, I8, I32
from onnxjit.errors import CompileError
from onnxjit.ir.loops import Buffer, Program
from onnxjit.ir.types import Sym

PTR = ir.PointerType()
I64 = ir.IntType(64)

#: Byte offsets of `data` and `flags` in numpy's PyArrayObject_fields on 64-bit CPython:
#: ob_refcnt@0, ob_type@8, data@16, nd@24, dimensions@32, strides@40, base@48, descr@56, flags@64.
DATA_OFFSET = 16
FLAGS_OFFSET = 64
NPY_C_CONTIGUOUS, NPY_ALIGNED, NPY_WRITEABLE = 0x1, 0x100, 0x400


def n_io(program: Program) -> int:
    """Number of io slots: inputs then outputs."""
    slots = [b.slot for b in program.inputs + program.outputs]
    return max(len(slots), max(slots, default=-1) + 1)


def entry(module: ir.Module, program: Program, kernels: list[Any],
           name: str, n_consts: int) -> ir.Function:
    fn = ir.Function(module, ir.FunctionType(I32, [PTR, PTR, PTR]), name)
    fn.attributes.add("nounwind")
    io, consts, arena = fn.args
    io.name, consts.name, arena.name = "io", "consts", "arena"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ptrs: dict[int, ir.Value] = {}
    dim_slot = {d: k for k, d in enumerate(program.dims)}

    def root_ptr(r: Buffer) -> ir.Value:
        p = ptrs.get(id(r))
        if p is None:
            if r.kind in ("input", "output"):
                p = load_elem(b, io, i64c(r.slot), PTR, 8)
            elif r.kind == "const":
                p = load_elem(b, consts, i64c(r.slot), PTR, 8)
            elif r.kind == "dims":
                p = load_elem(b, consts, i64c(n_consts + 2), PTR, 8)
            elif r.kind == "temp" and r.offset < 0 and program.dims:
                slot = dim_slot.get(Sym.var("@" + r.name))
                if slot is None:
                    raise CompileError(f"temp buffer {r.name} has no slot in the dims table")
                dims = root_ptr(next(x for x in program.buffers if x.kind == "dims"))
                off = load_elem(b, dims, i64c(slot), I64, 8)
                p = b.gep(arena, [off], inbounds=True, source_etype=I8)
            elif r.kind == "temp":
                if r.offset < 0:
                    raise CompileError(f"temp buffer {r.name} has no arena offset "
                                       "(run plan-memory)")
                p = load_elem_ptr(b, arena, r.offset)
            else:
                raise CompileError(f"buffer {r.name} of kind '{r.kind}' has no storage")
            ptrs[id(r)] = p
        return p

    pool: list[ir.Value] = []
    if any(kt.plan for kt in kernels):
        nthreads = load_elem(b, consts, i64c(n_consts + 1), PTR, 8)
        pool = [load_elem(b, consts, i64c(n_consts), PTR, 8), b.ptrtoint(nthreads, I64)]
    for kt in kernels:
        args = [load_elem_ptr(b, root_ptr(r), off) for r, off in kt.roots]
        rc = b.call(kt.fn, args + (pool if kt.plan else []))
        if kt.has_checks:
            fail = fn.append_basic_block("fail")
            cont = fn.append_basic_block("ok")
            b.cbranch(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), fail, cont)
            b.position_at_end(fail)
            b.ret(rc)
            b.position_at_end(cont)
    b.ret(ir.Constant(I32, 0))
    return fn


def load_elem_ptr(b: ir.IRBuilder, base: ir.Value, byte_offset: int) -> ir.Value:
    """base + byte_offset as a pointer (base itself for 0)."""
    if not byte_offset:
        return base
    return b.gep(base, [i64c(byte_offset)], inbounds=True, source_etype=I8)


def entry_py(module: ir.Module, program: Program, entry: ir.Function, name: str
              ) -> ir.Function:
    count = n_io(program)
    n_in = len(program.inputs)
    fn = ir.Function(module, ir.FunctionType(I32, [PTR] * count + [PTR, PTR]), name)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    io = b.alloca(PTR, size=i64c(max(1, count)), name="io")
    io.type = PTR
    ok: ir.Value = ir.Constant(I1, 1)
    for k in range(count):
        obj = fn.args[k]
        data = b.load(load_elem_ptr(b, obj, DATA_OFFSET), typ=PTR, align=8)
        flags = b.load(load_elem_ptr(b, obj, FLAGS_OFFSET), typ=I32, align=4)
        need = NPY_C_CONTIGUOUS | NPY_ALIGNED | (NPY_WRITEABLE if k >= n_in else 0)
        good = b.icmp_unsigned("==", b.and_(flags, ir.Constant(I32, need)),
                               ir.Constant(I32, need))
        ok = b.and_(ok, good)
        store_elem(b, data, io, i64c(k), PTR, 8)
    bad = fn.append_basic_block("bad")
    run = fn.append_basic_block("run")
    b.cbranch(ok, run, bad)
    b.position_at_end(bad)
    b.ret(ir.Constant(I32, -1))
    b.position_at_end(run)
    b.ret(b.call(entry, [io, fn.args[count], fn.args[count + 1]]))
    return fn
