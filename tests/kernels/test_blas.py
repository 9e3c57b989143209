"""kernels.blas: BLAS single-threaded, large products split over the engine's pool, with the same results."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info

import engine
from kernels import blas, conv


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
def test_split_product_equals_numpy(limited, shape):
    m, k, n = shape
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(blas.matmul(np, a, b), a @ b, rtol=1e-5, atol=1e-4)
    out = np.empty((m, n), np.float32)
    assert blas.matmul(np, a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-4)


def test_large_products_run_on_the_pool_and_small_ones_inline(limited, monkeypatch):
    threads: list[str] = []
    real = np.matmul

    def spy(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(np, "matmul", spy)
    a, b = np.ones((4096, 256), np.float32), np.ones((256, 256), np.float32)
    blas.matmul(np, a, b)
    if conv.pool_size() >= 2:
        # One part per core: the caller takes the first, the pool the others.
        caller = threading.current_thread().name
        assert len(threads) == conv.pool_size() and threads.count(caller) == 1
        assert all(t.startswith(conv.POOL_THREAD_PREFIX) for t in threads if t != caller)
    threads.clear()
    blas.matmul(np, a[:1], b)
    assert threads == [threading.current_thread().name]


def test_work_submitted_from_a_pool_thread_runs_inline(limited):
    """A kernel already on the pool that splits a product must not wait on the pool it occupies."""
    seen: list[str] = []
    a, b = np.ones((4096, 256), np.float32), np.ones((256, 256), np.float32)

    def task(_):
        seen.append(threading.current_thread().name)
        np.testing.assert_array_equal(blas.matmul(np, a, b), a @ b)

    conv.run_tasks(task, [0, 1, 2, 3])
    assert len(seen) == 4


def test_transposed_operands_through_the_matmul_kernel(limited):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((256, 3000)).astype(np.float32), rng.standard_normal((64, 256)).astype(np.float32)
    from kernels.matmul import mat_mul

    np.testing.assert_allclose(mat_mul(np, a, b, transpose_a=True, transpose_b=True)[0], a.T @ b.T, rtol=1e-5, atol=1e-3)
