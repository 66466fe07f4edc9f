"""Transformer models under the `specialize` policies: one program for a stream of shapes.

The models are the bench's exporter-style ones (`onnxjit.bench.transformers`, tiny widths): a
MiniLM-style encoder over batches of 1-4 texts of 1-20 tokens, and a GPT-style decoder whose KV
cache starts empty and grows by one token a step. They check against onnxruntime, that "auto"
compiles one program for the first shape and one symbolic program for all the others, that
`precompile` lets a fresh process sharing the disk cache compile nothing for 20 new shapes
(the cache counter says so), and that the symbolic program loaded from disk gives the results
of the one just compiled.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

import onnxjit
from onnxjit.bench.transformers import decoder_feeds, gpt_decoder, sentence_encoder

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")


def _encoder():
    m = sentence_encoder(layers=1, hidden=32, heads=2, inter=64, vocab=50, max_len=64)
    m.ir_version = 10
    return m


def _encoder_feeds(rng, b, s):
    mask = np.ones((b, s), np.int64)
    mask[0, max(1, s // 2):] = 0
    return {"input_ids": rng.integers(0, 50, (b, s)).astype(np.int64), "attention_mask": mask}


def _session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_auto_serves_a_stream_of_shapes_from_two_programs():
    model = _encoder()
    sess = _session(model)
    fn = onnxjit.compile(model, cache_dir=False)  # specialize="auto", the default
    rng = np.random.default_rng(0)
    before = fn.cache_info()["misses"]
    for b, s in [(2, 7), (1, 3), (4, 20), (3, 1), (2, 7), (1, 16), (4, 9)]:
        feeds = _encoder_feeds(rng, b, s)
        np.testing.assert_allclose(fn(**feeds)[0], sess.run(None, feeds)[0], rtol=1e-4,
                                   atol=1e-5)
    # the first shape's own program, then one program for every later size
    assert fn.cache_info()["misses"] - before == 2
    assert fn._symbolic.reasons() == []


def test_decoder_cache_grows_from_empty():
    model = gpt_decoder(layers=1, hidden=32, heads=2, vocab=100, max_len=64)
    model.ir_version = 10
    sess = _session(model)
    fn = onnxjit.compile(model, cache_dir=False, specialize="dynamic")
    names = [i.name for i in model.graph.input]
    feeds = decoder_feeds(model, 1, 0, 5, vocab=100)  # prefill: past = 0
    for step in range(6):
        got, want = fn(**feeds), sess.run(None, feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        feeds = {"input_ids": np.array([[step + 7]], np.int64), **dict(zip(names[1:], got[1:]))}
    assert len([p for p in fn._symbolic.programs.values() if p is not None]) == 1


_FRESH = """
import json, sys
import numpy as np
import onnxjit
fn = onnxjit.compile(sys.argv[1], cache_dir=sys.argv[2])
rng = np.random.default_rng(1)
outs = []
for k in range(20):
    b, s = 1 + k % 4, 2 + 3 * k
    mask = np.ones((b, s), np.int64)
    ids = rng.integers(0, 50, (b, s)).astype(np.int64)
    outs.append(fn(input_ids=ids, attention_mask=mask)[0].tolist())
print(json.dumps({"cache": fn.cache_info(), "first": outs[0], "last": outs[-1]}))
"""


def test_precompiled_cache_serves_a_fresh_process_without_compiling(tmp_path):
    model = _encoder()
    path = tmp_path / "enc.onnx"
    path.write_bytes(model.SerializeToString())
    cache = tmp_path / "cache"
    fn = onnxjit.compile(str(path), cache_dir=str(cache))
    info = fn.precompile(batch=4, sequence=32)
    assert info["symbolic"] and info["symbols"] == ["batch", "sequence"]
    p = subprocess.run([sys.executable, "-c", _FRESH, str(path), str(cache)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["cache"]["misses"] == 0, r["cache"]  # 20 new shapes, nothing compiled
    assert r["cache"]["disk_hits"] >= 1
    # the program from disk computes what this process's program computes
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 50, (1, 2)).astype(np.int64)
    np.testing.assert_allclose(fn(input_ids=ids, attention_mask=np.ones((1, 2), np.int64))[0],
                               np.array(r["first"], np.float32), rtol=1e-5, atol=1e-6)


def test_precompile_refuses_what_it_cannot_do():
    model = _encoder()
    with pytest.raises(onnxjit.OnnxJitError, match="specialize='shape'"):
        onnxjit.compile(model, cache_dir=False, specialize="shape").precompile()
    with pytest.raises(onnxjit.OnnxJitError, match="unknown symbol"):
        onnxjit.compile(model, cache_dir=False).precompile(tokens=8)
