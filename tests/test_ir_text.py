"""The text forms of the graph IR and the loop IR: print -> parse gives the same IR (every
field), printing that again gives the same text, and parse errors say where they are."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from onnxjit.errors import ModelError
from onnxjit.ir.graph import AttrRef, Function, Graph, Model, Node, TypeAttr, Value
from onnxjit.ir.loop_builder import Builder, const, elementwise
from onnxjit.ir.loop_parser import parse_program
from onnxjit.ir.loop_printer import print_program
from onnxjit.ir.loops import (
    Buffer,
    Check,
    Const,
    Kernel,
    Load,
    Loop,
    Matmul,
    Op,
    Program,
    Store,
    Var,
    i64,
)
from onnxjit.ir.parser import parse_model
from onnxjit.ir.printer import print_model
from onnxjit.ir.text_consts import format_float, parse_float
from onnxjit.ir.text_lexer import Cursor
from onnxjit.ir.text_types import dim_text, parse_dim
from onnxjit.ir.types import (
    DType,
    MapType,
    OptionalType,
    SequenceType,
    SparseTensorType,
    Sym,
    TensorType,
    dim_str,
    sym_floordiv,
    sym_max,
)
from onnxjit.ir.verify import verify_model

N, M = Sym.var("N"), Sym.var("M")
F32 = DType.FLOAT


# --------------------------------------------------------------------------- structural equality


def same_scalar(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


def same_array(a, b) -> bool:
    if not isinstance(b, np.ndarray) or a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == object:
        return all(same_scalar(x, y) for x, y in zip(a.reshape(-1), b.reshape(-1)))
    return a.tobytes() == b.tobytes()


class GraphEq:
    """Checks two models are the same IR, mapping the first one's values onto the second's."""

    def __init__(self) -> None:
        self.vmap: dict[Value, Value] = {}

    def value(self, a: Value | None, b: Value | None, where: str) -> None:
        if a is None or b is None:
            assert a is None and b is None, where
            return
        if a in self.vmap:
            assert self.vmap[a] is b, f"{where}: {a} maps to two values"
            return
        assert b not in self.vmap.values(), f"{where}: two values map to {b}"
        self.vmap[a] = b
        assert a.name == b.name, (where, a.name, b.name)
        assert a.type == b.type, (where, a.type, b.type)
        assert a.sym_value == b.sym_value, where
        assert (a.const is None) == (b.const is None), where
        if a.const is not None:
            assert same_array(a.const, b.const), where
        assert (a.producer is None) == (b.producer is None), where

    def attr(self, a, b, where: str) -> None:
        if isinstance(a, Graph):
            assert isinstance(b, Graph), where
            self.graph(a, b, where)
        elif isinstance(a, tuple):
            assert isinstance(b, tuple) and len(a) == len(b), where
            for x, y in zip(a, b):
                self.attr(x, y, where)
        elif isinstance(a, np.ndarray):
            assert same_array(a, b), where
        elif isinstance(a, (TypeAttr, AttrRef)):
            assert a == b, where
        else:
            assert same_scalar(a, b), (where, a, b)

    def graph(self, a: Graph, b: Graph, where: str = "main") -> None:
        where = f"{where}/{a.name}"
        assert (a.name, a.doc, a.output_names) == (b.name, b.doc, b.output_names), where
        assert len(a.inputs) == len(b.inputs) and len(a.nodes) == len(b.nodes), where
        assert len(a.initializers) == len(b.initializers), where
        for x, y in zip(a.inputs + a.initializers, b.inputs + b.initializers):
            self.value(x, y, where)
        for k, (n, m) in enumerate(zip(a.nodes, b.nodes)):
            w = f"{where} node {k}"
            assert (n.op, n.domain, n.version, n.name) == (m.op, m.domain, m.version, m.name), w
            assert len(n.inputs) == len(m.inputs) and len(n.outputs) == len(m.outputs), w
            for x, y in zip(n.inputs, m.inputs):
                self.value(x, y, w)
            for x, y in zip(n.outputs, m.outputs):
                self.value(x, y, w)
                assert y.producer is m, w
            assert list(n.attrs) == list(m.attrs), w
            for key in n.attrs:
                self.attr(n.attrs[key], m.attrs[key], f"{w} attr {key}")
        assert len(a.outputs) == len(b.outputs), where
        for x, y in zip(a.outputs, b.outputs):
            self.value(x, y, where)

    def model(self, a: Model, b: Model) -> None:
        for f in ("ir_version", "opset_imports", "producer_name", "producer_version", "domain",
                  "model_version", "doc", "metadata"):
            assert getattr(a, f) == getattr(b, f), f
        self.graph(a.graph, b.graph)
        assert len(a.functions) == len(b.functions)
        for f, g in zip(a.functions, b.functions):
            for key in ("name", "domain", "inputs", "outputs", "attributes", "opset_imports",
                        "overload"):
                assert getattr(f, key) == getattr(g, key), key
            assert list(f.attribute_defaults) == list(g.attribute_defaults)
            for key in f.attribute_defaults:
                self.attr(f.attribute_defaults[key], g.attribute_defaults[key], key)
            self.graph(f.body, g.body, f"function {f.name}")


def round_trip(model: Model) -> tuple[str, Model]:
    text = print_model(model)
    back = parse_model(text)
    GraphEq().model(model, back)
    assert print_model(back) == text
    return text, back


# --------------------------------------------------------------------------- hand-built models

ARRAYS = {
    "f32": np.array([1.5, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4028235e38, 0.1], np.float32),
    "f64": np.array([[0.1, -0.0], [np.nan, 1e308]], np.float64),
    "f16": np.array([0.1, 65504, -np.inf], np.float16),
    "i8": np.array([-128, 127], np.int8), "u8": np.array([0, 255], np.uint8),
    "i16": np.array([-32768], np.int16), "u16": np.array([65535], np.uint16),
    "i32": np.array([-(2**31)], np.int32), "u32": np.array([2**32 - 1], np.uint32),
    "i64": np.array([-(2**63), 2**63 - 1], np.int64), "u64": np.array([2**64 - 1], np.uint64),
    "bool": np.array([[True, False]]), "c64": np.array([1 + 2j, -0.5j], np.complex64),
    "c128": np.array([np.nan + 1j], np.complex128),
    "str": np.array(["a b", 'q"\\\n', "é€"], dtype=object).reshape(3, 1),
    "bytes": np.array([b"\x00\xff", b"x"], dtype=object),
    "scalar": np.array(7, np.int64), "empty": np.zeros((0, 3), np.float32),
    "big": np.arange(600, dtype=np.float32).reshape(20, 30) / 7,
    "big_i64": np.arange(-50, 50, dtype=np.int64), "big_bool": np.arange(40) % 3 == 0,
    "big_c64": (np.arange(20) * (1 + 1j)).astype(np.complex64),
    "big_str": np.array([f"s{k}" for k in range(40)], dtype=object),
}
NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000123))[0]


def all_kinds_model() -> Model:
    """A valid model touching every attribute kind, type kind and constant form."""
    x = Value(TensorType(F32, (N, 3)), "x")
    opt = Value(TensorType(DType.INT64, (2,)), "with default", const=np.array([4, 5]))
    inits = [Value(TensorType(DType.from_numpy(a.dtype), a.shape), k, const=a)
             for k, a in ARRAYS.items()]
    shared = Value(None, "shared", const=ARRAYS["big"])  # untyped, shares its array
    inits.append(shared)
    types = [TensorType(F32, (N + 1, sym_floordiv(N, 2 * M), None, sym_max(N, M))),
             TensorType(F32, None), TensorType(DType.BOOL, ()), SequenceType(None),
             SequenceType(TensorType(DType.INT64, (None,))), OptionalType(SequenceType(None)),
             MapType(DType.STRING, TensorType(F32, (2,))), SparseTensorType(F32, (3, N)),
             SparseTensorType(F32, None), None]
    nodes, outs = [], []
    for k, t in enumerate(types):
        v = Value(t, "t" if k % 2 else "")
        outs.append(v)
        nodes.append(Node("Make", [x, None, opt, None], [v], {}, "custom", 3, name=f"n{k}"))
    s = Value(TensorType(DType.INT64, (2,)), "/shape/Shape_output_0")
    s.sym_value = (N, 3)
    nodes.append(Node("Shape", [x], [s], {}, "", 17, name="shape"))
    then_y = Value(TensorType(F32, (N, 3)), "y")
    then_g = Graph([Node("Identity", [x], [then_y], {}, "", 17)], [], [then_y], name="then")
    ey = Value(None, "y")
    c = Value(TensorType(F32, ()), "c", const=np.array(2.0, np.float32))
    else_g = Graph([Node("Mul", [x, c], [ey], {}, "", 17)], [], [ey], [c], "else", doc="d\n")
    body_in = Value(TensorType(DType.INT64, ()), "iter")
    body_out = Value(None, "")
    loop_g = Graph([Node("Add", [body_in, s], [body_out], {}, "", 17)], [body_in], [body_out],
                   name="body")
    attrs = {
        "i": -3, "f": 0.1, "nan": math.nan, "payload": NAN_PAYLOAD, "inf": -math.inf,
        "negzero": -0.0, "huge": 1e300, "s": 'tab\there "q" é', "b": b"\x00\x01",
        "t": ARRAYS["f16"], "tbig": ARRAYS["big"], "tstr": ARRAYS["str"],
        "ints": (1, 2, 3), "floats": (0.5, math.inf), "strings": ("a", ""), "empty": (),
        "tensors": (ARRAYS["scalar"], ARRAYS["empty"]), "graphs": (loop_g,),
        "then_branch": then_g, "else_branch": else_g, "type": TypeAttr(types[0]),
        "types": (TypeAttr(types[5]), TypeAttr(types[6])),
    }
    y = Value(TensorType(F32, (N, 3)), "odd name/\"y\"")
    nodes.append(Node("If", [s], [y], attrs, "", 17, name="the if"))
    graph = Graph(nodes, [x, opt], [y, y, s, x, outs[0]], inits, "main graph",
                  ["odd name/\"y\"", "y again", "0", "x", "t"], doc="top doc")
    fx = Value(None, "X")
    fy = Value(None, "Y")
    fn_body = Graph([Node("Scale", [fx], [fy], {"alpha": AttrRef("alpha", "float"),
                                                   "mode": AttrRef("mode", "string")}, "", 17)],
                    [fx], [fy], name="F")
    fn = Function("F", "local.fns", ["X"], ["Y"], ["alpha", "mode"], {"mode": "fast"}, fn_body,
                  {"": 17, "custom": 3}, overload="v2")
    return Model(graph, {"": 17, "custom": 3}, ir_version=9, producer_name="me",
                 producer_version="1.2", domain="org.x", model_version=4, doc="a\nb",
                 metadata={"key": "value", "odd key": "é"}, functions=[fn])


def test_all_kinds_round_trip():
    model = all_kinds_model()
    verify_model(model)
    text, back = round_trip(model)
    verify_model(back)
    assert "resources {" in text and "blob0" in text
    inits = {v.name: v for v in back.graph.initializers}
    assert inits["shared"].const is inits["big"].const  # one array, one blob
    assert '%"odd name/\\"y\\""' in text
    assert "sym=[N,3]" in text
    assert "(N // (2*M))" in text


def test_duplicate_and_empty_hints_keep_their_hints():
    x = Value(TensorType(F32, (2,)), "x")
    vals = [Value(None, h) for h in ("x", "x", "", "", "0", "x#1", "inf")]
    nodes = [Node("Relu", [x], [v], {}, "", 17) for v in vals]
    model = Model(Graph(nodes, [x], [vals[-1]]), {"": 17})
    text, back = round_trip(model)
    assert [v.name for n in back.graph.nodes for v in n.outputs] == [v.name for v in vals]
    for want in ("%x#1 =", "%x#2 =", "%0 =", "%1 =", '%"0" =', '%"x#1" =', '%"inf" ='):
        assert want in text, want


def test_interface_names_print_exactly():
    x = Value(TensorType(F32, (2,)), "/fc0/Gemm_output_0")
    y = Value(TensorType(F32, (2,)), "x")
    early = Value(None, "x")  # same hint as the output: the output keeps the bare name
    model = Model(Graph([Node("Relu", [x], [early], {}, "", 17),
                         Node("Relu", [early], [y], {}, "", 17)], [x], [y]), {"": 17})
    text, _ = round_trip(model)
    assert 'graph @main(%"/fc0/Gemm_output_0": f32[2])' in text
    assert "%x#1 = Relu<17>" in text and "return %x\n" in text


def test_free_constant_and_out_of_order_nodes():
    x = Value(TensorType(F32, (2,)), "x")
    c = Value(TensorType(F32, (2,)), "c", const=np.array([1, 2], np.float32))
    a, b = Value(None, "a"), Value(None, "b")
    nodes = [Node("Relu", [a], [b], {}, "", 17), Node("Add", [x, c], [a], {}, "", 17)]
    model = Model(Graph(nodes, [x], [b]), {"": 17})
    text, back = round_trip(model)
    assert "free %c: f32[2] = [1.0, 2.0]" in text
    assert back.graph.nodes[0].inputs[0] is back.graph.nodes[1].outputs[0]


@pytest.mark.parametrize("d", [N, N + 1, 2 * N, N // 2, sym_max(N, M), N * M + 3,
                               (N + 1) * (M + 2), sym_floordiv(N, 2 * M), N - 1, 2 - N,
                               sym_max(N + 1, 2 * M) + 1, (N // 2) // 3, None, 5,
                               Sym.var("batch size") * 2])
def test_dims(d):
    text = dim_text(d)
    assert parse_dim(Cursor(text)) == d
    if d is not None and not (isinstance(d, Sym) and "batch" in str(d)) \
            and d != sym_floordiv(N, 2 * M):
        assert text == dim_str(d)


@given(st.integers(0, 2**64 - 1), st.sampled_from([2, 4, 8]))
def test_floats_are_exact(bits, width):
    utype, ftype = {2: (np.uint16, np.float16), 4: (np.uint32, np.float32),
                    8: (np.uint64, np.float64)}[width]
    x = np.array(bits % (1 << (8 * width)), utype).view(ftype)[()]
    back = parse_float(format_float(x, width), width)
    assert np.array(back, ftype).tobytes() == np.array(x).tobytes()


# --------------------------------------------------------------------------- loop IR


def program_eq(a: Program, b: Program) -> None:
    bmap: dict[Buffer, Buffer] = dict(zip(a.buffers, b.buffers))
    assert a.name == b.name and len(a.buffers) == len(b.buffers)
    for x, y in bmap.items():
        assert (x.name, x.dtype, x.shape, x.kind, x.slot, x.offset) == \
               (y.name, y.dtype, y.shape, y.kind, y.slot, y.offset)
        assert (x.base is None and y.base is None) or bmap[x.base] is y.base
        assert (x.data is None) == (y.data is None)
        if x.data is not None:
            assert same_array(x.data, y.data)
    vmap: dict[Var, Var] = {}

    def operand(p, q):
        if isinstance(p, Var):
            assert isinstance(q, Var)
            if p not in vmap:
                assert q not in vmap.values()
                vmap[p] = q
                assert (p.dtype, p.hint) == (q.dtype, q.hint)
            assert vmap[p] is q
        else:
            assert isinstance(q, Const) and p.dtype == q.dtype and same_scalar(p.value, q.value)

    def body(s1, s2):
        assert len(s1) == len(s2)
        for p, q in zip(s1, s2):
            assert type(p) is type(q)
            if isinstance(p, Loop):
                for o, r in ((p.var, q.var), (p.start, q.start), (p.stop, q.stop)):
                    operand(o, r)
                assert (p.step, p.parallel, p.rolled, p.few) == (q.step, q.parallel, q.rolled,
                                                                 q.few)
                body(p.body, q.body)
            elif isinstance(p, Op):
                assert p.op == q.op and len(p.args) == len(q.args)
                for o, r in zip((p.dst,) + p.args, (q.dst,) + q.args):
                    operand(o, r)
            elif isinstance(p, Load):
                assert bmap[p.buf] is q.buf
                operand(p.dst, q.dst)
                operand(p.index, q.index)
            elif isinstance(p, Store):
                assert bmap[p.buf] is q.buf
                operand(p.index, q.index)
                operand(p.value, q.value)
            elif isinstance(p, Check):
                operand(p.cond, q.cond)
                assert p.message == q.message
            else:
                for f in ("c", "a", "b"):
                    assert bmap[getattr(p, f)] is getattr(q, f)
                    operand(getattr(p, f + "_off"), getattr(q, f + "_off"))
                for f in ("ldc", "lda", "ldb", "m", "n", "k", "a_trans", "b_trans",
                          "accumulate"):
                    assert getattr(p, f) == getattr(q, f), f
                assert same_scalar(p.alpha, q.alpha)

    assert len(a.kernels) == len(b.kernels)
    for k1, k2 in zip(a.kernels, b.kernels):
        assert k1.name == k2.name and k1.contract == k2.contract
        vmap.clear()
        body(k1.body, k2.body)


def loop_round_trip(p: Program) -> str:
    text = print_program(p)
    back = parse_program(text)
    program_eq(p, back)
    assert print_program(back) == text
    return text


def all_stmts_program() -> Program:
    x = Buffer("x", F32, (4, 8), "input", slot=0)
    w = Buffer("w", F32, (8, 6), "const", slot=0, data=np.arange(48, dtype=np.float32)
               .reshape(8, 6) / 3)
    s = Buffer("s", F32, (1,), "const", slot=1, data=np.array([0.5], np.float32))
    t = Buffer("t", F32, (4, 6), "temp", offset=64)
    v = Buffer("v", F32, (24,), "view", base=t)
    y = Buffer("y", F32, (4, 6), "output", slot=1)
    odd = Buffer("a/b", DType.INT64, (3,), "temp")
    b = Builder()
    b.emit(Matmul(t, i64(0), 6, x, i64(0), 8, w, i64(0), 6, 4, 6, 8))
    with b.loop(0, 2, step=1, parallel=True, hint="n") as i:
        off = b.op("mul", i, i64(12), hint="off")
        b.emit(Matmul(v, off, 3, x, i64(4), 8, w, b.op("add", off, i64(1)), 6, 2, 3, 4,
                      a_trans=True, b_trans=True, alpha=-0.5, accumulate=True))

    def fn(bb, args):
        a = bb.op("mul", args[0], const(0.5, F32))
        c = bb.op("gt", a, const(float("nan"), F32))
        return bb.op("select", c, a, const(-0.0, F32))

    elementwise(b, y, [t], fn)
    with b.loop(i64(1), i64(4), step=2, hint="i", rolled=True, few=True) as i:
        acc = b.var(const(0, F32))
        ok = b.op("lt", i, i64(3))
        b.check(ok, 'bad "index"\n for é')
        b.assign(acc, "add", acc, b.load(x, i))
        b.op("cast", acc, dtype=DType.INT32, hint="x")  # a var hinted like a buffer
        b.op("and", Const(True, DType.BOOL), Const(False, DType.BOOL))
        b.op("add", Const(3, DType.INT32), Const(-7, DType.INT32))
        b.op("copy", Const(float("inf"), DType.DOUBLE))
        b.store(odd, i64(0), i64(-1))
    kernels = [Kernel("mm", b.body[:2]), Kernel("ew", b.body[2:3], contract=True, gather=True),
               Kernel("odd name", b.body[3:])]
    return Program([x, w, s, t, v, y, odd], kernels, "prog")


def test_loop_all_statements_round_trip():
    text = loop_round_trip(all_stmts_program())
    assert text.count("kernel @") == 3
    assert "matmul %v[%off, ld=3] += %x[4, ld=8]^T * %w[%0, ld=6]^T" in text
    assert "-0.0:f32" in text and "nan:f32" in text and "inf:f64" in text
    assert "%x#1: i32 = cast %acc" in text
    assert 'kernel @"odd name"' in text and "buffer %\"a/b\": i64[3] temp" in text
    assert "kernel @ew contract gather {" in text and "kernel @mm {" in text
    assert "for %i: i64 = 1 to 4 step 2 rolled few {" in text and text.count("rolled") == 1


def test_loop_hand_built_statements():
    x = Buffer("", DType.BOOL, (2,), "input", slot=0)
    big = Buffer("k", DType.UINT8, (100,), "const", slot=0, data=np.arange(100, dtype=np.uint8))
    i = Var(DType.INT64, "i")
    v = Var(DType.BOOL)
    body = [Loop(i, i64(0), Const(2, DType.INT64), 1,
                 [Load(v, x, i), Check(v, ""), Store(x, i, Const(True, DType.BOOL))])]
    text = loop_round_trip(Program([x, big], [Kernel("k", body)]))
    assert "buffer %0: bool[2] input slot=0" in text and "= blob0" in text


# --------------------------------------------------------------------------- parse errors


@pytest.mark.parametrize("text, where, what", [
    ("model {ir_version = 10, opset_imports = {\"\" = 17}}\ngraph @m(%x: f32[2]) {\n"
     "  %y = Relu<17>(%x\n  return %y\n}\n", "line 4, column 3", "','"),
    ("model {ir_version = 10}\ngraph @m() {\n  return\n}\n", "", "opset_imports"),
    ("model {ir_version = 10, opset_imports = {}}\ngraph @m() {\n  return %nope\n}\n",
     "line 3, column 10", "never defined"),
    ("model {ir_version = 10, opset_imports = {}}\ngraph @m() {\n  init %w: f32[20] = blob3\n"
     "  return\n}\n", "line 3, column 22", "blob named 'blob3'"),
    ("model {ir_version = 10, opset_imports = {}}\ngraph @m() {\n  init %w: f32[2] = [1.0]\n"
     "  return\n}\n", "line 3, column 21", "2 elements"),
    ("model {ir_version = 10, opset_imports = {}}\ngraph @m(%x: f33[2]) {\n  return\n}\n",
     "line 2, column 14", "element type"),
    ("model {ir_version = 10, opset_imports = {}} $", "line 1, column 45", "character"),
])
def test_graph_parse_errors(text, where, what):
    with pytest.raises(ModelError) as e:
        parse_model(text)
    assert where in str(e.value) and what in str(e.value)


@pytest.mark.parametrize("text, where, what", [
    ("program @p {\n  kernel @k {\n    %a = add %b, 1\n  }\n}\n", "line 3, column 5",
     "declared"),
    ("program @p {\n  buffer %x: f32[?] input\n}\n", "line 2, column 17", "no '?'"),
    ("program @p {\n  kernel @k {\n    store %x[0], 1\n  }\n}\n", "line 3, column 11",
     "declared buffer"),
    ("program @p {\n  kernel @k {\n    %a: f32 = copy 1.5\n  }\n}\n", "line 4, column 3",
     "dtype"),
])
def test_loop_parse_errors(text, where, what):
    with pytest.raises(ModelError) as e:
        parse_program(text)
    assert where in str(e.value) and what in str(e.value)
