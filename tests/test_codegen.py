"""Native code against the loop-IR reference interpreter (`onnxjit.ir.loop_eval`).

Programs are built by hand with `loop_builder.Builder`, compiled with `onnxjit.codegen`, run
through `onnxjit.artifact.Artifact` with both entry points (`_entry_py` reading the numpy
objects, and `_entry` over a pointer array), and compared with `run_program`: exactly for ints
and bools, to float rounding for floats. Many ops share one program so the file stays fast.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxjit.artifact import Artifact, pyobject_layout_ok
from onnxjit.codegen import (
    DATA_OFFSET,
    FLAGS_OFFSET,
    CompiledObject,
    compile_program,
    load_object,
)
from onnxjit.errors import InputError, UnsupportedError
from onnxjit.ir.loop_builder import Builder, const, elementwise
from onnxjit.ir.loop_eval import run_program
from onnxjit.ir.loops import Buffer, Kernel, Matmul, Program, i64
from onnxjit.ir.types import COMPUTE_DTYPES, NARROW_FLOATS, DType

F32, F64, BOOL = DType.FLOAT, DType.DOUBLE, DType.BOOL
INTS = [DType.INT8, DType.INT16, DType.INT32, DType.INT64, DType.UINT8, DType.UINT16,
        DType.UINT32, DType.UINT64]
ALL = [F32, F64, BOOL] + INTS
assert set(ALL) == set(COMPUTE_DTYPES - NARROW_FLOATS)  # narrow floats: test_narrow_types.py


# helpers --------------------------------------------------------------------------------------
def native(p: Program, use_py: bool, dump: dict | None = None, lib: object = None
           ) -> Artifact:
    if lib is None:
        lib = load_object(compile_program(p, dump=None if dump is None else dump.__setitem__))
    return Artifact(tuple((b.dtype, b.shape) for b in p.inputs),
                    [(b.shape, b.dtype.numpy) for b in p.outputs],
                    [b.data for b in p.consts], p.arena_size, p.messages(), lib, use_py)


def check(p: Program, inputs: list[np.ndarray], rtol: float = 0.0, atol: float = 0.0) -> None:
    """Native outputs (both entries) equal the interpreter's (floats within rtol/atol)."""
    ref = run_program(p, inputs)
    lib = load_object(compile_program(p))
    for use_py in (True, False):
        got = native(p, use_py, lib=lib).run(tuple(inputs))
        for out, r, b in zip(got, ref, p.outputs):
            assert out.dtype == r.dtype and out.shape == r.shape, b.name
            if b.dtype.is_float and (rtol or atol):
                np.testing.assert_allclose(out, r, rtol=rtol, atol=atol, equal_nan=True,
                                           err_msg=b.name)
            else:
                np.testing.assert_array_equal(out, r, err_msg=f"{b.name} (py entry {use_py})")


