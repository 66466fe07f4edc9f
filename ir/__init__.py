"""onnxjit's intermediate representations: types and symbolic dims, the graph IR, the loop IR,
the op table, printers, parsers and verifiers. Imports neither protobuf nor llvmlite."""
