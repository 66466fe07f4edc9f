"""Recurrent ops RNN, GRU, LSTM: attributes, shape inference, activations, cell math, numpy.

Shapes (layout 0; layout 1, from opset 14, swaps the first two dims of X, initial_h/c, Y_h/c
and makes Y [batch, seq, dirs, hidden]): X [S, N, I], W [D, G*H, I], R [D, G*H, H],
B [D, 2*G*H] (Wb then Rb), sequence_lens int32 [N], initial_h/initial_c [D, N, H],
P [D, 3*H] (peepholes i, o, f); Y [S, D, N, H], Y_h/Y_c [D, N, H]. G = 1 (RNN), 3 (GRU: gates
z, r, h), 4 (LSTM: gates i, o, f, c). D = 2 for `bidirectional`, whose second direction runs
in reverse.

Activations (`activations`, per direction: RNN f; GRU f, g; LSTM f, g, h; defaults Tanh /
Sigmoid, Tanh / Sigmoid, Tanh, Tanh) are scalar rules built from the loop IR's ops, so the
lowering and this module's numpy evaluation run the same rule (numpy through
`scalar_eval.run_ops`). `activation_alpha`/`activation_beta` are consumed in order by the
activations that take them (as onnxruntime does; defaults: LeakyRelu 0.01, HardSigmoid 0.2/0.5,
Elu 1.0, others 0); a list giving one direction's activations for a bidirectional node is
repeated. `clip` bounds every activation's input to [-clip, clip].

Cell math (`cell_rnn`, `gru_gates`, `gru_out`, `cell_lstm`) is written once over a small
arithmetic interface (`Arith`) that both numpy (`recurrent.reference`) and the loop builder
(`recurrent.lowering`) implement: one source of truth for the recurrences.

sequence_lens: batch entry n only runs its first L_n steps (the reverse direction starts at
step L_n - 1); Y is zero at the steps past L_n and Y_h/Y_c hold the state after entry n's
last valid step (zero when L_n = 0), as onnxruntime computes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from onnxjit.errors import ModelError
from onnxjit.ir import symbolic
from onnxjit.ir.graph import Node
from onnxjit.ir.loop_builder import Builder, const
from onnxjit.ir.loops import Operand
from onnxjit.ir.ops.elementwise.activation import softplus
from onnxjit.ir.ops.elementwise.arithmetic import BF16, FLOATS, accept, arity, int_attr
from onnxjit.ir.ops.shape_utils import tensor_input
from onnxjit.ir.types import Dim, DType, TensorType

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
N_INPUTS = {"RNN": 6, "GRU": 6, "LSTM": 8}
N_ACTS = {"RNN": 1, "GRU": 2, "LSTM": 3}
DEFAULT_ACTS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
TYPES = ((1, FLOATS), (22, FLOATS | BF16))

# --------------------------------------------------------------------------- activations


def _c(v: float, x: Operand) -> Operand:
    return const(v, x.dtype)


def _affine(b: Builder, x: Operand, a: float, be: float) -> Operand:
    return b.op("add", b.op("mul", x, _c(a, x)), _c(be, x))


def _leaky(b: Builder, x: Operand, a: float, be: float) -> Operand:
    return b.op("select", b.op("ge", x, _c(0, x)), x, b.op("mul", x, _c(a, x)))


def _thresholded(b: Builder, x: Operand, a: float, be: float) -> Operand:
    return b.op("select", b.op("gt", x, _c(a, x)), x, _c(0, x))


def _scaled_tanh(b: Builder, x: Operand, a: float, be: float) -> Operand:
    return b.op("mul", _c(a, x), b.op("tanh", b.op("mul", x, _c(be, x))))


def _hard_sigmoid(b: Builder, x: Operand, a: float, be: float) -> Operand:
    return b.op("min", b.op("max", _affine(b, x, a, be), _c(0, x)), _c(1, x))


def _elu(b: Builder, x: Operand, a: float, be: float) -> Operand:
    neg = b.op("mul", _c(a, x), b.op("expm1", x))  # e**x - 1 would be 0 for |x| < 2**-25
    return b.op("select", b.op("ge", x, _c(0, x)), x, neg)


def _softsign(b: Builder, x: Operand, a: float, be: float) -> Operand:
    return b.op("div", x, b.op("add", _c(1, x), b.op("abs", x)))


def _softplus(b: Builder, x: Operand, a: float, be: float) -> Operand:
    return softplus(b, x)  # the op's form: no overflow, and the tail below x = -17 kept


ActFn = Callable[[Builder, Operand, float, float], Operand]

#: lower-case name -> (takes alpha, takes beta, default alpha, default beta, rule)
ACTIVATIONS: dict[str, tuple[bool, bool, float, float, ActFn]] = {
    "relu": (False, False, 0, 0, lambda b, x, a, be: b.op("max", x, _c(0, x))),
    "tanh": (False, False, 0, 0, lambda b, x, a, be: b.op("tanh", x)),
    "sigmoid": (False, False, 0, 0, lambda b, x, a, be: b.op("sigmoid", x)),
    "affine": (True, True, 0, 0, _affine),
    "leakyrelu": (True, False, 0.01, 0, _leaky),
    "thresholdedrelu": (True, False, 0, 0, _thresholded),
    "scaledtanh": (True, True, 0, 0, _scaled_tanh),
    "hardsigmoid": (True, True, 0.2, 0.5, _hard_sigmoid),
    "elu": (True, False, 1.0, 0, _elu),
    "softsign": (False, False, 0, 0, _softsign),
    "softplus": (False, False, 0, 0, _softplus),
}


@dataclass(frozen=True)
class Act:
    name: str  # lower case, a key of ACTIVATIONS
    alpha: float
    beta: float

    def emit(self, b: Builder, x: Operand) -> Operand:
        return ACTIVATIONS[self.name][4](b, x, self.alpha, self.beta)


# --------------------------------------------------------------------------- attributes


@dataclass(frozen=True)
class RnnAttrs:
    kind: str
    gates: int
    dirs: int
    direction: str
    hidden: int | None  # the attribute, when given
    layout: int
    acts: tuple[tuple[Act, ...], ...]  # per direction
    clip: float | None
    linear_before_reset: bool
    input_forget: bool

    def reverse(self, d: int) -> bool:
        return self.direction == "reverse" or d == 1


def _floats(node: Node, name: str) -> list[float]:
    v = node.attr(name, ())
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = (v,)
    if not isinstance(v, (tuple, list)) or not all(isinstance(x, (int, float)) for x in v):
        raise ModelError(f"attribute '{name}' must be a list of floats, got {v!r}", where=node)
    return [float(x) for x in v]


def attrs_of(node: Node) -> RnnAttrs:
    """Parse and check the node's attributes (ModelError naming the node on bad ones)."""
    kind = "LSTM" if node.op == "QuantizedLSTM" else node.op  # `recurrent.quantized`
    direction = node.attr("direction", "forward")
    if isinstance(direction, bytes):
        direction = direction.decode()
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ModelError(f"attribute 'direction' must be forward, reverse or bidirectional, "
                         f"got {direction!r}", where=node)
    dirs = 2 if direction == "bidirectional" else 1
    hidden = node.attr("hidden_size")
    if hidden is not None:
        hidden = int_attr(node, "hidden_size", 0)
        if hidden <= 0:
            raise ModelError(f"attribute 'hidden_size' must be positive, got {hidden}",
                             where=node)
    layout = int_attr(node, "layout", 0, (0, 1)) if node.version >= 14 else 0
    clip = node.attr("clip")
    if clip is not None:
        if not isinstance(clip, (int, float)) or isinstance(clip, bool):
            raise ModelError(f"attribute 'clip' must be a float, got {clip!r}", where=node)
        clip = float(clip)
        if not clip > 0:
            raise ModelError(f"attribute 'clip' must be positive, got {clip}", where=node)
    lbr = kind == "GRU" and node.version >= 3 and \
        int_attr(node, "linear_before_reset", 0, (0, 1)) == 1
    forget = kind == "LSTM" and int_attr(node, "input_forget", 0, (0, 1)) == 1
    return RnnAttrs(kind, GATES[kind], dirs, direction, hidden, layout,
                    _activations(node, kind, dirs), clip, lbr, forget)


