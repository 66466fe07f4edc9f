"""Random valid ONNX models for the differential fuzzer (issue 26), one per integer seed.

Algorithm:
1. Draw the model's frame from `random.Random(seed)`: an opset (13, 17, 18 or 21), a number K of
   calls (1 for a static model; 2-3 when it has symbolic dims) and a first graph input of rank
   0-4 whose dims are static sizes or symbols, each symbol given one size per call (0 included,
   so empty tensors come up).
2. A value's shape is a list of dims, a dim being the tuple of its K sizes, one per call. A dim
   whose sizes differ is symbolic: graph inputs and outputs name it with a `dim_param` picked
   per distinct tuple, so two dims that are equal in every call share a name (a true
   relation) and others get their own.
3. Append 3-15 op applications drawn from the catalogue (`fuzz_ops.CATALOGUE`, entries in
   `fuzz_ops_*.py`). An entry picks its operands among the values made so far that meet its
   dtype, rank and value constraints (`Builder.pick`), adds nodes, initializers or new graph
   inputs, and registers its outputs with their dims, dtype and value class; it returns None
   when nothing fits, and another entry is drawn. Operands an entry adds itself are graph
   inputs (any dims), initializers, overridable initializers (a graph input that also has an
   initializer; the calls pass a different value most of the time) or Constant nodes.
4. Every value carries a class bounding its elements: "tame" (finite and moderate: |x| about
   1e4 at most, float16 inputs up to 65504 so that float16 sums overflow), "wild"
   (may hold +-inf, nan, +-1e38, +-1e20, subnormals, +-0). Ops whose result depends on the
   order of accumulation or is undefined for extremes (casts to ints, sums, products, sorts)
   take tame operands only, so the references cannot legitimately differ.
5. The outputs are the last value and up to two other unused ones; feeds are drawn per call
   from each input's dims and class (`make_array`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F16, F32, F64, I64, I32, BOOL = (TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE,
                                 TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL)
FLOATS = (F16, F32, F64)
INTS = (I64, I32)
NP = {F16: np.float16, F32: np.float32, F64: np.float64, I64: np.int64, I32: np.int32,
      BOOL: np.bool_}
EXTREMES = [0.0, -0.0, 1e38, -1e38, 1e20, -1e20, 1e-40, -1e-40, 6e-8, 65504.0, 89.5, -89.5,
            -5000.0, 1e5, 3e4, 1e-30, np.inf, -np.inf, np.nan]
INT_EXTREMES = [0, -1, 2**62, -(2**62), 2**63 - 1, -(2**63), 2**31, -(2**31) - 1, 2**24 + 1]

Dims = list  # list of tuples, one size per call


@dataclass
class Value:
    name: str
    dtype: int
    dims: Dims
    kind: str = "tame"  # "tame" | "wild" | "index" (ints 0..n) | "mask"
    used: bool = False

    @property
    def rank(self) -> int:
        return len(self.dims)


@dataclass
class Input:
    name: str
    dtype: int
    dims: Dims
    kind: str
    init: np.ndarray | None = None  # an overridable initializer's own value
    high: int = 5  # ints of class "index" are below it
    preset: list | None = None  # the value of each call, fixed when the graph needs it


@dataclass
class Case:
    """A generated model with its feeds, one dict per call."""
    seed: int
    model: onnx.ModelProto
    feeds: list[dict[str, np.ndarray]]
    symbolic: bool
    ops: list[str] = field(default_factory=list)
    dims: dict = field(default_factory=dict)  # every value's dims, to check the generator

    def spec_shapes(self) -> list | None:
        """The output shapes of each call, by the ONNX spec, as the generator computed them
        (None: not computed, the corners generator)."""
        outs = [o.name for o in self.model.graph.output]
        if not all(o in self.dims for o in outs):
            return None
        return [[tuple(d[k] for d in self.dims[o]) for o in outs]
                for k in range(len(self.feeds))]


def static(d: tuple) -> bool:
    return len(set(d)) == 1


def make_array(rng: np.random.Generator, dtype: int, shape: tuple, kind: str,
               high: int = 5) -> np.ndarray:
    """Values of one input: normal floats (tame), mixed with extremes (wild), small ints,
    ints in [0, high) (index), bools."""
    if dtype == BOOL:
        return rng.random(shape) < 0.5
    if dtype in (I64, I32):
        if kind == "index":
            return rng.integers(0, max(high, 1), shape).astype(NP[dtype])
        a = np.asarray(rng.integers(-6, 7, shape), np.int64)
        if kind == "nonzero":
            a[a == 0] = 3
        if kind == "wild" and a.size:
            pick = rng.random(shape) < 0.3
            a[pick] = rng.choice(np.array(INT_EXTREMES, np.int64), int(pick.sum()))
        return a.astype(NP[dtype])
    scale = rng.choice([1.0, 1.0, 3.0, 100.0])
    if dtype == F16 and rng.random() < 0.3:  # sums and squares past 65504
        scale = 1e4
    a = np.asarray(rng.standard_normal(shape) * scale)
    if kind == "positive":
        a = np.abs(a) + 0.25
    if kind == "wild" and a.size:
        pick = rng.random(shape) < 0.35
        a[pick] = rng.choice(np.array(EXTREMES), int(pick.sum()))
    with np.errstate(over="ignore"):
        return a.astype(NP[dtype])


class Builder:
    """The state of one model under construction; the catalogue's entries call its methods."""

    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.nrng = np.random.default_rng(seed)
        self.opset = self.rng.choice([13, 17, 18, 18, 21])
        self.calls = 1 if self.rng.random() < 0.4 else self.rng.choice([2, 3])
        self.values: list[Value] = []
        self.inputs: list[Input] = []
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.ops: list[str] = []
        self._n = 0

    # names and dims -------------------------------------------------------------------------
    def fresh(self, hint: str = "t") -> str:
        self._n += 1
        return f"{hint}{self._n}"

    def dim(self, lo: int = 0, hi: int = 5, sym: float = 0.5) -> tuple:
        """A dim: static, or symbolic with one size per call (0 only when lo is 0)."""
        if self.calls > 1 and self.rng.random() < sym:
            return tuple(self.rng.randint(lo, hi) for _ in range(self.calls))
        return (self.rng.randint(lo, hi),) * self.calls

    def const_dim(self, n: int) -> tuple:
        return (n,) * self.calls

    # values ---------------------------------------------------------------------------------
    def add_value(self, name: str, dtype: int, dims: Dims, kind: str = "tame") -> Value:
        v = Value(name, dtype, [tuple(d) for d in dims], kind)
        self.values.append(v)
        return v

    def pick(self, dtypes=None, rank=(0, 5), kinds=None, cond=None) -> Value | None:
        """A random existing value meeting the constraints, preferring recent unused ones."""
        ok = [v for v in self.values
              if (dtypes is None or v.dtype in dtypes) and rank[0] <= v.rank <= rank[1]
              and (kinds is None or v.kind in kinds) and (cond is None or cond(v))]
        if not ok:
            return None
        fresh = [v for v in ok if not v.used]
        v = self.rng.choice(fresh) if fresh and self.rng.random() < 0.7 else self.rng.choice(ok)
        v.used = True
        return v

    def graph_input(self, dtype: int, dims: Dims, kind: str = "tame", hint="x",
                    high: int = 5) -> Value:
        name = self.fresh(hint)
        self.inputs.append(Input(name, dtype, [tuple(d) for d in dims], kind, high=high))
        return self.add_value(name, dtype, dims, "tame" if kind in ("positive", "nonzero")
                              else kind)

    def const(self, array, hint: str = "c", mode: str | None = None,
              wild: bool = True) -> str:
        """A constant operand: an initializer, a Constant node or (mode "override", data
        only) an overridable initializer whose calls pass other values (extremes too, when
        `wild`)."""
        array = np.asarray(array)
        name = self.fresh(hint)
        mode = mode or self.rng.choice(["init", "init", "node"])
        if mode == "node":
            attrs = {"value": numpy_helper.from_array(array, name)}
            if self.opset >= 13 and self.rng.random() < 0.3:  # the typed attribute forms
                if array.dtype == np.int64 and array.ndim == 1 and array.size:
                    attrs = {"value_ints": [int(v) for v in array]}
                elif array.dtype == np.int64 and array.ndim == 0:
                    attrs = {"value_int": int(array)}
                elif array.dtype == np.float32 and array.ndim == 0:
                    attrs = {"value_float": float(array)}
            self.nodes.append(helper.make_node("Constant", [], [name], **attrs))
        else:
            self.inits.append(numpy_helper.from_array(array, name))
            if mode == "override":
                dt = helper.np_dtype_to_tensor_dtype(array.dtype)
                self.inputs.append(Input(name, dt, [(s,) * self.calls for s in array.shape],
                                         "wild" if wild else "tame", init=array))
        return name

    def operand(self, dtype: int, dims: Dims, kind: str = "tame", broadcast: bool = True,
                high: int = 5) -> Value:
        """A second data operand of the given dims: an existing value, a new graph input, or
        a constant (symbolic dims become 1 when `broadcast`, else a graph input is used)."""
        match = [v for v in self.values if v.dtype == dtype and v.dims == dims and
                 (kind == "wild" or v.kind == kind)]
        r = self.rng.random()
        if match and r < 0.3:
            v = self.rng.choice(match)
            v.used = True
            return v
        if r < 0.6 or (not broadcast and not all(static(d) for d in dims)):
            return self.graph_input(dtype, dims, kind, high=high)
        shape = tuple(d[0] if static(d) else 1 for d in dims)
        if broadcast and self.rng.random() < 0.3:
            shape = tuple(1 if self.rng.random() < 0.5 else s for s in shape)
            shape = shape[self.rng.randint(0, len(shape)):]
        arr = make_array(self.nrng, dtype, shape, kind, high)
        mode = self.rng.choice(["init", "node", "override", "override"])
        name = self.const(arr, "w", mode)
        return self.add_value(name, dtype, [(s,) * self.calls for s in shape],
                              "wild" if mode == "override" else kind)

    def preset_input(self, dims: Dims, arrays: list, hint: str = "p") -> Value:
        """A graph input whose value in call k is arrays[k] (shapes from data, NonZero)."""
        v = self.graph_input(helper.np_dtype_to_tensor_dtype(arrays[0].dtype), dims, "tame",
                             hint)
        self.inputs[-1].preset = arrays
        return v

    def ints(self, values, hint="k", mode=None) -> str:
        return self.const(np.asarray(values, np.int64), hint, mode)

    def node(self, op: str, inputs: list[str], n_out: int = 1, **attrs) -> list[str]:
        outs = [self.fresh() for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, **attrs))
        self.ops.append(op)
        return outs

    # the model ------------------------------------------------------------------------------
    def _dim_proto(self, d: tuple, names: dict) -> int | str:
        if static(d):
            return d[0]
        return names.setdefault(d, f"s{len(names)}")

    def finish(self, n_ops: int) -> Case:
        vals = [v for v in self.values if v.name not in {i.name for i in self.inputs}]
        outs = vals[-1:] + self.rng.sample([v for v in vals[:-1] if not v.used],
                                           min(2, len([v for v in vals[:-1] if not v.used])))
        if not outs:  # no op at all: copy the first input
            v = self.values[0]
            outs = [self.add_value(self.node("Identity", [v.name])[0], v.dtype, v.dims)]
        names: dict = {}
        g_in = [helper.make_tensor_value_info(i.name, i.dtype,
                                              [self._dim_proto(d, names) for d in i.dims])
                for i in self.inputs]
        g_out = [helper.make_tensor_value_info(v.name, v.dtype,
                                               [self._dim_proto(d, names) for d in v.dims])
                 for v in outs]
        graph = helper.make_graph(self.nodes, f"fuzz{self.seed}", g_in, g_out, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 10
        feeds = []
        for k in range(self.calls):
            f = {}
            for i in self.inputs:
                shape = tuple(d[k] for d in i.dims)
                if i.init is not None:
                    if self.rng.random() < 0.2:
                        continue  # the initializer's own value
                    wild = i.kind == "wild" and self.rng.random() < 0.3
                    f[i.name] = make_array(self.nrng, i.dtype, shape, "wild" if wild else "tame")
                elif i.preset is not None:
                    f[i.name] = i.preset[k]
                else:
                    f[i.name] = make_array(self.nrng, i.dtype, shape, i.kind, i.high)
            feeds.append(f)
        return Case(self.seed, model, feeds, self.calls > 1, list(self.ops),
                    {v.name: v.dims for v in self.values})


def generate(seed: int) -> Case:
    """The model and feeds of case `seed` (deterministic)."""
    from fuzz_ops import CATALOGUE, WEIGHTS

    b = Builder(seed)
    rank = b.rng.choice([0, 1, 2, 2, 3, 3, 4, 4])
    dtype = b.rng.choice([F32, F32, F32, F16, F64, I64, I32])
    kind = "wild" if b.rng.random() < 0.3 else "tame"
    b.graph_input(dtype, [b.dim() for _ in range(rank)], kind)
    if b.rng.random() < 0.5:
        b.graph_input(b.rng.choice([F32, F16, F64]), [b.dim(1, 4) for _ in range(4)], "tame")
    target = b.rng.randint(3, 15)
    tries = 0
    while len(b.ops) < target and tries < 200:
        tries += 1
        name = b.rng.choices(list(CATALOGUE), WEIGHTS)[0]
        try:
            CATALOGUE[name](b)
        except Skip:
            continue
    return b.finish(target)


class Skip(Exception):
    """An entry found no operand it can take."""
