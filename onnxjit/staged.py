"""Staged execution: the run-time shape phase for graphs whose shapes depend on data.

Shape specialisation binds the input shapes of a call and infers every other shape. Some shapes
still depend on values, not shapes: a Reshape whose target is computed, a ReduceSum whose axes
arrive as an input, the output of NonZero. Such a signature runs in stages; each stage is a
graph whose inputs are concrete arrays:

    stage(graph):
        P = the longest run of leading nodes whose output shapes are all static
        if P is not empty: compile P natively (one artifact) and run it
        else: F = the first node; evaluate F on the host (its op's numpy `evaluate`)
        if every remaining node is host-only (a classifier's ZipMap, sequence ops): evaluate
            them here in order (host evaluation reads values: no child stage needed)
        else the remaining nodes form the next stage, specialised on the arrays now known:
            every input's shape, and the VALUES of the small integer tensors that the next
            node reads (shape-like operands: targets, axes, pads, sizes), bound as constants

Control flow and non-tensor values: a Loop or Scan of fixed carried shapes compiles natively like
any node (`ir.ops.control.native_loop`), except a Loop with scan outputs whose trip count arrives at
run time. A leading If is replaced in the child by the branch its condition selects, and a leading
Loop with a known trip count (no early exit) by itself with the trip count bound when its body then
compiles to a native loop, else (and a Scan) by its body unrolled (`ir.ops.control.unroll`, up to
`UNROLL_LIMIT` iterations), so they compile natively with what follows them; other Loops and Scans,
and the sequence and optional ops, run on the host (`ir.host_eval`), their regions reading outer
values through the stage's inputs (a region's free values count as reads of its node). Sequences are
Python lists and optionals an array or None in the stage's environment; a child is specialised on
each element's shape.

A child stage is built once per (shapes, bound values) key and kept, so a repeated call walks
the same chain of compiled stages: the host only evaluates ops whose output size depends on
large data (NonZero, Unique...). Every stage strictly consumes at least one node, so a chain
ends. Native stage artifacts go through the owner's memory and disk caches under a key that
extends the signature's key by the chain of stage keys.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxjit.errors import InputError, ModelError, SizeLimitError, UnsupportedError
from onnxjit.ir import symbolic
from onnxjit.ir.graph import Graph, Model, Node, Value, clone_model
from onnxjit.ir.ops.control.if_loop_scan import join
from onnxjit.ir.types import DType, OptionalType, SequenceType, TensorType

__all__ = ["Staged", "first_dynamic", "BIND_LIMIT"]

#: Integer tensors with at most this many elements are bound by value into the next stage.
BIND_LIMIT = 64


def _static(v: Value) -> bool:
    """A tensor whose sizes are known: ints, or (compiling for symbolic sizes) expressions."""
    t = v.type
    if not isinstance(t, TensorType) or t.shape is None:
        return False
    return t.is_static or symbolic.active() and all(d is not None for d in t.shape)


def first_dynamic(model: Model) -> int | None:
    """Index of the first node that cannot be compiled for the bound shapes (None: none):
    an output shape that is not static, or an op evaluated only on the host (its output size
    depends on data even when a declared type claims a fixed shape)."""
    from onnxjit.ir.host_eval import is_host_only
    from onnxjit.ir.opdef import resolve

    for i, n in enumerate(model.graph.nodes):
        if not all(_static(v) for v in n.outputs if v is not None):
            return i
        if is_host_only(n):
            return i
        d = resolve(n)
        if d.lower is None and d.scalar is None and d.evaluate is not None:
            return i
        if any(v is not None and v.const is None and not _sized(v, d)
               for v in _value_inputs(n, d)):
            return i
    g = model.graph
    if any(not isinstance(v.type, TensorType) or v.type.dtype == DType.STRING
           for v in g.inputs + g.outputs):
        return len(g.nodes)  # a sequence, optional or string passes through: only stages do
    return None


def _sized(v: Value, d: Any) -> bool:
    """While compiling for symbolic sizes, an op that takes them reads a value input from
    its sizes (`sym_value`, ints and `Sym`s) rather than from its data."""
    return (symbolic.active() and d.symbolic and v.sym_value is not None
            and all(x is not None for x in v.sym_value))


def _value_inputs(node: Node, d: Any) -> list[Value | None]:
    return [node.input(k) for k in d.value_inputs]


class Stage:
    """One graph of the chain: a native prefix or a host node, then children by key."""

    def __init__(self, owner: Any, model: Model, key: str):
        self.owner = owner
        self.model = model
        self.key = key
        self.children: dict[tuple, Stage] = {}
        self.lock = threading.Lock()
        g = model.graph
        cut = first_dynamic(model)
        cut = len(g.nodes) if cut is None else cut
        #: Inputs whose values this stage binds into its child (then it computes nothing).
        self.bind: list[Value] = []
        self.host: Node | None = None
        #: A leading If, Loop or Scan that the child replaces by straight-line nodes: the
        #: branch the condition selects, or the body unrolled (`ir.ops.control.unroll`).
        self.splice: Node | None = None
        if cut == 0 and g.nodes:
            from onnxjit.ir.host_eval import is_host_only
            from onnxjit.ir.opdef import resolve

            first = g.nodes[0]
            wanted = _value_inputs(first, resolve(first))
            if _spliceable(first):
                # The child stage compiles the selected branch / the unrolled body in place
                # of the node: it runs natively with what follows it.
                self.splice = first
            # Host-only ops (control flow, sequences) read values, never shapes: binding
            # their inputs would only multiply the stages.
            if self.splice is None and not is_host_only(first):
                self.bind = [v for v in g.inputs if v in first.inputs
                             and _bindable_type(v, any_dtype=v in wanted)]
            if not self.bind and self.splice is None:
                self.host = first
        self.prefix = g.nodes[:cut]
        self.rest = g.nodes[1:] if self.host else g.nodes[cut:]
        #: Host-only nodes that end the graph (a classifier's ZipMap, sequence ops) run here
        #: one after another, not as a chain of child stages keyed by their inputs' shapes:
        #: host evaluation reads values and needs no specialisation.
        self.tail: list[Node] = []
        if self.rest and all(_host_tail(n) for n in self.rest):
            self.tail, self.rest = self.rest, []
        from onnxjit.ir.host_eval import host_function

        #: the tail's host-table functions, looked up once (None: `_evaluate`'s general path)
        self._tail_fns = [host_function(n) for n in self.tail]
        done = self.prefix or ([self.host] if self.host else [])
        later = {v for n in self.rest + self.tail for v in _reads(n)} | set(g.outputs)
        self.boundary = [v for n in done for v in n.outputs if v in later]
        self.artifact: Any = None
        self._calls = 0
        self._fast: Any = None  # the prefix artifact's builtin, from its second call
        self._needed: dict[int, list[Value]] = {}
        self.prefix_inputs: list[int] = []
        if self.prefix:
            used = {v for n in self.prefix for v in _reads(n)}
            self.prefix_inputs = [i for i, v in enumerate(g.inputs) if v in used]

    # running ------------------------------------------------------------------------------
    def run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        g = self.model.graph
        env: dict[Value, np.ndarray] = dict(zip(g.inputs, arrays))
        if self.prefix:
            art = self.artifact or self._compile_prefix()
            args = [arrays[i] for i in self.prefix_inputs]
            # From the second call on, the prefix's builtin (`Artifact.fast`, as the runtime's
            # fast path): a tuple, or an int when the arrays need the checked path.
            fast = self._fast if self._calls else None
            self._calls += 1
            outs = fast(*args) if fast is not None else None
            if outs.__class__ is not tuple:
                outs = art.run(args)
                if self._calls == 2:
                    built = art.fast
                    self._fast = None if built is None else built.fn
            env.update(zip(self.boundary, outs))
        elif self.host is not None:
            env.update(zip(self.host.outputs, _evaluate(self.host, env)))
        for node, fn in zip(self.tail, self._tail_fns):
            env.update(zip(node.outputs, _evaluate(node, env, fn)))
        rest = self.rest
        choice = None if self.splice is None else _choice(self.splice, env)
        if self.splice is not None and choice is None:  # too long, or no iteration at all
            env.update(zip(self.splice.outputs, _evaluate(self.splice, env)))
            rest = rest[1:]
            choice = "host"
        if not rest:
            return [_value(v, env) for v in g.outputs]
        # Which known values the rest reads depends only on the stage's structure (and on
        # whether the spliced node ran on the host): computed once per form, not per call.
        needed = self._needed.get(len(rest))
        if needed is None:
            needed = self._needed[len(rest)] = _needed_inputs(rest, g.outputs, env)
        feeds = [env[v] for v in needed]
        key = tuple(_shape_key(a) for a in feeds) + tuple(
            env[v].tobytes() for v in self.bind) + ((choice,) if choice else ())
        child = self.children.get(key)
        if child is None:
            with self.lock:
                child = self.children.get(key)
                if child is None:
                    child = self._child(needed, feeds, key, rest,
                                        None if choice == "host" else choice)
                    self.children[key] = child
        return child.run([a for v, a in zip(needed, feeds) if v not in self.bind])

    # building -------------------------------------------------------------------------------
    def _compile_prefix(self) -> Any:
        with self.lock:
            if self.artifact is None:
                g = self.model.graph
                read = {v for n in self.prefix for v in _reads(n)}  # regions' reads too
                sub = Graph(list(self.prefix), [g.inputs[i] for i in self.prefix_inputs],
                            list(self.boundary),
                            [v for v in g.initializers if v in read], name=g.name)
                for k, v in enumerate(sub.outputs):
                    v.name = v.name or f"stage_value{k}"
                sub.output_names = [v.name for v in sub.outputs]
                model = Model(sub, dict(self.model.opset_imports))
                self.artifact = self.owner._stage_artifact(self.key, model)
            return self.artifact

    def _child(self, needed: list[Value], feeds: list[np.ndarray], key: tuple,
               rest: list[Node], choice: Any = None) -> Stage:
        g = self.model.graph
        read = {v for n in rest for v in _reads(n)}
        inits = [v for v in g.initializers if v in read or v in g.outputs]
        sub = Model(Graph(list(rest), list(needed), list(g.outputs), inits, g.name,
                          list(g.output_names or [])), dict(self.model.opset_imports))
        model = clone_model(sub)
        graph = model.graph
        for v, a in zip(list(graph.inputs), feeds):
            v.type = _type_of(a, v.type)
        for v, orig in zip(list(graph.inputs), needed):
            if orig in self.bind:
                v.const = env_copy(feeds[needed.index(orig)])
                graph.inputs.remove(v)
                graph.initializers.append(v)
        if choice is not None:
            _splice(graph, choice)
        from onnxjit import cache as cache_mod

        child_key = cache_mod.make_key(self.key, repr(key))
        model = self.owner._stage_passes(model, child_key)
        return Stage(self.owner, model, child_key)


def _host_tail(node: Node) -> bool:
    from onnxjit.ir.host_eval import is_host_only

    return is_host_only(node) and not _spliceable(node)


def _spliceable(node: Node) -> bool:
    if node.domain not in ("", "ai.onnx"):
        return False
    from onnxjit.ir.ops.control import unroll as cu

    if node.op == "If":
        return True
    if node.op == "Loop":
        return cu.loop_unrollable(node)
    if node.op == "Scan":
        n = cu.scan_length(node)
        return n is not None and 1 <= n <= cu.UNROLL_LIMIT
    return False


def _choice(node: Node, env: dict[Value, Any]) -> Any:
    """What replaces a splice node for these values: a branch name, ("unroll", n),
    ("native", n) (the trip count bound), or None (run it on the host)."""
    from onnxjit.ir.ops.control import unroll as cu

    if node.op == "If":
        cond = np.asarray(_value(node.inputs[0], env))
        if cond.size != 1:
            raise ModelError(f"If condition has {cond.size} elements; expected one",
                             where=node)
        return "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
    if node.op == "Loop":
        from onnxjit.ir.ops.control.native_loop import loop_native

        trip = int(np.asarray(_value(node.inputs[0], env)).reshape(-1)[0])
        # Binding the trip count fixes the scan outputs' shapes: a body of fixed shapes then
        # compiles to a native loop (as fast as the unrolled body, and far faster to compile).
        if trip >= 1 and node.inputs[0].const is None and loop_native(node, trip):
            return ("native", trip)
        return ("unroll", trip) if 1 <= trip <= cu.UNROLL_LIMIT else None
    return ("unroll", cu.scan_length(node))


def _splice(graph: Graph, choice: Any) -> None:
    """Replace the graph's first node (an If, Loop or Scan of the child's own copy) by
    straight-line nodes: the selected branch (readers of the If's outputs then read the
    branch's), or the unrolled body (which defines the node's own outputs)."""
    from onnxjit.ir.graph import replace_uses
    from onnxjit.ir.ops.control import unroll as cu

    node = graph.nodes[0]
    rest = graph.nodes[1:]
    if node.op == "If":
        body = node.attrs[choice]
        graph.nodes = rest
        for out, res in zip(node.outputs, body.outputs):
            replace_uses(graph, out, res)
        graph.nodes = list(body.nodes) + rest
        graph.initializers.extend(body.initializers)
        return
    if choice[0] == "native":
        trip = Value(TensorType(DType.INT64, ()), "trip_count", None,
                     np.array(choice[1], np.int64))
        graph.initializers.append(trip)
        node.inputs[0] = trip
        return
    unroll = cu.unroll_loop if node.op == "Loop" else cu.unroll_scan
    graph.nodes = unroll(node, choice[1], graph.initializers) + rest


def env_copy(a: np.ndarray) -> np.ndarray:
    c = np.array(a, copy=True)
    c.flags.writeable = False
    return c


def _bindable_type(v: Value, any_dtype: bool = False) -> bool:
    """Small integer tensors (shape-like operands) are bound by value; so are small tensors of
    any numeric type that an op declares as value inputs (Resize scales...)."""
    t = v.type
    if not isinstance(t, TensorType) or not t.is_static:
        return False
    if t.dtype.numpy.kind not in ("iufb" if any_dtype else "iu"):
        return False
    return int(np.prod(t.shape, dtype=np.int64)) <= BIND_LIMIT


def _reads(node: Node) -> list[Value]:
    """Every value a node reads: its inputs and what its regions read from outside."""
    ins = [v for v in node.inputs if v is not None]
    if any(True for _ in node.regions()):
        from onnxjit.ir.host_eval import implicit_inputs

        ins += implicit_inputs(node)
    return ins


def _shape_key(a: Any) -> Any:
    """What a child stage is specialised on: dtype and shape; for a sequence, each element's;
    for an empty optional, None."""
    if isinstance(a, np.ndarray):
        return (a.dtype.str, a.shape)
    if isinstance(a, list):
        return ("seq", tuple(_shape_key(x) for x in a))
    if isinstance(a, dict):
        return "map"  # no op reads a map's contents (it passes through)
    if a is None:
        return None
    a = np.asarray(a)
    return (a.dtype.str, a.shape)


def _type_of(a: Any, declared: Any) -> Any:
    """The type of a value known at run time (`declared`: its type before, kept where the
    value cannot tell: the element type of an empty sequence or optional)."""
    if isinstance(a, list):
        elem = None
        for x in a:
            t = _type_of(x, None)
            elem = t if elem is None else join(elem, t)
        if elem is None and isinstance(declared, SequenceType):
            elem = declared.elem
        return SequenceType(elem)
    if a is None:
        return declared if isinstance(declared, OptionalType) else OptionalType(None)
    if isinstance(a, dict):
        return declared
    a = np.asarray(a)
    t = TensorType(DType.from_numpy(a.dtype), tuple(a.shape))
    return OptionalType(t) if isinstance(declared, OptionalType) else t


def _needed_inputs(nodes: list[Node], outputs: list[Value],
                   env: dict[Value, np.ndarray]) -> list[Value]:
    """Values known now (in `env`) that the remaining nodes (also their regions) or the
    outputs read, in a fixed order: first use."""
    seen: dict[Value, None] = {}
    for n in nodes:
        for v in _reads(n):
            if v is not None and v in env:
                seen.setdefault(v)
    for v in outputs:
        if v in env:
            seen.setdefault(v)
    return list(seen)


def _value(v: Value, env: dict[Value, Any]) -> Any:
    if v in env:
        return env[v]
    if v.const is not None:
        return np.array(v.const, copy=True)
    raise UnsupportedError(f"{v.describe()} was not computed by any stage")


def _evaluate(node: Node, env: dict[Value, Any], fn: Callable | None = None) -> list[Any]:
    """Run a node on the host (`ir.host_eval.evaluate_node`: numpy rules, the host-only ops of
    sequences and optionals, and the interpreter of control-flow regions); `fn`: the node's
    host-table function, looked up by the caller once for every call."""
    from onnxjit.ir.host_eval import evaluate_node

    def lookup(v: Value) -> Any:
        return _value(v, env)

    try:
        if fn is not None:
            return list(fn(node, [None if v is None else lookup(v) for v in node.inputs],
                           lookup))
        return evaluate_node(node, lookup)
    except MemoryError as e:  # the sizes come from the call's inputs
        raise InputError(f"not enough memory to evaluate it for this call's inputs: "
                         f"{e or 'MemoryError'}", where=node) from None


class Staged:
    """The executable of a signature with data-dependent shapes (see the module docstring)."""

    def __init__(self, signature: tuple, root: Stage, on_run: Callable[[], None] | None = None):
        self.signature = signature
        self.root = root
        self.source = "staged"
        self.compile_seconds = 0.0
        self._fast: Any = False  # built when the runtime asks (`fast`), from the 2nd call

    @property
    def fast(self) -> Any:
        """A fast call for the runtime when the root is a native prefix and a host tail
        (`onnxjit.staged_fast`; its failed checks are the prefix's `messages`), else None."""
        if self._fast is False:
            from onnxjit.staged_fast import tail_fastcall

            built = tail_fastcall(self.root, _reads)
            if built is None and self.root.artifact is None:
                return None  # not run yet: ask again later
            self._fast = built
        return self._fast

    @property
    def messages(self) -> list[str]:
        art = self.root.artifact
        return [] if art is None else art.messages

    def run(self, args: tuple | list) -> tuple:
        # A later stage's shapes come from this call's values: too large is the call's fault,
        # and so is a shape the values make invalid (a negative dim, a Reshape that does not
        # fit): everything the model alone determines was checked when it compiled
        # (`artifact.sized_for_call`, inlined: this is every call's path).
        try:
            # np.ascontiguousarray would turn a 0-d array into shape (1,).
            return tuple(self.root.run([np.asarray(a, order="C") if isinstance(a, np.ndarray)
                                        else a for a in args]))
        except (SizeLimitError, MemoryError, ModelError) as e:
            from onnxjit.artifact import call_fault

            err = call_fault(e, lambda: self._what, values=True)
            if err is e:
                raise
            raise err from None

    @functools.cached_property
    def _what(self) -> str:
        """This signature's inputs, for messages (`signature.describe`)."""
        from onnxjit.signature import describe

        return describe(self.root.owner._all_names, self.signature)
