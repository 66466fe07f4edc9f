"""The LLVM-free ELF loader (`onnxjit.codegen.elf_loader`) against MCJIT (`load_object`).

Every program is compiled once; its object code is linked by both loaders and run through
`onnxjit.artifact.Artifact` with both entry points, and the outputs must be identical (same
machine code, so bit for bit). Hand-written LLVM IR compiled under other code models covers the
relocation types our target options do not emit (PC32, PLT32 stubs, GOTPCREL(X), GOTPC32, data
relocations, COMMON and weak symbols); pages are W^X; the worker pool runs with real threads; broken
objects raise `ElfLoadError`; a fresh process links and runs code without importing llvmlite.
"""

from __future__ import annotations

import ctypes
import math
import subprocess
import sys
import threading

import llvmlite.binding as llvm
import models
import numpy as np
import pytest

from onnxjit import driver
from onnxjit.artifact import Artifact
from onnxjit.codegen import compile_program, elf_loader, load_object, pool, target
from onnxjit.codegen.elf_loader import ElfLoadError, load_elf
from onnxjit.errors import InputError
from onnxjit.ir.loop_builder import Builder, const, elementwise
from onnxjit.ir.loops import Buffer, Kernel, Matmul, Program, i64
from onnxjit.ir.types import DType
from onnxjit.options import CompileOptions

F32, F64, BOOL = DType.FLOAT, DType.DOUBLE, DType.BOOL
ALL = [F32, F64, BOOL, DType.INT8, DType.INT16, DType.INT32, DType.INT64, DType.UINT8,
       DType.UINT16, DType.UINT32, DType.UINT64]


# programs ------------------------------------------------------------------------------------
def ops_program(dt: DType, n: int, ops: list[str], arity: int) -> Program:
    """out_<op>[i] = op(x0[i], ...) for every op, in one kernel."""
    ins = [Buffer(f"x{j}", dt, (n,), "input", slot=j) for j in range(arity)]
    outs = []
    bld = Builder()
    with bld.loop(0, n) as i:
        args = [bld.load(x, i) for x in ins]
        for k, op in enumerate(ops):
            r = bld.op(op, *args)
            outs.append(Buffer(op, r.dtype, (n,), "output", slot=arity + k))
            bld.store(outs[-1], i, r)
    return Program(ins + outs, [Kernel("ops", bld.body)])


def float_values(dt: DType) -> np.ndarray:
    special = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, np.nan, np.inf, -np.inf, 88.7, -103.9]
    return np.concatenate([special, np.linspace(-20, 20, 203)]).astype(dt.numpy)


def int_values(dt: DType) -> np.ndarray:
    if dt == BOOL:
        return np.array([False, True])
    if dt.is_float:
        return float_values(dt)
    info = np.iinfo(dt.numpy)
    vals = [0, 1, -1, 2, -2, 3, 7, -7, 100, info.min, info.max, info.min + 1, info.max - 1]
    return np.array([v if dt.is_signed else v % (1 << info.bits) for v in vals],
                    dtype=object).astype(dt.numpy)


def casts_program(n: int) -> Program:
    ins = [Buffer(f"x_{dt.short}", dt, (n,), "input", slot=k) for k, dt in enumerate(ALL)]
    outs: list[Buffer] = []
    bld = Builder()
    with bld.loop(0, n) as i:
        for x in ins:
            v = bld.load(x, i)
            for dst in ALL:
                outs.append(Buffer(f"{x.dtype.short}_{dst.short}", dst, (n,), "output",
                                   slot=len(ins) + len(outs)))
                bld.store(outs[-1], i, bld.op("cast", v, dtype=dst))
    return Program(ins + outs, [Kernel("casts", bld.body)])


def gather_program() -> Program:
    """out[i] = table[idx[i]] (a const) behind two Checks, in a parallel loop."""
    n, m = 5, 4
    table = Buffer("table", F32, (n,), "const", slot=0, data=np.arange(n, dtype=np.float32) * 2)
    idx = Buffer("idx", DType.INT64, (m,), "input", slot=0)
    out = Buffer("out", F32, (m,), "output", slot=1)
    bld = Builder()
    with bld.loop(0, m, parallel=True) as i:
        j = bld.load(idx, i)
        bld.check(bld.op("ge", j, i64(0)), "index below 0")
        bld.check(bld.op("lt", j, i64(n)), "index out of range")
        bld.store(out, i, bld.load(table, j))
    return Program([table, idx, out], [Kernel("gather", bld.body)])


