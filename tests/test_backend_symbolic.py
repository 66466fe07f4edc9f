"""The ONNX backend node tests again, every input dim symbolic (`specialize="dynamic"`).

Each node test's model is rewritten so that every dim of every graph input is a `dim_param`
(its own name per input and axis, the way an exporter's dynamic axes look), then compiled with
`specialize="dynamic"`: one program for every size of those dims. Cases with an op whose
lowering needs concrete sizes are skipped (saying so): they would run the shape-specialised
program `test_backend.py` already runs (the fallback itself is tested in
`test_dynamic_shapes.py`), and skipping them keeps this module CI-affordable (~800 of ~1900
cases remain). `test_common_nodes_compile_symbolically`
checks that the cases of the ops transformers and MLPs are made of really ran a symbolic
program. Expected failures are the static suite's (`backend_expected_failures.py`).
"""

import re
import warnings

import numpy as np
import onnx
import onnx.backend.base
import onnx.backend.test
import pytest
from backend_expected_failures import EXPECTED_FAILURES

import onnxjit
import onnxjit.backend

warnings.filterwarnings("ignore", category=RuntimeWarning)

def _symbolic_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name for t in m.graph.initializer}
    for vi in m.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        for k, d in enumerate(vi.type.tensor_type.shape.dim):
            d.ClearField("dim_value")
            d.dim_param = f"{vi.name}_d{k}"
    return m


class _Rep:
    def __init__(self, fn):
        self.fn = fn

    def run(self, inputs, **kwargs):
        return self.fn.run(None, dict(zip(self.fn.input_names, inputs)))


def _needs_concrete_sizes(graph) -> str | None:
    """The first op of `graph` (or its subgraphs) whose lowering needs concrete sizes."""
    from onnxjit.ir.opdef import lookup

    for n in graph.node:
        d = lookup("" if n.domain == "ai.onnx" else n.domain, n.op_type)
        if d is None or not (d.symbolic or d.scalar):
            return n.op_type
        for a in n.attribute:
            sub = _needs_concrete_sizes(a.g) if a.HasField("g") else None
            if sub is not None:
                return sub
    return None


class _SymbolicBackend(onnx.backend.base.Backend):
    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        op = _needs_concrete_sizes(model.graph)
        if op is not None:
            pytest.skip(f"{op} needs concrete sizes: test_backend.py runs this case")
        m = _symbolic_inputs(model)
        return _Rep(onnxjit.compile(m, cache_dir=False, specialize="dynamic"))

    @classmethod
    def supports_device(cls, device):
        return device == "CPU"

    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs):
        return True

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        return onnxjit.backend.run_node(node, inputs, device, outputs_info, **kwargs)


class _BackendTest(onnx.backend.test.BackendTest):
    @classmethod
    def assert_similar_outputs(cls, ref_outputs, outputs, rtol, atol, model_dir=None):
        if isinstance(ref_outputs, np.ndarray) and isinstance(outputs, np.ndarray):
            ref_outputs, outputs = [ref_outputs], [outputs]
        super().assert_similar_outputs(ref_outputs, outputs, rtol, atol, model_dir=model_dir)


RANDOM_OUTPUTS = r"^test_bernoulli(_double|_seed)?(_expanded)?_cpu$"

backend_test = _BackendTest(_SymbolicBackend, __name__)
for pattern in EXPECTED_FAILURES:
    re.compile(pattern)
    backend_test.xfail(pattern)
OnnxBackendSymbolicNodeTest = backend_test.test_cases["OnnxBackendNodeModelTest"]
for attr in [a for a in vars(OnnxBackendSymbolicNodeTest) if a.endswith("_cuda")]:
    delattr(OnnxBackendSymbolicNodeTest, attr)
for attr in list(vars(OnnxBackendSymbolicNodeTest)):
    if re.match(RANDOM_OUTPUTS, attr):
        setattr(OnnxBackendSymbolicNodeTest, attr, pytest.mark.xfail(
            reason="unseeded random expected outputs", strict=False)(
                getattr(OnnxBackendSymbolicNodeTest, attr)))


#: Node tests of the ops transformers and MLPs are made of: each must compile to a symbolic
#: program (not fall back to shapes) and match its expected outputs.
SYMBOLIC_CASES = [
    "test_add", "test_add_bcast", "test_sub_bcast", "test_mul_bcast", "test_div_bcast",
    "test_matmul_2d", "test_matmul_3d", "test_matmul_4d", "test_gemm_default_no_bias",
    "test_gemm_transposeA", "test_gemm_transposeB", "test_gemm_alpha", "test_gemm_beta",
    "test_softmax_axis_2", "test_softmax_default_axis", "test_logsoftmax_axis_2", "test_gather_0",
    "test_gather_1", "test_gather_2d_indices", "test_concat_2d_axis_1", "test_concat_3d_axis_0",
    "test_transpose_default", "test_transpose_all_permutations_3",
    "test_layer_normalization_3d_axis_negative_1_epsilon",
    "test_reduce_max_default_axes_keepdim_example",
    "test_reduce_prod_default_axes_keepdims_random", "test_where_example", "test_relu",
    "test_tanh", "test_erf", "test_sigmoid", "test_sqrt", "test_pow_bcast_array",
    "test_split_equal_parts_1d_opset18", "test_clip", "test_equal_bcast", "test_gelu_default_1",
    "test_reduce_min_default_axes_keepdims_random", "test_softmax_large_number", "test_leakyrelu",
    "test_concat_1d_axis_0",
]


_CASES = None


def _load_case(name):
    """(model, inputs, expected outputs) of a node test case, built by onnx's case code."""
    global _CASES
    if _CASES is None:
        from onnx.backend.test.loader import load_node_model_tests

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _CASES = {c.name: c for c in load_node_model_tests()}
    case = _CASES[name]
    ins, outs = case.data_sets[0]
    return case.model, list(ins), list(outs)


@pytest.mark.parametrize("name", SYMBOLIC_CASES)
def test_common_nodes_compile_symbolically(name):
    model, ins, outs = _load_case(name)
    fn = onnxjit.compile(_symbolic_inputs(model), cache_dir=False, specialize="dynamic")
    got = fn.run(None, dict(zip(fn.input_names, ins)))
    assert fn._symbolic.reasons() == []
    assert [p for p in fn._symbolic.programs.values() if p is not None]
    for g, want in zip(got, outs):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
