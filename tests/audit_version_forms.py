"""Rewrite the backend suite's node cases into the form an older opset version defines.

The backend node cases are written at the newest opset. For an op `op` and a registered
version `v`, `derive(case, v)` yields the case's (model, feeds) at opset `v`:

1) import the default domain at `v` (`op_audit.with_opset`);
2) map the node's inputs onto the inputs of `schema(op, v)` by formal name (Resize's `scales`
   moves from input 2 to input 1 at v10); an input the `v` schema does not have becomes the
   attribute of the same name (or an alias: `K` -> `k`, `constant_value` -> `value`,
   `pads` -> `paddings` at Pad-1), filled from the case's data for that input (axes of
   Reduce*/Squeeze/Unsqueeze before 13/18, Split's `split`, Pad's pads/value, Clip's min/max,
   Slice-1's starts/ends/axes, TopK-1's k, Dropout's ratio, Upsample's scales);
3) drop attributes the `v` schema does not know when they hold the newest schema's default
   (an attribute that changes the result cannot be expressed: the candidate is dropped);
4) drop the candidate unless `onnx.checker.check_model(full_check=True)` accepts it, which
   rejects dtypes and forms the `v` schema does not allow.

`dtype_variant` derives the "new dtype in v" case: a derived case's float32 inputs (and the
outputs of the same type) cast to a dtype `schema(op, v)` allows and the previous version did
not.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import helper, numpy_helper
from op_audit import schema, with_opset

# Input name -> attribute names that held the same data in older versions.
_ATTR_ALIASES = {"K": ("k",), "constant_value": ("value",), "pads": ("pads", "paddings")}

_ATTR_KIND = onnx.defs.OpSchema.AttrType


def _attr_value(kind, data: np.ndarray):
    data = np.asarray(data)
    if kind == _ATTR_KIND.INTS:
        return [int(x) for x in data.ravel()]
    if kind == _ATTR_KIND.FLOATS:
        return [float(x) for x in data.ravel()]
    if kind == _ATTR_KIND.INT:
        return int(data.ravel()[0])
    if kind == _ATTR_KIND.FLOAT:
        return float(data.ravel()[0])
    return None


def _default_of(op: str, name: str):
    """The newest schema's default of attribute `name` (None when it has none)."""
    attr = onnx.defs.get_schema(op, "").attributes.get(name)
    if attr is None or not attr.default_value.name:
        return None
    return helper.get_attribute_value(attr.default_value)


# onnx's own function body of MeanVarianceNormalization-13 fails strict shape inference (its
# Constant node is rejected), so that op is checked without inferring through the body.
_NO_FULL_CHECK = {"MeanVarianceNormalization"}


def _checks(model: onnx.ModelProto) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            full = model.graph.node[0].op_type not in _NO_FULL_CHECK
            onnx.checker.check_model(model, full_check=full)
        return True
    except Exception:  # noqa: BLE001 -- any rejection means "not a valid v form"
        return False


def _map_inputs(node, new_schema, old_schema) -> tuple[list[str], dict[str, str]] | None:
    """(the inputs the old schema takes, {input name: attribute to move it to}); None when an
    input cannot be expressed at the old version."""
    new_names = [f.name for f in new_schema.inputs]
    old_names = [f.name for f in old_schema.inputs]
    if new_names == old_names:
        return list(node.input), {}
    by_name: dict[str, str] = {}
    for k, value in enumerate(node.input):
        if k >= len(new_names):
            # Variadic tails keep their place only when both schemas name them alike.
            return None
        by_name[new_names[k]] = value
    inputs: list[str] = []
    for name in old_names:
        inputs.append(by_name.pop(name, ""))
    moved: dict[str, str] = {}
    for name, value in by_name.items():
        if value == "":
            continue
        for attr in (name, *_ATTR_ALIASES.get(name, ())):
            if attr in old_schema.attributes:
                moved[value] = attr
                break
        else:
            # A renamed input (BatchNormalization's mean -> input_mean) keeps its position.
            k = new_names.index(name)
            if k < len(inputs) and inputs[k] == "" and old_names[k] not in new_names:
                inputs[k] = value
            else:
                return None
    while inputs and inputs[-1] == "":
        inputs.pop()
    return inputs, moved


