"""Regenerate `onnxjit/proto/onnx_pb2.py` from `onnxjit/proto/onnx.proto`.

    python tools/gen_proto.py            # rewrite the committed module
    python tools/gen_proto.py --out F    # write the module to file F instead

Algorithm: 1) run `grpc_tools.protoc` with the repository root as the include path, so the file
is registered in the descriptor pool as `onnxjit/proto/onnx.proto` (never `onnx.proto`, and in
package `onnxjit_onnx`, so it cannot clash with the `onnx` package's own schema in one process);
2) post-process the generated text (below); 3) write it.

Post-processing, and why: protoc >= 26 emits `from google.protobuf import runtime_version` and a
`ValidateProtobufRuntimeVersion(...)` call pinned to the protoc release it ships with. That module
does not exist before protobuf 5.26, and the check rejects any runtime older than the generator,
while the project supports protobuf >= 4.21. The rest of the generated code (the `builder` API)
works on 4.21+, so the import and the check are removed. Nothing else is changed.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO = "onnxjit/proto/onnx.proto"
MODULE = ROOT / "onnxjit" / "proto" / "onnx_pb2.py"

_IMPORT = re.compile(r"^from google\.protobuf import runtime_version as _runtime_version\n",
                     re.MULTILINE)
_CHECK = re.compile(r"^_runtime_version\.ValidateProtobufRuntimeVersion\(\n(?:[ \t].*\n)*?\)\n",
                    re.MULTILINE)
_HEADER_NOTE = ("# Post-processed by tools/gen_proto.py: the protobuf runtime version check is "
                "removed\n# (the project supports protobuf >= 4.21; see that script).\n")


def postprocess(text: str) -> str:
    """Remove the runtime-version pin from protoc's Python output (see the module docstring)."""
    text = _IMPORT.sub("", text)
    text = _CHECK.sub("", text)
    if "_runtime_version" in text:
        raise RuntimeError("gen_proto: unexpected runtime_version use left in generated code")
    first, rest = text.split("\n", 1)
    return first + "\n" + _HEADER_NOTE + rest


def generate() -> str:
    """The post-processed text of `onnx_pb2.py` for the current `.proto`."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT}", f"--python_out={tmp}",
               str(ROOT / PROTO)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"protoc failed ({proc.returncode}):\n{proc.stderr}")
        text = (Path(tmp) / "onnxjit" / "proto" / "onnx_pb2.py").read_text()
    return postprocess(text)


def serialized_descriptor(module_text: str) -> bytes:
    """The serialized FileDescriptorProto embedded in a generated module's source."""
    m = re.search(r"AddSerializedFile\((b'(?:[^'\\]|\\.)*')\)", module_text)
    if m is None:
        raise ValueError("no AddSerializedFile(...) call in the generated module")
    return ast.literal_eval(m.group(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=MODULE, help="where to write the module")
    args = ap.parse_args(argv)
    text = generate()
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text)
    shutil.move(str(tmp), str(args.out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
