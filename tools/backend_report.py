"""Run the ONNX backend test cases in-process and summarise failures by reason.

    python tools/backend_report.py [-k REGEX] [--kind node] [--json out.json]

Development aid for maintaining tests/backend_expected_failures.py: prints each failing case
with a one-line reason (exception type and the start of its message), grouped by reason.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import traceback
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.loader import load_model_tests

warnings.filterwarnings("ignore")


def _load_pb(path: str) -> np.ndarray:
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def run_case(case) -> str | None:
    import onnxjit

    model_path = os.path.join(case.model_dir, "model.onnx")
    model = onnx.load(model_path)
    try:
        fn = onnxjit.compile(model, cache_dir=False)
        for ds in sorted(d for d in os.listdir(case.model_dir) if d.startswith("test_data_set")):
            d = os.path.join(case.model_dir, ds)
            ins = [_load_pb(os.path.join(d, f)) for f in sorted(os.listdir(d))
                   if f.startswith("input_")]
            outs = [_load_pb(os.path.join(d, f)) for f in sorted(os.listdir(d))
                    if f.startswith("output_")]
            got = fn(*ins)
            for g, r in zip(got, outs):
                if g.dtype != r.dtype or g.shape != r.shape:
                    return f"mismatch: dtype/shape {g.dtype}{g.shape} vs {r.dtype}{r.shape}"
                if g.dtype == object:
                    continue
                np.testing.assert_allclose(g, r, rtol=case.rtol, atol=case.atol)
    except AssertionError as e:
        return "mismatch: values " + str(e).strip().splitlines()[-1][:80]
    except Exception as e:  # noqa: BLE001
        msg = str(e).splitlines()[0] if str(e) else ""
        if not isinstance(e, onnxjit.OnnxJitError):
            msg += " @ " + traceback.extract_tb(e.__traceback__)[-1].name
        return f"{type(e).__name__}: {msg[:160]}"
    return None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("-k", default=None)
    p.add_argument("--kind", default="node")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    cases = [c for c in load_model_tests(kind=args.kind) if c.model_dir]
    if args.k:
        cases = [c for c in cases if re.search(args.k, c.name)]
    fails: dict[str, str] = {}
    for c in cases:
        r = run_case(c)
        if r is not None:
            fails[c.name] = r
    groups = collections.defaultdict(list)
    for name, r in fails.items():
        groups[re.sub(r"'[^']*'", "'…'", r)[:120]].append(name)
    for reason, names in sorted(groups.items(), key=lambda x: -len(x[1])):
        print(f"[{len(names)}] {reason}\n    " + " ".join(sorted(names)[:12]))
    print(f"\n{len(cases) - len(fails)} passed, {len(fails)} failed of {len(cases)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(fails, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
