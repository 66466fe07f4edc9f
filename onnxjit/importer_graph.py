"""GraphProto / FunctionProto / AttributeProto / TypeProto -> graph IR (part of the importer).

Algorithm for one graph, given the enclosing scope (None for the main graph):
1) a new `_Scope` chained to the enclosing one; every name the graph's nodes will define is
   recorded as *pending*, so a use before definition can be told apart from an undefined name;
2) initializers (dense and sparse, densified) become constant Values; an initializer that is
   also a graph input is that input's default value (it stays in `graph.inputs`, `.const` set),
   except in the main graph of an IR <= 3 model, where every initializer had to be listed as
   an input: there it is the constant it is (as onnxruntime has it), not an input;
3) inputs get their declared types (a negative dim, as Paddle writes, is an unknown dim, as
   onnxruntime reads it); value_info types are kept aside for node outputs;
4) nodes in file order: inputs resolved through the scope chain ("" -> None), attributes
   converted (subgraphs recursively, in a scope chained to this one), outputs defined — a
   second definition of a name in this graph, or a node output shadowing a visible outer name,
   is an SSA violation;
5) outputs resolved through the scope chain and typed from their ValueInfoProto when untyped.
Each node's `version` is the opset its domain imports; an unimported domain is a ModelError.
"""

from __future__ import annotations

from typing import Any

from onnxjit.errors import ModelError, OnnxJitError, add_context
from onnxjit.external_data import ExternalReader
from onnxjit.ir.graph import AttrRef, Graph, Node, TypeAttr, Value
from onnxjit.ir.types import (
    MapType,
    OptionalType,
    SequenceType,
    SparseTensorType,
    Sym,
    TensorType,
    ValueType,
)
from onnxjit.proto import onnx_pb2 as P
from onnxjit.tensors import element_type, sparse_to_numpy, to_numpy

_A = P.AttributeProto
_KIND = {v: k.lower() for k, v in _A.AttributeType.items()}

# The kind of every ai.onnx attribute name whose kind is the same in all ops and versions
# (from the ONNX schemas): a FLOAT where an INT is due (`axis=1.5`) would otherwise be
# truncated silently by the op rules. Names whose kind varies by op (to, seed, value, p) are
# left to the ops. An INT is accepted for a FLOAT and INTS for FLOATS (no information lost).
_KNOWN_KINDS = {kind: frozenset(names.split()) for kind, names in {
    _A.STRING: (
        "activation approximate auto_pad case_change_action coordinate_transformation_mode "
        "delimiter direction equation keep_aspect_ratio_policy locale mode nearest_mode "
        "padding_mode pattern pixel_format reduction round_mode update_rule value_string"),
    _A.FLOATS: "activation_alpha activation_beta scales value_floats weights",
    _A.STRINGS: "activations pool_strings stopwords value_strings",
    _A.INT: (
        "align_corners allowzero antialias axis batch_axis batch_dims block_size blocksize "
        "broadcast ceil_mode center_point_box chunk_size count_include_pad detect_negative "
        "detect_positive dtype end exclude_outside exclusive fmod group hidden_size ignore_index "
        "input_forget interleaved inverse is_case_sensitive is_causal is_test k keepdims "
        "kv_num_heads largest layout left_window_size linear_before_reset max_gram_length "
        "max_skip_count maxsplit min_gram_length new_axis noop_with_empty_axes num_groups "
        "num_heads num_outputs num_scan_inputs offset_group onesided output_datatype output_dtype "
        "output_height output_sequence output_width periodic precision q_num_heads "
        "qk_matmul_output_mode reverse right_window_size rotary_embedding_dim sample_size "
        "sampling_ratio saturate select_last_index size softmax_precision sorted spatial start "
        "stash_type storage_order time_axis training_mode transA transB upper value_int"),
    _A.FLOAT: (
        "alpha beta bias clip cubic_coeff_a epsilon extrapolation_value gamma height_scale high "
        "lambd low max mean min momentum ratio scale softcap spatial_scale value_float "
        "width_scale"),
    _A.INTS: (
        "axes consumed_inputs dilations directions ends kernel_shape ngram_counts ngram_indexes "
        "output_padding output_shape paddings pads perm pool_int64s pooled_shape scan_input_axes "
        "scan_input_directions scan_output_axes scan_output_directions shape split starts strides "
        "value_ints"),
    _A.GRAPH: "body else_branch then_branch",
}.items()}
_EXPECTED = {name: kind for kind, names in _KNOWN_KINDS.items() for name in names}
_ALSO_OK = {_A.FLOAT: {_A.INT}, _A.FLOATS: {_A.INTS}}


