"""The fast call trampoline: a CPython builtin (METH_FASTCALL) in front of any program entry.

Calling generated code through ctypes costs about a microsecond (argument conversion, a
libffi frame, GIL juggling) plus the Python-side signature lookup and output allocation. The
trampoline removes all of it: CPython calls it directly as a builtin function. It is generic
(one per process, data-driven by a context block, not one per program), so it never changes a
program's object code or its cache entry.

    PyObject* onnxjit_fastcall(PyObject* self, PyObject* const* args, i64 nargs)

`self` is a PyCapsule whose pointer (read at the capsule's fixed offset 16) is a context block
of 8-byte words (layout `CTX_FIELDS`). The trampoline:
  1. checks `nargs`, and for each argument: exact ndarray type, rank, every dim, dtype number,
     native byte order, C-contiguous and aligned (object offsets verified at start-up by
     `onnxjit.fastcall`); on any mismatch it returns the int -2 (the caller takes the slow path,
     which converts, copies or reports the error in words);
  2. takes the shared arena with an atomic exchange (0 in the slot: another thread is using it
     -> -2, the slow path has per-thread arenas);
  3. allocates each output with numpy's `PyArray_New` into a new tuple (NULL with the Python
     exception set on failure, e.g. MemoryError);
  4. releases the GIL around the entry when the program is large (`release_gil`), calls
     `entry(io, consts, arena)`, gives the arena back;
  5. returns the tuple, or the int status of a failed `Check` (> 0) after dropping the tuple.
Descriptor tables hold, per array, [dtype number, rank, dims...].
"""

from __future__ import annotations

from llvmlite import ir

from onnxjit.codegen.irutil import Callee, i64c
from onnxjit.codegen.pyabi import (
    AR_DATA,
    AR_DESCR,
    AR_DIMS,
    AR_FLAGS,
    AR_ND,
    CAPSULE_POINTER,
    CTX,
    DESCR_BYTEORDER,
    DESCR_TYPE_NUM,
    MAX_ARRAYS,
    NPY_ALIGNED,
    NPY_C_CONTIGUOUS,
    OB_TYPE,
    TUPLE_ITEMS,
)

NAME = "onnxjit_fastcall"

PTR = ir.PointerType()
I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)


