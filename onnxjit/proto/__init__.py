"""onnxjit's own ONNX wire schema (`onnx.proto`, package `onnxjit_onnx`) and its generated
protobuf module `onnx_pb2` (regenerate with `python tools/gen_proto.py`).

Only the importer modules import this package: the rest of onnxjit never sees protobuf.
"""