def matmul_program(dt: DType, m: int, k: int, n: int, a_trans: bool, b_trans: bool
                   ) -> Program:
    """c = 7 then c += 2 * op(a) @ op(b)."""
    a = Buffer("a", dt, (k, m) if a_trans else (m, k), "input", slot=0)
    b = Buffer("b", dt, (n, k) if b_trans else (k, n), "input", slot=1)
    c = Buffer("c", dt, (m, n), "output", slot=2)
    bld = Builder()
    elementwise(bld, c, [], lambda bb, x: const(7.0, dt))
    bld.emit(Matmul(c, i64(0), n, a, i64(0), m if a_trans else k, b, i64(0),
                    k if b_trans else n, m, n, k, a_trans, b_trans, 2.0, True))
    return Program([a, b, c], [Kernel("mm", bld.body)])


def onnx_program(model, signature: tuple) -> Program:
    opts = CompileOptions.from_user({"cache_dir": False})
    graph = driver.import_model(model.SerializeToString(), opts)
    return driver.lower_signature(graph, signature, opts)[1]


# running through both loaders ------------------------------------------------------------------
def artifact(p: Program, lib: object, use_py: bool) -> Artifact:
    return Artifact(tuple((b.dtype, b.shape) for b in p.inputs),
                    [(b.shape, b.dtype.numpy) for b in p.outputs],
                    [b.data for b in p.consts], p.arena_size, p.messages(), lib, use_py)


def both(p: Program) -> list[Artifact]:
    """Artifacts over the MCJIT library then the ELF loader's, each with both entry points."""
    obj = compile_program(p)
    mcjit = load_object(obj)
    elf = elf_loader.load_compiled(obj)
    assert elf.entry_addr != mcjit.entry_addr
    return [artifact(p, lib, use_py) for lib in (mcjit, elf) for use_py in (True, False)]


def same_results(p: Program, inputs: list[np.ndarray]) -> tuple:
    arts = both(p)
    ref = arts[0].run(tuple(inputs))
    for art in arts[1:]:
        got = art.run(tuple(inputs))
        for g, r, b in zip(got, ref, p.outputs):
            assert g.dtype == r.dtype and g.shape == r.shape, b.name
            np.testing.assert_array_equal(g, r, err_msg=b.name)  # NaN equals NaN here
    return ref


# tests: generated code ----------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [F32, F64], ids=lambda d: d.short)
def test_transcendentals_and_libm_calls(dt: DType) -> None:
    """exp/log/tanh/sigmoid/erf (polynomials in IR for f32, libm for f64) and pow/rem (powf,
    fmodf / pow, fmod from libm)."""
    x = float_values(dt)
    y = np.resize(np.array([0.5, -2.0, 3.0, 0.0, np.inf, -1.5], dt.numpy), x.size)
    ops = ["exp", "log", "tanh", "sigmoid", "erf", "pow", "rem", "sqrt", "div"]
    p = ops_program(dt, x.size, ops, 2)
    with np.errstate(all="ignore"):
        ref = same_results(p, [x, y])
        np.testing.assert_allclose(ref[0], np.exp(x), rtol=1e-5 if dt == F32 else 1e-13)


@pytest.mark.parametrize("dt", [DType.INT8, DType.UINT64, BOOL], ids=lambda d: d.short)
def test_integer_ops(dt: DType) -> None:
    v = int_values(dt)
    x, y = (a.reshape(-1) for a in np.meshgrid(v, v))
    ops = ["add", "mul", "min", "max", "eq", "lt"] + ([] if dt == BOOL else ["div", "rem", "pow"])
    same_results(ops_program(dt, x.size, ops, 2), [x, y])


def test_casts() -> None:
    srcs = [int_values(dt) for dt in ALL]
    n = max(s.size for s in srcs)
    same_results(casts_program(n), [np.resize(s, n) for s in srcs])


