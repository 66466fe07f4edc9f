"""Export small random-weight PyTorch models to ONNX for `tests/test_exported_models.py`.

Dev-only tool (issue 3): needs `torch` (CPU build) and `onnxscript` for the dynamo exporter.
Neither is a dependency of onnxjit and the tests never import them; the tests only read the
committed `.onnx` files and `manifest.json` this script writes into `tests/data/exported/`.

Algorithm:
1) Each builder returns a tiny `nn.Module` in eval mode (widths chosen so every file stays
   well under 400 KB), example inputs, input/output names and the dynamic axes (batch and,
   for sequence models, sequence length).
2) Each model is exported twice when the exporter accepts it: with the dynamo exporter
   (`torch.onnx.export(..., dynamo=True)`, `dynamic_shapes` with named `Dim`s) and with the
   legacy TorchScript exporter (`dynamo=False`, `dynamic_axes`), because the two emit
   different ONNX patterns (opset 18 functions/LayerNormalization vs opset-17 decompositions,
   Shape->Gather->Concat->Reshape chains, ...). A failed export is reported and skipped.
3) Post-processing with `onnx.helper` where torch cannot emit an op: the detection head gets
   an ONNX NonMaxSuppression + GatherND tail (torchvision is not available).
4) Weights are embedded (no external data); `ir_version` is lowered to 10 so onnxruntime
   loads every file. `manifest.json` records, per file, each input's dtype, symbolic shape
   and value range and the two sizes at which the test runs it.

Run: `python tools/export_models.py` (about a minute).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import onnx
import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch spelling
from onnx import TensorProto, helper
from torch import nn

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "exported"
SIZES = [{"batch": 2, "seq": 5}, {"batch": 3, "seq": 9}]
# The legacy exporter traces nn.MultiheadAttention's sequence length into a Reshape constant
# (onnxruntime fails too at another length), so these run at two batch sizes, one length.
SEQ_BAKED = {"transformer_legacy"}


# ---------------------------------------------------------------- models


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 project, residual when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int, act: type) -> None:
        super().__init__()
        mid = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), act(),
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), act(),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_res else y


class MobileNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU6())
        self.blocks = nn.Sequential(
            InvertedResidual(8, 8, 1, 2, nn.ReLU6),
            InvertedResidual(8, 16, 2, 3, nn.ReLU6),
            InvertedResidual(16, 16, 1, 3, nn.Hardswish),
            InvertedResidual(16, 24, 2, 3, nn.Hardswish),
        )
        self.head = nn.Sequential(nn.Conv2d(24, 32, 1), nn.Hardswish())
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        y = self.head(self.blocks(self.stem(x)))
        y = F.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc(y)


class TransformerClassifier(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, 64, d) * 0.1)
        layer = nn.TransformerEncoderLayer(d, heads, 64, dropout=0.0, activation="gelu",
                                           batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.cls = nn.Linear(d, 3)

    def forward(self, ids, pad_mask):
        x = self.emb(ids) + self.pos[:, : ids.shape[1]]
        x = self.enc(x, src_key_padding_mask=pad_mask)
        keep = (~pad_mask).unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.cls(self.norm(pooled))


class CausalAttention(nn.Module):
    """Hand-written attention: q/k/v projections, SDPA with a causal mask, output projection."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.h = heads
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        b, s, d = x.shape
        hd = d // self.h

        def split(t):
            return t.view(b, s, self.h, hd).transpose(1, 2)

        y = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)),
                                           split(self.v(x)), is_causal=True)
        y = y.transpose(1, 2).reshape(b, s, d)
        return self.ln(x + self.o(y))


class LstmTagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(40, 16)
        self.rnn = nn.LSTM(16, 24, num_layers=2, bidirectional=True, batch_first=True)
        self.out = nn.Linear(48, 5)

    def forward(self, ids):
        y, _ = self.rnn(self.emb(ids))
        return self.out(y)


class GruClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(40, 16)
        self.rnn = nn.GRU(16, 24, batch_first=True)
        self.out = nn.Linear(24, 4)

    def forward(self, ids):
        y, h = self.rnn(self.emb(ids))
        return self.out(y), h


