"""String tensors end to end (object arrays of `str`, run on the host) and the string/text ops:
the call boundary, mixing host string nodes with native code, data movement on strings,
StringNormalizer/StringSplit/StringConcat/RegexFullMatch, Cast to and from strings,
TfIdfVectorizer and ImageDecoder. Cases the ONNX backend suite covers are not repeated."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.errors import InputTypeError, ModelError, UnsupportedError

S = T.STRING


def strs(*shape: int, base: str = "s") -> np.ndarray:
    n = int(np.prod(shape))
    return np.array([f"{base}{i}" for i in range(n)], dtype=object).reshape(shape)


def _elem(a: np.ndarray) -> int:
    return S if a.dtype == object else h.np_dtype_to_tensor_dtype(a.dtype)


def build(nodes, inputs, outputs, opset=21, inits=()) -> onnx.ModelProto:
    """inputs: (name, array or (elem, shape)); outputs: (name, elem, shape)."""
    vin = [h.make_tensor_value_info(n, *((_elem(a), list(a.shape)) if isinstance(a, np.ndarray)
                                         else a)) for n, a in inputs]
    vout = [h.make_tensor_value_info(*o) for o in outputs]
    m = h.make_model(h.make_graph(nodes, "g", vin, vout, list(inits)),
                     opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def one(op, ins: list[tuple[str, np.ndarray]], n_out=1, opset=21, **attrs):
    """A one-node model whose outputs take the reference's types; returns (model, ref)."""
    outs = [f"y{k}" for k in range(n_out)]
    node = h.make_node(op, [n for n, _ in ins], outs, **attrs)
    sym = [(n, (_elem(a), [f"{n}_{k}" for k in range(a.ndim)])) for n, a in ins]
    probe = build([node], sym, [(o, 0, None) for o in outs], opset)
    ref = ReferenceEvaluator(probe).run(None, dict(ins))
    m = build([node], sym, [(o, _elem(np.asarray(r) if np.asarray(r).dtype.kind != "U" else
                                      np.asarray(r, object)),
                             [f"{o}_{k}" for k in range(np.ndim(r))]) for o, r in zip(outs, ref)],
              opset)
    return m, ref


def run(m, *args, **kw):
    return onnxjit.compile(m, cache_dir=False, **kw)(*args)


def same(got, ref):
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if ref.dtype.kind in "OU":
        assert got.dtype == object and all(type(v) is str for v in got.reshape(-1))
        assert got.tolist() == ref.astype(object).tolist()
    else:
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref)


# --------------------------------------------------------------------------- call boundary


def test_string_inputs_accept_object_unicode_lists_and_bytes():
    m = build([h.make_node("Identity", ["x"], ["y"])], [("x", (S, ["n"]))], [("y", S, ["n"])])
    f = onnxjit.compile(m, cache_dir=False)
    want = ["a", "bé", ""]
    for x in (np.array(want, dtype=object), np.array(want), want,
              [b"a", "b\u00e9".encode(), b""], np.array([b"a", "b\u00e9".encode(), b""])):
        y, = f(x)
        assert y.dtype == object and y.tolist() == want
    assert f(x=np.array(["q"]))[0].tolist() == ["q"]
    assert f.run(None, {"x": ["z"]})[0].tolist() == ["z"]


@pytest.mark.parametrize("bad, msg", [
    (np.array([1, 2]), "must hold strings"),
    (np.array(["a", 3], dtype=object), "element 1 is int"),
    ([b"\xff"], "not UTF-8"),
    ([["a"], ["b", "c"]], "element 0 is list"),
])
def test_bad_string_inputs_raise_input_type_error(bad, msg):
    m = build([h.make_node("Identity", ["x"], ["y"])], [("x", (S, ["n"]))], [("y", S, ["n"])])
    f = onnxjit.compile(m, cache_dir=False)
    f(["ok"])  # the valid call first: a compiled signature must not skip the element check
    with pytest.raises(InputTypeError, match=msg):
        f(bad)


def test_numeric_input_refuses_strings():
    m = build([h.make_node("Identity", ["x"], ["y"])], [("x", (T.FLOAT, [2]))],
              [("y", T.FLOAT, [2])])
    with pytest.raises(InputTypeError):
        run(m, np.array(["1", "2"], dtype=object))