@pytest.mark.parametrize("dt", [F32, F64, DType.INT32], ids=lambda d: d.short)
def test_matmul(dt: DType) -> None:
    rng = np.random.default_rng(0)
    for m, k, n, at, bt in [(7, 301, 601, False, True), (5, 9, 3, True, False)]:
        a = rng.integers(-9, 9, (k, m) if at else (m, k)).astype(dt.numpy)
        b = rng.integers(-9, 9, (n, k) if bt else (k, n)).astype(dt.numpy)
        c, = same_results(matmul_program(dt, m, k, n, at, bt), [a, b])
        ref = 7 + 2 * ((a.T if at else a).astype(np.float64) @ (b.T if bt else b))
        np.testing.assert_allclose(c, ref.astype(dt.numpy), rtol=1e-5)


def test_failing_check_and_consts() -> None:
    p = gather_program()
    np.testing.assert_array_equal(same_results(p, [np.array([4, 3, 0, 1])])[0], [8, 6, 0, 2])
    for art in both(p):
        with pytest.raises(InputError, match="index out of range"):
            art.run((np.array([0, 5, 0, 0]),))
        with pytest.raises(InputError, match="index below 0"):
            art.run((np.array([0, 1, -1, 0]),))


def test_onnx_mlp_with_constants() -> None:
    model = models.mlp((64, 48, 32, 10))
    p = onnx_program(model, ((F32, (3, 64)),))
    assert p.consts  # the weights reach the code by pointer
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    y, = same_results(p, [x])
    np.testing.assert_allclose(y, models.mlp_reference(model, x), rtol=1e-4, atol=1e-5)


def test_onnx_elementwise_chain() -> None:
    p = onnx_program(models.chain(4096), ((F32, (4096,)),))
    same_results(p, [np.linspace(-8, 8, 4096, dtype=np.float32)])


def test_code_read_execute_constants_read_only() -> None:
    p = ops_program(F32, 64, ["exp", "pow"], 2)
    obj = compile_program(p)
    lib = load_elf(obj.object_code, obj.entry, obj.entry_py, obj=obj)
    spans = []
    with open("/proc/self/maps") as f:
        for line in f:
            span, mode = line.split()[:2]
            lo, hi = (int(v, 16) for v in span.split("-"))
            spans.append((lo, hi, mode))
    # the kernel may merge our mappings with equal neighbours: look up each page's mapping
    modes = [next(m for lo, hi, m in spans if lo <= page < hi)
             for page in range(lib.base, lib.base + lib.size, 4096)]
    assert modes[0].startswith("r-x")  # code
    assert "r--p" in modes  # constants and the GOT, read-only once relocated
    assert not any(m[1] == "w" and m[2] == "x" for m in modes)


# tests: relocations beyond what our target options emit ----------------------------------------
_IR = r"""
@counter = global i64 0, align 8
@comm = common global i64 0, align 8
@table = internal constant [4 x double] [double 1.0, double 2.0, double 3.0, double 4.0], align 64
@fnptr = global ptr @helper, align 8
@missing = extern_weak global i8
declare double @cos(double)
declare ptr @memset(ptr, i32, i64)
declare double @EXTRA(double)
define internal double @helper(double %x) noinline {
  %y = fmul double %x, 3.0
  ret double %y
}
define double @entry(double %x, i64 %i, ptr %buf) {
  %c = load volatile i64, ptr @counter
  %c1 = add i64 %c, 1
  store volatile i64 %c1, ptr @counter
  %k = load volatile i64, ptr @comm
  %k1 = add i64 %k, 2
  store volatile i64 %k1, ptr @comm
  %cs = call double @cos(double %x)
  %j = and i64 %i, 3
  %p = getelementptr [4 x double], ptr @table, i64 0, i64 %j
  %t = load double, ptr %p
  %f = load volatile ptr, ptr @fnptr
  %h = call double %f(double %x)
  %d = call double @helper(double %t)
  %r = call ptr @memset(ptr %buf, i32 7, i64 16)
  %e = call double @EXTRA(double %x)
  %isnull = icmp eq ptr @missing, null
  %z = select i1 %isnull, double 0.0, double 1000.0
  %s1 = fadd double %cs, %t
  %s2 = fadd double %s1, %h
  %s3 = fadd double %s2, %d
  %s4 = fadd double %s3, %z
  %s5 = fadd double %s4, %e
  ret double %s5
}
"""
_ENTRY = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_int64, ctypes.c_void_p)
_KEEP: list = []  # libraries whose code threads may still run (the pool's workers)