def _check_kind(a: P.AttributeProto, desc: str) -> None:
    """ModelError when an ai.onnx attribute has the wrong kind (see _KNOWN_KINDS)."""
    want = _EXPECTED.get(a.name)
    if want is None or a.ref_attr_name or a.type == want or a.type in _ALSO_OK.get(want, ()):
        return
    got = _KIND.get(a.type, str(a.type))
    raise ModelError(f"attribute '{a.name}' must be of kind {_KIND[want]}, got {got}",
                     where=desc)


class _Scope:
    """The names visible in one graph, chained to the enclosing graph's scope."""

    def __init__(self, parent: _Scope | None, name: str = ""):
        self.parent = parent
        self.name = name  # of the graph, for messages
        self.values: dict[str, Value] = {}
        self.defined_by: dict[str, str] = {}  # name -> what defined it, for SSA messages
        self.pending: dict[str, str] = {}  # names later nodes of this graph define -> node

    def lookup(self, name: str) -> Value | None:
        s: _Scope | None = self
        while s is not None:
            v = s.values.get(name)
            if v is not None:
                return v
            s = s.parent
        return None

    def pending_def(self, name: str) -> tuple[str, str] | None:
        """(the node that defines `name` later, the name of its graph) or None."""
        s: _Scope | None = self
        while s is not None:
            if name in s.pending:
                return s.pending[name], s.name
            s = s.parent
        return None

    def outer_def(self, name: str) -> str | None:
        s = self.parent
        while s is not None:
            if name in s.values:
                return s.defined_by[name]
            s = s.parent
        return None

    def define(self, name: str, value: Value, by: str) -> None:
        if name in self.values:
            raise ModelError(f"value '{name}' is defined twice: by {self.defined_by[name]} and "
                             f"by {by} (a graph must be in SSA form)")
        self.values[name] = value
        self.defined_by[name] = by