def edge_values(dt: DType) -> np.ndarray:
    if dt == BOOL:
        return np.array([False, True])
    if dt.is_float:
        return np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.0, -7.0, 2.0, 1e-30, 1e30,
                         np.nan, np.inf, -np.inf, 2.0**31, -(2.0**63), 300.75], dt.numpy)
    info = np.iinfo(dt.numpy)
    vals = [0, 1, -1, 2, -2, 3, 7, -7, 100, info.min, info.max, info.min + 1, info.max - 1,
            info.max // 2 + 3]
    return np.array([v if dt.is_signed else v % (1 << info.bits) for v in vals],
                    dtype=object).astype(dt.numpy)


def pairs(dt: DType) -> tuple[np.ndarray, np.ndarray]:
    v = edge_values(dt)
    x, y = np.meshgrid(v, v)
    return x.reshape(-1), y.reshape(-1)


def ops_program(dt: DType, n: int, ops: list[str], arity: int) -> Program:
    """out_<op>[i] = op(x[i], y[i]) for every op, in one kernel."""
    ins = [Buffer(f"x{j}", dt, (n,), "input", slot=j) for j in range(arity)]
    outs = []
    bld = Builder()
    with bld.loop(0, n) as i:
        args = [bld.load(x, i) for x in ins]
        for k, op in enumerate(ops):
            r = bld.op(op, *args)
            out = Buffer(f"{op}", r.dtype, (n,), "output", slot=arity + k)
            outs.append(out)
            bld.store(out, i, r)
    return Program(ins + outs, [Kernel("ops", bld.body)])


BINARY = ["add", "sub", "mul", "div", "rem", "min", "max", "pow", "and", "or", "xor",
          "eq", "ne", "lt", "le", "gt", "ge"]
UNARY_FLOAT = ["neg", "abs", "sqrt", "floor", "ceil", "isnan", "copy"]
UNARY_INT = ["neg", "abs", "not", "isnan", "copy", "floor", "ceil"]
UNARY_BOOL = ["neg", "abs", "not", "isnan", "copy"]


def binary_ops(dt: DType) -> list[str]:
    if dt.is_float:
        return [o for o in BINARY if o not in ("and", "or", "xor")]
    if dt == BOOL:
        return [o for o in BINARY if o not in ("div", "rem", "pow")]
    return BINARY


# scalar ops -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.short)
def test_binary_ops(dt: DType) -> None:
    x, y = pairs(dt)
    ops = binary_ops(dt)
    if dt.is_float:
        # libm pow (C99: pow(-inf, 0.5) = inf) vs numpy's SIMD pow (nan there, and 1 ulp off)
        ops.remove("pow")
        keep = x != -np.inf
        check(ops_program(dt, int(keep.sum()), ["pow"], 2), [x[keep], y[keep]], rtol=3e-7)
    if dt == DType.UINT64:
        # scalar_eval._pow_int reads u64 exponents >= 2**63 as negative (int64): reported
        ops.remove("pow")
        keep = y < 2**63
        check(ops_program(dt, int(keep.sum()), ["pow"], 2), [x[keep], y[keep]])
    check(ops_program(dt, x.size, ops, 2), [x, y])


@pytest.mark.parametrize("dt", [F32, F64], ids=lambda d: d.short)
@pytest.mark.parametrize("c", [0.0, -0.0, 6.0, -1.5, np.inf, np.nan])
def test_min_max_with_a_constant_keep_numpy_semantics(dt: DType, c: float, monkeypatch) -> None:
    """min/max with a constant operand, on either side, take minps/maxps's form (`scalar.
    CONST_MINMAX`): the same bits as the generic select (NaN from either side, a tie of
    signed zeros to the second operand, as numpy), in vectorized loops and their tails."""
    from onnxjit.codegen import scalar

    x = np.tile(edge_values(dt), 57)  # 1026: vector iterations and a tail
    xb = Buffer("x", dt, x.shape, "input", slot=0)
    bld = Builder()
    outs = []
    with bld.loop(0, x.size) as i:
        v = bld.load(xb, i)
        for op in ("min", "max"):
            for args in ((v, const(c, dt)), (const(c, dt), v)):
                out = Buffer(f"{op}{len(outs)}", dt, x.shape, "output", slot=1 + len(outs))
                outs.append(out)
                bld.store(out, i, bld.op(op, *args))
    p = Program([xb] + outs, [Kernel("minmax", bld.body)])
    ref = run_program(p, [x])
    bits = np.uint32 if dt == F32 else np.uint64
    for on in (True, False):
        monkeypatch.setattr(scalar, "CONST_MINMAX", on)
        got = native(p, False, lib=load_object(compile_program(p))).run((x,))
        for g, r, out in zip(got, ref, outs):
            np.testing.assert_array_equal(g.view(bits), r.view(bits), err_msg=f"{out.name} {on}")


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.short)
def test_unary_ops(dt: DType) -> None:
    x = edge_values(dt)
    ops = UNARY_FLOAT if dt.is_float else UNARY_INT if dt.is_int else UNARY_BOOL
    check(ops_program(dt, x.size, ops, 1), [x])


@pytest.mark.parametrize("dt", [F32, F64], ids=lambda d: d.short)
def test_float_math_matches_interpreter(dt: DType) -> None:
    x = np.concatenate([edge_values(dt), np.linspace(-20, 20, 301, dtype=dt.numpy)])
    ops = ["exp", "log", "tanh", "sigmoid", "erf"]
    check(ops_program(dt, x.size, ops, 1), [x], rtol=4e-7 if dt == F32 else 1e-14,
          atol=1e-30)