def test_string_passthrough_and_string_initializer_outputs():
    c = h.make_tensor("c", S, [2], [b"k\xc3\xa9", b"v"])
    m = build([], [("x", (S, [1]))], [("x", S, [1]), ("c", S, [2])], inits=[c])
    x, cc = run(m, ["in"])
    assert x.tolist() == ["in"] and cc.tolist() == ["k\u00e9", "v"]


def test_string_normalizer_feeds_native_code_and_caches(tmp_path):
    """StringNormalizer (host) -> Equal (host) -> Cast -> Add (native), repeated calls."""
    key = h.make_tensor("key", S, [], [b"cat"])
    nodes = [h.make_node("StringNormalizer", ["x"], ["n"], case_change_action="LOWER",
                         stopwords=["the"]),
             h.make_node("Equal", ["n", "key"], ["e"]),
             h.make_node("Cast", ["e"], ["f"], to=T.FLOAT),
             h.make_node("Add", ["f", "b"], ["y"])]
    m = build(nodes, [("x", (S, ["C"])), ("b", (T.FLOAT, []))], [("y", T.FLOAT, ["D"])],
              inits=[key])
    cases = [(["The", "CAT", "dog", "Cat"], 0.5, [1.5, 0.5, 1.5]),
             (["cat"], 1.0, [2.0]), (["the", "dog", "cat"], 0.0, [0.0, 1.0]),
             (["THE"], 2.0, [2.0])]
    for cache in (tmp_path, tmp_path):  # the second compile reads the disk cache
        f = onnxjit.compile(m, cache_dir=cache)
        for _ in range(2):
            for x, b, want in cases:
                y, = f(x, np.float32(b))
                np.testing.assert_array_equal(y, np.array(want, np.float32))


