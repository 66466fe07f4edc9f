"""What lowering asks of the code generator: the GEMM microkernel's shapes on this host.

Lowerings (`ir/ops/linalg`, `ir/ops/conv`) and the prepack-weights pass size their blocks and
lay out constant weights for the register-tiled kernel (`matmul_kernel`), so they need its
geometry before any LLVM IR exists: `tile_shape` (vector lanes, tile rows, vectors per tile
row), `panel_width` (columns of a packed B panel; `INT8_PANEL` and `has_vnni` for the 8-bit
products), and which `Matmul` statements run on the
tiled kernel (`uses_tiles`) or get their constant B packed at compile time (`packs_b`). This is
the one module of `codegen/` that `ir/` and `passes/` import; it loads no llvmlite until
`tile_shape` asks the target for its vector width.
"""

from __future__ import annotations

from onnxjit.ir.loops import Matmul
from onnxjit.ir.types import DType, Sym

#: float products from this many multiply-adds use the register-tiled kernel (matmul_kernel);
#: below PACK_MIN_M rows B is read in place (packing would cost as much as the product), and a
#: single row (a matrix-vector product, bound by reading B) stays in the axpy form. A
#: transposed B cannot be read in place: it is packed from PACK_MIN_M_T rows (`matmul`'s
#: dot form). Measured, one thread, 16-24 rows (pointwise convs' chunks of output channels) read
#: in place against packed per call: 1x1 32->16 at 112x112 1.25x, 256->16 at 56x56 1.30x,
#: 512->16 at 14x14 1.25x, 128->24 at 28x28 1.17x; MobileNetV2-like 1.02x (two threads 1.05x).
TILE_WORK, PACK_MIN_M, PACK_MIN_M_T = 32768, 32, 16
#: a constant B is packed at compile time (once) for products of this many rows on: read from
#: a packed constant, the tiled kernel beats the forms reading B in place at every m
#: (784x512 weights, one thread: m = 1 even, m = 2..12 3-8% faster, 25-45% with B transposed)
PREPACK_MIN_M = 1


#: columns of a panel of an 8-bit B packed in quads (`ir.quad_panels`): 4 vectors of 16 i32
#: lanes, the VNNI kernel's tile width (`int8_gemm`)
INT8_PANEL = 64


def has_vnni() -> bool:
    """Whether the host has AVX-512 VNNI (`vpdpbusd` on 512-bit vectors): the 8-bit products
    are lowered onto `int8_gemm`'s kernel only then."""
    from onnxjit.codegen.target import host

    features = host()[2].split(",")
    return "+avx512vnni" in features and "+avx512bw" in features


def tile_shape(itemsize: int) -> tuple[int, int, int]:
    """(VL, MR, NRV): vector lanes, tile rows, vectors per tile row for this host."""
    from onnxjit.codegen.target import vector_bytes  # LLVM's view of the host

    vb = vector_bytes()
    vl = max(1, vb // itemsize)
    if vb >= 64:  # 32 zmm: 24 accumulators + 4 B vectors + broadcasts
        return vl, 6, 4
    return vl, 6, 2  # 16 ymm/xmm: 12 accumulators


def panel_width(itemsize: int) -> int:
    """Columns of a packed B panel (NR) on this host: the layout a prepacked weight must have."""
    vl, _, nrv = tile_shape(itemsize)
    return vl * nrv


def _num(x: object) -> int | None:
    """A Matmul size as a number: an int, a symbolic size's hint, None for a variable."""
    if isinstance(x, int):
        return x
    if isinstance(x, Sym):
        from onnxjit.ir.symbolic import hint

        return hint(x)
    return None


def packs_b(s: Matmul) -> bool:
    """Whether a constant B of `s` is worth packing once at compile time (in
    `panel_width` panels, then read by the tiled kernel whatever m is; a symbolic m by its
    usual size)."""
    dt = s.c.dtype
    m, n, k = (_num(x) for x in (s.m, s.n, s.k))
    if m is None or n is None or k is None:
        return False
    if not isinstance(s.m, int):  # a run-time m is taken to be large (the tiled kernel runs
        m = max(m, PACK_MIN_M)    # it whatever it is, and a packed B costs it nothing)
    return (dt in (DType.FLOAT, DType.DOUBLE) and s.a.dtype == dt and s.b.dtype == dt
            and k > 0 and n > 0 and m >= PREPACK_MIN_M and m * n * k >= TILE_WORK)


def uses_tiles(s: Matmul) -> bool:
    """Whether `emit_matmul` runs `s` on the tiled kernel: a B packed at compile time whatever
    the sizes (a split product's leftover rows), else float products of TILE_WORK
    multiply-adds from PACK_MIN_M rows (PACK_MIN_M_T with B transposed), or of 2+ rows with B
    read in place."""
    dt = s.c.dtype
    if not all(isinstance(x, int) for x in (s.m, s.n, s.k)):  # run-time sizes: floats tile
        return dt in (DType.FLOAT, DType.DOUBLE) and s.a.dtype == dt and s.b.dtype == dt
    if s.k <= 0 or s.m == 0 or s.n == 0 or not dt.is_float or s.a.dtype != dt \
            or s.b.dtype != dt:
        return False
    if s.b_packed:
        return True
    return s.m * s.n * s.k >= TILE_WORK and (
        s.m >= PACK_MIN_M or s.b_trans and s.m >= PACK_MIN_M_T or not s.b_trans and s.m > 1)
