"""The benchmark suite (`onnxjit bench`): onnxjit against onnxruntime in one process.

    runner         run each benchmark, compare, write the report (`main` is `onnxjit bench`)
    timing         interleaved schedules (blocks of calls or single calls) and their medians
    report         the JSON and markdown report, the machine's description, regressions
    builder        `BenchModel` and `GraphBuilder`: benchmark models built in code
    models         the registry (name -> builder) and the small models
    networks       the larger networks (BERT-tiny, MobileNetV2-like, ResNet-like)
    peak           the host's measured single-thread FMA peak (GFLOP/s)
    fresh_process  one engine in a fresh process: cold compile, warm start, peak memory

Building models needs the test extra (onnx); nothing here is imported by `import onnxjit`.
"""
