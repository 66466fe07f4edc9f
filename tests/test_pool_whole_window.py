"""A whole-image AveragePool (ResNet-50's, Inception's and DenseNet's 7x7 heads) lowers as
ReduceMean (`ir/ops/pooling/lowering._whole_window`); a padded or multi-window pool keeps the
window path. Oracles: onnxruntime (float32), onnx.reference (float64, which onnxruntime's
AveragePool lacks)."""

from __future__ import annotations

import numpy as np
import pytest
from test_ops_pool_norm import check, model, x

import onnxjit


@pytest.mark.parametrize("shape, dtype, attrs", [
    ((2, 64, 7, 7), np.float32, dict(kernel_shape=[7, 7])),  # ResNet-50's head
    ((1, 3, 5, 5), np.float64, dict(kernel_shape=[5, 5], strides=[2, 2], ceil_mode=1)),
    ((2, 4, 9), np.float32, dict(kernel_shape=[9], count_include_pad=1)),
    ((1, 3, 5, 5), np.float32, dict(kernel_shape=[5, 5], pads=[1, 1, 1, 1])),  # windows
])
def test_averagepool_whole_window_is_a_mean(shape: tuple, dtype, attrs: dict) -> None:
    """A window covering the whole unpadded image lowers as ReduceMean (`_whole_window`:
    one short kernel instead of the window path, whose unrolled rows cost LLVM 0.3 s)."""
    inputs = [x(*shape, dtype=dtype)]
    # onnxruntime has no float64 AveragePool
    check("AveragePool", inputs, 19, "ort" if dtype == np.float32 else "ref", **attrs)
    fn = onnxjit.compile(model("AveragePool", inputs, 19, **attrs), cache_dir=False,
                         tiered=False)
    fn(*inputs)
    whole = "pads" not in attrs
    assert ("kernel @averagepool_whole" in fn.ir("loops")) == whole
