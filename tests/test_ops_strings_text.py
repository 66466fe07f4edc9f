"""The text ops beyond the ONNX backend cases: StringNormalizer, StringSplit, StringConcat,
RegexFullMatch (and the RE2 -> Python `re` translation), Cast to and from strings,
TfIdfVectorizer (against onnx.reference on random token rows) and ImageDecoder."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from test_ops_strings import S, build, one, run, same

from onnxjit.errors import InputError, ModelError, UnsupportedError
from onnxjit.ir.ops.strings.re2 import translate


def obj(*items) -> np.ndarray:
    return np.array(list(items), dtype=object)


# --------------------------------------------------------------------------- StringNormalizer


@pytest.mark.parametrize("x, attrs, want", [
    (obj("The", "cat", "THE", "Dog"), {"stopwords": ["the"]}, ["cat", "Dog"]),
    (obj("The", "cat", "THE"), {"stopwords": ["the"], "is_case_sensitive": 1},
     ["The", "cat", "THE"]),
    (obj("Straße", "ǅ"), {"case_change_action": "UPPER"}, ["STRASSE", "Ǆ"]),
    (obj("the", "THE").reshape(1, 2), {"stopwords": ["The"], "case_change_action": "LOWER"},
     [[""]]),
    (obj(), {"stopwords": ["a"]}, [""]),
    (obj(), {}, [""]),
])
def test_string_normalizer(x, attrs, want):
    m = build([h.make_node("StringNormalizer", ["x"], ["y"], **attrs)],
              [("x", (S, [1, "C"] if x.ndim == 2 else ["C"]))],
              [("y", S, [1, "D"] if x.ndim == 2 else ["D"])], opset=10)
    assert run(m, x)[0].tolist() == want


def test_string_normalizer_shape_and_attribute_errors():
    m = build([h.make_node("StringNormalizer", ["x"], ["y"])], [("x", (S, [2, 2]))],
              [("y", S, [2, 2])], opset=10)
    with pytest.raises(ModelError, match=r"StringNormalizer.*\[C\] or \[1, C\]"):
        run(m, obj("a", "b", "c", "d").reshape(2, 2))
    m = build([h.make_node("StringNormalizer", ["x"], ["y"], case_change_action="TITLE")],
              [("x", (S, [2]))], [("y", S, [2])], opset=10)
    with pytest.raises(ModelError, match="case_change_action"):
        run(m, obj("a", "b"))


# --------------------------------------------------------------------------- Split / Concat


@pytest.mark.parametrize("x, attrs", [
    (obj(" a  b\u2003c ", "", "d"), {}),
    (obj("a,,b", "", ",", "x,y,z,w").reshape(2, 2), {"delimiter": ","}),
    (obj("a--b--c", "--"), {"delimiter": "--", "maxsplit": 1}),
    (obj("a b", "c"), {"maxsplit": 0}),
    (np.empty((2, 0), dtype=object), {"delimiter": ";"}),
])
def test_string_split_matches_reference(x, attrs):
    m, ref = one("StringSplit", [("x", x)], n_out=2, **attrs)
    y, z = run(m, x)
    same(y, ref[0])
    same(z, ref[1])


def test_string_concat_broadcasts_scalars_and_empty():
    x, z = np.array("<", dtype=object), obj("a", "b\u00e9")
    m, ref = one("StringConcat", [("x", x), ("z", z)])
    assert run(m, x, z)[0].tolist() == ["<a", "<b\u00e9"] == ref[0].tolist()
    e = np.empty((0, 2), dtype=object)
    m, ref = one("StringConcat", [("x", e), ("z", z)])
    assert run(m, e, z)[0].shape == (0, 2)
    m = build([h.make_node("StringConcat", ["x", "z"], ["y"])],
              [("x", (S, [2])), ("z", (T.INT64, [2]))], [("y", S, [2])])
    with pytest.raises(ModelError, match="StringConcat.*string tensor"):
        run(m, ["a", "b"], np.array([1, 2]))


# --------------------------------------------------------------------------- RegexFullMatch


@pytest.mark.parametrize("pattern, text, match", [
    (r"\d+", "123", True),
    (r"\d+", "\u0663\u0664", False),  # Arabic-Indic digits: RE2's \d is ASCII
    (r"\w+", "caf\u00e9", False),
    (r"[\w.]+@[\w.]+", "a.b@c.d", True),
    (r"[^\s]+", "a\u2003b", True),  # RE2's \s has no em space
    (r"[[:alpha:]]+[[:digit:]]", "abc1", True),
    (r"\Qa.b\E", "a.b", True),
    (r"\Qa.b\E", "axb", False),
    (r"a\z", "a", True),
    (r"(?i)straße", "STRAßE", True),
    (r"[]a]+", "]a]", True),
    (r"\x{263a}+", "\u263a\u263a", True),
    (r"(?<word>a+)b", "aab", True),
])
def test_regex_full_match_re2_semantics(pattern, text, match):
    m = build([h.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)],
              [("x", (S, [1]))], [("y", T.BOOL, [1])], opset=20)
    assert run(m, [text])[0].tolist() == [match]


def test_regex_translation_and_errors():
    assert translate(r"\d\D[\d\s]") == r"[0-9][^0-9][0-9\t\n\f\r ]"
    with pytest.raises(ModelError, match="bad escape"):
        translate(r"\x{zz}")
    m = build([h.make_node("RegexFullMatch", ["x"], ["y"], pattern="a(")],
              [("x", (S, [1]))], [("y", T.BOOL, [1])], opset=20)
    with pytest.raises(ModelError, match=r"RegexFullMatch.*'a\('.*invalid"):
        run(m, ["a"])
    m = build([h.make_node("RegexFullMatch", ["x"], ["y"], pattern=r"\p{Greek}+")],
              [("x", (S, [1]))], [("y", T.BOOL, [1])], opset=20)
    with pytest.raises(UnsupportedError, match=r"RegexFullMatch.*\\p"):
        run(m, ["a"])
    m = build([h.make_node("RegexFullMatch", ["x"], ["y"], pattern="a")],
              [("x", (S, [1]))], [("y", T.BOOL, [1])], opset=19)
    with pytest.raises(ModelError, match="opset 19"):
        run(m, ["a"])


# --------------------------------------------------------------------------- Cast


@pytest.mark.parametrize("to, texts, want", [
    (T.FLOAT, ["1.5", " -2 ", "1e3", "1E-2", "+INF", "-inf", "NaN"],
     np.array([1.5, -2, 1000, 0.01, np.inf, -np.inf, np.nan], np.float32)),
    (T.INT64, ["100.5", "-7", "9223372036854775807"],
     np.array([100, -7, 9223372036854775807], np.int64)),
    (T.UINT8, ["300", "1"], np.array([44, 1], np.uint8)),
    (T.BOOL, ["0", "2.5", "True", "false"], np.array([False, True, True, False])),
    (T.DOUBLE, [], np.zeros(0)),
])
def test_cast_from_strings(to, texts, want):
    m = build([h.make_node("Cast", ["x"], ["y"], to=to)], [("x", (S, ["n"]))],
              [("y", to, ["n"])])
    y, = run(m, texts)
    assert y.dtype == want.dtype
    np.testing.assert_array_equal(y, want)


def test_cast_to_strings_and_back():
    x = np.array([1.5, -0.0, 0.1, np.nan, -np.inf, 3e38], np.float32)
    nodes = [h.make_node("Cast", ["x"], ["s"], to=S), h.make_node("Cast", ["s"], ["y"],
                                                                   to=T.FLOAT)]
    m = build(nodes, [("x", x)], [("s", S, [6]), ("y", T.FLOAT, [6])])
    s, y = run(m, x)
    assert s.tolist() == ["1.5", "-0.0", "0.1", "nan", "-inf", "3e+38"]
    np.testing.assert_array_equal(y, x)
    m = build([h.make_node("CastLike", ["x", "like"], ["y"])],
              [("x", np.array([True, False])), ("like", (S, [1]))], [("y", S, [2])])
    assert run(m, np.array([True, False]), ["?"])[0].tolist() == ["True", "False"]


def test_cast_of_text_that_is_no_number_names_the_node():
    m = build([h.make_node("Cast", ["x"], ["y"], to=T.FLOAT, name="parse")],
              [("x", (S, [2]))], [("y", T.FLOAT, [2])])
    with pytest.raises(InputError, match="parse.*'abc'.*element 1"):
        run(m, ["1", "abc"])


# --------------------------------------------------------------------------- TfIdfVectorizer


def _tfidf(x, mode, lo, hi, skips, pool, counts, weights=None, strings=False):
    ends = list(counts[1:]) + [len(pool)]
    n = sum((e - c) // (k + 1) for k, (c, e) in enumerate(zip(counts, ends)))  # grams
    attrs = dict(mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skips,
                 ngram_counts=counts, ngram_indexes=list(range(n))[::-1])
    attrs["pool_strings" if strings else "pool_int64s"] = pool
    if weights is not None:
        attrs["weights"] = weights
    return one("TfIdfVectorizer", [("x", x)], opset=9, **attrs)


@pytest.mark.parametrize("seed", range(6))
def test_tfidf_random_int_rows_match_reference(seed):
    rng = np.random.default_rng(seed)
    mode = ["TF", "IDF", "TFIDF"][seed % 3]
    x = rng.integers(0, 5, (3, 9) if seed % 2 else (11,)).astype(np.int32 if seed < 3 else
                                                                  np.int64)
    uni = list(range(5))
    bi = [int(v) for v in rng.integers(0, 5, 8)]
    tri = [int(v) for v in rng.integers(0, 5, 9)]
    lo, hi = [(1, 3), (2, 3), (1, 2)][seed % 3]
    # onnx.reference needs weights except in TF mode
    weights = None if mode == "TF" else [float(w) for w in rng.random(5 + 4 + 3)]
    m, ref = _tfidf(x, mode, lo, hi, seed % 4, uni + bi + tri, [0, 5, 13], weights)
    y, = run(m, x)
    np.testing.assert_allclose(y, ref[0], rtol=1e-6)


def test_tfidf_string_pool_with_weights():
    x = np.array([["a", "b", "a", "c"], ["c", "x", "a", "b"]], dtype=object)
    m, ref = _tfidf(x, "TFIDF", 1, 2, 1, ["a", "b", "c", "a", "b", "c", "a"], [0, 3],
                    weights=[1.0, 2.0, 3.0, 0.5, 0.25], strings=True)
    y, = run(m, x)
    np.testing.assert_allclose(y, ref[0])
    assert y.shape == (2, 5) and y.dtype == np.float32


def test_tfidf_attribute_and_dtype_errors():
    x = np.array([1, 2], np.int64)
    m = build([h.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1,
                           max_gram_length=1, max_skip_count=0, ngram_counts=[0],
                           ngram_indexes=[0], pool_strings=["a"])],
              [("x", x)], [("y", T.FLOAT, [1])], opset=9)
    with pytest.raises(ModelError, match="pool_strings.*str"):
        run(m, x)
    m = build([h.make_node("TfIdfVectorizer", ["x"], ["y"], mode="BM25", min_gram_length=1,
                           max_gram_length=1, max_skip_count=0, ngram_counts=[0],
                           ngram_indexes=[0], pool_int64s=[1])],
              [("x", x)], [("y", T.FLOAT, [1])], opset=9)
    with pytest.raises(ModelError, match="mode"):
        run(m, x)


# --------------------------------------------------------------------------- ImageDecoder


def _encode(img: np.ndarray, fmt: str) -> np.ndarray:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format=fmt)
    return np.frombuffer(buf.getvalue(), np.uint8)


def _decoder(pixel_format: str = "RGB"):
    return build([h.make_node("ImageDecoder", ["x"], ["y"], pixel_format=pixel_format)],
                 [("x", (T.UINT8, ["n"]))],
                 [("y", T.UINT8, ["h", "w", 1 if pixel_format == "Grayscale" else 3])],
                 opset=20)


def test_image_decoder_png_formats_and_undecodable_stream():
    rng = np.random.default_rng(0)
    rgba = rng.integers(0, 256, (5, 7, 4), dtype=np.uint8)
    rgba[..., 3] = 255
    data = _encode(rgba, "PNG")
    rgb, = run(_decoder("RGB"), data)
    np.testing.assert_array_equal(rgb, rgba[..., :3])
    bgr, = run(_decoder("BGR"), data)
    np.testing.assert_array_equal(bgr, rgba[..., 2::-1])
    gray, = run(_decoder("Grayscale"), _encode(rgba[..., 0].copy(), "PNG"))
    np.testing.assert_array_equal(gray, rgba[..., :1])
    empty, = run(_decoder("RGB"), np.arange(20, dtype=np.uint8))
    assert empty.shape == (0, 0, 3) and empty.dtype == np.uint8


def test_image_decoder_without_pillow(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(UnsupportedError, match=r"ImageDecoder.*needs Pillow \(pip install"):
        run(_decoder(), np.zeros(4, np.uint8))


def test_image_decoder_attribute_errors():
    with pytest.raises(ModelError, match="pixel_format"):
        run(_decoder("CMYK"), np.zeros(4, np.uint8))
