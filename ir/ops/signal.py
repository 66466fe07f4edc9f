"""Signal ops (opset 17, DFT also 20): DFT, STFT, Hann/Hamming/BlackmanWindow, MelWeightMatrix.

All are evaluated in numpy (no lowering): the loop IR has no sin/cos, the windows and the mel
matrix are small and usually constant-folded, and a DFT/STFT whose input is not constant runs
on the host through the run-time shape phase (onnxjit.staged). Their size-giving inputs are
`value_inputs`, so output shapes are known before the node runs.

- DFT: the signal is x[..., 0] (real, last dim 1) or x[..., 0] + i x[..., 1] (last dim 2); the
  transform runs along `axis` (opset 17: attribute, default 1; opset 20: input 2, default -2)
  with length `dft_length` (input 1; default the axis' size, or 2 (n - 1) for an inverse
  one-sided transform), zero-padding or truncating the signal. Forward: np.fft.fft, keeping
  the first L // 2 + 1 bins when `onesided`. Inverse: np.fft.ifft (scaled by 1/L), or irfft
  with a real output (last dim 1) when `onesided`. Output last dim: (re, im).
- STFT: frames of `frame_length` samples every `frame_step` (n_frames = 1 + (L - frame_length)
  // frame_step), multiplied by `window`, each transformed like a forward DFT; output
  (batch, n_frames, bins, 2), bins = frame_length // 2 + 1 when `onesided` (default 1).
- Windows, with N = size (periodic, the default) or size - 1 (symmetric) and n = 0..size-1:
  Hann sin^2(pi n / N); Hamming a - (1 - a) cos(2 pi n / N), a = 25/46;
  Blackman 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N). Computed in float64 and cast to
  `output_datatype` (default float).
- MelWeightMatrix: triangular filters between mel-spaced edges (mel = 2595 log10(1 + f/700)),
  edges mapped to spectrogram bins floor((dft_length + 1) f / sample_rate); output
  (dft_length // 2 + 1, num_mel_bins) in `output_datatype` (default float).
"""

from __future__ import annotations

import numpy as np

from onnxjit.errors import InputError, ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.elementwise.arithmetic import FLOATS, INTS, accept, arity, int_attr
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import normalize_axis, tensor_input
from onnxjit.ir.types import COMPUTE_DTYPES, DType

_SIZE_TYPES = ((17, frozenset({DType.INT32, DType.INT64})),)


def _const_int(node: Node, i: int) -> int | None:
    """The single int held by optional input i when it is known (None if absent/unknown)."""
    v = node.input(i)
    if v is None or v.const is None:
        return None
    c = v.const
    if c.size != 1:
        raise ModelError(f"input {i} must hold one value, got shape {list(c.shape)}",
                         where=node)
    return int(c.reshape(-1)[0])


def _scalar_value(node: Node, x: np.ndarray | None, i: int) -> int | None:
    if x is None:
        return None
    if x.size != 1:
        raise InputError(f"input {i} must hold one value, got shape {list(x.shape)}",
                         where=node)
    return int(x.reshape(-1)[0])


def _out_dtype(node: Node) -> DType:
    code = int_attr(node, "output_datatype", 1)
    try:
        dt = DType(code)
    except ValueError:
        raise ModelError(f"attribute 'output_datatype' {code} is not an ONNX element type",
                         where=node) from None
    if dt == DType.BOOL or dt == DType.STRING or dt not in FLOATS | INTS \
            and dt != DType.BFLOAT16:
        raise ModelError(f"attribute 'output_datatype' must be a numeric type, got {dt.short}",
                         where=node)
    if dt not in COMPUTE_DTYPES:
        raise UnsupportedError(f"op '{node.op}' with output type {dt.short} is not supported",
                               where=node)
    return dt


# --------------------------------------------------------------------------- DFT


def _dft_axis(node: Node, rank: int, axis_value: int | None) -> int:
    if node.version >= 20:
        axis = -2 if axis_value is None else axis_value
    else:
        axis = int_attr(node, "axis", 1)
    ax = normalize_axis(axis, rank, node)
    if ax == rank - 1:
        raise ModelError(f"axis {axis} is the (re, im) dim; it must be a signal dim",
                         where=node)
    return ax


