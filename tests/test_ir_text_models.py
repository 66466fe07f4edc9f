"""Real models through the IR text forms: every ONNX backend node model imported, printed and
parsed back (graph level), and real models lowered to loop IR printed and parsed back."""

import numpy as np
import pytest
from test_ir_text import loop_round_trip, round_trip

from onnxjit.errors import OnnxJitError
from onnxjit.ir.types import DType
from onnxjit.ir.verify import verify_model


@pytest.fixture(scope="module")
def backend_models():
    import onnx.backend.test.loader as loader

    return loader.load_model_tests(kind="node")


def test_onnx_backend_node_models_round_trip(backend_models):
    from onnxjit.importer import load_model

    done = 0
    for case in backend_models:
        try:
            model = load_model(case.model.SerializeToString())
        except OnnxJitError:
            continue  # the importer refuses it (e.g. a dtype numpy cannot hold)
        text, back = round_trip(model)
        verify_model(back)
        done += 1
    assert done > 1000


LOWERED = ["test_add", "test_relu", "test_gemm_default_no_bias", "test_gemm_all_attributes",
           "test_matmul_2d", "test_softmax_example", "test_transpose_default", "test_sigmoid"]


def test_lowered_programs_round_trip(backend_models):
    """Real models lowered to loop IR (as tests/loop_harness.py does) print and parse back."""
    from loop_harness import OPTIONS
    from models import chain, mlp

    from onnxjit.driver import import_model, lower_signature
    from onnxjit.ir.opdef import load_all

    load_all()
    cases = {c.name: c for c in backend_models}
    sources = [(chain(16), [np.ones(16, np.float32)]),
               (mlp(sizes=(20, 6, 4)), [np.ones((2, 20), np.float32)])]
    sources += [(cases[n].model, list(cases[n].data_sets[0][0])) for n in LOWERED]
    for model, inputs in sources:
        graph = import_model(model.SerializeToString(), OPTIONS)
        sig = tuple((DType.from_numpy(np.asarray(a).dtype), np.shape(a)) for a in inputs)
        final, program = lower_signature(graph, sig, OPTIONS)
        text = loop_round_trip(program)
        assert text.count("kernel @") == len(program.kernels) >= 1
        round_trip(final)  # the graph after fusion (Fused regions) too