def import_type(tp: P.TypeProto, where: str) -> ValueType | None:
    """The IR type of a TypeProto; None when it says nothing (or is opaque)."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type" or kind == "sparse_tensor_type":
        t = getattr(tp, kind)
        if t.elem_type == 0:
            return None
        dtype = element_type(t.elem_type, where)
        shape = _shape(t.shape, where) if t.HasField("shape") else None
        return TensorType(dtype, shape) if kind == "tensor_type" else SparseTensorType(dtype,
                                                                                    shape)
    if kind == "sequence_type":
        s = tp.sequence_type
        return SequenceType(import_type(s.elem_type, where) if s.HasField("elem_type") else None)
    if kind == "optional_type":
        o = tp.optional_type
        return OptionalType(import_type(o.elem_type, where) if o.HasField("elem_type") else None)
    if kind == "map_type":
        m = tp.map_type
        value = import_type(m.value_type, where)
        if value is None:
            raise ModelError("map type has no value type", where=where)
        return MapType(element_type(m.key_type, where), value)
    return None


def _named(dim_param: str) -> bool:
    """Is a dim_param a name? Exporters also write "?" (Paddle: H and W of one input both "?")
    or "-1" for a dim they do not know; onnxruntime ignores dim_params, so those are unknown
    dims, each its own, not one symbol that every "?" must share."""
    if not isinstance(dim_param, str):  # damaged bytes: the symbol's checks name the problem
        return bool(dim_param)
    return bool(dim_param) and (dim_param[0].isalpha() or dim_param[0] == "_")


def _shape(shape: P.TensorShapeProto, where: str) -> tuple:
    dims: list = []
    for d in shape.dim:
        which = d.WhichOneof("value")
        if which == "dim_value":
            # onnxruntime reads a negative dim (Paddle's -1) as an unknown one.
            dims.append(int(d.dim_value) if d.dim_value >= 0 else None)
        elif which == "dim_param" and _named(d.dim_param):
            dims.append(Sym.var(d.dim_param))
        else:
            dims.append(None)
    return tuple(dims)


class GraphImporter:
    """Imports graphs of one model (or function) sharing its opset imports and data reader."""

    def __init__(self, opsets: dict[str, int], reader: ExternalReader,
                 local_domains: frozenset[str] | set[str] = frozenset(),
                 legacy_inputs: bool = False):
        self.opsets = opsets
        # IR <= 3: initializers listed among the main graph's inputs are constants.
        self.legacy_inputs = legacy_inputs
        self.reader = reader
        self.local_domains = local_domains

    # graphs -------------------------------------------------------------------------------
    def import_graph(self, g: P.GraphProto, parent: _Scope | None) -> Graph:
        gname = g.name or "main"
        scope = _Scope(parent, gname)
        self._mark_pending(g.node, scope)
        infos = {vi.name: vi for vi in g.value_info}

        inits: dict[str, Value] = {}
        for t in g.initializer:
            where = f"initializer '{t.name}'"
            if not t.name:
                raise ModelError("an initializer has no name", where=f"graph '{gname}'")
            arr = to_numpy(t, self.reader)
            v = Value(TensorType(element_type(t.data_type, where), tuple(arr.shape)), t.name,
                      const=arr)
            scope.define(t.name, v, where)
            inits[t.name] = v
        for s in g.sparse_initializer:
            name = s.values.name
            where = f"sparse initializer '{name}'"
            if not name:
                raise ModelError("a sparse initializer has no name", where=f"graph '{gname}'")
            arr = sparse_to_numpy(s, self.reader)
            v = Value(TensorType(element_type(s.values.data_type, where), tuple(arr.shape)),
                      name, const=arr)
            scope.define(name, v, where)
            inits[name] = v

        inputs: list[Value] = []
        for vi in g.input:
            where = f"graph input '{vi.name}'"
            if parent is None and self.legacy_inputs and vi.name in inits:
                continue
            typ = import_type(vi.type, where) if vi.HasField("type") else None
            v = inits.pop(vi.name, None)
            if v is None:
                v = Value(typ, vi.name)
                scope.define(vi.name, v, where)
            elif typ is not None:
                v.type = typ  # the declared type (maybe symbolic) of an input with a default
            inputs.append(v)

        nodes = [self._node(n, scope, infos, gname) for n in g.node]

        outputs: list[Value] = []
        for vi in g.output:
            v = scope.lookup(vi.name)
            if v is None:
                raise ModelError(f"graph output '{vi.name}' is not defined in graph '{gname}'")
            if v.type is None and vi.HasField("type"):
                v.type = import_type(vi.type, f"graph output '{vi.name}'")
            outputs.append(v)
        return Graph(nodes, inputs, outputs, list(inits.values()), gname,
                     [vi.name for vi in g.output], g.doc_string)

    def import_function_body(self, f: P.FunctionProto, owner: str) -> Graph:
        scope = _Scope(None, owner)
        self._mark_pending(f.node, scope)
        infos = {vi.name: vi for vi in f.value_info}
        inputs = []
        for name in f.input:
            v = Value(None, name)
            scope.define(name, v, f"input '{name}' of {owner}")
            inputs.append(v)
        nodes = [self._node(n, scope, infos, owner) for n in f.node]
        outputs = []
        for name in f.output:
            v = scope.lookup(name)
            if v is None:
                raise ModelError(f"output '{name}' of {owner} is not defined")
            outputs.append(v)
        return Graph(nodes, inputs, outputs, [], f.name, list(f.output), f.doc_string)

    @staticmethod
    def _mark_pending(nodes: Any, scope: _Scope) -> None:
        for i, n in enumerate(nodes):
            for o in n.output:
                if o:
                    scope.pending.setdefault(o, _node_desc(n, i))

    # nodes --------------------------------------------------------------------------------
    def _node(self, n: P.NodeProto, scope: _Scope, infos: dict[str, P.ValueInfoProto],
              gname: str) -> Node:
        desc = _node_desc(n, None)
        if not n.op_type:
            raise ModelError("the node has no op_type", where=desc)
        domain = "" if n.domain == "ai.onnx" else n.domain
        if domain in self.opsets:
            version = self.opsets[domain]
        elif domain in self.local_domains:
            version = 1  # a model-local function's domain need not be imported
        else:
            raise ModelError(f"domain '{n.domain}' is not imported by the model (opset_import "
                             f"has {sorted(d or 'ai.onnx' for d in self.opsets)})", where=desc)
        inputs: list[Value | None] = []
        for name in n.input:
            if not name:
                inputs.append(None)
                continue
            v = scope.lookup(name)
            if v is None:
                later = scope.pending_def(name)
                if later is not None:
                    raise ModelError(f"input '{name}' is used before {later[0]} defines it: the "
                                     f"nodes of graph '{later[1]}' are not in topological order "
                                     "(or there is a cycle)", where=desc)
                raise ModelError(f"input '{name}' is an undefined value in graph '{gname}'",
                                 where=desc)
            inputs.append(v)
        attrs: dict[str, Any] = {}
        for a in n.attribute:
            if a.name in attrs:
                raise ModelError(f"attribute '{a.name}' is given twice", where=desc)
            if domain == "":
                _check_kind(a, desc)
            attrs[a.name] = self.attribute(a, desc, scope)
        outputs: list[Value] = []
        for name in n.output:
            v = Value(None, name)
            if name:
                outer = scope.outer_def(name)
                if outer is not None:
                    raise ModelError(f"output '{name}' shadows the value of that name defined by "
                                     f"{outer} in an enclosing graph (names must be unique across "
                                     "nested scopes)", where=desc)
                scope.pending.pop(name, None)
                scope.define(name, v, desc)
                vi = infos.get(name)
                if vi is not None and vi.HasField("type"):
                    v.type = import_type(vi.type, f"value '{name}'")
            outputs.append(v)
        return Node(n.op_type, inputs, outputs, attrs, domain, version, n.name)

    # attributes ---------------------------------------------------------------------------
    def attribute(self, a: P.AttributeProto, desc: str, scope: _Scope | None = None) -> Any:
        """The Python value of an attribute (see the importer docs for the mapping)."""
        where = f"{desc}: attribute '{a.name}'"
        if not a.name:
            raise ModelError("an attribute has no name", where=desc)
        if a.ref_attr_name:
            kind = _KIND.get(a.type)
            if kind is None or a.type == _A.UNDEFINED:
                raise ModelError(f"reference to '@{a.ref_attr_name}' has no valid type",
                                 where=where)
            return AttrRef(a.ref_attr_name, kind)
        t = a.type
        if t == _A.FLOAT:
            return float(a.f)
        if t == _A.INT:
            return int(a.i)
        if t == _A.STRING:
            return _text(a.s)
        if t == _A.TENSOR:
            return to_numpy(a.t, self.reader)
        if t == _A.GRAPH:
            return self._region(a.g, scope, a.name, desc)
        if t == _A.SPARSE_TENSOR:
            return sparse_to_numpy(a.sparse_tensor, self.reader)
        if t == _A.TYPE_PROTO:
            return self._type_attr(a.tp, where)
        if t == _A.FLOATS:  # the container yields Python floats and ints already: a C-level
            return tuple(a.floats)  # copy, 3x faster than a generator on a forest's 10^6 values
        if t == _A.INTS:
            return tuple(a.ints)
        if t == _A.STRINGS:
            return _texts(a.strings)
        if t == _A.TENSORS:
            return tuple(to_numpy(x, self.reader) for x in a.tensors)
        if t == _A.GRAPHS:
            return tuple(self._region(g, scope, a.name, desc) for g in a.graphs)
        if t == _A.SPARSE_TENSORS:
            return tuple(sparse_to_numpy(s, self.reader) for s in a.sparse_tensors)
        if t == _A.TYPE_PROTOS:
            return tuple(self._type_attr(tp, where) for tp in a.type_protos)
        if t == _A.UNDEFINED:
            raise ModelError("attribute has no type (AttributeProto.type is UNDEFINED)",
                             where=where)
        raise ModelError(f"attribute has unknown type {t}", where=where)

    def _region(self, g: P.GraphProto, scope: _Scope | None, attr: str, desc: str) -> Graph:
        """Import a subgraph; an error inside it also names the subgraph and its owner."""
        try:
            return self.import_graph(g, scope)
        except OnnxJitError as e:
            raise add_context(e, f"subgraph '{g.name or 'main'}' (attribute '{attr}' of "
                                 f"{desc})") from None

    @staticmethod
    def _type_attr(tp: P.TypeProto, where: str) -> TypeAttr:
        typ = import_type(tp, where)
        if typ is None:
            raise ModelError("type attribute holds no type", where=where)
        return TypeAttr(typ)


def _texts(items: Any) -> tuple:
    """`_text` of each item; a long list (a forest's 10^6 node modes) decoded in one piece when
    it is valid UTF-8 without NUL bytes, 5x faster than item by item."""
    if len(items) > 64:
        joined = b"\0".join(items)
        if joined.count(b"\0") == len(items) - 1:
            try:
                return tuple(joined.decode("utf-8").split("\0"))
            except UnicodeDecodeError:
                pass
    return tuple(_text(s) for s in items)


def _text(b: bytes) -> str | bytes:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b  # binary payloads (rare) are kept as they are


def _node_desc(n: P.NodeProto, index: int | None) -> str:
    op = f"{n.domain}.{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
    label = f" '{n.name}'" if n.name else (f" #{index}" if index is not None else "")
    first = f" -> '{n.output[0]}'" if not n.name and n.output else ""
    return f"node{label} ({op}){first}"
