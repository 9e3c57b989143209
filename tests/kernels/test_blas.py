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


@pytest.fixture
def tasks(monkeypatch):
    """The items each run_tasks call got, and BLAS's thread counts seen inside np.matmul."""
    seen = {"items": [], "threads": []}
    real_run, real_matmul = pool.run_tasks, np.matmul

    def run(work, items):
        seen["items"].append(list(items))
        return real_run(work, items)

    def spy(*args, **kwargs):
        seen["threads"].append(_blas_threads())
        return real_matmul(*args, **kwargs)

    monkeypatch.setattr(pool, "run_tasks", run)
    monkeypatch.setattr(np, "matmul", spy)
    monkeypatch.setattr(pool, "pool_size", lambda: 2)
    return seen


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "blocks"),
    [((512, 256), (256, 256), [(0, 256), (256, 512)]),  # rows of a
     ((1, 4096), (4096, 2500), [(0, 1250), (1250, 2500)]),  # a batch-1 dense layer: columns of b
     ((16, 300, 64), (16, 64, 128), [(0, 8), (8, 16)])],  # Winograd's 16 positions
)
def test_a_large_product_is_split_over_the_pool_with_blas_single_threaded(limited, tasks, a_shape, b_shape, blocks):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    expected = np.einsum("...mk,...kn->...mn", a, b)
    np.testing.assert_allclose(blas.matmul(np, a, b), expected, rtol=1e-4, atol=1e-3)
    assert tasks["items"] == [blocks]
    assert all(n == 1 for threads in tasks["threads"] for n in threads)


def test_small_products_and_products_in_pool_tasks_run_in_one_piece(limited, tasks):
    """A kernel already on the pool has siblings on the cores; a small product is not worth a hand-off."""
    a, b = np.ones((512, 256), np.float32), np.ones((256, 256), np.float32)
    blas.matmul(np, a[:1, :16], b[:16])
    assert tasks["items"] == []
    tasks["threads"].clear()
    pool.run_tasks(lambda _: blas.matmul(np, a, b), [0, 1, 2, 3])
    assert tasks["items"] == [[0, 1, 2, 3]]  # only the outer call: no nested split
    assert len(tasks["threads"]) == 4


def test_transposed_operands_through_the_matmul_kernel(limited):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((256, 3000)).astype(np.float32), rng.standard_normal((64, 256)).astype(np.float32)
    from kernels.math.matmul import mat_mul

    np.testing.assert_allclose(mat_mul(np, a, b, transpose_a=True, transpose_b=True)[0], a.T @ b.T, rtol=1e-5, atol=1e-3)