def _activations(node: Node, kind: str, dirs: int) -> tuple[tuple[Act, ...], ...]:
    per = N_ACTS[kind]
    names = node.attr("activations")
    if names is None:
        names = DEFAULT_ACTS[kind] * dirs
    if isinstance(names, (str, bytes)):
        names = (names,)
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    if len(names) == per and dirs == 2:
        names = names * 2  # one direction's list serves both
    if len(names) != per * dirs:
        raise ModelError(f"attribute 'activations' must name {per * dirs} functions "
                         f"({per} per direction), got {len(names)}: {names}", where=node)
    alphas, betas = _floats(node, "activation_alpha"), _floats(node, "activation_beta")
    acts: list[Act] = []
    for name in names:
        entry = ACTIVATIONS.get(name.lower())
        if entry is None:
            raise ModelError(f"unknown activation '{name}' (expected one of Relu, Tanh, "
                             "Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
                             "HardSigmoid, Elu, Softsign, Softplus)", where=node)
        takes_a, takes_b, da, db, _ = entry
        a = (alphas.pop(0) if alphas else da) if takes_a else 0.0
        be = (betas.pop(0) if betas else db) if takes_b else 0.0
        acts.append(Act(name.lower(), a, be))
    return tuple(tuple(acts[d * per:(d + 1) * per]) for d in range(dirs))


