"""Rare slow paths inside vectorized loops: masked vector variants of a cold scalar function.

A math function whose rare inputs need a slow path (the huge arguments of sin/cos/tan) is an
`alwaysinline` scalar function: the fast form for every input, then `if (rare) y = cold(x)`.
Inlined into a loop, LLVM's vectorizer would execute that call on every lane of every vector (a
call is not predicated; it is scalarized for all lanes), unless the call names *masked vector
variants* (LLVM's VFABI call-site attribute `vector-function-abi-variant`): each vector
iteration then calls the variant of its width once, with the lanes' mask.

Algorithm:
1) `cold_call(b, cold, x)` defines, on first use, for each width N in WIDTHS an internal
   `alwaysinline` function `<cold>.vN(<N x T> x, <N x i1> mask)`: when no mask bit is set (a
   bitcast of the mask and one compare) it returns zeros, else it stores x and the mask to the
   stack and calls `<cold>.lanes`, a `noinline` loop applying `cold` to the masked lanes. The
   variants stay alive through the optimizer in `llvm.compiler.used` (as LLVM's own
   InjectTLIMappings keeps its variants), and the call carries the attribute naming them.
2) After the O3 pipeline (where the loop vectorizer ran), `jit.optimize` runs the
   always-inliner once more (`inline_variants`): the variants' mask test lands in the vector
   loop as a branch that is almost never taken. The fast path pays one compare, one bitcast
   and one branch per vector, and no call.
A width without a variant would make the vectorizer call `cold` on every lane, so WIDTHS covers
every vector width a loop of f32/f64 values can take on x86 (2 to 64 lanes).
"""

from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir

from onnxjit.codegen.irutil import for_range

WIDTHS = (2, 4, 8, 16, 32, 64)
ATTR = "vector-function-abi-variant"
USED = "llvm.compiler.used"
I1 = ir.IntType(1)
I8 = ir.IntType(8)
PTR = ir.PointerType()
#: the weight of the "some lane is rare" edge against the common one (a hint for block layout)
_RARE = 1


def raw_attr(attrs: ir.values.AttributeSet, text: str) -> None:
    """Add an attribute llvmlite does not know (a string attribute, `memory(none)`) verbatim."""
    set.add(attrs, text)


def cold_call(b: ir.IRBuilder, cold: ir.Function, x: ir.Value) -> ir.Value:
    """`cold(x)`, a call the vectorizer turns into one masked variant call per vector."""
    names = _variants(b.module, cold)
    call = b.call(cold, [x])
    raw_attr(call.attributes, f'"{ATTR}"="{names}"')
    return call


def rare_weights(module: ir.Module) -> ir.Value:
    """Branch weights for `cbranch(rare, ...)`: the rare edge is almost never taken."""
    return module.add_metadata([ir.MetaDataString(module, "branch_weights"),
                                ir.Constant(ir.IntType(32), _RARE),
                                ir.Constant(ir.IntType(32), 1 << 20)])


def _variants(module: ir.Module, cold: ir.Function) -> str:
    """Define cold's variants once; the attribute value naming them."""
    names = [f"_ZGV_LLVM_M{n}v_{cold.name}({cold.name}.v{n})" for n in WIDTHS]
    if module.globals.get(f"{cold.name}.v{WIDTHS[0]}") is None:
        lanes = _lanes(module, cold)
        _keep(module, [_variant(module, cold, lanes, n) for n in WIDTHS])
    return ",".join(names)


def _lanes(module: ir.Module, cold: ir.Function) -> ir.Function:
    """`void <cold>.lanes(ptr x, ptr mask, ptr out, i64 n)`: out[i] = cold(x[i]) where mask[i]."""
    ty = cold.function_type.return_type
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, ir.IntType(64)]),
                     f"{cold.name}.lanes")
    fn.linkage = "internal"
    for attr in ("noinline", "nounwind", "cold"):
        fn.attributes.add(attr)
    xs, mask, out, n = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def body(i: ir.Value) -> None:
        on = b.icmp_unsigned("!=", b.load(b.gep(mask, [i], source_etype=I8), typ=I8),
                             ir.Constant(I8, 0))
        with b.if_then(on):
            v = b.call(cold, [b.load(b.gep(xs, [i], source_etype=ty), typ=ty)])
            b.store(v, b.gep(out, [i], source_etype=ty))

    for_range(b, 0, n, 1, body, name="lane")
    b.ret_void()
    return fn


def _variant(module: ir.Module, cold: ir.Function, lanes: ir.Function, n: int) -> ir.Function:
    ty = cold.function_type.return_type
    vty, mty = ir.VectorType(ty, n), ir.VectorType(I1, n)
    fn = ir.Function(module, ir.FunctionType(vty, [vty, mty]), f"{cold.name}.v{n}")
    fn.linkage = "internal"
    for attr in ("alwaysinline", "nounwind"):
        fn.attributes.add(attr)
    x, mask = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    # static allocas (entry block): the inliner hoists them, no stack save/restore per call
    xs, ms, out = (b.alloca(t) for t in (vty, ir.VectorType(I8, n), vty))
    for p in (xs, ms, out):
        p.type = PTR  # llvmlite would print a typed pointer; LLVM 22 IR is opaque `ptr`
    some = b.icmp_unsigned("!=", b.bitcast(mask, ir.IntType(n)), ir.Constant(ir.IntType(n), 0))
    rare, none = fn.append_basic_block("rare"), fn.append_basic_block("none")
    br = b.cbranch(some, rare, none)
    br.set_metadata("prof", rare_weights(module))
    b.position_at_end(none)
    b.ret(ir.Constant(vty, None))
    b.position_at_end(rare)
    b.store(x, xs)
    b.store(b.zext(mask, ir.VectorType(I8, n)), ms)
    b.call(lanes, [xs, ms, out, ir.Constant(ir.IntType(64), n)])
    b.ret(b.load(out, typ=vty))
    return fn


def _keep(module: ir.Module, fns: list[ir.Function]) -> None:
    """Append `fns` to `llvm.compiler.used` (the optimizer must not delete them before the
    vectorizer has looked them up by name)."""
    g = module.globals.get(USED)
    if g is None:
        g = ir.GlobalVariable(module, ir.ArrayType(PTR, 0), USED)
        g.linkage = "appending"
        g.section = "llvm.metadata"
        g.initializer = ir.Constant(g.value_type, [])
    items = list(g.initializer.constant)
    items += [ir.FormattedConstant(PTR, f.get_reference()) for f in fns]
    g.value_type = ir.ArrayType(PTR, len(items))  # grown in place: one such global a module
    g.initializer = ir.Constant(g.value_type, items)


def inline_variants(mod: llvm.ModuleRef, tm: llvm.TargetMachine) -> None:
    """Inline the variants the vectorizer called (step 2 of the module docstring)."""
    if not any(g.name == USED for g in mod.global_variables):
        return
    pm = llvm.create_new_module_pass_manager()
    pm.add_always_inliner_pass()
    pm.run(mod, llvm.create_pass_builder(tm, llvm.PipelineTuningOptions()))