def _dft_infer(node: Node) -> list:
    arity(node, 1, 3 if node.version >= 20 else 2)
    dt = accept(node, 0, ((17, FLOATS),))
    for i in (1, 2):
        if node.input(i) is not None:
            accept(node, i, _SIZE_TYPES)
    inverse = int_attr(node, "inverse", 0, (0, 1)) == 1
    onesided = int_attr(node, "onesided", 0, (0, 1)) == 1
    shape = tensor_input(node, 0).shape
    if shape is None:
        return tensor(dt, None)
    if len(shape) < 2:
        raise ModelError(f"input must have rank >= 2 ([batch...,] signal, 1 or 2), got "
                         f"rank {len(shape)}", where=node)
    if isinstance(shape[-1], int) and shape[-1] not in (1, 2):
        raise ModelError(f"the last dim of the input must be 1 (real) or 2 (complex), got "
                         f"{shape[-1]}", where=node)
    axis_known = node.version < 20 or node.input(2) is None or _const_int(node, 2) is not None
    if not axis_known:
        return tensor(dt, (None,) * len(shape))
    ax = _dft_axis(node, len(shape), _const_int(node, 2) if node.version >= 20 else None)
    length = _const_int(node, 1)
    n = shape[ax]
    if length is None and node.input(1) is None:
        length = (2 * (n - 1) if inverse and onesided else n) if isinstance(n, int) else None
    if length is not None and length < 1:
        raise ModelError(f"dft_length must be >= 1, got {length}", where=node)
    out = list(shape)
    if length is None:
        out[ax] = None
    else:
        out[ax] = length // 2 + 1 if onesided and not inverse else length
    out[-1] = 1 if inverse and onesided else 2
    return tensor(dt, tuple(out))


def _complex(x: np.ndarray) -> np.ndarray:
    # In the input's precision (numpy >= 2 transforms complex64 natively), as the reference
    # does: near-zero outputs then carry the same rounding as the expected values.
    ct = np.complex64 if x.dtype == np.float32 else np.complex128
    sig = x[..., 0].astype(ct)
    return sig + 1j * x[..., 1].astype(ct) if x.shape[-1] == 2 else sig


