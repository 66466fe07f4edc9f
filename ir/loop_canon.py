"""Canonical text of a kernel: equal texts mean the kernels compile to the same code.

Code generation gives every kernel its own function taking the root pointers of the buffers it
touches (in order of first use) as arguments, so two kernels differing only in WHICH buffers
they touch (a ResNet's repeated blocks: the same convolution on other weights and activations)
can share one function, called with different pointers. `kernel_key` prints a kernel with the
loop-IR printer's statement syntax, but with the buffers named by the position of their root
in that argument list (plus dtype and shape, and a view's position among the views and its
byte offset: the function adds it to the root pointer), the variables numbered in order of
appearance (hints are ignored) and the kernel's name left out.
Kernels with a `check` are never shared: their failure codes index the program's messages.
"""

from __future__ import annotations

from onnxjit.ir.loop_printer import _Printer
from onnxjit.ir.loops import Buffer, Check, Kernel, Var, walk


class _Canonical(_Printer):
    def __init__(self, kernel: Kernel) -> None:
        super().__init__()
        self.names: dict[int, str] = {}
        roots: list[int] = []
        views = 0
        for b in kernel.buffers():
            r = b.root()
            if id(r) not in roots:
                roots.append(id(r))
            name = f"%r{roots.index(id(r))}"
            if b is not r:
                name += f"v{views}@{b.root_offset()}"
                views += 1
            shape = ",".join(str(d) for d in b.shape)
            self.names[id(b)] = f"{name}:{b.dtype.short}[{shape}]"
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
    lines: list[str] = []
    p.body(kernel.body, "", lines)
    return "\n".join(lines)