# --------------------------------------------------------------------------- inference


def _mismatch(a: Dim, b: Dim) -> bool:
    """Two sizes that must agree and do not; a symbolic one is assumed to (`ir.symbolic`:
    the runtime checks it, and a call breaking it takes the shape-specialised path)."""
    if isinstance(a, int) and isinstance(b, int):
        return a != b
    if a is not None and b is not None and symbolic.active():
        symbolic.assume_equal(a, b, "the sizes of a recurrent op's inputs")
    return False


def _txt(shape: tuple) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _check_shape(node: Node, i: int, what: str, want: tuple) -> None:
    v = node.input(i)
    if v is None:
        return
    shape = tensor_input(node, i).shape
    if shape is None:
        return
    if len(shape) != len(want) or any(_mismatch(x, y) for x, y in zip(shape, want)):
        raise ModelError(f"input {i} ({what}) has shape {_txt(shape)}, expected {_txt(want)}",
                         where=node)


@dataclass(frozen=True)
class Dims:
    seq: Dim
    batch: Dim
    input: Dim
    hidden: Dim


def dims_of_node(node: Node, a: RnnAttrs) -> Dims:
    """Check every input's shape against the others and the attributes; the problem sizes."""
    x = tensor_input(node, 0, "X").shape
    w = tensor_input(node, 1, "W").shape
    r = tensor_input(node, 2, "R").shape
    for i, s, what in ((0, x, "X"), (1, w, "W"), (2, r, "R")):
        if s is not None and len(s) != 3:
            raise ModelError(f"input {i} ({what}) must have rank 3, got shape {_txt(s)}",
                             where=node)
    seq, batch, inp = (None, None, None) if x is None else \
        ((x[1], x[0], x[2]) if a.layout else x)
    g = a.gates
    hid: Dim = a.hidden
    if hid is None and r is not None:
        hid = r[2]
    if hid is None and w is not None and isinstance(w[1], int):
        hid = w[1] // g
    if a.hidden is not None and r is not None and _mismatch(r[2], a.hidden):
        raise ModelError(f"hidden_size {a.hidden} does not match input 2 (R) of shape "
                         f"{_txt(r)} (expected [{a.dirs}, {g * a.hidden}, {a.hidden}])",
                         where=node)
    gh = None if hid is None else g * hid
    _check_shape(node, 1, "W", (a.dirs, gh, inp))
    _check_shape(node, 2, "R", (a.dirs, gh, hid))
    _check_shape(node, 3, "B", (a.dirs, None if gh is None else 2 * gh))
    _check_shape(node, 4, "sequence_lens", (batch,))
    state = (batch, a.dirs, hid) if a.layout else (a.dirs, batch, hid)
    _check_shape(node, 5, "initial_h", state)
    if a.kind == "LSTM":
        _check_shape(node, 6, "initial_c", state)
        _check_shape(node, 7, "P", (a.dirs, None if hid is None else 3 * hid))
    return Dims(seq, batch, inp, hid)


