"""When the IR verifiers run: after every pass with `verify=True` (what the test suite sets
through ONNXJIT_VERIFY=1), on the imported model and at the end of each pipeline with None
(the default), never with False; a broken IR is a CompileError naming a pass."""

from __future__ import annotations

import numpy as np
import pytest
from models import finish
from onnx import TensorProto, helper

import onnxjit
from onnxjit import driver
from onnxjit.errors import CompileError
from onnxjit.options import CompileOptions


def _model():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Exp", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [4])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return finish(graph)


def _verifications(monkeypatch, **options) -> int:
    from onnxjit import runtime

    runtime._MEMORY.clear()  # compile again, not from the other test's memory
    calls = []
    real = driver.verify_ir
    monkeypatch.setattr(driver, "verify_ir", lambda ir: calls.append(1) or real(ir))
    y, = onnxjit.compile(_model(), cache_dir=False, **options)(np.ones(4, np.float32))
    np.testing.assert_allclose(y, np.e, rtol=1e-6)
    return len(calls)


def test_every_pass_each_pipeline_end_or_never(monkeypatch):
    each = _verifications(monkeypatch, verify=True)
    monkeypatch.delenv("ONNXJIT_VERIFY", raising=False)
    ends = _verifications(monkeypatch, verify=None)
    never = _verifications(monkeypatch, verify=False)
    n_passes = len(driver.GRAPH_PIPELINE) + len(driver.SIGNATURE_PIPELINE)
    assert each >= n_passes
    assert 3 <= ends <= 5  # import, graph pipeline, signature graph part, loops
    assert never == 0


def test_default_follows_the_environment(monkeypatch):
    monkeypatch.setenv("ONNXJIT_VERIFY", "1")
    assert CompileOptions.from_user({}).verify
    monkeypatch.setenv("ONNXJIT_VERIFY", "0")
    assert CompileOptions.from_user({}).verify is False
    monkeypatch.delenv("ONNXJIT_VERIFY")
    assert CompileOptions.from_user({}).verify is None
    assert CompileOptions.from_user({"verify": True}).verify


@pytest.mark.parametrize("verify", [True, None])
def test_broken_ir_is_named(monkeypatch, verify):
    def broken(ir):
        raise CompileError("value %r used before it is defined")

    monkeypatch.setattr(driver, "verify_ir", broken)
    monkeypatch.delenv("ONNXJIT_VERIFY", raising=False)
    hook = driver.PassHook(CompileOptions.from_user({"verify": verify, "cache_dir": False}),
                           driver.Dumper(None))
    with pytest.raises(CompileError, match="IR invalid after pass 'dce'"):
        hook("dce", object(), 0.0)
        hook.end("dce", object())
