"""Translate a loop-IR `Program` into one LLVM module (llvmlite IR).

Algorithm:
1) Every `Kernel` becomes an internal function `<prefix>.k<N>.<name>` whose arguments are the
   root buffers it touches (views resolve to their root; same start address), each `ptr noalias
   captures(none)`: distinct buffers never overlap within a kernel (plan-memory guarantees it for
   temps; inputs are only read), which is what lets the vectorizer widen loops without runtime
   alias checks. A kernel with `Check`s returns i32 (0 or 1 + the check's index in
   `Program.messages()` order), otherwise void. Kernels stay separate (`noinline`) functions.
2) Statements are translated by a `match` on their type: each `Var` gets one alloca in the
   kernel's entry block (mem2reg promotes them); a `Loop` is an i64 counted loop (see
   `irutil.for_range`; a `Break` in its body branches to an exit block joined after it);
   `Load`/`Store` GEP the element type with the flat index (bool is an i8
   in memory and an i1 in registers; f16/bf16 are 16 bits in memory and f32 in registers,
   see `scalar.py`); `Op` goes to `ScalarEmitter`; `Matmul` to `matmul.py` (on f16/bf16
   buffers to `narrow_matmul.py`, u8 x i8 -> i32 to `int8_gemm.py`).
   A top-level `parallel` loop worth it, or one directly inside a serial top-level loop (a
   recurrence's steps: one dispatch per step), and a large top-level Matmul (split over its
   rows) is outlined into a task run by the process's worker pool (`parallel.py`, `pool.py`); the
   kernel then takes two more arguments, the pool's `parallel_for` and the thread count.
   Other parallel loops run serially.
3) `modules.py` assembles modules from translated kernels: the whole program with its entry
   points (`entry.entry`, `entry.entry_py`), or a group of kernels alone (`codegen.workers`).
"""

from __future__ import annotations

import math

from llvmlite import ir

from onnxjit.codegen.entry import load_elem_ptr
from onnxjit.codegen.epilogue_fuse import match as match_epilogue
from onnxjit.codegen.epilogue_fuse import outer_forms
from onnxjit.codegen.folds import emit_step, fold_md, fold_steps
from onnxjit.codegen.index_flags import index_vars
from onnxjit.codegen.int8_gemm import emit_int8_matmul
from onnxjit.codegen.irutil import (
    for_range,
    interleave_md,
    load_elem,
    no_unroll_md,
    scalar_md,
    store_elem,
)
from onnxjit.codegen.kernel_shapes import uses_tiles
from onnxjit.codegen.matmul import emit_matmul, emit_outlined
from onnxjit.codegen.narrow_matmul import emit_narrow_matmul
from onnxjit.codegen.parallel import ABSORBED, emit_parallel, plan_kernel
from onnxjit.codegen.scalar import (
    I1,
    I32,
    ScalarEmitter,
    compute_type,
    constant,
    from_storage,
    storage_type,
    to_storage,
)
from onnxjit.codegen.target import gather_features
from onnxjit.codegen.vector_variants import raw_attr
from onnxjit.errors import CompileError, UnsupportedError
from onnxjit.ir.loop_canon import kernel_args
from onnxjit.ir.loop_ranges import magnitude, value_ranges
from onnxjit.ir.loops import (
    Break,
    Buffer,
    Check,
    Const,
    Kernel,
    Load,
    Loop,
    Matmul,
    Op,
    Operand,
    Program,
    Stmt,
    Store,
    Var,
    walk,
)
from onnxjit.ir.quad_panels import is_int8_product
from onnxjit.ir.types import NARROW_FLOATS, DType

PTR = ir.PointerType()
I64 = ir.IntType(64)



#: float types whose multiply-adds a `contract` kernel fuses (`KernelTranslator._fused_add`)
_FMA_TYPES = (DType.FLOAT, DType.DOUBLE)


