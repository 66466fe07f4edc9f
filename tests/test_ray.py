"""Ray Data batch inference with an actor pool, on a local 2-CPU Ray: a pickled CompiledModel
travels to the actors, which match the single-process result over 10,000 rows and compile
nothing (the shared disk cache holds the program). The recipe is docs/distributed.md's."""

import os

import numpy as np
import pytest
from warm_model import ROWS, warm_model

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'onnxjit[ray]')")
pytest.importorskip("ray.data", reason="ray.data is not installed (pip install 'ray[data]')")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_data_map_batches_with_an_actor_pool(local_ray):
    fn, x, ref = warm_model()

    class Predictor:  # defined here: cloudpickle ships it by value to the actors
        def __init__(self, model):
            self.model = model  # unpickled once per actor, without compiling

        def __call__(self, batch):
            y, = self.model(batch["data"])
            misses = self.model.cache_info()["misses"]
            return {"y": y, "misses": np.full(len(y), misses)}

    ctx = ray.data.DataContext.get_current()
    ordered, ctx.execution_options.preserve_order = ctx.execution_options.preserve_order, True
    try:
        ds = ray.data.from_numpy(np.array_split(x, 4))  # 4 blocks: both actors get work
        out = ds.map_batches(Predictor, fn_constructor_args=(fn,), batch_size=1000,
                             compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1)
        batches = list(out.iter_batches(batch_size=None, batch_format="numpy"))
    finally:
        ctx.execution_options.preserve_order = ordered
    y = np.concatenate([b["y"] for b in batches])
    assert y.shape == (ROWS, ref.shape[1])
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)
    assert max(int(b["misses"].max()) for b in batches) == 0, "an actor compiled"


@pytest.mark.skipif(os.environ.get("ONNXJIT_TEST_SERVE") != "1",
                    reason="opt-in (ONNXJIT_TEST_SERVE=1): starting Ray Serve's controller "
                           "takes ~10 s on 2 cores, beyond this suite's time budget")
def test_ray_serve_deployment(local_ray):
    serve = pytest.importorskip("ray.serve", reason="ray[serve] is not installed")
    fn, x, ref = warm_model()

    @serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 1})
    class Model:
        def __init__(self, model):
            self.model = model

        def predict(self, rows):
            return self.model(rows)[0], self.model.cache_info()["misses"]

    handle = serve.run(Model.bind(fn), name="onnxjit-test", route_prefix=None)
    try:
        y, misses = handle.predict.remote(x[:500]).result()
    finally:
        serve.shutdown()
    np.testing.assert_allclose(y, ref[:500], rtol=1e-6, atol=1e-6)
    assert misses == 0
