"""20,000 calls do not grow memory: outputs, tuples and error paths release what they take.

Runs in a subprocess so the measurement (resident set size from /proc/self/statm) sees only
the calls. Each output is 4 KB, so a leak of one array per call would add ~80 MB.
"""

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, os
    import numpy as np
    import onnx
    from onnx import TensorProto as TP, helper as oh
    import onnxjit

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    g = oh.make_graph([oh.make_node("Add", ["a", "b"], ["s"]),
                       oh.make_node("Gather", ["s", "i"], ["y"], axis=0)], "g",
                      [oh.make_tensor_value_info("a", TP.FLOAT, [1024]),
                       oh.make_tensor_value_info("b", TP.FLOAT, [1024]),
                       oh.make_tensor_value_info("i", TP.INT64, [1024])],
                      [oh.make_tensor_value_info("y", TP.FLOAT, [1024])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)], ir_version=10)
    fn = onnxjit.compile(m, cache_dir=False)
    a = np.ones(1024, np.float32); i = np.arange(1024, dtype=np.int64)
    bad = i.copy(); bad[5] = 4096
    def calls(n):
        for k in range(n):
            fn(a, a, i)                 # the fast path
            if k % 10 == 0:
                fn(a=a, b=a, i=i)       # the checked path
                fn(list(a), a, i)       # conversion
            if k % 100 == 0:
                try:
                    fn(a, a, bad)       # a failed check
                except onnxjit.InputError:
                    pass
    calls(2000)
    before = rss()
    calls(20000)
    print(json.dumps({"growth": rss() - before}))
""")


def test_twenty_thousand_calls_do_not_grow_memory():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    growth = json.loads(out.stdout.strip().splitlines()[-1])["growth"]
    assert growth < 8 * 1024 * 1024, f"resident memory grew by {growth} bytes"
