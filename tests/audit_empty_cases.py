"""The hand-written empty-tensor cases of tests/test_audit_empty.py (its module docstring
states the audit): `HAND`, cases compared with an oracle, and `ERRORS`, cases the spec makes
invalid. Each case is a small graph (`Hand`) over graph inputs fed at call time and
initializers; its id reads `<op>-v<opset>-<what is empty>`.

Where onnx.reference cannot be the oracle (it crashes on the empty input, or lacks the op)
the case names onnxruntime ("ort") or gives numpy's answer, with a comment saying why.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_RNG = np.random.default_rng(0)
F32, I64, U8 = np.float32, np.int64, np.uint8


def _f(*shape: int) -> np.ndarray:
    return _RNG.standard_normal(shape).astype(F32)


def _i(*values: int) -> np.ndarray:
    return np.array(values, I64)


def _s(*values: str) -> np.ndarray:
    return np.array(values, dtype=object)


class Hand:
    """One hand-written case: `nodes` over graph `inputs` (fed at call time) and `inits`
    (initializers), checked against `oracle` ("ref", "ort", or feeds -> expected outputs)."""

    def __init__(self, cid: str, nodes: list, inputs: dict, outputs: list[str], opset: int,
                 inits: dict | None = None, oracle: object = "ref", sym: bool = False):
        self.cid, self.nodes, self.inputs, self.outputs = cid, nodes, inputs, outputs
        self.opset, self.inits, self.oracle, self.sym = opset, inits or {}, oracle, sym

    def ops(self) -> set[str]:
        """Every op type in the case, subgraphs included."""
        out, todo = set(), list(self.nodes)
        while todo:
            n = todo.pop()
            out.add(n.op_type)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    todo += list(a.g.node)
        return out

    def model(self, symbolic: bool, expected: list | None = None) -> onnx.ModelProto:
        """The model; zero dims of the graph inputs become symbolic if asked; the outputs
        are typed from `expected` (dtype and rank) or left for the oracle to infer."""
        ins = []
        for k, (name, a) in enumerate(self.inputs.items()):
            dims = [f"z{k}_{d}" if symbolic and n == 0 else n for d, n in enumerate(a.shape)]
            ins.append(helper.make_tensor_value_info(name, _elem(a), dims))
        if expected is None:
            outs = [helper.make_value_info(o, onnx.TypeProto()) for o in self.outputs]
        else:
            outs = [helper.make_tensor_value_info(o, _elem(e), [None] * np.ndim(e))
                    for o, e in zip(self.outputs, expected)]
        inits = [_tensor(a, n) for n, a in self.inits.items()]
        g = helper.make_graph(self.nodes, "empty", ins, outs, inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 10
        return m


def _elem(a) -> int:
    a = np.asarray(a)
    return TensorProto.STRING if a.dtype == object else helper.np_dtype_to_tensor_dtype(a.dtype)


def _tensor(a: np.ndarray, name: str) -> onnx.TensorProto:
    if a.dtype == object:
        return helper.make_tensor(name, TensorProto.STRING, a.shape,
                                  [v.encode() for v in a.ravel()])
    return numpy_helper.from_array(a, name)


def _n(op: str, ins: list[str], outs: list[str], **attrs) -> onnx.NodeProto:
    return helper.make_node(op, ins, outs, **attrs)


def _one(cid: str, op: str, opset: int, inputs: dict, inits: dict | None = None,
         nout: int = 1, oracle: object = "ref", sym: bool = False, order: list | None = None,
         **attrs) -> Hand:
    """A one-node case; node inputs are `order` (default: inputs then inits, in order)."""
    names = order if order is not None else [*inputs, *(inits or {})]
    outs = [f"y{k}" for k in range(nout)]
    return Hand(f"{op}-v{opset}-{cid}", [_n(op, names, outs, **attrs)], inputs, outs, opset,
                inits, oracle, sym)


_REDUCE_EMPTY_AXIS = ["ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceL1",
                      "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]

HAND: list[Hand] = [
    # Reductions over an empty axis give the identity of the reduction (spec, opset 18+).
    *[_one("empty-axis", op, 18, {"x": _f(3, 0)}, {"axes": _i(1)}, sym=True)
      for op in _REDUCE_EMPTY_AXIS],
    _one("empty-axis-attr", "ReduceMax", 13, {"x": _f(2, 0, 3)}, axes=[1], keepdims=0,
         sym=True),
    _one("empty-all", "ReduceSum", 13, {"x": _f(0, 3)}, keepdims=0),
    _one("passive-empty", "ReduceMean", 18, {"x": _f(0, 4)}, {"axes": _i(1)}, sym=True),
    _one("passive-empty", "ArgMax", 13, {"x": _f(3, 0)}, axis=0, sym=True),
    _one("passive-empty", "ArgMin", 13, {"x": _f(0, 4)}, axis=1, keepdims=0, sym=True),
    # Concatenation and splitting with empty pieces.
    _one("empty-piece", "Concat", 13, {"a": _f(2, 0), "b": _f(2, 3)}, axis=1, sym=True),
    _one("all-empty", "Concat", 13, {"a": _f(0, 3), "b": _f(0, 3)}, axis=0, sym=True),
    _one("empty-piece", "Split", 13, {"x": _f(5, 4)}, {"split": _i(0, 5)}, nout=2, axis=0),
    _one("empty-input", "Split", 18, {"x": _f(0, 4)}, {"split": _i(1, 3)}, nout=2, axis=1,
         sym=True),
    _one("empty-result", "Slice", 13, {"x": _f(3, 4)},
         {"starts": _i(1), "ends": _i(1), "axes": _i(0)}),
    _one("empty-input", "Pad", 18, {"x": _f(0, 3)}, {"pads": _i(1, 0, 1, 0),
         "value": np.array(5, F32)}),
    _one("zero-repeat", "Tile", 13, {"x": _f(2, 4)}, {"repeats": _i(0, 2)}),
    _one("to-empty", "Expand", 13, {"x": _f(1, 3)}, {"shape": _i(0, 3)}),
    _one("infer", "Reshape", 14, {"x": _f(0, 3)}, {"shape": _i(-1, 3, 1)}, sym=True),
    _one("allowzero", "Reshape", 14, {"x": _f(0, 3)}, {"shape": _i(3, 0)}, allowzero=1),
    # Indexing with no indices or into empty data.
    _one("no-indices", "Gather", 13, {"x": _f(3, 4), "i": np.zeros(0, I64)}, axis=0,
         sym=True),
    _one("indices-2x0", "Gather", 13, {"x": _f(3, 4), "i": np.zeros((2, 0), I64)}, axis=1),
    _one("empty-data", "Gather", 13, {"x": _f(3, 0), "i": _i(0, 2)}, axis=0, sym=True),
    _one("no-indices", "GatherElements", 13, {"x": _f(3, 4), "i": np.zeros((3, 0), I64)},
         axis=1, sym=True),
    _one("no-indices", "GatherND", 13, {"x": _f(3, 4), "i": np.zeros((0, 2), I64)}),
    _one("no-indices-slices", "GatherND", 13, {"x": _f(3, 4), "i": np.zeros((0, 1), I64)},
         sym=True),
    _one("no-updates", "ScatterElements", 18, {"x": _f(3, 4), "i": np.zeros((3, 0), I64),
         "u": _f(3, 0)}, axis=1, sym=True),
    # The reference has no Scatter (deprecated), and onnxruntime no longer registers it:
    # with nothing to scatter the data comes back unchanged.
    _one("no-updates", "Scatter", 11, {"x": _f(3, 4), "i": np.zeros((3, 0), I64),
         "u": _f(3, 0)}, axis=1, oracle=lambda feeds: [feeds["x"]]),
    _one("no-updates", "ScatterND", 18, {"x": _f(3, 4), "i": np.zeros((0, 1), I64),
         "u": _f(0, 4)}, sym=True),
    _one("no-rows", "Compress", 11, {"x": _f(3, 4), "c": np.zeros(3, bool)}, axis=0),
    _one("empty-condition", "Compress", 11, {"x": _f(3, 4), "c": np.zeros(0, bool)}),
    _one("k0", "TopK", 11, {"x": _f(3, 4)}, {"k": _i(0)}, nout=2),
    _one("empty-batch", "TopK", 11, {"x": _f(0, 4)}, {"k": _i(2)}, nout=2, sym=True),
    _one("all-zero", "NonZero", 13, {"x": np.zeros((3, 4), F32)}),
    _one("empty-input", "NonZero", 13, {"x": _f(0, 4)}, sym=True),
    _one("empty", "Unique", 11, {"x": np.zeros(0, F32)}, nout=4, sorted=1),
    _one("no-indices", "OneHot", 11, {"i": np.zeros(0, I64)},
         {"depth": np.array(3, I64), "values": np.array([0, 1], F32)}, sym=True),
    # Contractions over an empty dim give zeros (or the bias).
    _one("k0", "MatMul", 13, {"a": _f(3, 0), "b": _f(0, 4)}, sym=True),
    _one("m0", "MatMul", 13, {"a": _f(2, 0, 5), "b": _f(5, 4)}, sym=True),
    _one("k0-bias", "Gemm", 13, {"a": _f(3, 0), "b": _f(0, 4), "c": _f(4)}, beta=2.0,
         sym=True),
    _one("k0", "MatMulInteger", 10, {"a": np.zeros((3, 0), U8), "b": np.zeros((0, 4), U8)}),
    _one("k0", "QLinearMatMul", 21, {"a": np.zeros((3, 0), U8), "b": np.zeros((0, 4), U8)},
         {"sa": np.array(0.1, F32), "za": np.array(3, U8), "sb": np.array(0.2, F32),
          "zb": np.array(5, U8), "sy": np.array(0.5, F32), "zy": np.array(7, U8)},
         order=["a", "sa", "za", "b", "sb", "zb", "sy", "zy"]),
    _one("k0", "Einsum", 12, {"a": _f(3, 0), "b": _f(0, 4)}, equation="ij,jk->ik",
         sym=True),
    _one("sum-empty", "Einsum", 12, {"a": _f(0)}, equation="i->"),
    # Along an empty normalised / scanned axis.
    *[_one("empty-axis", op, 13, {"x": _f(3, 0)}, axis=-1, sym=True)
      for op in ("Softmax", "LogSoftmax", "Hardmax")],
    _one("empty-axis", "CumSum", 14, {"x": _f(3, 0)}, {"axis": np.array(1, I64)},
         sym=True),
    _one("empty-axis", "CumProd", 26, {"x": _f(3, 0)}, {"axis": np.array(1, I64)}),
    _one("batch0", "Det", 22, {"x": _f(0, 3, 3)}, sym=True),
    # np.linalg.det of a 0x0 matrix is 1 (the empty product), as the spec's numpy semantics.
    _one("0x0", "Det", 22, {"x": _f(0, 0)}),
    _one("0x0", "Trilu", 14, {"x": _f(0, 0)}),
    _one("3x0", "Trilu", 14, {"x": _f(3, 0)}, {"k": _i(1)}, sym=True),
    _one("0x3", "EyeLike", 22, {"x": _f(0, 3)}, sym=True),
    _one("0x0", "EyeLike", 22, {"x": _f(0, 0)}),
    # Generators with an empty output.
    _one("start-eq-limit", "Range", 11, {}, {"s": np.array(3, I64), "l": np.array(3, I64),
         "d": np.array(1, I64)}),
    _one("runtime-empty", "Range", 11, {"s": np.array(5.0, F32), "l": np.array(1.0, F32),
         "d": np.array(1.0, F32)}),
    _one("const", "ConstantOfShape", 21, {}, {"s": _i(0, 3)}),
    _one("runtime", "ConstantOfShape", 21, {"s": _i(2, 0)}),
    Hand("Constant-v21-empty", [_n("Constant", [], ["y0"], value=numpy_helper.from_array(
        np.zeros((0, 3), F32)))], {}, ["y0"], 21),
    _one("size0", "BlackmanWindow", 17, {}, {"n": np.array(0, I64)}),
    _one("size0", "HammingWindow", 17, {}, {"n": np.array(0, I64)}),
    _one("size0", "HannWindow", 17, {}, {"n": np.array(0, I64)}),
    _one("no-bins", "MelWeightMatrix", 17, {}, {
        "bins": np.array(0, I64), "dft": np.array(16, I64), "rate": np.array(8000, I64),
        "lo": np.array(0.0, F32), "hi": np.array(4000.0, F32)}),
    _one("shape-2x0", "RandomNormal", 22, {}, shape=[2, 0]),
    _one("shape-0x3", "RandomUniform", 22, {}, shape=[0, 3]),
    _one("empty", "RandomNormalLike", 22, {"x": _f(0, 3)}, sym=True),
    _one("empty", "RandomUniformLike", 22, {"x": _f(2, 0)}),
    # Neither the reference nor onnxruntime (22) implements these two: an empty batch gives
    # an empty result of the spec's shape and dtype.
    _one("batch0", "Multinomial", 22, {"x": _f(0, 3)}, sample_size=2, sym=True,
         oracle=lambda feeds: [np.zeros((0, 2), np.int32)]),
    _one("batch0", "GlobalLpPool", 22, {"x": _f(0, 3, 4, 4)}, sym=True,
         oracle=lambda feeds: [np.zeros((0, 3, 1, 1), F32)]),
    # Region ops with no regions.
    # The reference's NonMaxSuppression cannot take zero boxes (onnxruntime can).
    _one("no-boxes", "NonMaxSuppression", 11, {"b": np.zeros((1, 0, 4), F32),
         "s": np.zeros((1, 1, 0), F32)}, {"m": _i(3)}, oracle="ort"),
    _one("no-rois", "RoiAlign", 22, {"x": _f(1, 3, 4, 4), "r": np.zeros((0, 4), F32),
         "b": np.zeros(0, I64)}, output_height=2, output_width=2, sym=True),
    # The reference has no MaxRoiPool: with no rois the answer is an empty (0, C, ph, pw).
    _one("no-rois", "MaxRoiPool", 22, {"x": _f(1, 3, 4, 4), "r": np.zeros((0, 5), F32)},
         pooled_shape=[2, 2], oracle=lambda feeds: [np.zeros((0, 3, 2, 2), F32)]),
    _one("batch0", "AffineGrid", 20, {"t": _f(0, 2, 3)}, {"size": _i(0, 3, 5, 6)}),
    # Recurrent ops over a sequence of length 0: Y is empty, Y_h (and Y_c) the initial state,
    # zeros here. The reference cannot stack zero steps, onnxruntime aborts on GRU and
    # has returned uninitialised memory for LSTM's Y_c, so numpy states the answer.
    *[_one("seq0", op, 22, {"x": _f(0, 2, 3)}, {"w": _f(1, g * 4, 3), "r": _f(1, g * 4, 4)},
           nout=n, hidden_size=4, sym=op == "GRU",
           oracle=lambda feeds, n=n: [np.zeros((0, 1, 2, 4), F32)] + [np.zeros((1, 2, 4), F32)]
           * (n - 1)) for op, g, n in (("RNN", 1, 2), ("GRU", 3, 2), ("LSTM", 4, 3))],
    _one("batch0", "RotaryEmbedding", 23, {"x": _f(0, 2, 8), "p": np.zeros((0, 2), I64)},
         {"cos": _f(4, 2), "sin": _f(4, 2)}, order=["x", "cos", "sin", "p"], num_heads=2,
         sym=True),
    # The reference and onnxruntime both fail on this empty batch (their function body
    # reshapes with -1); the answer is an empty tensor shaped like x.
    _one("batch0", "GroupNormalization", 21, {"x": _f(0, 4, 2, 2)},
         {"s": np.ones(4, F32), "b": np.zeros(4, F32)}, num_groups=2, sym=True,
         oracle=lambda feeds: [feeds["x"]]),
    # An empty input has the zero range [0, 0], like an all-zero one. The spec's formula
    # divides 0 by 255 and then by the zero scale; onnxjit documents scale 1/255 for a zero
    # range (onnxruntime picks 1.0). y is empty and the zero point 0 either way.
    _one("empty", "DynamicQuantizeLinear", 11, {"x": np.zeros(0, F32)}, nout=3, sym=True,
         oracle=lambda feeds: [np.zeros(0, U8), np.array(1 / 255, F32), np.array(0, U8)]),
    # Losses over an empty batch: the reference reshapes with -1 and fails, so onnxruntime is
    # the oracle of NegativeLogLikelihoodLoss; for SoftmaxCrossEntropyLoss it fails too (its
    # function body reshapes to a 0-size shape), and numpy states the answer: no per-sample
    # losses, and a sum over no samples is 0.
    *[_one(f"batch0-{red}", "NegativeLogLikelihoodLoss", 22, {"x": _f(0, 5),
           "t": np.zeros(0, I64)}, reduction=red, sym=red == "sum", oracle="ort")
      for red in ("none", "sum")],
    *[_one(f"batch0-{red}", "SoftmaxCrossEntropyLoss", 13, {"x": _f(0, 5),
           "t": np.zeros(0, I64)}, reduction=red, sym=red == "sum",
           oracle=lambda feeds, red=red: [np.zeros(0, F32) if red == "none"
                                          else np.array(0, F32)])
      for red in ("none", "sum")],
    # Broadcasting an empty operand against a non-empty one gives an empty result.
    _one("bcast-0x1-1x3", "Add", 14, {"a": _f(0, 1), "b": _f(1, 3)}, sym=True),
    _one("bcast-3x0-1", "Where", 16, {"c": np.ones((3, 0), bool), "a": _f(1),
         "b": _f(3, 1)}, sym=True),
    _one("bcast-three", "Sum", 13, {"a": _f(0, 1), "b": _f(3), "c": _f(1, 3)}),
    # Along an empty normalised axis, or with zero channels.
    _one("empty-axis", "LpNormalization", 22, {"x": _f(3, 0)}, axis=-1, sym=True),
    _one("empty-axis", "LayerNormalization", 17, {"x": _f(3, 0)},
         {"s": np.ones(0, F32), "b": np.zeros(0, F32)}, axis=-1, sym=True),
    _one("zero-channels", "DepthToSpace", 13, {"x": _f(1, 0, 2, 2)}, blocksize=2, sym=True),
    _one("zero-channels", "QuantizeLinear", 21, {"x": _f(2, 0)},
         {"s": np.ones(0, F32), "z": np.zeros(0, U8)}, axis=1),
    _one("crop-to-0", "CenterCropPad", 18, {"x": _f(4, 3)}, {"shape": _i(0, 3)}),
    _one("batch0", "ReverseSequence", 10, {"x": _f(4, 0), "n": np.zeros(0, I64)},
         time_axis=0, batch_axis=1, sym=True),
    # The reference and onnxruntime refuse a [B, C] input with B = 0, which the spec allows:
    # no rows give no rows of counts.
    _one("batch0", "TfIdfVectorizer", 9, {"x": np.zeros((0, 6), I64)}, mode="TF",
         min_gram_length=2, max_gram_length=2, max_skip_count=0, ngram_counts=[0, 4],
         ngram_indexes=[0, 1, 2, 3, 4, 5, 6], pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
         sym=True, oracle=lambda feeds: [np.zeros((0, 7), F32)]),
    # Cast's backend cases feed TensorProtos (exotic types), which the rewrite does not cut.
    _one("to-f16", "Cast", 21, {"x": _f(0, 3)}, to=TensorProto.FLOAT16, sym=True),
    _one("to-i64", "Cast", 13, {"x": _f(3, 0)}, to=TensorProto.INT64),
    _one("like-i64", "CastLike", 21, {"x": _f(0, 3)}, {"like": np.zeros(1, I64)}, sym=True),
    # An empty stream cannot be decoded, and the spec says an undecodable stream gives an
    # empty [0, 0, C] image (the reference raises instead; onnxruntime lacks the op).
    _one("empty-stream", "ImageDecoder", 20, {"x": np.zeros(0, U8)}, sym=True,
         oracle=lambda feeds: [np.zeros((0, 0, 3), U8)]),
    # Strings: empty tensors of strings.
    _one("empty", "StringConcat", 20, {"a": _s(), "b": _s()}),
    _one("empty", "RegexFullMatch", 20, {"x": _s()}, pattern="a.*"),
    _one("empty", "StringSplit", 20, {"x": _s()}, nout=2),
    # Sequences and optionals holding empty tensors, and an empty sequence.
    Hand("ConcatFromSequence-v11-empty-piece", [
        _n("SequenceConstruct", ["a", "b"], ["q"]),
        _n("ConcatFromSequence", ["q"], ["y0"], axis=0)],
        {"a": _f(0, 3), "b": _f(2, 3)}, ["y0"], 11, sym=True),
    Hand("SequenceInsert-v11-empty-element", [
        _n("SequenceConstruct", ["a"], ["q"]),
        _n("SequenceInsert", ["q", "b"], ["r"]),
        _n("ConcatFromSequence", ["r"], ["y0"], axis=1)],
        {"a": _f(2, 3), "b": _f(2, 0)}, ["y0"], 11, sym=True),
    Hand("SequenceMap-v17-empty-element", [
        _n("SequenceConstruct", ["a", "b"], ["q"]),
        _n("SequenceMap", ["q"], ["r"], body=helper.make_graph(
            [_n("Neg", ["e"], ["ne"])], "neg",
            [helper.make_tensor_value_info("e", TensorProto.FLOAT, [None, 3])],
            [helper.make_tensor_value_info("ne", TensorProto.FLOAT, [None, 3])])),
        _n("ConcatFromSequence", ["r"], ["y0"], axis=0)],
        {"a": _f(0, 3), "b": _f(2, 3)}, ["y0"], 17, sym=True),
    Hand("SequenceLength-v11-empty-sequence", [
        _n("SequenceEmpty", [], ["q"], dtype=TensorProto.FLOAT),
        _n("SequenceLength", ["q"], ["y0"])], {}, ["y0"], 11),
    Hand("SequenceAt-v11-empty-element", [
        _n("SequenceConstruct", ["a", "b"], ["q"]),
        _n("SequenceErase", ["q", "p"], ["r"]),
        _n("SequenceAt", ["r", "p0"], ["y0"])],
        {"a": _f(0, 3), "b": _f(2, 3)}, ["y0"], 11,
        {"p": np.array(1, I64), "p0": np.array(0, I64)}, sym=True),
    # The reference's Optional keeps its tensor in a list, which OptionalGetElement then
    # mishandles; onnxruntime is the oracle.
    Hand("Optional-v18-empty-element", [
        _n("Optional", ["x"], ["o"]),
        _n("OptionalHasElement", ["o"], ["y0"]),
        _n("OptionalGetElement", ["o"], ["y1"])], {"x": _f(0, 3)}, ["y0", "y1"], 18,
        oracle="ort"),
]


def _graph(name: str, nodes: list, ins: list, outs: list) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, ins, outs)


def _vi(name: str, elem: int, shape: list | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


_FT, _BT, _IT = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64

# Loop body: v <- v + 1, and the scan output collects v; 0 trips give an empty scan output.
_LOOP_BODY = _graph("body", [
    _n("Identity", ["c"], ["c_out"]),
    _n("Add", ["v", "one"], ["v_out"]),
    _n("Identity", ["v"], ["s"])],
    [_vi("it", _IT, []), _vi("c", _BT, []), _vi("v", _FT, [3])],
    [_vi("c_out", _BT, []), _vi("v_out", _FT, [3]), _vi("s", _FT, [3])])
# Scan body: a running sum over the rows of x; 0 rows leave the state and give no rows.
_SCAN_BODY = _graph("body", [
    _n("Add", ["acc", "row"], ["acc_out"]),
    _n("Identity", ["acc_out"], ["out"])],
    [_vi("acc", _FT, [3]), _vi("row", _FT, [3])],
    [_vi("acc_out", _FT, [3]), _vi("out", _FT, [3])])

HAND += [
    # The reference's Loop cannot concatenate the scan outputs of zero iterations, so
    # onnxruntime is the oracle.
    Hand("Loop-v21-zero-trips", [_n("Loop", ["n", "", "v0"], ["y0", "y1"], body=_LOOP_BODY)],
         {"n": np.array(0, I64), "v0": _f(3)}, ["y0", "y1"], 21,
         {"one": np.ones(3, F32)}, oracle="ort"),
    # onnxruntime's Scan rejects a sequence of length 0 and the reference does not support
    # it: the state comes back unchanged and the scan output has no rows.
    Hand("Scan-v21-empty-sequence", [_n("Scan", ["a0", "x"], ["y0", "y1"], body=_SCAN_BODY,
                                         num_scan_inputs=1)],
         {"a0": _f(3), "x": _f(0, 3)}, ["y0", "y1"], 21, sym=True,
         oracle=lambda feeds: [feeds["a0"], np.zeros((0, 3), F32)]),
    Hand("If-v21-empty-branch", [_n("If", ["c"], ["y0"], then_branch=_graph(
        "then", [_n("Identity", ["x"], ["t"])], [], [_vi("t", _FT, [None, 3])]),
        else_branch=_graph("else", [_n("Neg", ["x"], ["e"])], [], [_vi("e", _FT, [None, 3])]))],
        {"c": np.array(False), "x": _f(0, 3)}, ["y0"], 21, sym=True),
]


# --------------------------------------------------------------------------- error cases

# Where the spec makes an empty input invalid: each case with arrays of its outputs' dtypes
# and ranks (to declare the graph outputs; nothing is computed).
_F2, _I2 = np.zeros((1, 1), F32), np.zeros((1, 1), I64)
ERRORS: list[tuple[Hand, list]] = [
    (_one("empty-axis", "ArgMax", 13, {"x": _f(3, 0)}, axis=1, sym=True), [_I2]),
    (_one("empty-axis", "ArgMin", 13, {"x": _f(0, 4)}, axis=0, sym=True), [_I2]),
    (_one("k-beyond-empty-axis", "TopK", 11, {"x": _f(3, 0)}, {"k": _i(1)}, nout=2,
          sym=True), [_F2, _I2]),
    (_one("index-into-empty", "Gather", 13, {"x": _f(0, 4), "i": _i(0)}, axis=0, sym=True),
     [_F2]),
]


