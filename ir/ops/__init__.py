"""The op table's families: every ONNX operator's semantics and lowering, one folder a family.

Each module registers its ops with `opdef.op(...)` when imported; `opdef.lookup` imports the
modules that the generated `index` names for the op (every module when the index does not know
it: `opdef.load_all`), so a new file or family needs no hand-written registration list. An
op's `OpDef` holds its whole semantics: verification and shape inference per opset version,
numpy evaluation (constant folding and the host interpreter), a scalar rule (elementwise ops,
which the fuse pass groups into one loop nest) or a loop-IR lowering.

    elementwise/    arithmetic, math, trig, logic, cast, activations, bitcast
    linalg/         MatMul, Gemm, MatMulInteger (Strassen, strided views), Einsum, Det
    conv/           Conv (im2col + GEMM, Winograd, depthwise forms), ConvTranspose, Col2Im,
                    ConvInteger/QLinearConv, DeformConv, CausalConvWithState
    pooling/        MaxPool, AveragePool, LpPool, their Global forms, MaxUnpool
    normalization/  LayerNorm, RMSNorm, InstanceNorm, GroupNorm, BatchNorm, LRN, MVN, LpNorm
    reductions/     Reduce*, Softmax family, ArgMax/ArgMin, CumSum/CumProd, TopK
    attention/      Attention, FlexAttention, LinearAttention, RotaryEmbedding
    recurrent/      RNN, GRU, LSTM
    tensor/         shapes, data movement, Slice, Pad, generators, gathers and scatters,
                    data-dependent sizes (NonZero, Compress, Unique)
    vision/         Resize/Upsample, GridSample, RoiAlign/MaxRoiPool/AffineGrid, NMS,
                    ImageDecoder
    control/        If, Loop, Scan (host, native loop, unrolled), sequences and optionals
    quantization/   QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearMatMul
    random/         RandomNormal/Uniform(-Like), Bernoulli, Multinomial, Dropout
    strings/        StringNormalizer, StringSplit, StringConcat, RegexFullMatch, TfIdfVectorizer
    ml/             ai.onnx.ml: tree ensembles (native walk), linear models, scalers,
                    encoders (LabelEncoder, OneHotEncoder, ZipMap, ...)
    fused/          onnxjit's own ops that the fusion passes build: Fused, FusedConv, FusedMatMul
    signal.py       DFT, STFT, windows, MelWeightMatrix
    loss.py         NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
    shape_utils.py  broadcasting, axes and attribute helpers every family shares

Imports go one way: a family may use `elementwise` (dtype tables, the inference helpers) and
`shape_utils`, and the families that build on another's lowering import it (`fused.linear` uses
`conv` and `linalg`); the IR core (`onnxjit.ir`) imports no family.
"""
