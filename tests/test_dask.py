"""Dask on a local 2-worker cluster (`distributed.LocalCluster`): `map_blocks` over a dask
array and `map_partitions` over a dask dataframe with a pickled CompiledModel match the
single-process result over 10,000 rows, and the workers compile nothing (the shared disk
cache holds the program). The recipes are docs/distributed.md's."""

import numpy as np
import pytest
from warm_model import ROWS, warm_model

distributed = pytest.importorskip(
    "distributed", reason="dask.distributed is not installed (pip install 'onnxjit[dask]')")
da = pytest.importorskip("dask.array", reason="dask.array is not installed")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster:
        with distributed.Client(cluster) as c:
            yield c


def test_dask_array_and_dataframe(client):
    fn, x, ref = warm_model()
    X = da.from_array(x, chunks=(1000, x.shape[1]))
    y = X.map_blocks(lambda b: fn(b)[0], dtype=np.float32,
                     chunks=(1000, ref.shape[1])).compute()
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)
    try:
        import dask.dataframe as dd
        import pandas as pd
    except ImportError:  # pandas is optional for dask: the array recipe is checked above
        pass
    else:
        df = pd.DataFrame(x, columns=[f"f{i}" for i in range(x.shape[1])])
        cols = [f"y{i}" for i in range(ref.shape[1])]
        meta = pd.DataFrame({c: pd.Series(dtype=np.float32) for c in cols})

        def predict(part):
            return pd.DataFrame(fn(part.to_numpy(np.float32))[0], columns=cols,
                                index=part.index)

        out = dd.from_pandas(df, npartitions=4).map_partitions(predict, meta=meta).compute()
        assert out.shape == (ROWS, len(cols))
        np.testing.assert_allclose(out.to_numpy(), ref, rtol=1e-6, atol=1e-6)
    infos = client.run(lambda: fn.cache_info())  # in each worker: the model it unpickled
    assert len(infos) == 2 and all(i["misses"] == 0 for i in infos.values()), infos
    assert sum(i["disk_hits"] for i in infos.values()) >= 1
