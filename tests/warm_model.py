"""A model compiled into a fresh disk cache, for the tests that send it to worker processes
(Ray, Dask): its program for every batch size is in the cache, so workers compile nothing."""

import numpy as np
from models import mlp

import onnxjit

ROWS = 10_000
SIZES = (16, 32, 8)


def warm_model():
    """(fn, 10,000 rows of input, the single-process result over all of them). The cache is
    this test process's (conftest.py): a second test module finds the program there."""
    fn = onnxjit.compile(mlp(SIZES, seed=7), num_threads=1)
    assert fn.precompile(batch_size=1000)["symbolic"]  # serves every batch size
    x = np.random.default_rng(7).standard_normal((ROWS, SIZES[0])).astype(np.float32)
    ref, = fn(x)
    return fn, x, ref