def rnn_infer(node: Node) -> list:
    arity(node, 3, N_INPUTS[node.op])
    dt = accept(node, 0, TYPES)
    for i in (1, 2, 3, 5, 6, 7):
        if i < N_INPUTS[node.op] and node.input(i) is not None:
            if accept(node, i, TYPES) != dt:
                raise ModelError(f"input {i} is {tensor_input(node, i).dtype.short} but input "
                                 f"0 (X) is {dt.short}; they must match", where=node)
    if node.input(4) is not None and tensor_input(node, 4).dtype != DType.INT32:
        raise ModelError("input 4 (sequence_lens) must be int32, got "
                         f"{tensor_input(node, 4).dtype.short}", where=node)
    a = attrs_of(node)
    dm = dims_of_node(node, a)
    if a.layout:
        y = (dm.batch, dm.seq, a.dirs, dm.hidden)
        st = (dm.batch, a.dirs, dm.hidden)
    else:
        y = (dm.seq, a.dirs, dm.batch, dm.hidden)
        st = (a.dirs, dm.batch, dm.hidden)
    n_out = 3 if node.op == "LSTM" else 2
    if len(node.outputs) > n_out:
        raise ModelError(f"{node.op} has at most {n_out} outputs, got {len(node.outputs)}",
                         where=node)
    types = [TensorType(dt, y), TensorType(dt, st), TensorType(dt, st)]
    return types[:len(node.outputs)]


# --------------------------------------------------------------------------- cell math


class Arith(Protocol):
    """Arithmetic the cell rules use; numpy arrays or loop-IR operands."""

    def add(self, x: Any, y: Any) -> Any: ...
    def sub(self, x: Any, y: Any) -> Any: ...
    def mul(self, x: Any, y: Any) -> Any: ...
    def one_minus(self, x: Any) -> Any: ...
    def clip(self, x: Any) -> Any: ...
    def act(self, a: Act, x: Any) -> Any: ...


def cell_rnn(o: Arith, a: tuple[Act, ...], g: Any) -> Any:
    """H = f(pre-activation)."""
    return o.act(a[0], o.clip(g))


def gru_gates(o: Arith, a: tuple[Act, ...], gz: Any, gr: Any) -> tuple[Any, Any]:
    """(z, r) from their pre-activations."""
    return o.act(a[0], o.clip(gz)), o.act(a[0], o.clip(gr))


def gru_out(o: Arith, a: tuple[Act, ...], z: Any, gh: Any, h_prev: Any) -> Any:
    """H = (1 - z) * g(gh) + z * H_prev; gh is the h gate's full pre-activation."""
    hh = o.act(a[1], o.clip(gh))
    return o.add(o.mul(o.one_minus(z), hh), o.mul(z, h_prev))


def cell_lstm(o: Arith, a: tuple[Act, ...], forget_coupled: bool, gi: Any, go: Any, gf: Any,
              gc: Any, c_prev: Any, peep: tuple[Any, Any, Any] | None) -> tuple[Any, Any]:
    """(H, C) from the gates' pre-activations (bias included, peepholes not)."""
    if peep is not None:
        gi = o.add(gi, o.mul(peep[0], c_prev))
        gf = o.add(gf, o.mul(peep[2], c_prev))
    i = o.act(a[0], o.clip(gi))
    f = o.one_minus(i) if forget_coupled else o.act(a[0], o.clip(gf))
    c = o.add(o.mul(f, c_prev), o.mul(i, o.act(a[1], o.clip(gc))))
    if peep is not None:
        go = o.add(go, o.mul(peep[1], c))
    out = o.act(a[0], o.clip(go))
    return o.mul(out, o.act(a[2], c)), c