class KernelTranslator:
    """Translates one kernel into one LLVM function."""

    def __init__(self, module: ir.Module, scalar: ScalarEmitter, kernel: Kernel, name: str,
                 check_index: dict[int, int], params: list[Var] | None = None):
        """`params`: scalar variables passed after the root pointers (an outlined loop's
        bounds and captured values); kernels with them never dispatch to the pool."""
        self.scalar = scalar
        self.last_mul = None  # (dst, operand values) of a `mul` just emitted (`_fused_add`)
        self.steps: dict[int, str] = {}  # the accumulations of fold loops (`codegen.folds`)
        self.kernel = kernel
        self.check_index = check_index
        self.roots, self.arg_of = kernel_args(kernel)
        self.has_checks = any(isinstance(s, Check) for s in walk(kernel.body))
        self.ranges = value_ranges(kernel.body)
        self.index_vars = index_vars(kernel.body)  # emitted `nsw` (`codegen.index_flags`)
        ret = I32 if self.has_checks else ir.VoidType()
        self.params = params or []
        self.plan = plan_kernel(kernel) if params is None else {}
        args = [PTR] * len(self.roots) + [compute_type(v.dtype) for v in self.params]
        if self.plan:
            args += [PTR, I64]
        self.fn = ir.Function(module, ir.FunctionType(ret, args), name)
        self.fn.linkage = "internal"
        for attr in ("nounwind", "noinline"):
            self.fn.attributes.add(attr)
        if kernel.gather:  # the function's own features replace the target machine's
            raw_attr(self.fn.attributes, f'"target-features"="{gather_features()}"')
        self.n_products = 0  # products emitted as functions of their own (`emit_outlined`)
        self.math_heavy = any(isinstance(t, Op) and t.op in _CHAINED for t in walk(kernel.body))
        self.ptrs: list[ir.Value] = []
        for arg, (r, _) in zip(self.fn.args, self.roots):
            arg.name = c_ident(r.name)
            if not self.plan:  # a dispatching kernel hands its pointers to other threads
                arg.add_attribute("noalias")
                arg.add_attribute("captures(none)")
            self.ptrs.append(arg)
        self.alloca_block = self.fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.fn.append_basic_block("body"))
        self.slots: dict[Var, ir.Value] = {}
        extra = self.fn.args[len(self.roots):]
        for v, arg in zip(self.params, extra):
            arg.name = c_ident(v.hint or "p")
            self.assign(v, arg)
        self.pool_args: tuple[ir.Value, ...] = tuple(extra[len(self.params):])
        self.n_outlined = 0
        #: exit blocks of the enclosing loops, innermost last (None: the loop has no Break)
        self.breaks: list[ir.Block | None] = []
        if self.plan:
            self.pool_args[0].name, self.pool_args[1].name = "parallel_for", "nthreads"

    def translate(self) -> ir.Function:
        self.stmts(self.kernel.body)
        if self.has_checks:
            self.b.ret(ir.Constant(I32, 0))
        else:
            self.b.ret_void()
        ir.IRBuilder(self.alloca_block).branch(self.fn.blocks[1])
        return self.fn

    def _fusable(self, s: Op, op: str) -> bool:
        """`s` is an `op` of one f32/f64 type in a `contract` kernel."""
        return self.kernel.contract and s.op == op and s.dst.dtype in _FMA_TYPES \
            and all(a.dtype == s.dst.dtype for a in s.args)

    def _fused_add(self, s: Op, vals: list[ir.Value], prev) -> ir.Value | None:
        """In a `contract` kernel, `add` of the product the statement before computed (and
        another value of its type): one `llvm.fmuladd` (an FMA on hosts with one), so every
        such pair rounds once, whatever shape the loop around it takes."""
        if prev is None or not self._fusable(s, "add"):
            return None
        product, (x, y) = prev
        if s.args[0] is product:
            other = vals[1]
        elif s.args[1] is product:
            other = vals[0]
        else:
            return None
        ty = compute_type(s.dst.dtype)
        name = "f32" if s.dst.dtype == DType.FLOAT else "f64"
        fn = self.scalar.intrinsic(f"llvm.fmuladd.{name}", ty, [ty, ty, ty])
        return self.b.call(fn, [x, y, other])

    # values ------------------------------------------------------------------------------------
    def slot(self, v: Var) -> ir.Value:
        s = self.slots.get(v)
        if s is None:
            ab = ir.IRBuilder(self.alloca_block)
            s = self.slots[v] = ab.alloca(compute_type(v.dtype), name=c_ident(v.hint or "v"))
            s.type = PTR  # llvmlite would print a typed `float*`; LLVM 22 IR is opaque `ptr`
        return s

    def operand(self, x: Operand) -> ir.Value:
        if isinstance(x, Const):
            return constant(x.value, x.dtype)
        return self.b.load(self.slot(x), typ=compute_type(x.dtype))

    def index(self, x: Operand) -> ir.Value:
        """An operand as an i64 element index."""
        return self.scalar.cast(self.b, self.operand(x), x.dtype, DType.INT64)

    def assign(self, v: Var, value: ir.Value) -> None:
        self.b.store(value, self.slot(v))

    def pointer(self, buf: Buffer) -> ir.Value:
        """The buffer's first element: its argument's pointer (`loop_canon.kernel_args`), plus
        the buffer's byte offset from the argument's start. A buffer the kernel does not touch
        (the root of an outlined loop's slice) is reached from an argument of its root."""
        k = self.arg_of.get(id(buf))
        if k is None:
            return self.at(buf.root(), buf.root_offset())
        off = buf.root_offset() - self.roots[k][1]
        return load_elem_ptr(self.b, self.ptrs[k], off)

    def at(self, root: Buffer, offset: int) -> ir.Value:
        """The address `offset` bytes into `root`, from an argument of that root."""
        k = next(j for j, (r, _) in enumerate(self.roots) if r is root)
        off = offset - self.roots[k][1]
        return load_elem_ptr(self.b, self.ptrs[k], off)

    # statements --------------------------------------------------------------------------------
    def stmts(self, body: list[Stmt]) -> None:
        skip = None
        for k, s in enumerate(body):
            if s is skip:
                continue
            planned = self.plan.get(id(s))  # top-level, or directly in a serial top-level loop
            if planned is ABSORBED:
                continue  # the split product before it runs it in its blocks
            if isinstance(s, Matmul) and planned is None and FUSE_EPILOGUES \
                    and k + 1 < len(body) and id(body[k + 1]) not in self.plan:
                nxt = body[k + 1]
                fused = (match_epilogue(s, nxt, outer_forms(body[:k]))
                         if isinstance(nxt, Loop) else None)
                if fused is not None:
                    if self.matmul(s, fused.bind(self)):
                        skip = body[k + 1]  # the nest ran in the product's stores
                    continue
            if planned is None:
                self.stmt(s)
            else:
                loop, captured, after, before = planned
                self.stmts(before)
                emit_parallel(self, loop, captured, self.n_outlined)
                self.n_outlined += 1
                self.stmts(after)
            if not isinstance(s, Op) or planned is not None:
                self.last_mul = None  # its values may not dominate what follows

    def stmt(self, s: Stmt) -> None:
        b = self.b
        prev, self.last_mul = self.last_mul, None
        match s:
            case Op(dst=dst, op=op, args=args):
                vals = [self.operand(a) for a in args]
                res = emit_step(b, self.steps.get(id(s)), vals) or self._fused_add(s, vals, prev)
                if res is None and dst in self.index_vars:
                    res = getattr(b, op)(vals[0], vals[1], flags=["nsw"])
                if res is None:
                    res = self.scalar.op(b, op, vals, [a.dtype for a in args], dst.dtype,
                                         magnitude(self.ranges, args[0]) if args else math.inf)
                if self._fusable(s, "mul"):
                    self.last_mul = (dst, vals)
                if res.type != compute_type(dst.dtype):
                    raise CompileError(f"op '{op}' produced {res.type}, expected "
                                       f"{dst.dtype.short}", where=f"kernel {self.kernel.name}")
                self.assign(dst, res)
            case Load(dst=dst, buf=buf, index=index):
                ty = storage_type(buf.dtype)
                v = load_elem(b, self.pointer(buf), self.index(index), ty, buf.dtype.itemsize)
                v = from_storage(b, v, buf.dtype)
                self.assign(dst, self.scalar.cast(b, v, buf.dtype, dst.dtype))
            case Store(buf=buf, index=index, value=value):
                v = self.scalar.cast(b, self.operand(value), value.dtype, buf.dtype)
                store_elem(b, to_storage(b, v, buf.dtype), self.pointer(buf),
                           self.index(index), storage_type(buf.dtype), buf.dtype.itemsize)
            case Loop(var=var, start=start, stop=stop, step=step, body=body):
                if step <= 0:
                    raise CompileError(f"loop step {step} is not positive",
                                       where=f"kernel {self.kernel.name}")
                lo, hi = self.operand(start), self.operand(stop)

                def loop_body(i: ir.Value, var: Var = var, body: list[Stmt] = body) -> None:
                    self.assign(var, i)
                    self.stmts(body)

                flat = not any(isinstance(t, (Loop, Matmul)) for t in body)
                if s.fold:  # loop metadata: a fold, else a few-trip loop, else chained math
                    md = fold_md(self.fn.module)
                    self.steps.update(fold_steps(body))
                elif s.few and FEW_SCALAR:
                    md = scalar_md(self.fn.module)
                else:
                    md = (interleave_md(self.fn.module, 2) if flat and any(
                        isinstance(t, Op) and t.op in _CHAINED for t in body) else None)
                # a `rolled` loop (glue code) or a fold of many lanes keeps its loop
                if md is None and (s.rolled or flat and KEEP_FOLDS and sum(
                        isinstance(t, Op) and t.dst.dtype.is_float and t.dst in t.args
                        for t in body) >= FOLD_LANES):
                    md = no_unroll_md(self.fn.module)
                # a Break in the body jumps to an exit block joined after the loop's own exit
                brk = (self.fn.append_basic_block("loop.break")
                       if any(isinstance(t, Break) for t in body) else None)
                self.breaks.append(brk)
                for_range(b, lo, hi, step, loop_body, name=c_ident(var.hint or "i"), loop_md=md)
                self.breaks.pop()
                if brk is not None:
                    after = self.fn.append_basic_block("loop.after")
                    b.branch(after)
                    b.position_at_end(brk)
                    b.branch(after)
                    b.position_at_end(after)
            case Break(cond=cond):
                go = self.operand(cond)
                if go.type != I1:
                    go = self.scalar.cast(b, go, cond.dtype, DType.BOOL)
                if not self.breaks or self.breaks[-1] is None:
                    raise CompileError("break outside a loop", where=f"kernel {self.kernel.name}")
                cont = self.fn.append_basic_block("break.no")
                b.cbranch(go, self.breaks[-1], cont)
                b.position_at_end(cont)
            case Check(cond=cond, message=_):
                ok = self.operand(cond)
                if ok.type != I1:
                    ok = self.scalar.cast(b, ok, cond.dtype, DType.BOOL)
                fail = self.fn.append_basic_block("check.fail")
                cont = self.fn.append_basic_block("check.ok")
                b.cbranch(ok, cont, fail)
                b.position_at_end(fail)
                b.ret(ir.Constant(I32, 1 + self.check_index[id(s)]))
                b.position_at_end(cont)
            case Matmul():
                self.matmul(s)
            case _:
                raise CompileError(f"unknown statement {type(s).__name__}",
                                   where=f"kernel {self.kernel.name}")

    def matmul(self, s: Matmul, epilogue=None) -> bool:
        """Emit a Matmul; `epilogue` (an `epilogue_fuse.Fused`) goes into its stores when the
        tiled kernel takes it. Returns whether it did."""
        ptrs = (self.pointer(s.c), self.pointer(s.a), self.pointer(s.b))
        offs = tuple(self.index(o) for o in (s.c_off, s.a_off, s.b_off))
        sizes = {f: self.operand(x) for f in _SIZES if isinstance(x := getattr(s, f), Var)}
        if is_int8_product(s):
            terms = [(self.pointer(t.row), self.index(t.row_off), t.row_step,
                      self.pointer(t.col), self.index(t.col_off)) for t in s.rank1]
            emit_int8_matmul(self.b, s, ptrs, offs, sizes, terms)
            return False
        if s.c.dtype in NARROW_FLOATS:  # the microkernel computes in its storage type
            if s.a.dtype != s.c.dtype or s.b.dtype != s.c.dtype:
                raise UnsupportedError(f"matrix product of {s.a.dtype.short} and "
                                       f"{s.b.dtype.short} into {s.c.dtype.short}",
                                       where=f"kernel {self.kernel.name}")
            emit_narrow_matmul(self.b, self.scalar, s, ptrs, offs, sizes)  # type: ignore
            return False
        m_hint = 0
        if sizes:  # run-time sizes (a symbolic program)
            m_hint = int(self.kernel.size_hints.get(s.m, 64) if isinstance(s.m, Var) else s.m)
            if epilogue is not None or not (OUTLINE_PRODUCTS and self.math_heavy):
                return emit_matmul(self.b, s, ptrs, offs, where=f"kernel {self.kernel.name}",
                                   epilogue=epilogue, sizes=sizes, m_hint=m_hint)
        if epilogue is None and OUTLINE_PRODUCTS and self.math_heavy and uses_tiles(s):
            emit_outlined(self.b, s, ptrs, offs, f"{self.fn.name}.mm{self.n_products}",
                          where=f"kernel {self.kernel.name}", sizes=sizes, m_hint=m_hint)
            self.n_products += 1
            return False
        return emit_matmul(self.b, s, ptrs, offs, where=f"kernel {self.kernel.name}",
                           epilogue=epilogue, sizes=sizes, m_hint=m_hint)