def test_select() -> None:
    for dt in (F32, DType.INT16, BOOL, DType.UINT64):
        v = edge_values(dt)
        n = v.size
        c = Buffer("c", BOOL, (n,), "input", slot=0)
        a = Buffer("a", dt, (n,), "input", slot=1)
        out = Buffer("o", dt, (n,), "output", slot=2)
        bld = Builder()
        with bld.loop(0, n) as i:
            bld.store(out, i, bld.op("select", bld.load(c, i), bld.load(a, i), const(1, dt)))
        check(Program([c, a, out], [Kernel("sel", bld.body)]),
              [np.arange(n) % 3 == 0, v])


def test_casts_every_pair() -> None:
    """One program: for each source dtype an input of edge values, cast to every dtype."""
    srcs = {dt: edge_values(dt) for dt in ALL}
    extra = np.array([1e20, -1e20, 255.9, -0.9, 2.0**63, 2.0**64, -129.0, 128.5, 65535.5,
                      2.0**32, -(2.0**31) - 1.0, 2.0**63 - 1024, 0.9999], np.float64)
    srcs[F64] = np.concatenate([srcs[F64], extra])
    srcs[F32] = np.concatenate([srcs[F32], extra.astype(np.float32)])
    n = max(v.size for v in srcs.values())
    inputs = [np.resize(srcs[dt], n) for dt in ALL]
    ins = [Buffer(f"x_{dt.short}", dt, (n,), "input", slot=k) for k, dt in enumerate(ALL)]
    outs: list[Buffer] = []
    bld = Builder()
    with bld.loop(0, n) as i:
        for x in ins:
            v = bld.load(x, i)
            for dst in ALL:
                out = Buffer(f"{x.dtype.short}_to_{dst.short}", dst, (n,), "output",
                             slot=len(ins) + len(outs))
                outs.append(out)
                bld.store(out, i, bld.op("cast", v, dtype=dst))
    check(Program(ins + outs, [Kernel("casts", bld.body)]), inputs)


def test_int_pow_negative_exponents() -> None:
    for dt in (DType.INT8, DType.INT32, DType.INT64):
        v = np.array([-3, -2, -1, 0, 1, 2, 3, 5], dt.numpy)
        e = np.array([-5, -2, -1, 0, 1, 2, 3, 7, 31, 62, 63, 127 if dt == DType.INT8 else 64],
                     dt.numpy)
        x, y = np.meshgrid(v, e)
        check(ops_program(dt, x.size, ["pow"], 2), [x.reshape(-1), y.reshape(-1)])


def test_unsupported_op_dtype() -> None:
    with pytest.raises(UnsupportedError, match="exp"):
        compile_program(ops_program(DType.INT32, 4, ["exp"], 1))




# checks, storage kinds, entry points -----------------------------------------------------------
def _gather_program() -> Program:
    """out[i] = table[idx[i]] with Checks 0 <= idx < n (kernel 1) and a second kernel whose
    Check fails when the indexes sum above 10: two messages in order."""
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
    k1 = Kernel("gather", bld.body)
    bld = Builder()
    acc = bld.var(i64(0))
    with bld.loop(0, m) as i:
        bld.assign(acc, "add", acc, bld.load(idx, i))
    bld.check(bld.op("le", acc, i64(10)), "sum too big")
    return Program([table, idx, out], [k1, Kernel("sum", bld.body)])


def test_checks_raise_input_error() -> None:
    p = _gather_program()
    assert p.messages() == ["index below 0", "index out of range", "sum too big"]
    check(p, [np.array([0, 4, 2, 1])])
    lib = load_object(compile_program(p))
    for use_py in (True, False):
        art = native(p, use_py, lib=lib)
        np.testing.assert_array_equal(art.run((np.array([4, 3, 0, 0]),))[0], [8, 6, 0, 0])
        with pytest.raises(InputError, match="index out of range"):
            art.run((np.array([0, 5, 0, 0]),))
        with pytest.raises(InputError, match="index below 0"):
            art.run((np.array([0, 1, -1, 9]),))
        with pytest.raises(InputError, match="sum too big"):
            art.run((np.array([4, 4, 4, 0]),))


