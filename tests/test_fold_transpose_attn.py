"""fold-transpose's MatMul views: attention's head transposes read/written in place.

The four transposes of multi-head attention (Q, K^T, V heads split from [B, S, H*D], and the context
merged back) become `a_perm`/`b_perm`/`y_perm` views of FusedMatMul nodes
(`ir/ops/linalg/strided_views.py`): no Transpose node is left and no transpose kernel is emitted.
Results are compared with onnxruntime, through the native code and the loop-IR interpreter, and with
the unfolded compile (switch off): bit for bit unless a view reads B transposed, which small
products compute in the dot form with reassociated sums, as the older trans_b fold does.
"""

from __future__ import annotations

import glob

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from loop_harness import run_via_loop_ir
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxjit
import onnxjit.runtime as rt
from onnxjit.passes import fold_transpose

RNG = np.random.default_rng(7)


def _rand(shape: tuple, dtype=np.float32) -> np.ndarray:
    return RNG.normal(size=shape).astype(dtype)


class G:
    """A small model builder with one element type."""

    def __init__(self, dtype=np.float32) -> None:
        self.dtype = dtype
        self.elem = TP.DOUBLE if dtype == np.float64 else TP.FLOAT
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.k = 0

    def init(self, arr: np.ndarray) -> str:
        self.k += 1
        self.inits.append(nh.from_array(np.asarray(arr), f"p{self.k}"))
        return f"p{self.k}"

    def shape(self, dims: list[int]) -> str:
        return self.init(np.array(dims, np.int64))

    def node(self, op: str, ins: list[str], out: str | None = None, **attrs) -> str:
        self.k += 1
        out = out or f"t{self.k}"
        self.nodes.append(h.make_node(op, ins, [out], **attrs))
        return out

    def model(self, inputs: dict[str, tuple], outputs: list[str]) -> onnx.ModelProto:
        g = h.make_graph(self.nodes, "g",
                         [h.make_tensor_value_info(n, self.elem, s) for n, s in inputs.items()],
                         [h.make_tensor_value_info(o, self.elem, None) for o in outputs],
                         self.inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
        m.ir_version = 10
        return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def attention(g: G, x: str, s: int | str, heads: int, dh: int, torch_k: bool = False) -> str:
    """Self-attention as torch.onnx exports it: [B,S,H*D] -> heads -> softmax -> [B,S,H*D]."""
    hd = heads * dh
    split = g.shape([0, -1, heads, dh])

    def proj() -> str:
        mm = g.node("MatMul", [x, g.init(_rand((hd, hd), g.dtype) * 0.3)])
        return g.node("Reshape", [g.node("Add", [mm, g.init(_rand((hd,), g.dtype))]), split])

    q = g.node("Transpose", [proj()], perm=[0, 2, 1, 3])
    if torch_k:  # k.transpose(1, 2) then k.transpose(-1, -2): composed by the pass
        k = g.node("Transpose", [g.node("Transpose", [proj()], perm=[0, 2, 1, 3])],
                   perm=[0, 1, 3, 2])
    else:
        k = g.node("Transpose", [proj()], perm=[0, 2, 3, 1])
    v = g.node("Transpose", [proj()], perm=[0, 2, 1, 3])
    scale = g.init(np.array(np.sqrt(dh), g.dtype))
    scores = g.node("Div", [g.node("MatMul", [q, k]), scale])
    ctx = g.node("MatMul", [g.node("Softmax", [scores], axis=-1), v])
    merged = g.node("Reshape", [g.node("Transpose", [ctx], perm=[0, 2, 1, 3]),
                                g.shape([0, -1, hd])])
    return g.node("MatMul", [merged, g.init(_rand((hd, hd), g.dtype) * 0.3)], "y")


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _compile(model: onnx.ModelProto, views: bool, monkeypatch, **kw):
    monkeypatch.setattr(fold_transpose, "FOLD_VIEWS", views)
    rt._MEMORY.clear()  # the process-wide artifact cache does not key on the switch
    return onnxjit.compile(model, cache_dir=False, **kw)


def _dumps(tmp_path, pattern: str) -> str:
    files = sorted(glob.glob(str(tmp_path / "*" / f"*-{pattern}")))
    assert files, pattern
    return "\n".join(open(f).read() for f in files)


def check(model, feeds: dict, monkeypatch, tmp_path, rtol=1e-4, atol=1e-5, **kw):
    """Native (views on), loop IR and onnxruntime agree; views on == views off bitwise.
    Returns the dumped graph after fuse and the final loop IR."""
    want = _ort(model, feeds)
    dump = tmp_path / "dump"
    got = _compile(model, True, monkeypatch, dump_ir=str(dump), **kw)(**feeds)
    for g_, w in zip(got, want):
        np.testing.assert_allclose(g_, w, rtol=rtol, atol=atol)
    plain = _compile(model, False, monkeypatch, **kw)(**feeds)
    loops = _dumps(dump, "plan-memory.loops.txt")
    for g_, p in zip(got, plain):
        if "]^T" in loops:
            # B read transposed: small products take the dot form, whose float sums may be
            # split into vector partial sums (codegen/matmul.py), as for the trans_b fold.
            np.testing.assert_allclose(g_, p, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(g_, p)
    monkeypatch.setattr(fold_transpose, "FOLD_VIEWS", True)
    names = [i.name for i in model.graph.input]
    for g_, w in zip(run_via_loop_ir(model, [feeds[n] for n in names]), want):
        np.testing.assert_allclose(g_, w, rtol=rtol, atol=atol)
    return _dumps(dump, "fuse.graph.txt"), loops


@pytest.mark.parametrize("b,s,heads,dh", [(1, 16, 2, 8), (2, 12, 4, 4), (3, 9, 1, 16),
                                          (1, 33, 3, 5)])
def test_attention_heads_fold(b, s, heads, dh, monkeypatch, tmp_path):
    g = G()
    attention(g, "x", s, heads, dh)
    m = g.model({"x": (b, s, heads * dh)}, ["y"])
    text, loops = check(m, {"x": _rand((b, s, heads * dh))}, monkeypatch, tmp_path)
    assert "Transpose" not in text and "@transpose" not in loops
    assert "a_perm = [0, 2, 1, 3]" in text and "b_perm = [0, 2, 3, 1]" in text
    assert "b_perm = [0, 2, 1, 3]" in text and "y_perm = [0, 2, 1, 3]" in text


def test_attention_f64_and_torch_style_k(monkeypatch, tmp_path):
    g = G(np.float64)
    attention(g, "x", 10, 2, 6, torch_k=True)
    m = g.model({"x": (2, 10, 12)}, ["y"])
    text, loops = check(m, {"x": _rand((2, 10, 12), np.float64)}, monkeypatch, tmp_path,
                        rtol=1e-10, atol=1e-12)
    assert "Transpose" not in text and "@transpose" not in loops and "f64" in text


def test_attention_symbolic_batch(monkeypatch, tmp_path):
    g = G()
    attention(g, "x", 8, 2, 4)
    m = g.model({"x": ("B", 8, 8)}, ["y"])
    fn = _compile(m, True, monkeypatch, dump_ir=str(tmp_path))
    for b in (1, 3):
        x = _rand((b, 8, 8))
        np.testing.assert_allclose(fn(x)[0], _ort(m, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert len(fn.signatures) == 2
    assert "@transpose" not in _dumps(tmp_path, "plan-memory.loops.txt")


@pytest.mark.parametrize("perm,which", [([0, 2, 1, 3], 0), ([0, 2, 1, 3], 1),
                                        ([0, 2, 3, 1], 1), ([2, 0, 1, 3], 0),
                                        ([1, 2, 3, 0], 1)])
def test_single_operand_view(perm, which, monkeypatch, tmp_path):
    """One transposed operand at a time, the other a plain input (batch broadcast too)."""
    g = G()
    x = g.node("Transpose", ["x"], perm=perm)
    shape = (2, 6, 3, 5)
    t_shape = tuple(shape[p] for p in perm)
    other = (t_shape[-1], 4) if which == 0 else (t_shape[:-2][-1:] + (7, t_shape[-2]))
    ins = [x, "w"] if which == 0 else ["w", x]
    g.node("MatMul", ins, "y")
    m = g.model({"x": shape, "w": other}, ["y"])
    text, loops = check(m, {"x": _rand(shape), "w": _rand(other)}, monkeypatch, tmp_path)
    assert "Transpose" not in text and "@transpose" not in loops
    assert f"{'ab'[which]}_perm = {perm}" in text


@pytest.mark.parametrize("perm", [[0, 3, 1, 2], [3, 0, 1, 2], [1, 3, 0, 2]])
def test_operand_without_contiguous_dim_is_not_folded(perm, monkeypatch, tmp_path):
    """The source's last dim moved into the batch: no 2-D window can read it in place."""
    g = G()
    x = g.node("Transpose", ["x"], perm=perm)
    shape = (2, 3, 4, 5)
    t_shape = tuple(shape[p] for p in perm)
    g.node("MatMul", [x, "w"], "y")
    m = g.model({"x": shape, "w": (t_shape[-1], 6)}, ["y"])
    text, loops = check(m, {"x": _rand(shape), "w": _rand((t_shape[-1], 6))}, monkeypatch,
                        tmp_path)
    assert "Transpose" in text and "_perm" not in text


@pytest.mark.parametrize("perm,folds", [([0, 2, 1, 3], True), ([2, 1, 0, 3], True),
                                        ([0, 1, 3, 2], False), ([0, 3, 1, 2], False)])
def test_output_view(perm, folds, monkeypatch, tmp_path):
    """The product written through a Transpose only when its last dim stays last."""
    g = G()
    p = g.node("MatMul", ["a", "b"])
    g.node("Transpose", [p], "y", perm=perm)
    m = g.model({"a": (2, 3, 5, 4), "b": (3, 4, 6)}, ["y"])
    text, loops = check(m, {"a": _rand((2, 3, 5, 4)), "b": _rand((3, 4, 6))}, monkeypatch,
                        tmp_path)
    assert ("Transpose" not in text) == folds and ("y_perm" in text) == folds


def test_output_view_with_epilogue(monkeypatch, tmp_path):
    """Elementwise ops after the folded transpose join the epilogue: a per-channel bias
    (the last dim) and a full-shape residual are read at the written element."""
    g = G()
    p = g.node("MatMul", ["a", "b"])
    t = g.node("Transpose", [p], perm=[0, 2, 1, 3])
    r = g.node("Add", [g.node("Add", [t, g.init(_rand((6,)))]), "res"])
    g.node("Relu", [r], "y")
    m = g.model({"a": (2, 3, 5, 4), "b": (2, 3, 4, 6), "res": (2, 5, 3, 6)}, ["y"])
    feeds = {"a": _rand((2, 3, 5, 4)), "b": _rand((2, 3, 4, 6)), "res": _rand((2, 5, 3, 6))}
    text, loops = check(m, feeds, monkeypatch, tmp_path)
    assert "Transpose" not in text and "y_perm" in text and "epilogue" in text


def test_output_with_other_reader_is_not_folded(monkeypatch, tmp_path):
    g = G()
    p = g.node("MatMul", ["a", "b"])
    g.node("Transpose", [p], "y", perm=[1, 0, 2])
    g.node("Relu", [p], "z")
    m = g.model({"a": (2, 3, 4), "b": (2, 4, 5)}, ["y", "z"])
    text, _ = check(m, {"a": _rand((2, 3, 4)), "b": _rand((2, 4, 5))}, monkeypatch, tmp_path)
    assert "Transpose" in text and "y_perm" not in text


def test_switch_off_keeps_transposes(monkeypatch, tmp_path):
    g = G()
    attention(g, "x", 8, 2, 4)
    m = g.model({"x": (1, 8, 8)}, ["y"])
    x = _rand((1, 8, 8))
    fn = _compile(m, False, monkeypatch, dump_ir=str(tmp_path))
    np.testing.assert_allclose(fn(x)[0], _ort(m, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert "@transpose" in _dumps(tmp_path, "plan-memory.loops.txt")


def test_output_of_an_empty_sum_is_not_folded(monkeypatch, tmp_path):
    """K = 0: the plain MatMul zero-fills its output; a FusedMatMul view needs K > 0, so the
    transpose after it stays (fuzz seed 9122237 stopped with a CompileError)."""
    g = G()
    p = g.node("MatMul", ["a", "b"])
    g.node("Transpose", [p], "y", perm=[1, 0, 2, 3])
    m = g.model({"a": (1, 2, 3, 0), "b": (1, 2, 0, 4)}, ["y"])
    feeds = {"a": _rand((1, 2, 3, 0)), "b": _rand((1, 2, 0, 4))}
    text, _ = check(m, feeds, monkeypatch, tmp_path)
    assert "y_perm" not in text
    y = _compile(m, True, monkeypatch)(**feeds)[0]
    assert y.shape == (2, 1, 3, 4) and not y.any()
