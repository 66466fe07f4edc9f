"""Assembling LLVM modules from translated kernels: one module for a whole program, or a
kernel group and an entry module for compiling a program in parts (`codegen.workers`).

Algorithm: `KernelPlan` decides which kernels get a function (a kernel whose canonical text,
`ir.loop_canon.kernel_key`, equals an earlier one's is that kernel's twin: the entry calls the
earlier function on its own root buffers) and numbers the `Check`s in program order.
`build_module` translates every planned kernel (internal functions) and adds the entry points
(`entry.entry`, `entry.entry_py`). For a program compiled in parts, `translate_kernels` puts a
group of kernels into a module of its own with external linkage, and `build_entry_module`
gives the entry points with the kernels declared (same names: `kernel_name`), so the linker
(`elf_loader`, or MCJIT) joins the objects.
"""

from __future__ import annotations

from llvmlite import ir

from onnxjit.codegen.entry import entry, entry_py
from onnxjit.codegen.llvmgen import I64, PTR, KernelTranslator, c_ident
from onnxjit.codegen.parallel import plan_kernel
from onnxjit.codegen.scalar import I32, ScalarEmitter
from onnxjit.ir.loop_canon import kernel_args, kernel_key
from onnxjit.ir.loops import Check, Kernel, Program, walk


def build_module(program: Program, prefix: str, triple: str, data_layout: str,
                 plan: KernelPlan | None = None) -> tuple[ir.Module, str, str]:
    """The LLVM module of `program`; returns (module, entry name, entry_py name)."""
    module = new_module(prefix, triple, data_layout)
    plan = plan or plan_kernels(program)
    fns = translate_kernels(module, program, plan, plan.unique, prefix, external=False)
    kernels = [fns[n] if n == o else _Twin(fns[o], k)
               for n, (k, o) in enumerate(zip(program.kernels, plan.origin))]
    fn = entry(module, program, kernels, f"{prefix}_entry", len(program.consts))
    fn_py = entry_py(module, program, fn, f"{prefix}_entry_py")
    return module, fn.name, fn_py.name


def new_module(name: str, triple: str, data_layout: str) -> ir.Module:
    module = ir.Module(name=name)
    module.triple = triple
    module.data_layout = data_layout
    return module


class KernelPlan:
    """Which kernels get a function: `origin[n]` is the index of the kernel whose function
    kernel n calls (n itself, or an earlier kernel with the same canonical text,
    `ir.loop_canon.kernel_key`); `unique` the indices with a function of their own;
    `check_index` numbers every `Check` in program order (its status is 1 + the number)."""

    def __init__(self, program: Program):
        self.check_index: dict[int, int] = {}
        for k in program.kernels:
            for s in walk(k.body):
                if isinstance(s, Check):
                    self.check_index[id(s)] = len(self.check_index)
        first: dict[str, int] = {}
        self.origin = list(range(len(program.kernels)))
        if all(k.share_key is not None for k in program.kernels):  # parametrize-kernels ran
            for n, k in enumerate(program.kernels):
                self.origin[n] = first.setdefault(k.share_key, n)  # type: ignore[arg-type]
            self.unique = [n for n, o in enumerate(self.origin) if n == o]
            return
        # Printing a kernel's canonical text costs more than translating some kernels: print
        # only kernels that a cheap fingerprint (implied by the text) does not already tell
        # apart from every other.
        prints: dict[tuple, list[int]] = {}
        for n, k in enumerate(program.kernels):
            prints.setdefault(_twin_print(k), []).append(n)
        for same in prints.values():
            if len(same) < 2:
                continue  # no other kernel can have its text
            for n in same:
                key = kernel_key(program.kernels[n])
                if key is not None:
                    self.origin[n] = first.setdefault(key, n)
        self.unique = [n for n, o in enumerate(self.origin) if n == o]


def plan_kernels(program: Program) -> KernelPlan:
    return KernelPlan(program)


def fingerprint(kernel: Kernel) -> tuple:
    """What equal canonical texts (`kernel_key`) have in common: statement count, `contract`,
    and the dtype and shape of each buffer touched, in order of first use."""
    count = sum(1 for _ in walk(kernel.body))
    return (count, kernel.contract, tuple((b.dtype, tuple(b.shape)) for b in kernel.buffers()))


def _twin_print(kernel: Kernel) -> tuple:
    """`fingerprint` without the buffers' shapes, which code generation does not read (the
    canonical text leaves them out too): statement count, `contract`, buffer dtypes."""
    count = sum(1 for _ in walk(kernel.body))
    return (count, kernel.contract, tuple(b.dtype for b in kernel.buffers()))


def kernel_name(prefix: str, program: Program, n: int) -> str:
    return f"{prefix}.k{n}.{c_ident(program.kernels[n].name)}"


def translate_kernels(module: ir.Module, program: Program, plan: KernelPlan,
                      indices: list[int], prefix: str, external: bool
                      ) -> dict[int, KernelTranslator]:
    """Translate kernels `indices` of `program` into `module`; `external`: their functions are
    visible to other objects (a kernel group compiled on its own, `codegen.workers`)."""
    scalar = ScalarEmitter(module)
    out: dict[int, KernelTranslator] = {}
    for n in indices:
        kt = KernelTranslator(module, scalar, program.kernels[n],
                              kernel_name(prefix, program, n), plan.check_index)
        kt.translate()
        if external:
            kt.fn.linkage = ""
        out[n] = kt
    return out


def build_entry_module(program: Program, plan: KernelPlan, prefix: str, triple: str,
                       data_layout: str) -> tuple[ir.Module, str, str]:
    """The module of `program`'s entry points alone, calling its kernels' functions as external
    declarations (compiled in other objects: `codegen.workers`)."""
    module = new_module(prefix, triple, data_layout)
    decls = {n: _Declared(module, program.kernels[n], kernel_name(prefix, program, n))
             for n in plan.unique}
    kernels = [decls[n] if n == o else _Twin(decls[o], k)
               for n, (k, o) in enumerate(zip(program.kernels, plan.origin))]
    fn = entry(module, program, kernels, f"{prefix}_entry", len(program.consts))
    fn_py = entry_py(module, program, fn, f"{prefix}_entry_py")
    return module, fn.name, fn_py.name


class _Declared:
    """A kernel's function declared in the entry's module (defined in another object): the
    signature `KernelTranslator` gives it."""

    def __init__(self, module: ir.Module, kernel: Kernel, name: str):
        self.roots = kernel_args(kernel)[0]
        self.has_checks = any(isinstance(s, Check) for s in walk(kernel.body))
        self.plan = plan_kernel(kernel)
        args = [PTR] * len(self.roots) + ([PTR, I64] if self.plan else [])
        ret = I32 if self.has_checks else ir.VoidType()
        self.fn = ir.Function(module, ir.FunctionType(ret, args), name)
        self.fn.attributes.add("nounwind")


class _Twin:
    """A kernel whose canonical text (`ir.loop_canon`) equals an earlier kernel's: the entry
    calls that kernel's function with this kernel's root buffers."""

    def __init__(self, of: KernelTranslator | _Declared, kernel: Kernel):
        self.fn, self.plan, self.has_checks = of.fn, of.plan, of.has_checks
        self.roots = kernel_args(kernel)[0]
