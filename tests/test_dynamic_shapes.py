"""One symbolic program against the programs specialised per shape, on the calls that break things.

Each case is a small model whose dims are symbolic, written the way exporters write them
(broadcasts, Shape -> Gather -> Concat -> Reshape chains, -1 reshapes, Concat/Split/Slice on
symbolic axes, embeddings, attention-like products). It is compiled once with
`specialize="dynamic"`, then called with sizes that matter: size 1 meeting a broadcast, size 0
(an empty KV cache), dims that coincide at run time, and sizes that violate what the model
needs (a -1 that does not divide, dims that cannot broadcast). The symbolic program must give
the specialised program's outputs, and raise the same error type (`InputError`) where it does:
a relation the symbolic code assumed but the call breaks sends the call to the specialised
path, never to a wrong result. The outputs a call must give are tier 0's (`tier0_ref`: numpy,
no compile) where tier 0 runs it; the program specialised to the call is compiled only for
the calls tier 0 gives no result for (an error, or a call that breaks the declared inputs).
"""

import numpy as np
import pytest
from tier0_ref import Tier0

import onnxjit

RNG = np.random.default_rng(11)

HEAD = '<ir_version: 8, opset_import: ["" : 17]>\n'

#: name -> (model text, [call shapes: one tuple per input]); ints inputs are named i*
CASES = {
    "add_row": ("g (float[A, B] x, float[B] y) => (float[A, B] z) { z = Add(x, y) }",
                [((3, 4), (4,)), ((1, 7), (7,)), ((0, 5), (5,)), ((2, 3), (1,))]),
    "mul_two_symbols": ("g (float[A, B] x, float[C, B] y) => (float[D, B] z) { z = Mul(x, y) }",
                        [((3, 4), (3, 4)), ((1, 4), (5, 4)), ((5, 4), (1, 4)), ((3, 4), (2, 4)),
                         ((0, 2), (1, 2))]),
    "sub_col": ("g (float[A, B] x, float[A, 1] y) => (float[A, B] z) { z = Sub(x, y) }",
                [((3, 4), (3, 1)), ((1, 1), (1, 1)), ((6, 0), (6, 1))]),
    "matmul_const": (
        "g (float[N, 8] x) => (float[N, 5] y) {\n"
        " w = Constant<value = float[8, 5] {" + ",".join(str(i % 7 - 3) for i in range(40))
        + "}>()\n b = Constant<value = float[5] {1, 2, 3, 4, 5}>()\n"
        " m = MatMul(x, w)\n y = Add(m, b) }",
        [((1, 8),), ((7, 8),), ((0, 8),), ((33, 8),)]),
    "matmul_inner": ("g (float[A, K] x, float[J, B] y) => (float[A, B] z) { z = MatMul(x, y) }",
                     [((2, 3), (3, 4)), ((5, 1), (1, 2)), ((2, 3), (4, 4)), ((3, 0), (0, 2))]),
    "batched_attention": (
        "g (float[B, H, S, D] q, float[B, H, T, D] k) => (float[B, H, S, T] p) {\n"
        " kt = Transpose<perm = [0, 1, 3, 2]>(k)\n s = MatMul(q, kt)\n"
        " p = Softmax<axis = -1>(s) }",
        [((1, 2, 3, 4), (1, 2, 5, 4)), ((2, 1, 1, 4), (2, 1, 7, 4)),
         ((1, 2, 3, 4), (1, 2, 0, 4)), ((1, 2, 3, 4), (1, 3, 5, 4))]),
    "reshape_minus_one": (
        "g (float[A, B] x) => (float[C, D] z) {\n"
        " s = Constant<value = int64[2] {-1, 6}>()\n z = Reshape(x, s) }",
        [((2, 3),), ((4, 3),), ((1, 5),), ((0, 3),), ((6, 7),)]),
    "reshape_zero_copy": (
        "g (float[A, B, C] x) => (float[A, D] z) {\n"
        " s = Constant<value = int64[2] {0, -1}>()\n z = Reshape(x, s) }",
        [((2, 3, 4),), ((1, 1, 1),), ((3, 0, 2),)]),
    "shape_chain_heads": (
        "g (float[B, S, 8] x) => (float[B, 2, S, 4] y) {\n"
        " sh = Shape(x)\n i0 = Constant<value = int64 {0}>()\n"
        " i1 = Constant<value = int64 {1}>()\n z = Constant<value = int64[1] {0}>()\n"
        " b = Gather<axis = 0>(sh, i0)\n s = Gather<axis = 0>(sh, i1)\n"
        " bu = Unsqueeze(b, z)\n su = Unsqueeze(s, z)\n"
        " hd = Constant<value = int64[2] {2, 4}>()\n t = Concat<axis = 0>(bu, su, hd)\n"
        " r = Reshape(x, t)\n y = Transpose<perm = [0, 2, 1, 3]>(r) }",
        [((1, 5, 8),), ((3, 1, 8),), ((2, 0, 8),)]),
    "concat_symbolic_axis": (
        "g (float[B, P, 4] past, float[B, S, 4] new) => (float[B, T, 4] y) {\n"
        " y = Concat<axis = 1>(past, new) }",
        [((1, 0, 4), (1, 3, 4)), ((2, 5, 4), (2, 1, 4)), ((1, 2, 4), (2, 1, 4))]),
    "split_halves": (
        "g (float[A, B] x) => (float[A, C] y, float[A, C] z) {\n"
        " y, z = Split<axis = 1, num_outputs = 2>(x) }",
        [((3, 4),), ((2, 6),), ((1, 0),)]),
    "slice_by_shape": (
        "g (float[A, B] x, float[C] y) => (float[A, D] z) {\n"
        " sh = Shape(y)\n st = Constant<value = int64[1] {1}>()\n"
        " ax = Constant<value = int64[1] {1}>()\n z = Slice(x, st, sh, ax) }",
        [((3, 6), (4,)), ((2, 5), (9,)), ((2, 5), (0,)), ((1, 1), (1,))]),
    "slice_negative": (
        "g (float[A, B] x) => (float[A, D] z) {\n"
        " st = Constant<value = int64[1] {1}>()\n en = Constant<value = int64[1] {-1}>()\n"
        " ax = Constant<value = int64[1] {1}>()\n z = Slice(x, st, en, ax) }",
        [((3, 6),), ((2, 2),), ((2, 1),), ((0, 4),)]),
    "embedding": (
        "g (int64[B, S] ids) => (float[B, S, 3] y) {\n"
        " t = Constant<value = float[5, 3] {" + ",".join(str(i) for i in range(15)) + "}>()\n"
        " y = Gather<axis = 0>(t, ids) }",
        [((2, 3),), ((1, 0),), ((3, 1),)]),
    "layernorm_softmax": (
        "g (float[B, S, 4] x) => (float[B, S, 4] y) {\n"
        " g1 = Constant<value = float[4] {1, 2, 1, 0.5}>()\n"
        " b1 = Constant<value = float[4] {0, 1, 0, 1}>()\n"
        " n = LayerNormalization<axis = -1, epsilon = 0.00001>(x, g1, b1)\n"
        " y = Softmax<axis = -1>(n) }",
        [((2, 3, 4),), ((1, 1, 4),), ((0, 2, 4),)]),
    "reduce_mean_keep": (
        "g (float[A, B] x) => (float[A, 1] y) {\n"
        " y = ReduceMean<axes = [1], keepdims = 1>(x) }",
        [((3, 5),), ((1, 1),), ((4, 7),)]),
    "where_mask": (
        "g (float[A, B] x, float[A, B] y) => (float[A, B] z) {\n"
        " c = Less(x, y)\n z = Where(c, x, y) }",
        [((3, 4), (3, 4)), ((1, 1), (1, 1)), ((2, 3), (3, 3))]),
    "expand_to_shape": (
        "g (float[A, 1] x, float[A, B] y) => (float[A, B] z) {\n"
        " s = Shape(y)\n z = Expand(x, s) }",
        [((3, 1), (3, 4)), ((1, 1), (1, 5)), ((2, 1), (3, 4))]),
    "range_positions": (
        "g (float[B, S] x) => (float[B, S] y) {\n"
        " sh = Shape(x)\n i1 = Constant<value = int64 {1}>()\n s = Gather<axis = 0>(sh, i1)\n"
        " z = Constant<value = int64 {0}>()\n o = Constant<value = int64 {1}>()\n"
        " r = Range(z, s, o)\n f = Cast<to = 1>(r)\n y = Add(x, f) }",
        [((2, 5),), ((1, 1),), ((3, 0),)]),
    "flatten_transpose": (
        "g (float[A, B, C] x) => (float[D, E] y) {\n"
        " t = Transpose<perm = [2, 0, 1]>(x)\n y = Flatten<axis = 1>(t) }",
        [((2, 3, 4),), ((1, 5, 1),), ((0, 2, 3),)]),
}


