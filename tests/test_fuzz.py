"""Fuzzing (issue 7): random valid graphs against `onnx.reference`, and mutated models that
must end in a clean onnxjit error or a result.

1. Property test (hypothesis): a random chain of 1-5 ops drawn from elementwise unary/binary
   (with random broadcasting of a second input), reductions (random axes, keepdims) and shape
   ops (Transpose, Reshape to flat, Unsqueeze), on a random input shape; the result must match
   `onnx.reference.ReferenceEvaluator`. CI runs a bounded, derandomized number of examples;
   set ONNXJIT_FUZZ_EXAMPLES for a longer run.
2. Mutation fuzzer: valid models are damaged (bytes flipped, truncated, inserted; fields
   changed through the protobuf API) and compiled and called in a child process; any outcome
   but an OnnxJitError or a result (a bare exception, a crash, a hang) fails the test with the
   reproducer (the mutation's seed and kind).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import finish
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxjit

EXAMPLES = int(os.environ.get("ONNXJIT_FUZZ_EXAMPLES", "30"))
UNARY = ["Relu", "Neg", "Abs", "Tanh", "Sigmoid", "Exp", "Floor", "Sqrt"]
BINARY = ["Add", "Sub", "Mul", "Max", "Min"]
REDUCE = ["ReduceSum", "ReduceMax", "ReduceMean", "ReduceMin"]


@st.composite
def graphs(draw):
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    nodes, inits, cur, cur_shape = [], [], "x", list(shape)
    for k in range(draw(st.integers(1, 5))):
        out = f"t{k}"
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "shape"]))
        if kind == "unary":
            op = draw(st.sampled_from(UNARY))
            src = cur
            if op == "Sqrt":  # keep the domain valid: sqrt(|x|)
                nodes.append(helper.make_node("Abs", [cur], [f"a{k}"]))
                src = f"a{k}"
            nodes.append(helper.make_node(op, [src], [out]))
        elif kind == "binary":
            op = draw(st.sampled_from(BINARY))
            # broadcasting: a suffix of the shape with some dims set to 1
            n = draw(st.integers(0, len(cur_shape)))
            bshape = [d if draw(st.booleans()) else 1 for d in cur_shape[len(cur_shape) - n:]]
            seed = draw(st.integers(0, 1000))
            w = np.random.default_rng(seed).standard_normal(bshape).astype(np.float32)
            inits.append(numpy_helper.from_array(w, f"w{k}"))
            args = [cur, f"w{k}"] if draw(st.booleans()) else [f"w{k}", cur]
            nodes.append(helper.make_node(op, args, [out]))
        elif kind == "reduce":
            op = draw(st.sampled_from(REDUCE))
            axes = sorted(draw(st.sets(st.integers(0, len(cur_shape) - 1), min_size=1)))
            keep = draw(st.integers(0, 1))
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), f"ax{k}"))
            nodes.append(helper.make_node(op, [cur, f"ax{k}"], [out], keepdims=keep))
            cur_shape = [1 if i in axes else d for i, d in enumerate(cur_shape)] if keep else \
                [d for i, d in enumerate(cur_shape) if i not in axes]
            if not cur_shape:  # keep at least rank 1 for the following ops
                inits.append(numpy_helper.from_array(np.array([0], np.int64), f"u{k}"))
                nodes.append(helper.make_node("Unsqueeze", [out], [f"r{k}"]))
                nodes[-1].input.append(f"u{k}")
                out, cur_shape = f"r{k}", [1]
        else:
            which = draw(st.sampled_from(["transpose", "flatten", "unsqueeze"]))
            if which == "transpose":
                perm = draw(st.permutations(range(len(cur_shape))))
                nodes.append(helper.make_node("Transpose", [cur], [out], perm=list(perm)))
                cur_shape = [cur_shape[p] for p in perm]
            elif which == "flatten":
                inits.append(numpy_helper.from_array(np.array([-1], np.int64), f"s{k}"))
                nodes.append(helper.make_node("Reshape", [cur, f"s{k}"], [out]))
                cur_shape = [int(np.prod(cur_shape))]
            elif len(cur_shape) < 4:
                inits.append(numpy_helper.from_array(np.array([0], np.int64), f"s{k}"))
                nodes.append(helper.make_node("Unsqueeze", [cur, f"s{k}"], [out]))
                cur_shape = [1] + cur_shape
            else:
                nodes.append(helper.make_node("Relu", [cur], [out]))
        cur = out
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    g = helper.make_graph(nodes, "fuzz", [helper.make_tensor_value_info("x", 1, shape)],
                          [helper.make_tensor_value_info("y", 1, cur_shape)], inits)
    x = np.random.default_rng(draw(st.integers(0, 1000))).standard_normal(shape)
    return finish(g, 18), x.astype(np.float32)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(graphs())
def test_random_graphs_match_reference(case):
    model, x = case
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = onnxjit.compile(model, cache_dir=False)(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


MUTATE = textwrap.dedent("""
    import json, random, sys, traceback
    sys.path.insert(0, sys.argv[1])
    import numpy as np, onnxjit
    from models import chain, mlp
    from onnx import ModelProto, TensorProto, helper
    first, count = int(sys.argv[2]), int(sys.argv[3])
    bases = [mlp(sizes=(6, 5, 3)), chain(8)]
    def mutate(rng, seed):
        m = ModelProto(); m.CopyFrom(bases[seed % len(bases)])
        kind = rng.choice(["flip", "truncate", "insert", "field", "field", "field"])
        if kind == "field":
            g = m.graph
            what = rng.choice(["dim", "dtype", "attr", "input", "output", "op", "init", "opset"])
            n = g.node[rng.randrange(len(g.node))]
            if what == "dim":
                vi = rng.choice(list(g.input) + list(g.output))
                dims = vi.type.tensor_type.shape.dim
                if dims:
                    dims[rng.randrange(len(dims))].dim_value = rng.choice([0, 1, 7, 2**40])
            elif what == "dtype":
                rng.choice(list(g.input) + list(g.output)).type.tensor_type.elem_type = \\
                    rng.randrange(0, 30)
            elif what == "attr" and n.attribute:
                a = n.attribute[rng.randrange(len(n.attribute))]
                a.type = rng.randrange(0, 15)
            elif what == "input" and n.input:
                n.input[rng.randrange(len(n.input))] = rng.choice(["", "zz", g.node[-1].output[0]])
            elif what == "output":
                n.output[0] = rng.choice(["", "input", "x", g.node[0].output[0]])
            elif what == "op":
                n.op_type = rng.choice(["Relu", "Gemm", "Add", "Softmax", "Nope", "Concat"])
            elif what == "init" and g.initializer:
                t = g.initializer[rng.randrange(len(g.initializer))]
                t.dims[rng.randrange(len(t.dims)) if t.dims else 0:] = [rng.choice([0, 3, -1])]
            else:
                m.opset_import[0].version = rng.choice([0, 1, 5, 13, 30])
            return kind + ":" + what, m.SerializeToString()
        data = bytearray(m.SerializeToString())
        if kind == "flip":
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind == "truncate":
            data = data[: rng.randrange(len(data))]
        else:
            p = rng.randrange(len(data))
            data[p:p] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        return kind, bytes(data)
    bad = []
    for seed in range(first, first + count):
        rng = random.Random(seed)
        kind, data = mutate(rng, seed)
        print(json.dumps({"seed": seed, "kind": kind}), file=sys.stderr, flush=True)
        try:
            fn = onnxjit.compile(data, cache_dir=False)
            x = np.ones((2, 6) if seed % 2 == 0 else (8,), np.float32)
            fn(x)
        except onnxjit.OnnxJitError:
            pass
        except Exception as e:
            bad.append({"seed": seed, "kind": kind, "error": type(e).__name__ + ": " + str(e),
                        "trace": traceback.format_exc()[-800:]})
    print(json.dumps(bad))
""")


def _batch(first: int, count: int) -> list:
    proc = subprocess.run([sys.executable, "-c", MUTATE, str(Path(__file__).parent), str(first),
                           str(count)], capture_output=True, text=True, timeout=240)
    last = proc.stderr.strip().splitlines()[-1:] if proc.stderr.strip() else []
    assert proc.returncode == 0, f"the child crashed ({proc.returncode}) at {last}: " \
        f"{proc.stderr[-1500:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_mutated_models_end_cleanly():
    count = int(os.environ.get("ONNXJIT_FUZZ_MUTATIONS", "150"))
    bad = _batch(0, count)
    assert not bad, json.dumps(bad[:5], indent=1)