def _dft_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    x = inputs[0]
    ins = list(inputs) + [None] * (3 - len(inputs))
    inverse = int_attr(node, "inverse", 0) == 1
    onesided = int_attr(node, "onesided", 0) == 1
    if x.shape[-1] not in (1, 2):
        raise InputError(f"the last dim of the input must be 1 or 2, got {x.shape[-1]}",
                         where=node)
    ax = _dft_axis(node, x.ndim, _scalar_value(node, ins[2], 2) if node.version >= 20
                   else None)
    length = _scalar_value(node, ins[1], 1)
    if length is None:
        length = 2 * (x.shape[ax] - 1) if inverse and onesided else x.shape[ax]
    if length < 1:
        raise InputError(f"dft_length must be >= 1, got {length}", where=node)
    sig = _complex(x)
    if inverse and onesided:
        return [np.fft.irfft(sig, n=length, axis=ax)[..., None].astype(x.dtype)]
    res = np.fft.ifft(sig, n=length, axis=ax) if inverse else np.fft.fft(sig, n=length, axis=ax)
    if onesided and not inverse:
        res = np.take(res, np.arange(length // 2 + 1), axis=ax)
    return [np.stack([res.real, res.imag], axis=-1).astype(x.dtype)]


op("DFT", (17, 20), infer=_dft_infer, evaluate=_dft_evaluate, value_inputs=(1, 2),
   doc="discrete Fourier transform along one axis (host numpy FFT)")

# --------------------------------------------------------------------------- STFT


def _stft_frame_length(node: Node, shape: tuple | None) -> int | None:
    fl = _const_int(node, 3)
    if fl is not None:
        return fl
    if node.input(3) is not None:
        return None
    if node.input(2) is not None:
        w = tensor_input(node, 2).shape
        return w[0] if w is not None and isinstance(w[0], int) else None
    return shape[-2] if shape is not None and isinstance(shape[-2], int) else None


def _stft_infer(node: Node) -> list:
    arity(node, 2, 4)
    dt = accept(node, 0, ((17, FLOATS),))
    accept(node, 1, _SIZE_TYPES)
    if node.input(2) is not None and accept(node, 2, ((17, FLOATS),)) != dt:
        raise ModelError("window must have the signal's element type", where=node)
    if node.input(3) is not None:
        accept(node, 3, _SIZE_TYPES)
    onesided = int_attr(node, "onesided", 1, (0, 1)) == 1
    shape = tensor_input(node, 0).shape
    if shape is not None and len(shape) != 3:
        raise ModelError(f"signal must be 3-D (batch, length, 1 or 2), got rank {len(shape)}",
                         where=node)
    if shape is not None and isinstance(shape[-1], int) and shape[-1] not in (1, 2):
        raise ModelError(f"the last dim of the signal must be 1 or 2, got {shape[-1]}",
                         where=node)
    step, fl = _const_int(node, 1), _stft_frame_length(node, shape)
    if step is not None and step < 1:
        raise ModelError(f"frame_step must be >= 1, got {step}", where=node)
    n = shape[1] if shape is not None else None
    frames = None
    if step is not None and fl is not None and isinstance(n, int):
        if fl < 1 or fl > n:
            raise ModelError(f"frame_length {fl} must be in [1, {n}] (the signal length)",
                             where=node)
        frames = 1 + (n - fl) // step
    bins = None if fl is None else fl // 2 + 1 if onesided else fl
    return tensor(dt, (shape[0] if shape is not None else None, frames, bins, 2))


def _stft_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    ins = list(inputs) + [None] * (4 - len(inputs))
    x, window = ins[0], ins[2]
    step = _scalar_value(node, ins[1], 1)
    fl = _scalar_value(node, ins[3], 3)
    if fl is None:
        fl = window.shape[0] if window is not None else x.shape[-2]
    onesided = int_attr(node, "onesided", 1) == 1
    n = x.shape[1]
    if step is None or step < 1 or not 1 <= fl <= n:
        raise InputError(f"STFT needs frame_step >= 1 and frame_length in [1, {n}], got "
                         f"{step} and {fl}", where=node)
    if window is not None and window.shape != (fl,):
        raise InputError(f"window has shape {list(window.shape)}, expected [{fl}]", where=node)
    frames = 1 + (n - fl) // step
    sig = _complex(x)  # (batch, n)
    idx = np.arange(frames)[:, None] * step + np.arange(fl)[None, :]
    framed = sig[:, idx]  # (batch, frames, fl)
    if window is not None:
        framed = framed * window.astype(framed.real.dtype)
    res = np.fft.fft(framed, axis=-1)
    if onesided:
        res = res[..., : fl // 2 + 1]
    return [np.stack([res.real, res.imag], axis=-1).astype(x.dtype)]


op("STFT", (17,), infer=_stft_infer, evaluate=_stft_evaluate, value_inputs=(1, 3),
   doc="short-time Fourier transform of windowed frames (host numpy FFT)")

# --------------------------------------------------------------------------- windows


def _window_infer(node: Node) -> list:
    arity(node, 1)
    accept(node, 0, _SIZE_TYPES)
    int_attr(node, "periodic", 1, (0, 1))
    dt = _out_dtype(node)
    size = _const_int(node, 0)
    if size is not None and size < 0:
        raise ModelError(f"size must be >= 0, got {size}", where=node)
    return tensor(dt, (size,))


def _window_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    size = _scalar_value(node, inputs[0], 0)
    assert size is not None
    if size < 0:
        raise InputError(f"size must be >= 0, got {size}", where=node)
    big_n = size if int_attr(node, "periodic", 1) == 1 else size - 1
    n = np.arange(size, dtype=np.float64)
    with np.errstate(all="ignore"):
        if node.op == "HannWindow":
            y = np.sin(n * np.pi / big_n) ** 2
        elif node.op == "HammingWindow":
            a = 25.0 / 46.0
            y = a - np.cos(n * np.pi * 2 / big_n) * (1 - a)
        else:
            y = np.cos(n * (np.pi * 2) / big_n) * -0.5 + np.cos(n * (np.pi * 4) / big_n) * 0.08
            y += 0.42
    return [y.astype(_out_dtype(node).numpy)]


for _name, _doc in (("HannWindow", "sin^2(pi n / N)"),
                    ("HammingWindow", "25/46 - 21/46 cos(2 pi n / N)"),
                    ("BlackmanWindow", "0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)")):
    op(_name, (17,), infer=_window_infer, evaluate=_window_evaluate, value_inputs=(0,),
       doc=_doc)

# --------------------------------------------------------------------------- MelWeightMatrix


def _mel_infer(node: Node) -> list:
    arity(node, 5)
    for i in range(3):
        accept(node, i, _SIZE_TYPES)
    for i in (3, 4):
        accept(node, i, ((17, FLOATS),))
    dt = _out_dtype(node)
    bins, length = _const_int(node, 0), _const_int(node, 1)
    return tensor(dt, (None if length is None else length // 2 + 1, bins))


def _mel_evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    bins, length, rate = (_scalar_value(node, inputs[i], i) for i in range(3))
    lo, hi = (float(inputs[i].reshape(-1)[0]) for i in (3, 4))
    assert bins is not None and length is not None and rate is not None
    # Zero mel bins is a valid, empty filter bank (onnx.reference and onnxruntime agree).
    if bins < 0 or length < 1 or rate < 1:
        raise InputError(f"num_mel_bins must be >= 0, dft_length and sample_rate >= 1, got "
                         f"{bins}, {length}, {rate}", where=node)
    spec = length // 2 + 1
    mel_lo = 2595 * np.log1p(lo / 700) / np.log(10)
    mel_hi = 2595 * np.log1p(hi / 700) / np.log(10)
    freq = np.arange(bins + 2) * ((mel_hi - mel_lo) / (bins + 2)) + mel_lo
    freq = 700 * np.expm1(freq / 2595 * np.log(10))
    edges = (((length + 1) * freq) // rate).astype(np.int64)
    if edges.min() < 0 or edges.max() >= spec + 1:
        raise InputError(f"mel edges {lo}..{hi} Hz fall outside the {spec} spectrogram bins",
                         where=node)
    out = np.zeros((spec + 1, bins))  # one spare row: an upper edge may land on `spec`
    for i in range(bins):
        left, center, right = edges[i], edges[i + 1], edges[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            j = np.arange(left, center + 1)
            out[j, i] = (j - left) / float(center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, i] = (right - j) / float(right - center)
    return [out[:spec].astype(_out_dtype(node).numpy)]


op("MelWeightMatrix", (17,), infer=_mel_infer, evaluate=_mel_evaluate, value_inputs=(0, 1),
   doc="triangular mel filter bank (num_spectrogram_bins, num_mel_bins)")