def _run(fn, arrays):
    try:
        return fn(*arrays)
    except onnxjit.OnnxJitError as e:
        return type(e)


@pytest.mark.parametrize("name", sorted(CASES))
def test_symbolic_program_matches_specialised(name):
    text, calls = CASES[name]
    dyn = onnxjit.compile(HEAD + text, cache_dir=False, specialize="dynamic")
    ref = Tier0(HEAD + text)
    spec = None  # compiled for the first call tier 0 gives no result for
    served = 0
    for shapes in calls:
        arrays = [RNG.integers(0, 5, s).astype(np.int64) if n.startswith("i")
                  else RNG.standard_normal(s).astype(np.float32)
                  for n, s in zip(dyn.input_names, shapes)]
        want = ref.run(arrays)
        if want is None:
            spec = spec or onnxjit.compile(HEAD + text, cache_dir=False, specialize="shape")
            want = _run(spec, arrays)
        got = _run(dyn, arrays)
        if isinstance(want, type):
            assert got is want, (shapes, got)
            assert want is onnxjit.InputError, (shapes, want)
            continue
        assert not isinstance(got, type), (shapes, got)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, shapes
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=str(shapes))
        served += 1
    assert dyn._symbolic.reasons() == [], dyn._symbolic.reasons()
    assert [p for p in dyn._symbolic.programs.values() if p is not None]
    assert served >= 2