def test_string_nodes_inside_if_branches():
    then = h.make_graph([h.make_node("StringConcat", ["x", "x"], ["t"])], "then", [],
                        [h.make_tensor_value_info("t", S, [2])])
    other = h.make_graph([h.make_node("Identity", ["x"], ["o"])], "else", [],
                         [h.make_tensor_value_info("o", S, [2])])
    m = build([h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
              [("c", (T.BOOL, [])), ("x", (S, [2]))], [("y", S, [2])])
    f = onnxjit.compile(m, cache_dir=False)
    assert f(np.bool_(True), ["a", "b"])[0].tolist() == ["aa", "bb"]
    assert f(np.bool_(False), ["a", "b"])[0].tolist() == ["a", "b"]


# --------------------------------------------------------------------------- data movement


I64 = np.int64
MOVES = [
    ("Reshape", [("x", strs(2, 3, 4)), ("s", np.array([4, -1], I64))], {}),
    ("Flatten", [("x", strs(2, 3, 4))], {"axis": 2}),
    ("Squeeze", [("x", strs(1, 3, 1)), ("a", np.array([0], I64))], {}),
    ("Unsqueeze", [("x", strs(2, 3)), ("a", np.array([1, -1], I64))], {}),
    ("Transpose", [("x", strs(2, 3, 4))], {"perm": [2, 0, 1]}),
    ("Concat", [("x", strs(2, 3)), ("z", strs(2, 1, base="t"))], {"axis": 1}),
    ("Gather", [("x", strs(2, 3, 4)), ("i", np.array([[1, 0], [-1, 2]], I64))], {"axis": 1}),
    ("GatherElements", [("x", strs(2, 3)), ("i", np.array([[0, 2, 1], [1, 0, 0]], I64))],
     {"axis": 1}),
    ("GatherND", [("x", strs(2, 3)), ("i", np.array([[1, 2], [0, 0]], I64))], {}),
    ("Slice", [("x", strs(4, 5)), ("b", np.array([3, 1], I64)), ("e", np.array([0, 5], I64)),
               ("a", np.array([0, 1], I64)), ("st", np.array([-1, 2], I64))], {}),
    ("Expand", [("x", strs(3, 1)), ("s", np.array([2, 3, 4], I64))], {}),
    ("Tile", [("x", strs(2, 2)), ("r", np.array([2, 3], I64))], {}),
    ("Compress", [("x", strs(3, 2)), ("c", np.array([True, False, True]))], {"axis": 0}),
    ("ReverseSequence", [("x", strs(4, 2)), ("l", np.array([2, 3], I64))],
     {"batch_axis": 1, "time_axis": 0}),
    ("DepthToSpace", [("x", strs(1, 8, 2, 2))], {"blocksize": 2, "mode": "CRD"}),
    ("ScatterND", [("x", strs(2, 3)), ("i", np.array([[1, 0]], I64)), ("u", strs(1, base="u"))],
     {}),
    ("Where", [("c", np.array([[True], [False]])), ("x", strs(2, 3)), ("z", strs(3, base="z"))],
     {}),
    ("Equal", [("x", strs(2, 3)), ("z", np.array(["s1", "q", "s5"], dtype=object))], {}),
    ("Equal", [("x", strs(0, 3)), ("z", np.array("s1", dtype=object))], {}),
    ("Shape", [("x", strs(2, 0, 3))], {}),
]


@pytest.mark.parametrize("op, ins, attrs", MOVES, ids=[f"{c[0]}{k}" for k, c in
                                                       enumerate(MOVES)])
def test_data_movement_on_strings_matches_reference(op, ins, attrs):
    m, ref = one(op, ins, **attrs)
    for g, r in zip(run(m, *[a for _, a in ins]), ref):
        same(g, r)


def test_trilu_clears_strings_to_empty():
    x = strs(2, 3)
    m = build([h.make_node("Trilu", ["x"], ["y"], upper=0)], [("x", x)], [("y", S, [2, 3])])
    assert run(m, x)[0].tolist() == [["s0", "", ""], ["s3", "s4", ""]]


def test_split_and_unique_on_strings():
    x = np.array(["b", "a", "b", "c", "a"], dtype=object)
    m, ref = one("Unique", [("x", x)], n_out=4, sorted=1)
    for g, r in zip(run(m, x), ref):
        same(g, r)
    m, ref = one("Split", [("x", strs(5)), ("s", np.array([2, 3], I64))], n_out=2)
    for g, r in zip(run(m, strs(5), np.array([2, 3], I64)), ref):
        same(g, r)


@pytest.mark.parametrize("op, opset, ins", [
    ("Equal", 18, [strs(2), strs(2)]),
    ("Flatten", 8, [strs(2, 2)]),
    ("Concat", 3, [strs(2), strs(2)]),
])
def test_strings_before_the_opset_that_allows_them_are_refused(op, opset, ins):
    names = [f"x{k}" for k in range(len(ins))]
    node = h.make_node(op, names, ["y"], **({"axis": 0} if op == "Concat" else {}))
    m = build([node], list(zip(names, ins)), [("y", S if op != "Equal" else T.BOOL, ["m"])],
              opset=opset)
    with pytest.raises(ModelError, match=op):
        run(m, *ins)


def test_ops_without_string_support_say_so():
    m = build([h.make_node("Pad", ["x", "p"], ["y"])],
              [("x", (S, [2])), ("p", (T.INT64, [2]))], [("y", S, [4])], opset=13)
    with pytest.raises(UnsupportedError, match="Pad.*str"):
        run(m, ["a", "b"], np.array([1, 1], I64))
    m = build([h.make_node("Add", ["x", "x"], ["y"])], [("x", (S, [2]))], [("y", S, [2])])
    with pytest.raises((ModelError, UnsupportedError), match="Add"):
        run(m, ["a", "b"])


def test_constant_value_strings_output():
    m = build([h.make_node("Constant", [], ["y"], value_strings=["a", "bé"])], [],
              [("y", S, [2])])
    assert run(m)[0].tolist() == ["a", "bé"]


def test_constant_of_shape_rejects_a_string_value():
    value = h.make_tensor("v", S, [1], [b"a"])
    m = build([h.make_node("ConstantOfShape", ["s"], ["y"], value=value)],
              [("s", (T.INT64, [1]))], [("y", S, ["n"])])
    with pytest.raises(ModelError, match="ConstantOfShape.*str"):
        run(m, np.array([2], I64))