#: the Matmul fields that may be run-time sizes
_SIZES = ("m", "n", "k", "lda", "ldb", "ldc")

#: in a kernel that also computes exp/log/tanh/... (polynomials with many constants), emit each
#: tiled product without a fused epilogue as a function of its own (`matmul.emit_outlined`).
#: Measured, two threads, on the bench LSTM with blocks of 64 hidden units: 3.0x (the tile had
#: spilled); with its blocks of 16: 1.01-1.015x; GRU 1.02x; BERT-tiny even. Outlining every
#: product lost 2.5% on an LSTM with hidden 64 (its 16x64x64 products are short)
OUTLINE_PRODUCTS = True

#: a `few` loop (`ir.loops.Loop`: a symbolic program's edge columns) is emitted scalar and
#: rolled (`irutil.scalar_md`). Measured on a Zen 3 host, fresh processes alternating, and
#: steady in one process with calls alternated, both orders: the OCR detector's symbolic
#: compile + first call 4.8-5.4 -> 4.4-4.6 s (its Winograd kernels 1.07 -> 0.33 s of LLVM each),
#: the recognizer's 2.8-3.2 -> 2.6-2.8 s (its AveragePool kernel 0.68 -> 0.21 s); steady
#: within 0.5% on both
FEW_SCALAR = True