def test_violated_relation_is_an_input_error_not_a_result():
    text, _ = CASES["reshape_minus_one"]
    fn = onnxjit.compile(HEAD + text, cache_dir=False, specialize="dynamic")
    fn(np.ones((2, 3), np.float32))
    with pytest.raises(onnxjit.InputError, match="cannot reshape 5 elements"):
        fn(np.ones((1, 5), np.float32))


@pytest.mark.parametrize("k,n", [(784, 512), (512, 256), (512, 300)])
def test_layer_over_a_large_weight_every_batch(k, n):
    """A layer y = Relu(x @ W + b) whose constant W is large enough that calls of few rows
    (up to 64: `split_matmul.WIDE_B_ROWS`) split it by columns (a GEMV per thread) and calls
    of more rows by rows: both plans sit in one symbolic program, and each must apply the bias
    and Relu (once they were skipped for batches 1-4: the column plan lost the fused
    epilogue)."""
    from onnx import TensorProto, helper, numpy_helper

    w = RNG.standard_normal((k, n)).astype(np.float32)
    b = np.linspace(-3, 3, n).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    g = helper.make_graph(nodes, "layer",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", n])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    fn = onnxjit.compile(model, cache_dir=False, specialize="dynamic")
    for rows in (1, 2, 3, 4, 5, 9, 33, 64, 65, 70, 131, 132, 160, 199):  # row blocks: 66+
        x = RNG.standard_normal((rows, k)).astype(np.float32)
        want = np.maximum(x.astype(np.float64) @ w + b, 0)
        np.testing.assert_allclose(fn(x)[0], want, rtol=1e-4, atol=1e-3, err_msg=str(rows))
    assert fn._symbolic.reasons() == []


def test_steps_of_a_growing_cache_share_a_temp_placement():
    """A decoder step is a new shape every call (the cache grows by one): binding places the
    temps at sizes rounded up to `dynamic.size_bucket`, so neighbouring steps reuse one
    placement, and every step's result is still right (tier 0's, numpy: its temps, placed for
    larger sizes, neither overlap nor spill)."""
    from onnxjit.dynamic import size_bucket

    text = ("g (float[S, 16] x, float[T, 16] c) => (float[S, T] p) {\n"
            " h = Relu(x)\n ct = Transpose<perm = [1, 0]>(c)\n s = MatMul(h, ct)\n"
            " p = Softmax<axis = -1>(s) }")
    dyn = onnxjit.compile(HEAD + text, cache_dir=False, specialize="dynamic")
    ref = Tier0(HEAD + text)
    for t in range(40, 61):
        x = RNG.standard_normal((3, 16)).astype(np.float32)
        c = RNG.standard_normal((t, 16)).astype(np.float32)
        want = ref.run([x, c])
        assert want is not None, t
        np.testing.assert_allclose(dyn(x, c)[0], want[0], rtol=1e-5, atol=1e-6)
    (prog,) = [p for p in dyn._symbolic.programs.values() if p is not None]
    assert 1 <= len(prog._placements) < 21
    for n in (1, 64, 65, 1000, 4097, 123_456_789):
        assert n <= size_bucket(n) <= max(64, n + n // 8 + 1) and size_bucket(n) % 8 == 0


def test_size_code_round_trips_compiled_and_falls_back_to_source():
    """A symbolic program's size code is stored compiled (`SizeCode.marshalled`) beside its
    source; loading takes the compiled form, and a blob it cannot read (another Python's, a
    damaged one) means compiling the source, never a failed load."""
    from onnxjit.size_code import SizeCode

    text, calls = CASES["shape_chain_heads"]
    fn = onnxjit.compile(HEAD + text, cache_dir=False, specialize="dynamic")
    fn(RNG.standard_normal((2, 3, 8)).astype(np.float32))
    (prog,) = [p for p in fn._symbolic.programs.values() if p is not None]
    code = prog.code
    for blob in (code.marshalled(), b"\x00not marshal", b"i\x07\x00\x00\x00", None):
        loaded = SizeCode.from_source(code.source, code.symbols, blob)
        for shapes in [((2, 3, 8),), ((1, 7, 8),), ((2, 3, 9),)]:
            assert loaded.sizes(shapes) == code.sizes(shapes), (blob, shapes)


def test_signatures_of_a_symbolic_program_share_one_arena_per_thread():
    """Every signature a symbolic program binds takes its temps from the program's
    `ArenaShare` (one buffer per thread, grown when a call needs more), so calls of growing
    and shrinking sizes from two threads at once must still each get their own results."""
    import threading

    from onnxjit.artifact import ArenaShare

    share = ArenaShare()
    p = share.get(1000)
    assert p % 64 == 0 and share.get(10) == p and share.get(1250) == p
    assert share.get(5000) % 64 == 0

    text = ("g (float[S, 16] x, float[T, 16] c) => (float[S, T] p) {\n"
            " h = Relu(x)\n ct = Transpose<perm = [1, 0]>(c)\n s = MatMul(h, ct)\n"
            " p = Softmax<axis = -1>(s) }")
    dyn = onnxjit.compile(HEAD + text, cache_dir=False, specialize="dynamic")
    sizes = [(s, t) for s, t in zip(range(1, 40, 3), range(60, 2, -4))] * 3
    errors = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for s, t in sizes[seed:] + sizes[:seed]:
            x = rng.standard_normal((s, 16)).astype(np.float32)
            c = rng.standard_normal((t, 16)).astype(np.float32)
            z = np.maximum(x, 0).astype(np.float64) @ c.T
            want = np.exp(z - z.max(-1, keepdims=True))
            want /= want.sum(-1, keepdims=True)
            if not np.allclose(dyn(x, c)[0], want, rtol=1e-4, atol=1e-6):
                errors.append((seed, s, t))

    threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 5)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    (prog,) = [p for p in dyn._symbolic.programs.values() if p is not None]
    bound = [a for a in dyn._fast.values() if a.symbolic is prog]  # signatures called twice
    assert bound and all(a.arena_share is prog._arena_share for a in bound)