def build(module: ir.Module, name: str = NAME) -> ir.Function:
    """Add the trampoline to `module` as `name`."""
    fn = ir.Function(module, ir.FunctionType(PTR, [PTR, PTR, I64]), name)
    self_obj, args, nargs = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def at(base: ir.Value, offset: int | ir.Value) -> ir.Value:
        off = i64c(offset) if isinstance(offset, int) else offset
        return b.gep(base, [off], inbounds=True, source_etype=I8)

    def word(base: ir.Value, index: int | ir.Value, typ: ir.Type = PTR) -> ir.Value:
        idx = i64c(index) if isinstance(index, int) else index
        return b.load(b.gep(base, [idx], inbounds=True, source_etype=I64), typ=typ, align=8)

    ctx = b.load(at(self_obj, CAPSULE_POINTER), typ=PTR, align=8)
    field = {name: word(ctx, k, I64 if name in ("n_in", "n_out", "release_gil", "needs_arena")
                        else PTR) for name, k in CTX.items()}
    long_from = field["long_from"]
    long_type = ir.FunctionType(PTR, [I64])
    io = b.alloca(PTR, size=i64c(MAX_ARRAYS), name="io")

    reject = fn.append_basic_block("reject")
    with b.goto_block(reject):
        b.ret(b.call(_fnptr(b, long_from, long_type), [i64c(-2)]))

    n_in, n_out = field["n_in"], field["n_out"]
    ok_n = b.and_(b.icmp_signed("==", nargs, n_in),
                  b.icmp_signed("<=", b.add(n_in, n_out), i64c(MAX_ARRAYS)))
    check = fn.append_basic_block("check")
    b.cbranch(ok_n, check, reject)
    b.position_at_end(check)

    # 1. arguments ---------------------------------------------------------------------------
    head = fn.append_basic_block("arg.head")
    body = fn.append_basic_block("arg.body")
    dims_head = fn.append_basic_block("dim.head")
    dims_body = fn.append_basic_block("dim.body")
    next_arg = fn.append_basic_block("arg.next")
    done = fn.append_basic_block("args.done")
    pre = b.block
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, "i")
    d = b.phi(I64, "d")  # word index into in_desc
    i.add_incoming(i64c(0), pre)
    d.add_incoming(i64c(0), pre)
    b.cbranch(b.icmp_signed("<", i, n_in), body, done)

    b.position_at_end(body)
    a = word(args, i)
    same_type = b.icmp_unsigned("==", b.load(at(a, OB_TYPE), typ=PTR, align=8),
                                field["ndarray_type"])
    good = fn.append_basic_block("arg.isarray")
    b.cbranch(same_type, good, reject)
    b.position_at_end(good)
    desc = field["in_desc"]
    want_type, want_nd = word(desc, d, I64), word(desc, b.add(d, i64c(1)), I64)
    nd = b.sext(b.load(at(a, AR_ND), typ=I32, align=4), I64)
    descr = b.load(at(a, AR_DESCR), typ=PTR, align=8)
    type_num = b.sext(b.load(at(descr, DESCR_TYPE_NUM), typ=I32, align=4), I64)
    byteorder = b.load(at(descr, DESCR_BYTEORDER), typ=I8, align=1)
    flags = b.load(at(a, AR_FLAGS), typ=I32, align=4)
    need = ir.Constant(I32, NPY_C_CONTIGUOUS | NPY_ALIGNED)
    ok = b.and_(b.icmp_signed("==", nd, want_nd), b.icmp_signed("==", type_num, want_type))
    ok = b.and_(ok, b.icmp_unsigned("!=", byteorder, ir.Constant(I8, ord(">"))))
    ok = b.and_(ok, b.icmp_unsigned("==", b.and_(flags, need), need))
    b.store(b.load(at(a, AR_DATA), typ=PTR, align=8),
            b.gep(io, [i], inbounds=True, source_etype=PTR))
    dims = b.load(at(a, AR_DIMS), typ=PTR, align=8)
    entry_dims = b.block
    b.cbranch(ok, dims_head, reject)

    b.position_at_end(dims_head)
    k = b.phi(I64, "k")
    k.add_incoming(i64c(0), entry_dims)
    dims_more = b.icmp_signed("<", k, nd)
    b.cbranch(dims_more, dims_body, next_arg)
    b.position_at_end(dims_body)
    have = word(dims, k, I64)
    want = word(desc, b.add(d, b.add(k, i64c(2))), I64)
    k.add_incoming(b.add(k, i64c(1)), dims_body)
    b.cbranch(b.icmp_signed("==", have, want), dims_head, reject)

    b.position_at_end(next_arg)
    i.add_incoming(b.add(i, i64c(1)), next_arg)
    d.add_incoming(b.add(d, b.add(nd, i64c(2))), next_arg)
    b.branch(head)

    # 2. the arena ---------------------------------------------------------------------------
    b.position_at_end(done)
    slot = field["arena_slot"]
    wants_arena = b.icmp_signed("!=", field["needs_arena"], i64c(0))
    take = fn.append_basic_block("arena.take")
    got = fn.append_basic_block("arena.got")
    before_take = b.block
    b.cbranch(wants_arena, take, got)
    b.position_at_end(take)
    taken = b.atomic_rmw("xchg", slot, ir.Constant(PTR, None), "acquire")
    b.cbranch(b.icmp_unsigned("==", taken, ir.Constant(PTR, None)), reject, got)
    b.position_at_end(got)
    arena = b.phi(PTR, "arena")
    arena.add_incoming(ir.Constant(PTR, None), before_take)
    arena.add_incoming(taken, take)

    def give_back() -> None:
        put = fn.append_basic_block("arena.put")
        after = fn.append_basic_block("arena.after")
        b.cbranch(wants_arena, put, after)
        b.position_at_end(put)
        b.atomic_rmw("xchg", slot, arena, "release")
        b.branch(after)
        b.position_at_end(after)

    # 3. outputs -----------------------------------------------------------------------------
    tuple_new = _fnptr(b, field["tuple_new"], ir.FunctionType(PTR, [I64]))
    result = b.call(tuple_new, [n_out])
    fail_null = fn.append_basic_block("fail.null")
    alloc = fn.append_basic_block("out.start")
    b.cbranch(b.icmp_unsigned("==", result, ir.Constant(PTR, None)), fail_null, alloc)
    b.position_at_end(fail_null)
    give_back()
    b.ret(ir.Constant(PTR, None))

    decref = _fnptr(b, field["decref"], ir.FunctionType(ir.VoidType(), [PTR]))
    array_new = _fnptr(b, field["array_new"], ir.FunctionType(
        PTR, [PTR, I32, PTR, I32, PTR, PTR, I32, I32, PTR]))
    b.position_at_end(alloc)
    ohead = fn.append_basic_block("out.head")
    obody = fn.append_basic_block("out.body")
    onext = fn.append_basic_block("out.next")
    ofail = fn.append_basic_block("out.fail")
    odone = fn.append_basic_block("out.done")
    b.branch(ohead)
    b.position_at_end(ohead)
    j = b.phi(I64, "j")
    e = b.phi(I64, "e")
    j.add_incoming(i64c(0), alloc)
    e.add_incoming(i64c(0), alloc)
    b.cbranch(b.icmp_signed("<", j, n_out), obody, odone)
    b.position_at_end(obody)
    odesc = field["out_desc"]
    otype = b.trunc(word(odesc, e, I64), I32)
    ond = word(odesc, b.add(e, i64c(1)), I64)
    odims = b.gep(odesc, [b.add(e, i64c(2))], inbounds=True, source_etype=I64)
    null = ir.Constant(PTR, None)
    arr = b.call(array_new, [field["ndarray_type"], b.trunc(ond, I32), odims, otype, null, null,
                             ir.Constant(I32, 0), ir.Constant(I32, 0), null])
    b.cbranch(b.icmp_unsigned("==", arr, null), ofail, onext)
    b.position_at_end(onext)
    b.store(arr, b.gep(at(result, TUPLE_ITEMS), [j], inbounds=True, source_etype=PTR))
    b.store(b.load(at(arr, AR_DATA), typ=PTR, align=8),
            b.gep(io, [b.add(n_in, j)], inbounds=True, source_etype=PTR))
    j.add_incoming(b.add(j, i64c(1)), onext)
    e.add_incoming(b.add(e, b.add(ond, i64c(2))), onext)
    b.branch(ohead)
    b.position_at_end(ofail)
    b.call(decref, [result])  # the tuple's unfilled slots are NULL, which dealloc skips
    give_back()
    b.ret(null)

    # 4. run -----------------------------------------------------------------------------------
    b.position_at_end(odone)
    release = b.icmp_signed("!=", field["release_gil"], i64c(0))
    save = _fnptr(b, field["save_thread"], ir.FunctionType(PTR, []))
    restore = _fnptr(b, field["restore_thread"], ir.FunctionType(ir.VoidType(), [PTR]))
    entry = _fnptr(b, field["entry"], ir.FunctionType(I32, [PTR, PTR, PTR]))
    with b.if_else(release) as (then, otherwise):
        with then:
            ts = b.call(save, [])
            rc1 = b.call(entry, [io, field["consts"], arena])
            b.call(restore, [ts])
            then_block = b.block
        with otherwise:
            rc2 = b.call(entry, [io, field["consts"], arena])
            else_block = b.block
    rc = b.phi(I32, "rc")
    rc.add_incoming(rc1, then_block)
    rc.add_incoming(rc2, else_block)
    give_back()
    failed = fn.append_basic_block("failed")
    success = fn.append_basic_block("success")
    b.cbranch(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), failed, success)
    b.position_at_end(failed)
    b.call(decref, [result])
    b.ret(b.call(_fnptr(b, long_from, long_type), [b.sext(rc, I64)]))
    b.position_at_end(success)
    b.ret(result)
    return fn


def _fnptr(b: ir.IRBuilder, ptr: ir.Value, typ: ir.FunctionType) -> Callee:
    return Callee(ptr, typ)


def module_text(triple: str, data_layout: str) -> str:
    m = ir.Module(name="onnxjit_fastcall")
    m.triple = triple
    m.data_layout = data_layout
    build(m)
    return str(m)
