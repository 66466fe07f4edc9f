"""Canonical text of a kernel: equal texts mean the kernels compile to the same code.

Code generation gives every kernel its own function taking pointers to the storage it touches
(`kernel_args`: in order of first use, one per root buffer, or one per slice of a root when the
kernel touches only disjoint slices of it - the blocks of a Concat's output written in place -
so a function does not depend on where in its root a slice lies), so two kernels differing
only in WHICH buffers they touch (a ResNet's repeated blocks: the same convolution on other
weights and activations; DenseNet's layers writing into other slices) can share one function,
called with different pointers. `kernel_key` prints a kernel with the loop-IR printer's
statement syntax, but with the buffers named by their argument's position (plus dtype, a
view's position among the views and its byte offset from the argument; not the shape, which
code generation never reads: every access is a flat index), the variables numbered in order of
appearance (hints are ignored) and the kernel's name left out (its `contract` flag kept: it
changes the code). Kernels with a `check` are never shared: their failure codes index the
program's messages. (`passes.parametrize_kernels` turns kernels that differ in some sizes
into such twins.)
"""

from __future__ import annotations

from onnxjit.ir.loop_printer import _Printer
from onnxjit.ir.loops import Buffer, Check, Kernel, Var, walk


def kernel_args(kernel: Kernel) -> tuple[list[tuple[Buffer, int]], dict[int, int]]:
    """The storage the kernel's function takes: a (root, byte offset) per argument, in order of
    first use, and the argument of each buffer the kernel touches (by id). A root gets one
    argument per distinct byte range the kernel touches when those ranges are pairwise disjoint
    (slices of it: each argument then points at its slice, and may be `noalias`); otherwise
    (the root itself, or overlapping views, touched) one argument at its start."""
    touched = kernel.buffers()
    by_root: dict[int, list[Buffer]] = {}
    for b in touched:
        by_root.setdefault(id(b.root()), []).append(b)
    split: dict[int, bool] = {}
    for rid, group in by_root.items():
        if not all(x.is_static for x in group):  # symbolic sizes: one argument at the root
            split[rid] = False
            continue
        spans = sorted({(x.root_offset(), x.nbytes) for x in group})
        split[rid] = all(x.base is not None for x in group) and all(
            a[0] + a[1] <= c[0] for a, c in zip(spans, spans[1:]))
    args: list[tuple[Buffer, int]] = []
    arg_of: dict[int, int] = {}
    where: dict[tuple[int, int], int] = {}
    for b in touched:
        r = b.root()
        at = b.root_offset() if split[id(r)] else 0
        if (id(r), at) not in where:
            where[id(r), at] = len(args)
            args.append((r, at))
        arg_of[id(b)] = where[id(r), at]
    return args, arg_of


class _Canonical(_Printer):
    def __init__(self, kernel: Kernel) -> None:
        super().__init__()
        self.names: dict[int, str] = {}
        args, arg_of = kernel_args(kernel)
        views = 0
        for b in kernel.buffers():
            k = arg_of[id(b)]
            name = f"%r{k}"
            if b is not b.root():
                name += f"v{views}@{b.root_offset() - args[k][1]}"
                views += 1
            self.names[id(b)] = f"{name}:{b.dtype.short}"
        self.var_ids: dict[Var, str] = {}

    def buf(self, b: Buffer) -> str:
        return self.names[id(b)]

    def var(self, v: Var) -> str:
        name = self.var_ids.get(v)
        if name is None:
            name = self.var_ids[v] = f"%{len(self.var_ids)}:{v.dtype.short}"
        return name


def kernel_key(kernel: Kernel) -> str | None:
    """The canonical text of `kernel`, or None when it must get its own function."""
    if any(isinstance(s, Check) for s in walk(kernel.body)):
        return None
    p = _Canonical(kernel)
    lines: list[str] = ["contract"] if kernel.contract else []  # other code for the same text
    p.body(kernel.body, "", lines)
    return "\n".join(lines)