def _ir_object(reloc: str, codemodel: str, extra: str = "sqrt") -> bytes:
    target.init()
    triple, cpu, features = target.host()
    tm = llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=2, reloc=reloc, codemodel=codemodel)
    mod = llvm.parse_assembly(_IR.replace("EXTRA", extra))
    mod.triple = triple
    return bytes(tm.emit_object(mod))


def _rtypes(code: bytes) -> set[int]:
    sections, _, data = elf_loader._parse(code)
    elf_loader._choose_sections(sections)
    return {t for _, rows in elf_loader._relocations(sections, data) for _, t, _, _ in rows}


@pytest.mark.parametrize("reloc,codemodel,expect", [
    ("pic", "small", {2, 4, 9, 42}),        # PC32, PLT32 (stubs), GOTPCREL, REX_GOTPCRELX
    ("pic", "medium", {2, 4, 25, 26, 42}),  # + GOTOFF64, GOTPC32
    ("pic", "large", {1, 25, 27, 29}),      # 64, GOTOFF64, GOT64, GOTPC64
    ("static", "large", {1}),
    ("pic", "jitdefault", {25, 27, 29}),    # what compile_program uses
])
def test_code_models(reloc: str, codemodel: str, expect: set[int]) -> None:
    code = _ir_object(reloc, codemodel)
    assert expect <= _rtypes(code)
    lib = load_elf(code, "entry", "entry")
    fn = _ENTRY(lib.entry_addr)
    buf = (ctypes.c_uint8 * 16)()
    for _ in range(3):
        r = fn(0.5, 6, ctypes.addressof(buf))
    # cos(0.5) + table[2] + helper(0.5) + helper(table[2]) + (weak @missing is null) + sqrt
    assert r == math.cos(0.5) + 3.0 + 1.5 + 9.0 + 0.0 + math.sqrt(0.5)
    assert list(buf) == [7] * 16
    assert ctypes.c_int64.from_address(lib.address("counter")).value == 3  # .bss
    assert ctypes.c_int64.from_address(lib.address("comm")).value == 6  # COMMON
    assert ctypes.c_void_p.from_address(lib.address("fnptr")).value  # .data, R_X86_64_64


def test_extra_symbols_resolve_first() -> None:
    cb = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(lambda x: 100.0 * x)
    addr = ctypes.cast(cb, ctypes.c_void_p).value
    for reloc, codemodel in (("pic", "small"), ("pic", "jitdefault")):
        lib = load_elf(_ir_object(reloc, codemodel, "onnxjit_test_extra"), "entry", "entry",
                       symbols={"onnxjit_test_extra": addr})
        r = _ENTRY(lib.entry_addr)(0.5, 0, ctypes.addressof((ctypes.c_uint8 * 16)()))
        assert r == math.cos(0.5) + 1.0 + 1.5 + 3.0 + 50.0


def test_worker_pool_object_with_threads() -> None:
    """The pool's module (bss globals, pthread calls, a function pointer to its worker) linked
    by the loader dispatches a loop over real threads."""
    obj = pool.compile_pool()
    lib = load_elf(obj.object_code, obj.entry, obj.entry_py, obj=obj)
    _KEEP.append(lib)  # its workers wait in this code for the rest of the process
    task_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    seen: list[tuple[int, int]] = []
    threads: set[int] = set()

    def body(ctx: int, begin: int, end: int) -> None:
        threading.Event().wait(0.002)  # releases the GIL: other workers get chunks too
        seen.append((begin, end))
        threads.add(threading.get_ident())

    task = task_t(body)
    _KEEP.append(task)
    parallel_for = ctypes.CFUNCTYPE(None, task_t, ctypes.c_void_p, ctypes.c_int64,
                                    ctypes.c_int64, ctypes.c_int64)(lib.entry_addr)
    for _ in range(3):
        seen.clear()
        parallel_for(task, None, 1000, 1, 4)
        chunks = sorted(seen)
        assert chunks[0][0] == 0 and chunks[-1][1] == 1000
        assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
    assert len(threads) > 1
    control = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(lib.entry_py_addr)
    assert control(0) >= 1  # workers this copy of the pool started