def opset_model(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    """`op_audit.with_opset`, also for the opsets 2-4 onnx's version table does not list
    (IR version 3 read them)."""
    try:
        return with_opset(model, version)
    except ValueError:
        m = with_opset(model, 5)
        m.opset_import[0].version = version
        m.ir_version = 3
        return m


def _array(x) -> np.ndarray:
    # Some backend cases hold their data as TensorProto (narrow float types).
    return numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x


def _retyped(attr: onnx.AttributeProto, kind) -> onnx.AttributeProto:
    """`attr` converted to the attribute type the old schema declares (LpPool-1's p is a
    float, an int since 2)."""
    if attr.type == kind:
        return attr
    value = helper.get_attribute_value(attr)
    if kind == _ATTR_KIND.FLOAT and attr.type == _ATTR_KIND.INT:
        return helper.make_attribute(attr.name, float(value))
    return attr


# (op, attribute) -> the behaviour versions without the attribute have, where it is not the
# attribute's default (RoiAlign before 16 samples as coordinate_transformation_mode
# "output_half_pixel"; 16's default is "half_pixel").
_IMPLICIT = {("RoiAlign", "coordinate_transformation_mode"): b"output_half_pixel"}

# GridSample before 20 names its modes bilinear/bicubic (20 renamed them linear/cubic).
_GRID_MODES = {b"linear": "bilinear", b"cubic": "bicubic"}


def _op_specific(model: onnx.ModelProto, feeds: dict, version: int) -> None:
    """The version differences a name mapping cannot express."""
    node = model.graph.node[0]
    if node.op_type == "Gemm" and version < 7 and len(node.input) == 3:
        # Before 7, C broadcasts only with broadcast=1 (the backend cases broadcast C).
        node.attribute.append(helper.make_attribute("broadcast", 1))
    if node.op_type == "Resize" and version == 11:
        # Resize-11's roi and scales inputs are required even when empty.
        for k, name in ((1, "roi"), (2, "scales")):
            if len(node.input) > k and node.input[k] == "":
                model.graph.initializer.append(
                    numpy_helper.from_array(np.zeros(0, np.float32), name))
                node.input[k] = name
    if node.op_type == "GridSample" and version < 20:
        for k, a in enumerate(node.attribute):
            if a.name == "mode" and a.s in _GRID_MODES:
                node.attribute[k].CopyFrom(helper.make_attribute("mode", _GRID_MODES[a.s]))
    if node.op_type == "BatchNormalization" and version < 7:
        # Before 7 the default is training (is_test=0); the one-output cases are inference.
        node.attribute.append(helper.make_attribute("is_test", 1))
    old = schema(node.op_type, version)
    if "consumed_inputs" in old.attributes and old.attributes["consumed_inputs"].required:
        # A version-1 hint for in-place updates, required by a few v1 schemas.
        node.attribute.append(helper.make_attribute("consumed_inputs", [0] * len(node.input)))


def derive(case, version: int, data_set: int = 0) -> tuple[onnx.ModelProto, dict] | None:
    """Backend node case `case` rewritten to opset `version` (see the module docstring), with
    its feeds; None when the case cannot be expressed at that version."""
    model = opset_model(case.model, version)
    graph = model.graph
    node = graph.node[0]
    op = node.op_type
    try:
        old = schema(op, version)
    except onnx.defs.SchemaError:
        return None
    new = onnx.defs.get_schema(op, "")
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    inputs, _ = case.data_sets[data_set]
    graph_inputs = [i.name for i in graph.input if i.name not in inits]
    data = {**inits, **dict(zip(graph_inputs, inputs))}
    mapped = _map_inputs(node, new, old)
    if mapped is None:
        return None
    node_inputs, moved = mapped
    attrs = []
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if a.name in old.attributes:
            attrs.append(_retyped(a, old.attributes[a.name].type))
        elif _IMPLICIT.get((op, a.name), _default_of(op, a.name)) != value:
            return None
    for value, attr in moved.items():
        if value not in data:
            return None
        got = _attr_value(old.attributes[attr].type, data[value])
        if got is None:
            return None
        if got == []:
            # An empty axes input means "all axes" (noop_with_empty_axes is at its default
            # here): the old form says so by omitting the attribute.
            continue
        attrs.append(helper.make_attribute(attr, got))
    if len(node.output) > len(old.outputs) and not old.outputs[-1].option == 2:
        used = {o.name for o in graph.output}
        if any(o in used for o in node.output[len(old.outputs):]):
            return None
        del node.output[len(old.outputs):]
    del node.input[:]
    node.input.extend(node_inputs)
    del node.attribute[:]
    node.attribute.extend(attrs)
    for name in moved:
        for k, i in enumerate(graph.input):
            if i.name == name:
                del graph.input[k]
                break
        for k, t in enumerate(graph.initializer):
            if t.name == name:
                del graph.initializer[k]
                break
    feeds = {n: _array(x) for n, x in zip(graph_inputs, inputs) if n not in moved}
    _op_specific(model, feeds, version)
    if not _checks(model):
        return None
    return model, feeds


def allowed_types(op: str, version: int) -> set[str]:
    """Every tensor type any type constraint of `schema(op, version)` allows."""
    return {t for c in schema(op, version).type_constraints for t in c.allowed_type_strs}


_NEW_DTYPES = {
    "tensor(float16)": onnx.TensorProto.FLOAT16, "tensor(bfloat16)": onnx.TensorProto.BFLOAT16,
    "tensor(double)": onnx.TensorProto.DOUBLE,
}


def new_float_dtypes(op: str, version: int, previous: int | None) -> list[int]:
    """Float element types `schema(op, version)` allows and the `previous` version did not."""
    if previous is None:
        return []
    added = allowed_types(op, version) - allowed_types(op, previous)
    return [_NEW_DTYPES[t] for t in sorted(added) if t in _NEW_DTYPES]


def dtype_variant(model: onnx.ModelProto, feeds: dict, elem: int
                  ) -> tuple[onnx.ModelProto, dict] | None:
    """`model` with its float32 inputs and outputs retyped to `elem` (data cast to match);
    None when that is not a valid model or there is no float32 input."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    np_type = helper.tensor_dtype_to_np_dtype(elem)
    out_feeds = dict(feeds)
    changed = False
    for vi in list(m.graph.input) + list(m.graph.output):
        t = vi.type.tensor_type
        if t.elem_type == onnx.TensorProto.FLOAT:
            t.elem_type = elem
            if vi.name in out_feeds:
                out_feeds[vi.name] = np.asarray(out_feeds[vi.name]).astype(np_type)
                changed = True
    for k, t in enumerate(m.graph.initializer):
        if t.data_type == onnx.TensorProto.FLOAT:
            arr = numpy_helper.to_array(t).astype(np_type)
            m.graph.initializer[k].CopyFrom(numpy_helper.from_array(arr, t.name))
            changed = True
    if not changed or not _checks(m):
        return None
    return m, out_feeds