class DetectionHead(nn.Module):
    """Tiny FPN detector: strided backbone, top-down nearest/bilinear upsampling, box decoding.

    Outputs boxes [N, A, 4] (x1, y1, x2, y2) and class scores [N, C, A], the layout ONNX
    NonMaxSuppression takes; the NMS tail is appended after export.
    """

    def __init__(self, classes: int = 3) -> None:
        super().__init__()

        def cbr(cin, cout, s):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, s, 1), nn.BatchNorm2d(cout), nn.ReLU())

        self.c1, self.c2, self.c3 = cbr(3, 8, 2), cbr(8, 16, 2), cbr(16, 16, 2)
        self.l2, self.l1 = nn.Conv2d(16, 16, 1), nn.Conv2d(8, 16, 1)
        self.box = nn.Conv2d(16, 4, 3, 1, 1)
        self.cls = nn.Conv2d(16, classes, 3, 1, 1)
        self.classes = classes

    def forward(self, x):
        f1 = self.c1(x)
        f2 = self.c2(f1)
        f3 = self.c3(f2)
        p2 = self.l2(f2) + F.interpolate(f3, scale_factor=2.0, mode="nearest")
        p1a = F.interpolate(p2, size=f1.shape[-2:], mode="bilinear", align_corners=False)
        p1b = F.interpolate(p2, size=f1.shape[-2:], mode="bilinear", align_corners=True)
        p1 = self.l1(f1) + 0.5 * (p1a + p1b)
        n, _, h, w = p1.shape
        reg = self.box(p1).flatten(2).transpose(1, 2)              # [N, A, 4]
        logits = self.cls(p1).flatten(2)                            # [N, C, A]
        ys = torch.arange(h, dtype=torch.float32).view(h, 1).expand(h, w) + 0.5
        xs = torch.arange(w, dtype=torch.float32).view(1, w).expand(h, w) + 0.5
        centers = torch.stack([xs, ys], -1).reshape(1, h * w, 2) * 2.0
        ctr = centers + reg[..., :2]
        half = torch.exp(reg[..., 2:].clamp(max=4.0)) * 2.0
        boxes = torch.cat([ctr - half, ctr + half], -1)
        return boxes, torch.sigmoid(logits)