def test_short_folds_stay_rolled_and_vectorize(monkeypatch) -> None:
    # LayerNorm over rows of 128: its folds' 16 partial sums (`Lanes`, without fold loops)
    # kept rolled (no_unroll_md) become vector adds; fully unrolled they were 128 scalar adds
    # a row. (Fold loops, the default: `test_softmax_fold.py`.)
    from onnx import TensorProto, helper

    import onnxjit
    import onnxjit.codegen.llvmgen as llvmgen
    import onnxjit.ir.ops.reductions.lowering as lowering
    from onnxjit import runtime

    monkeypatch.setattr(lowering, "FOLD_LOOPS", False)

    n = 128
    g = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)], "g",
        [helper.make_tensor_value_info(v, TensorProto.FLOAT, shape)
         for v, shape in (("x", [4, n]), ("s", [n]), ("b", [n]))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, n])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    rng = np.random.default_rng(3)
    x, s, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((4, n), (n,), (n,)))
    outs = []
    for keep in (True, False):
        monkeypatch.setattr(llvmgen, "KEEP_FOLDS", keep)
        runtime._MEMORY.clear()
        fn = onnxjit.compile(m, cache_dir=False, num_threads=1)
        outs.append(fn(x, s, b)[0])
        assert ("llvm.loop.unroll.disable" in fn.ir("llvm")) == keep
        assert (fn.ir("asm").count("vaddss") < n // 2) == keep
    np.testing.assert_array_equal(outs[0], outs[1])  # the same sums, in the same order
    mean, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    np.testing.assert_allclose(outs[0], (x - mean) / np.sqrt(var + 1e-5) * s + b, rtol=1e-4,
                               atol=1e-5)


def test_temps_views_consts() -> None:
    """k1: t = x * c (const, 2x3) into a temp; k2: out = view(t, 3x2) + 1 via a view of the
    temp; a second temp shares the arena at another offset; a bool output via a view."""
    x = Buffer("x", F32, (2, 3), "input", slot=0)
    c = Buffer("c", F32, (2, 3), "const", slot=0,
               data=np.array([[1, -2, 3], [0.5, np.nan, -np.inf]], np.float32))
    t = Buffer("t", F32, (2, 3), "temp", offset=64)
    tv = Buffer("tv", F32, (3, 2), "view", base=t)
    u = Buffer("u", BOOL, (6,), "temp", offset=0)
    out = Buffer("out", F32, (3, 2), "output", slot=1)
    flag = Buffer("flag", BOOL, (6,), "output", slot=2)
    b1 = Builder()
    elementwise(b1, t, [x, c], lambda b, a: b.op("mul", a[0], a[1]))
    b2 = Builder()
    elementwise(b2, out, [tv], lambda b, a: b.op("add", a[0], const(1, F32)))
    b3 = Builder()
    elementwise(b3, u, [t.__class__("tf", F32, (6,), "view", base=t)],
                lambda b, a: b.op("gt", a[0], const(0, F32)))
    b4 = Builder()
    elementwise(b4, flag, [u], lambda b, a: b.op("not", a[0]))
    p = Program([x, c, t, tv, u, out, flag],
                [Kernel("k1", b1.body), Kernel("k2", b2.body), Kernel("k3", b3.body),
                 Kernel("k4", b4.body)])
    assert p.arena_size == 64 + 24
    check(p, [np.array([[1, 2, 3], [4, 5, 6]], np.float32)])


def test_entry_py_falls_back_for_strided_and_readonly() -> None:
    n = 64
    x = Buffer("x", DType.INT32, (n,), "input", slot=0)
    y = Buffer("y", DType.INT32, (n,), "output", slot=1)
    bld = Builder()
    elementwise(bld, y, [x], lambda b, a: b.op("mul", a[0], const(3, DType.INT32)))
    art = native(Program([x, y], [Kernel("k", bld.body)]), True)
    base = np.arange(2 * n, dtype=np.int32)
    ro = base[:n].copy()
    ro.flags.writeable = False
    for arr in (base[::2], ro):
        np.testing.assert_array_equal(art.run((arr,))[0], np.asarray(arr) * 3)


def test_object_code_loads_twice_and_layout() -> None:
    assert DATA_OFFSET == 16 and FLAGS_OFFSET == 64
    assert pyobject_layout_ok(DATA_OFFSET, FLAGS_OFFSET)
    p = _gather_program()
    obj = compile_program(p)
    again = CompiledObject(bytes(obj.object_code), obj.entry, obj.entry_py, obj.n_io,
                           obj.n_consts)
    assert compile_program(p).object_code == obj.object_code  # deterministic names
    libs = [load_object(obj), load_object(again)]
    assert libs[0].entry_addr != libs[1].entry_addr
    assert (obj.n_io, obj.n_consts) == (2, 1)
    for lib in libs:
        art = Artifact(((DType.INT64, (4,)),), [((4,), np.float32)],
                       [b.data for b in p.consts], 0, p.messages(), lib, True)
        np.testing.assert_array_equal(art.run((np.array([1, 1, 2, 3]),))[0], [2, 2, 4, 6])


# Matmul -------------------------------------------------------------------------------------
def _rand(dt: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dt.is_float:
        return rng.uniform(-1, 1, shape).astype(dt.numpy)
    info = np.iinfo(dt.numpy)
    return rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True
                        ).astype(dt.numpy)


#: (m, k, n): ones, odd sizes, empty sums and outputs (small: unblocked code), and one large
#: enough for the register-blocked forms that has a remainder in every blocked loop and crosses
#: every cache block (k > 256 rows of B; n above the column block of the axpy form and the row
#: block of the dot form)
MM_SIZES = [(1, 1, 1), (3, 1, 5), (5, 9, 1), (7, 13, 19), (2, 0, 3), (0, 4, 3), (7, 301, 601)]


@pytest.mark.parametrize("dt", [F32, F64, DType.INT32, DType.UINT8, DType.INT64],
                         ids=lambda d: d.short)
def test_matmul_variants(dt: DType) -> None:
    """One program: for every size and trans flags a Matmul into its own output, cycling
    through (alpha, accumulate) combinations (accumulate starts from a copy of an input)."""
    rng = np.random.default_rng(0)
    alpha = 3.0 if dt == DType.UINT8 else -2.0
    combos = [(1.0, False), (alpha, True), (alpha, False), (1.0, True)]
    cases = [(m, k, n, at, bt) for m, k, n in MM_SIZES for at in (False, True)
             for bt in (False, True)]
    n_in = 3 * len(cases)
    bufs: list[Buffer] = []
    inputs: list[np.ndarray] = []
    kernels: list[Kernel] = []
    for j, (m, k, n, at, bt) in enumerate(cases):
        scale, acc = combos[(j + j // 4) % len(combos)]  # every flag pair meets every combo
        a = Buffer(f"a{j}", dt, (k, m) if at else (m, k), "input", slot=3 * j)
        b = Buffer(f"b{j}", dt, (n, k) if bt else (k, n), "input", slot=3 * j + 1)
        c0 = Buffer(f"c0_{j}", dt, (m, n), "input", slot=3 * j + 2)
        c = Buffer(f"c{j}", dt, (m, n), "output", slot=n_in + j)
        bufs += [a, b, c0, c]
        inputs += [_rand(dt, x.shape, rng) for x in (a, b, c0)]
        bld = Builder()
        if acc:
            elementwise(bld, c, [c0], lambda bb, x: x[0], parallel=False)
        bld.emit(Matmul(c, i64(0), n, a, i64(0), m if at else k, b, i64(0), k if bt else n,
                        m, n, k, at, bt, scale, acc))
        kernels.append(Kernel(f"mm{j}", bld.body))
    tol = 1e-5 if dt == F32 else 1e-12
    check(Program(bufs, kernels), inputs, rtol=tol, atol=tol * 30)


def test_batched_matmul_with_var_offsets_and_strided_windows() -> None:
    """C[b] = A[b] @ B[b]^T on windows inside wider rows (ld > cols), offsets from a loop."""
    nb, m, k, n, pad = 3, 5, 20, 6, 4
    dt = F32
    a = Buffer("a", dt, (nb, m, k + pad), "input", slot=0)
    b = Buffer("b", dt, (nb, n, k), "input", slot=1)
    c = Buffer("c", dt, (nb, m, n + pad), "output", slot=2)
    bld = Builder()
    elementwise(bld, c, [], lambda bb, x: const(7.0, dt))
    with bld.loop(0, nb, parallel=True) as i:
        bld.emit(Matmul(c, bld.imul(i, m * (n + pad)), n + pad,
                        a, bld.iadd(bld.imul(i, m * (k + pad)), i64(pad)), k + pad,
                        b, bld.imul(i, n * k), k, m, n, k, b_trans=True, alpha=0.5))
        bld.emit(Matmul(c, bld.imul(i, m * (n + pad)), n + pad,
                        a, bld.imul(i, m * (k + pad)), k + pad,
                        b, bld.imul(i, n * k), n, m, n, 1, accumulate=True))
    rng = np.random.default_rng(1)
    check(Program([a, b, c], [Kernel("bmm", bld.body)]),
          [_rand(dt, a.shape, rng), _rand(dt, b.shape, rng)], rtol=1e-5, atol=1e-5)




def test_identical_kernels_share_one_function() -> None:
    """Kernels that differ only in the buffers they touch compile to one function, called with
    each kernel's pointers; a kernel with other shapes or ops gets its own."""
    n = 64
    x = Buffer("x", F32, (n,), "input", slot=0)
    t = Buffer("t", F32, (n,), "temp", offset=0)
    y = Buffer("y", F32, (n,), "output", slot=1)
    z = Buffer("z", F32, (n,), "output", slot=2)
    kernels = []
    for name, (src, dst, op) in {"a": (x, t, "tanh"), "b": (t, y, "tanh"),
                                 "c": (y, z, "exp")}.items():
        bld = Builder()
        elementwise(bld, dst, [src], lambda b, a, op=op: b.op(op, a[0]))
        kernels.append(Kernel(name, bld.body))
    p = Program([x, t, y, z], kernels)
    dump: dict[str, str] = {}
    xs = np.linspace(-3, 3, n, dtype=np.float32)
    yv, zv = native(p, True, dump).run((xs,))
    defined = [line for line in dump["llvm.ll"].splitlines() if line.startswith("define")]
    assert sum(".k0.a" in d for d in defined) == 1 and not any(".k1.b" in d for d in defined)
    assert sum(".k2.c" in d for d in defined) == 1
    np.testing.assert_allclose(yv, np.tanh(np.tanh(xs)), rtol=1e-6)
    np.testing.assert_allclose(zv, np.exp(yv), rtol=1e-6)


def test_contract_kernels_fuse_multiply_add() -> None:
    """A kernel marked `contract` rounds a*b + c once (`llvm.fmuladd`: an FMA on this host),
    an unmarked one rounds the product first; the same body in both compiles to two functions.
    With a*b = 1 + 2^-11 + 2^-24 (a tie in f32, rounded to 1 + 2^-11) and c = -(1 + 2^-11):
    0 unfused, 2^-24 fused."""
    from onnxjit.codegen.target import host

    n = 64
    a = Buffer("a", F32, (n,), "input", slot=0)
    c = Buffer("c", F32, (n,), "input", slot=1)
    outs = [Buffer(f"y{j}", F32, (n,), "output", slot=2 + j) for j in range(2)]
    kernels = []
    for j, y in enumerate(outs):
        bld = Builder()
        elementwise(bld, y, [a, c], lambda b, v: b.op("add", b.op("mul", v[0], v[0]), v[1]))
        kernels.append(Kernel(f"k{j}", bld.body, contract=j == 1))
    p = Program([a, c, *outs], kernels)
    dump: dict[str, str] = {}
    av = np.full(n, 1 + 2.0 ** -12, np.float32)
    cv = np.full(n, -(1 + 2.0 ** -11), np.float32)
    plain, fused = native(p, True, dump).run((av, cv))
    defined = [line for line in dump["llvm.ll"].splitlines() if line.startswith("define")]
    assert any(".k0.k0" in d for d in defined) and any(".k1.k1" in d for d in defined)
    bodies = dump["llvm.ll"].split("\ndefine ")
    fused_fn = [f for f in bodies if f.split("(")[0].endswith('.k1.k1"')]
    plain_fn = [f for f in bodies if f.split("(")[0].endswith('.k0.k0"')]
    assert "llvm.fmuladd" in fused_fn[0] and "llvm.fmuladd" not in plain_fn[0]
    np.testing.assert_array_equal(plain, np.zeros(n, np.float32))
    want = 2.0 ** -24 if "+fma" in host()[2] else 0.0
    np.testing.assert_array_equal(fused, np.full(n, want, np.float32))