# tests: errors ----------------------------------------------------------------------------------
def test_errors() -> None:
    obj = compile_program(ops_program(F64, 8, ["exp", "pow"], 2))
    code = obj.object_code
    with pytest.raises(ElfLoadError, match="does not define nope"):
        load_elf(code, obj.entry, "nope")
    with pytest.raises(ElfLoadError, match="not an ELF"):
        load_elf(b"MZ" + code[2:], obj.entry, obj.entry_py)
    with pytest.raises(ElfLoadError, match="malformed"):
        load_elf(code[:200], obj.entry, obj.entry_py)
    with pytest.raises(ElfLoadError, match="undefined symbol 'onnxjit_no_such_fn'"):
        load_elf(_ir_object("pic", "jitdefault", "onnxjit_no_such_fn"), "entry", "entry")
    # rewrite the type of the first relocation to one the loader does not know
    sections, _, _ = elf_loader._parse(code)
    rela = next(s for s in sections if s.type == 4 and sections[s.info].flags & 2)
    bad = bytearray(code)
    bad[rela.offset + 8] = 200  # r_info low byte: the type
    with pytest.raises(ElfLoadError, match="unsupported relocation type 200"):
        load_elf(bytes(bad), obj.entry, obj.entry_py)


# test: a fresh process links without LLVM -----------------------------------------------------
_CHILD = r"""
import ctypes, importlib.util, sys
import numpy as np
path, obj_path, entry, entry_py, n = sys.argv[1:6]
# onnxjit.codegen's __init__ imports the LLVM code generator; the loader itself must not
spec = importlib.util.spec_from_file_location("onnxjit_elf_loader", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
lib = mod.load_elf(open(obj_path, "rb").read(), entry, entry_py)
n = int(n)
x = np.linspace(-3, 3, n, dtype=np.float32)
outs = [np.empty(n, np.float32) for _ in range(3)]
io = (ctypes.c_void_p * 4)(x.ctypes.data, *[o.ctypes.data for o in outs])
consts = (ctypes.c_void_p * 2)(0, 1)  # no consts; the pool slots: no pool, 1 thread
fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    lib.entry_addr)
assert fn(ctypes.addressof(io), ctypes.addressof(consts), None) == 0
assert "llvmlite" not in sys.modules, "llvmlite was imported"
sys.stdout.write(np.stack(outs).tobytes().hex())
"""


def test_fresh_process_does_not_import_llvmlite(tmp_path) -> None:
    n = 100
    p = ops_program(F32, n, ["exp", "tanh", "erf"], 1)
    obj = compile_program(p)
    (tmp_path / "k.o").write_bytes(obj.object_code)
    out = subprocess.run([sys.executable, "-c", _CHILD, elf_loader.__file__,
                          str(tmp_path / "k.o"), obj.entry, obj.entry_py, str(n)],
                         capture_output=True, text=True, check=True).stdout
    got = np.frombuffer(bytes.fromhex(out), np.float32).reshape(3, n)
    x = np.linspace(-3, 3, n, dtype=np.float32)
    ref = artifact(p, load_object(obj), True).run((x,))
    np.testing.assert_array_equal(got, np.stack(ref))


def test_memory_is_unmapped_when_the_library_is_collected() -> None:
    obj = compile_program(ops_program(F32, 8, ["exp"], 1))

    def maps() -> int:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    libs = [load_elf(obj.object_code, obj.entry, obj.entry_py) for _ in range(20)]
    bases = {lib.base for lib in libs}
    assert len(bases) == 20
    before = maps()
    del libs
    import gc

    gc.collect()
    assert maps() < before