#: A Matmul's epilogue nest runs in the tiled kernel's stores (`epilogue_fuse`); False: as a
#: pass over C after the product.
FUSE_EPILOGUES = True

#: A flat loop folding at least FOLD_LANES float accumulators (`reductions.lowering.Lanes`) is
#: kept rolled (`no_unroll_md`): a fold of 8 trips (LayerNorm or softmax over 128) was fully
#: unrolled into scalar chains. Measured, LayerNorm 128x128 on one thread 7.9 -> 5.8 us a
#: call; BERT-tiny 1.05x (two threads); MobileNetV2-like, LSTM, MLP, SqueezeNet, ShuffleNet,
#: Inception-v1 alike (0.99-1.00x)
KEEP_FOLDS, FOLD_LANES = True, 8

#: Ops whose polynomial code is a long dependent chain: an innermost loop computing one is
#: interleaved twice (measured: the 4M-float sigmoid(erf(tanh)) chain 13% faster).
_CHAINED = frozenset({"exp", "expm1", "log", "tanh", "sigmoid", "erf", "pow"})


def c_ident(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_." else "_" for c in name) or "v"


def uses_pool(program: Program) -> bool:
    """True when some kernel of `program` dispatches to the worker pool."""
    return any(plan_kernel(k) for k in program.kernels)
