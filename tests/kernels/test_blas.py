"""kernels.blas: BLAS single-threaded, large products split over the engine's pool, with the same results."""

from __future__ import annotations


import numpy as np
import pytest
from threadpoolctl import threadpool_info

import engine
from kernels import blas, pool


@pytest.fixture
def limited():
    if not blas.limit_blas_threads():
        pytest.skip("no BLAS that threadpoolctl can drive")
    return True


def test_a_session_makes_blas_single_threaded():
    engine.Session(engine.builder.GraphBuilder().as_graph_def())
    if blas.blas_threads_limited():
        assert all(lib["num_threads"] == 1 for lib in threadpool_info() if lib["user_api"] == "blas")


@pytest.mark.parametrize("shape", [(1, 784, 512), (2048, 256, 256), (37, 300, 999), (4096, 64, 8)])
def test_products_equal_numpy(limited, shape):
    m, k, n = shape
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(blas.matmul(np, a, b), a @ b, rtol=1e-5, atol=1e-4)
    out = np.empty((m, n), np.float32)
    assert blas.matmul(np, a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-4)


def _blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_a_large_product_gets_blas_threads_and_gives_them_back(limited, monkeypatch):
    seen: list[list[int]] = []
    real = np.matmul

    def spy(*args, **kwargs):
        seen.append(_blas_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(np, "matmul", spy)
    a, b = np.ones((512, 256), np.float32), np.ones((256, 256), np.float32)
    blas.matmul(np, a, b)
    assert seen[-1] == [pool.pool_size()] * len(seen[-1])
    assert all(n == 1 for n in _blas_threads())
    blas.matmul(np, a[:1], b)  # small: single-threaded
    assert all(n == 1 for n in seen[-1])


def test_products_in_pool_threads_or_beside_a_threaded_one_stay_single_threaded(limited, monkeypatch):
    """A kernel already on the pool must not start BLAS threads beside its siblings; nor may a second
    request's product while another one has them."""
    seen: list[list[int]] = []
    real = np.matmul
    monkeypatch.setattr(np, "matmul", lambda *a, **k: (seen.append(_blas_threads()), real(*a, **k))[1])
    a, b = np.ones((512, 256), np.float32), np.ones((256, 256), np.float32)
    pool.run_tasks(lambda _: blas.matmul(np, a, b), [0, 1, 2, 3])
    assert len(seen) == 4
    assert all(n == 1 for s in seen for n in s)  # the caller's own share counts as a pool task
    seen.clear()
    with blas._THREADED:  # another product holds BLAS's threads
        blas.matmul(np, a, b)
    assert all(n == 1 for n in seen[-1])


def test_transposed_operands_through_the_matmul_kernel(limited):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((256, 3000)).astype(np.float32), rng.standard_normal((64, 256)).astype(np.float32)
    from kernels.math.matmul import mat_mul

    np.testing.assert_allclose(mat_mul(np, a, b, transpose_a=True, transpose_b=True)[0], a.T @ b.T, rtol=1e-5, atol=1e-3)
