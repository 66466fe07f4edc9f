"""ImageDecoder (opset 20): an encoded image (uint8 bytes) -> [H, W, C] uint8, on the host.

Decoding uses Pillow, imported lazily inside the evaluation (Pillow is not a runtime
dependency): a model using ImageDecoder needs it only when the node runs; without it the node
raises UnsupportedError naming itself. `pixel_format` RGB and BGR give 3 channels (the image
converted to RGB, BGR reversing the channels), Grayscale 1 channel (Pillow's "L" conversion,
ITU-R 601-2 luma). The formats are Pillow's: BMP, JPEG, JPEG 2000, TIFF, PNG, WebP, PNM and
more. As the ONNX text says, a stream that cannot be decoded gives an empty image: [0, 0, C].
"""

from __future__ import annotations

import io

import numpy as np

from onnxjit.errors import ModelError, UnsupportedError
from onnxjit.ir.graph import Node
from onnxjit.ir.opdef import op
from onnxjit.ir.ops.elementwise.arithmetic import arity
from onnxjit.ir.ops.elementwise.inference import tensor
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import DType, ValueType

_CHANNELS = {"RGB": 3, "BGR": 3, "Grayscale": 1}


def _format(node: Node) -> str:
    fmt = node.attr("pixel_format", "RGB")
    if fmt not in _CHANNELS:
        raise ModelError(f"attribute 'pixel_format' must be RGB, BGR or Grayscale, got {fmt!r}",
                         where=node)
    return fmt


def _infer(node: Node) -> list[ValueType | None]:
    arity(node, 1)
    t = tensor_input(node, 0)
    if t.dtype != DType.UINT8:
        raise ModelError(f"input 0 (the encoded stream) must be u8, got {t.dtype.short}",
                         where=node)
    if t.shape is not None and len(t.shape) != 1:
        raise ModelError(f"input 0 (the encoded stream) must be 1-D, got rank {len(t.shape)}",
                         where=node)
    return tensor(DType.UINT8, (None, None, _CHANNELS[_format(node)]))  # type: ignore


def _evaluate(node: Node, inputs: list) -> list[np.ndarray]:
    fmt = _format(node)
    try:
        from PIL import Image
    except ImportError:
        raise UnsupportedError("ImageDecoder needs Pillow (pip install pillow)",
                               where=node) from None
    data = np.ascontiguousarray(inputs[0], dtype=np.uint8).tobytes()
    try:
        with Image.open(io.BytesIO(data)) as img:
            img = img.convert("L" if fmt == "Grayscale" else "RGB")
            out = np.asarray(img, dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return [np.zeros((0, 0, _CHANNELS[fmt]), np.uint8)]
    if fmt == "Grayscale":
        out = out[:, :, None]
    elif fmt == "BGR":
        out = out[:, :, ::-1]
    return [np.ascontiguousarray(out)]


op("ImageDecoder", (20,), infer=_infer, evaluate=_evaluate,
   doc="decode an encoded image to [H, W, C] uint8 with Pillow (host)")
