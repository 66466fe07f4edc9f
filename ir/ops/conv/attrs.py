"""Convolution attributes, padding and output shapes, shape inference and numpy semantics.

Geometry of one spatial dim of a convolution with input size `d`, kernel `k`, stride `s`,
dilation `dl` and pads `pb` (begin) / `pe` (end): output position `o` reads input position
`o*s - pb + t*dl` for kernel tap `t`, so the output size is `(d + pb + pe - dl*(k-1) - 1) // s + 1`.
`auto_pad` (Conv and ConvTranspose, every version):
- NOTSET: the `pads` attribute (default zeros); VALID: zero pads;
- SAME_UPPER / SAME_LOWER: the output size is `ceil(d / s)` and the total padding
  `max(0, (out-1)*s + dl*(k-1) + 1 - d)` is split with the extra pixel at the end (UPPER) or
  the beginning (LOWER).
ConvTranspose is the adjoint: input position `i` scatters to output `i*s - pb + t*dl`, so the output
size is `s*(d-1) + output_padding + dl*(k-1) + 1 - pb - pe`; with `output_shape` (or SAME) the
total padding is derived from the requested size as onnxruntime does (clamped at 0; SAME_UPPER
puts the odd pixel at the end, every other mode at the beginning) and `pads` is ignored.

Every function taking dims works on symbolic dims (`Sym`, unknown `None`) where the formula
allows; `conv_numpy` is Conv's constant-folding semantics: im2col over a zero-padded copy and a
per-group matmul. The loop helpers the lowerings share are in `geometry`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onnxjit.errors import ModelError
from onnxjit.ir import symbolic
from onnxjit.ir.graph import Node
from onnxjit.ir.narrow import is_narrow_array, widen
from onnxjit.ir.types import Dim, Sym, sym_max

AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def ints_attr(node: Node, name: str, n: int, default: int | None, low: int | None
          ) -> tuple[int, ...] | None:
    """An ints attribute of length n (every value >= low), or `default` repeated."""
    v = node.attr(name)
    if v is None:
        return None if default is None else (default,) * n
    try:
        vals = tuple(int(x) for x in (v if isinstance(v, (tuple, list, np.ndarray)) else (v,)))
    except (TypeError, ValueError):
        raise ModelError(f"attribute '{name}' must be a list of ints, got {v!r}",
                         where=node) from None
    if len(vals) != n:
        raise ModelError(f"attribute '{name}' has {len(vals)} values, expected {n} (one per "
                         "spatial dim" + (", begins then ends" if name == "pads" else "") + ")",
                         where=node)
    if low is not None and any(x < low for x in vals):
        raise ModelError(f"attribute '{name}' must be >= {low}, got {list(vals)}", where=node)
    return vals


@dataclass(frozen=True)
class ConvAttrs:
    """The spatial attributes of one conv node, validated; `kernel` from W when not given."""

    kernel: tuple[Dim, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]  # begins then ends (the attribute; auto_pad may override)
    auto_pad: str
    group: int

    @property
    def rank(self) -> int:
        return len(self.strides)


def conv_attrs(node: Node, rank: int, w_shape: tuple | None) -> ConvAttrs:
    """Parse and check the attributes of a Conv-like node with `rank` spatial dims."""
    auto = node.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto not in AUTO_PADS:
        raise ModelError(f"attribute 'auto_pad' must be one of {list(AUTO_PADS)}, got {auto!r}",
                         where=node)
    group = node.attr("group", 1)
    if not isinstance(group, (int, np.integer)) or isinstance(group, bool) or group < 1:
        raise ModelError(f"attribute 'group' must be a positive int, got {group!r}", where=node)
    ks = ints_attr(node, "kernel_shape", rank, None, 1)
    w_k = None if w_shape is None else tuple(w_shape[2:])
    if ks is not None and w_k is not None and any(
            isinstance(a, int) and a != b for a, b in zip(w_k, ks)):
        raise ModelError(f"attribute kernel_shape {list(ks)} does not match the kernel dims "
                         f"{list(w_k)} of W", where=node)
    kernel: tuple[Dim, ...] = ks if ks is not None else w_k if w_k is not None else (None,) * rank
    pads = ints_attr(node, "pads", 2 * rank, 0, 0)
    # With auto_pad set, `pads` is ignored (the spec forbids both; onnxruntime ignores pads).
    return ConvAttrs(kernel, ints_attr(node, "strides", rank, 1, 1),  # type: ignore[arg-type]
                     ints_attr(node, "dilations", rank, 1, 1), pads,  # type: ignore[arg-type]
                     auto, int(group))


# --------------------------------------------------------------------------- Conv geometry


def conv_out_dims(node: Node, a: ConvAttrs, spatial: Sequence[Dim]) -> tuple[Dim, ...]:
    """Output spatial dims of a Conv (symbolic where the input dims are)."""
    out: list[Dim] = []
    for j, d in enumerate(spatial):
        k, s, dl = a.kernel[j], a.strides[j], a.dilations[j]
        if d is None or (k is None and a.auto_pad not in ("SAME_UPPER", "SAME_LOWER")):
            out.append(None)
            continue
        if a.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = (d + (s - 1)) // s
        else:
            pad = 0 if a.auto_pad == "VALID" else a.pads[j] + a.pads[j + a.rank]
            o = (d + (pad - dl * (k - 1) - 1)) // s + 1  # type: ignore[operator]
        if isinstance(o, int) and o < 1:
            raise ModelError(f"spatial dim {j}: input size {d} with kernel {k}, dilation {dl} "
                             f"and pads {a.pads[j]}+{a.pads[j + a.rank]} leaves no output "
                             "position", where=node)
        if isinstance(o, Sym) and symbolic.active():  # a call breaking it is specialised,
            symbolic.assume_equal(sym_max(o, 1), o,  # which names the error
                                  f"{node.op} output dim {j} >= 1")
        out.append(o)
    return tuple(out)


def conv_pads(a: ConvAttrs, spatial: Sequence[Dim]) -> tuple[list[Dim], list[Dim]]:
    """(begin, end) pads of a Conv for known input dims: ints, or with SAME_* padding and a
    stride > 1 `Sym`s of symbolic input dims (the total padding depends on d mod s)."""
    rank = a.rank
    if a.auto_pad == "VALID":
        return [0] * rank, [0] * rank
    if a.auto_pad == "NOTSET":
        return list(a.pads[:rank]), list(a.pads[rank:])
    begin, end = [], []
    for j, d in enumerate(spatial):
        k, s, dl = int(a.kernel[j]), a.strides[j], a.dilations[j]  # type: ignore[arg-type]
        if isinstance(d, Sym):
            total: Dim = dl * (k - 1) if s == 1 else sym_max(
                0, (d + (s - 1)) // s * s + (dl * (k - 1) + 1 - s) - d)
        else:
            out = -(-d // s)  # type: ignore[operator]
            total = max(0, (out - 1) * s + dl * (k - 1) + 1 - d)  # type: ignore[operator]
        head = (total + 1) // 2 if a.auto_pad == "SAME_LOWER" else total // 2
        begin.append(head)
        end.append(total - head)
    return begin, end


# --------------------------------------------------------------------------- ConvTranspose


def transpose_geometry(node: Node, a: ConvAttrs, spatial: Sequence[Dim]
                       ) -> tuple[tuple[Dim, ...], list[Dim] | None]:
    """(output spatial dims, begin pads or None when not computable) of a ConvTranspose."""
    rank = a.rank
    opad = ints_attr(node, "output_padding", rank, 0, 0)
    assert opad is not None
    for j in range(rank):
        if opad[j] >= max(a.strides[j], a.dilations[j]):
            raise ModelError(f"output_padding {list(opad)} must be smaller than the stride "
                             f"or the dilation of its dim", where=node)
    oshape = node.attr("output_shape")
    if oshape is not None:
        oshape = tuple(int(x) for x in oshape)
        if len(oshape) == rank + 2:  # the full (N, C, ...) form some exporters write
            oshape = oshape[2:]
        if len(oshape) != rank:
            raise ModelError(f"attribute 'output_shape' has {len(oshape)} values, expected "
                             f"{rank}", where=node)
    auto = a.auto_pad
    out: list[Dim] = []
    begin: list[Dim] | None = []
    for j, d in enumerate(spatial):
        k, s, dl = a.kernel[j], a.strides[j], a.dilations[j]
        full = None if d is None or k is None else s * (d - 1) + (opad[j] + dl * (k - 1) + 1)
        if oshape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
            o = oshape[j] if oshape is not None else None if d is None else d * s
            if isinstance(full, int) and isinstance(o, int):
                total = max(0, full - o)
                head = total // 2 if auto == "SAME_UPPER" else total - total // 2
                if begin is not None:  # None: an earlier dim's pad needs its size
                    begin.append(head)
            else:
                begin = None
        else:
            pb, pe = (0, 0) if auto == "VALID" else (a.pads[j], a.pads[j + rank])
            o = None if full is None else full - pb - pe
            if begin is not None:
                begin.append(pb)
        if isinstance(o, int) and o < 1:
            raise ModelError(f"spatial dim {j} of the output would be {o}", where=node)
        out.append(o)
    return tuple(out), begin


# --------------------------------------------------------------------------- numpy semantics


def conv_numpy(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, a: ConvAttrs,
               acc: type = np.float64) -> np.ndarray:
    """Conv of concrete arrays (dtype of the result: x's, or `acc` when x is an int type).
    float16/bfloat16 are computed in f32 and rounded once, as the lowering does."""
    dt, narrow_in = x.dtype, is_narrow_array(x)
    if narrow_in:
        x, w = widen(x), widen(w)
        bias = None if bias is None else widen(bias)
    n, c = x.shape[:2]
    m, kshape = w.shape[0], w.shape[2:]
    g = a.group
    begin, end = conv_pads(a, x.shape[2:])
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(begin, end)))
    out = conv_out_dims(Node("Conv", [], []), a, x.shape[2:])
    kprod = math.prod(kshape)
    cols = np.zeros((n, c, kprod, *out), dtype=x.dtype)  # type: ignore[misc]
    for t, koff in enumerate(np.ndindex(*kshape)):
        sl = tuple(slice(kk * dl, kk * dl + (o - 1) * s + 1, s) for kk, dl, o, s
                   in zip(koff, a.dilations, out, a.strides))  # type: ignore[operator]
        cols[:, :, t] = xp[(slice(None), slice(None), *sl)]
    p = math.prod(out)  # type: ignore[arg-type]
    cols = cols.reshape(n, g, (c // g) * kprod, p)
    wr = w.reshape(g, m // g, (c // g) * kprod)
    with np.errstate(all="ignore"):
        y = np.einsum("gmk,ngkp->ngmp", wr, cols).reshape(n, m, *out)  # type: ignore[misc]
        if bias is not None:
            y = y + bias.reshape(1, m, *([1] * len(out)))
    return np.asarray(y, dtype=dt if dt.kind == "f" or narrow_in else acc)


# --------------------------------------------------------------------------- shape inference


def _txt(shape: Sequence[Dim] | None) -> str:
    return "?" if shape is None else "[" + ",".join("?" if d is None else str(d)
                                                    for d in shape) + "]"


def _differ(a: Dim, b: Dim) -> bool:
    return isinstance(a, int) and isinstance(b, int) and a != b


def infer_conv_shape(node: Node, x: tuple | None, w: tuple | None, b: tuple | None,
                     transpose: bool = False) -> tuple[ConvAttrs | None, tuple[Dim, ...] | None]:
    """Check X (N, C, *spatial), W and the optional bias B of a Conv (W: (M, C/group, *k)) or
    ConvTranspose (W: (C, M/group, *k)); returns (attributes, output shape) or ModelError."""
    rank = len(x) if x is not None else len(w) if w is not None else None
    if rank is None:
        return None, None
    for i, s in ((0, x), (1, w)):
        if s is not None and (len(s) != rank or len(s) < 3):
            raise ModelError(f"input {i} ({'XW'[i]}) must have rank >= 3 and the rank of the "
                             f"other input; got X {_txt(x)} and W {_txt(w)}", where=node)
    a = conv_attrs(node, rank - 2, w)
    g = a.group
    c = None if x is None else x[1]
    if w is not None:
        wc = w[0] if transpose else w[1]
        m = w[1] * g if transpose else w[0]
        want_c = wc if transpose else wc * g  # type: ignore[operator]
        if _differ(c, want_c):
            layout = "(C, M/group, ...)" if transpose else "(M, C/group, ...)"
            raise ModelError(f"X has {c} channels but W {_txt(w)} (layout {layout}) with "
                             f"group={g} expects {want_c}", where=node)
        split = w[0] if transpose else w[0]
        if isinstance(split, int) and split % g:
            what = "input channels" if transpose else "output channels"
            raise ModelError(f"W has {split} {what}, not divisible by group={g}", where=node)
    else:
        m = None
    if isinstance(c, int) and c % g:
        raise ModelError(f"X has {c} channels, not divisible by group={g}", where=node)
    if b is not None and (len(b) != 1 or _differ(b[0], m)):
        raise ModelError(f"bias B must have shape [{m}] (one per output channel), got {_txt(b)}",
                         where=node)
    spatial = (None,) * (rank - 2) if x is None else x[2:]
    if transpose:
        out, _ = transpose_geometry(node, a, spatial)
    else:
        out = conv_out_dims(node, a, spatial)
    return a, (None if x is None else x[0], m, *out)