class OddPatterns(nn.Module):
    """Patterns at risk elsewhere: tanh-GELU, nn.LayerNorm, Einsum, -inf Where masks, Shape-
    driven Expand/Reshape with dynamic dims, Split/Concat, CumSum, Range."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.w = nn.Parameter(torch.randn(d, d) * 0.2)
        self.proj = nn.Linear(d, 2 * d)

    def forward(self, x, lengths):
        b, s, d = x.shape
        y = F.gelu(self.ln(x), approximate="tanh")
        y = torch.einsum("bsd,de->bse", y, self.w)
        a, g = self.proj(y).split(d, dim=-1)
        y = a * torch.sigmoid(g)
        scores = torch.einsum("bqd,bkd->bqk", y, y) / math.sqrt(d)
        pos = torch.arange(s, device=x.device)
        valid = pos.view(1, 1, s) < lengths.view(b, 1, 1)
        scores = torch.where(valid, scores, torch.tensor(float("-inf")))
        att = torch.softmax(scores, -1)
        z = att @ y
        c = torch.cumsum(z, dim=1) / (pos.view(1, s, 1).to(z.dtype) + 1.0)
        flat = torch.cat([z, c], -1).reshape(b, s * 2, d)
        bias = self.ln.weight.view(1, 1, d).expand(b, s * 2, d)
        return flat + bias, c.mean(dim=(1, 2))


# ---------------------------------------------------------------- export


def _specs():
    """(name, module, example args, input names, output names, per-input dynamic axes, ranges)."""
    torch.manual_seed(0)
    ids = torch.randint(0, 40, (2, 5))
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[0, 3:] = True
    return [
        ("mobilenet", MobileNet(), (torch.randn(2, 3, 32, 32),), ["x"], ["logits"],
         [{0: "batch"}], [None]),
        ("transformer", TransformerClassifier(), (torch.randint(0, 50, (2, 5)), pad),
         ["ids", "pad_mask"], ["logits"], [{0: "batch", 1: "seq"}, {0: "batch", 1: "seq"}],
         [[0, 50], "padmask"]),
        ("attention", CausalAttention(), (torch.randn(2, 5, 32),), ["x"], ["y"],
         [{0: "batch", 1: "seq"}], [None]),
        ("lstm", LstmTagger(), (ids,), ["ids"], ["tags"], [{0: "batch", 1: "seq"}], [[0, 40]]),
        ("gru", GruClassifier(), (ids,), ["ids"], ["y", "h"], [{0: "batch", 1: "seq"}],
         [[0, 40]]),
        ("detect", DetectionHead(), (torch.randn(2, 3, 32, 32),), ["image"],
         ["boxes", "scores"], [{0: "batch"}], [None]),
        ("patterns", OddPatterns(), (torch.randn(2, 5, 16), torch.tensor([5, 3])),
         ["x", "lengths"], ["flat", "mean"], [{0: "batch", 1: "seq"}, {0: "batch"}],
         [None, "lengths"]),
    ]


def _export(mod, args, in_names, out_names, axes, dynamo: bool) -> onnx.ModelProto:
    path = OUT / "_tmp.onnx"
    if dynamo:
        dims = {n: torch.export.Dim(n, min=2, max=64) for n in ("batch", "seq")}
        shapes = tuple({k: dims[v] for k, v in a.items()} for a in axes)
        torch.onnx.export(mod, args, str(path), input_names=in_names, output_names=out_names,
                          dynamo=True, dynamic_shapes=shapes, external_data=False,
                          opset_version=18)
    else:
        dyn = {n: a for n, a in zip(in_names, axes)}
        torch.onnx.export(mod, args, str(path), input_names=in_names, output_names=out_names,
                          dynamo=False, dynamic_axes=dyn, opset_version=17)
    model = onnx.load(str(path))
    path.unlink()
    return model


def _append_nms(model: onnx.ModelProto) -> None:
    """boxes [N,A,4], scores [N,C,A] -> + selected [K,3], kept boxes [K,4], kept scores [K]."""
    g = model.graph
    g.initializer.extend([
        helper.make_tensor("nms_max", TensorProto.INT64, [1], [6]),
        helper.make_tensor("nms_iou", TensorProto.FLOAT, [1], [0.5]),
        helper.make_tensor("nms_thr", TensorProto.FLOAT, [1], [0.3]),
        helper.make_tensor("nms_bidx", TensorProto.INT64, [2], [0, 2]),
    ])
    g.node.extend([
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "nms_max", "nms_iou",
                                               "nms_thr"], ["selected"], name="nms"),
        helper.make_node("Gather", ["selected", "nms_bidx"], ["sel_bi"], axis=1, name="sel_cols"),
        helper.make_node("GatherND", ["boxes", "sel_bi"], ["kept_boxes"], name="gather_boxes"),
        helper.make_node("GatherND", ["scores", "selected"], ["kept_scores"],
                         name="gather_scores"),
    ])
    g.output.extend([
        helper.make_tensor_value_info("selected", TensorProto.INT64, ["K", 3]),
        helper.make_tensor_value_info("kept_boxes", TensorProto.FLOAT, ["K", 4]),
        helper.make_tensor_value_info("kept_scores", TensorProto.FLOAT, ["K"]),
    ])


def _input_info(model: onnx.ModelProto, ranges) -> list[dict]:
    out = []
    for vi, rng in zip(model.graph.input, ranges):
        tt = vi.type.tensor_type
        dims = [d.dim_param or d.dim_value for d in tt.shape.dim]
        out.append({"name": vi.name, "elem_type": tt.elem_type, "shape": dims, "range": rng})
    return out


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, dict] = {}
    for name, mod, args, ins, outs, axes, ranges in _specs():
        mod.eval()
        for dynamo in (True, False):
            tag = f"{name}_{'dynamo' if dynamo else 'legacy'}"
            try:
                # Grad stays enabled: under no_grad, eval-mode TransformerEncoderLayer takes
                # its fused fast path, which the legacy exporter cannot export.
                model = _export(mod, args, ins, outs, axes, dynamo)
            except Exception as exc:  # noqa: BLE001 - report and go on with the others
                print(f"{tag}: export failed: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            if name == "detect":
                _append_nms(model)
            model.ir_version = min(model.ir_version, 10)
            onnx.checker.check_model(model)
            path = OUT / f"{tag}.onnx"
            onnx.save(model, str(path))
            opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
            sizes = SIZES
            if tag in SEQ_BAKED:
                sizes = [{**s, "seq": SIZES[0]["seq"]} for s in SIZES]
            manifest[tag] = {"inputs": _input_info(model, ranges), "sizes": sizes,
                             "opset": opset}
            print(f"{tag}: {path.stat().st_size // 1024} KB, opset {opset}")
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
