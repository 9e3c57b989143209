"""BLAS threading: BLAS single-threaded, except for one large product at a time from outside the kernel pool.

OpenBLAS (numpy's BLAS) starts its own threads for large products and keeps them spinning for a while
after each one. Left to itself in a model server it oversubscribes the cores: the engine's kernel pool runs
compiled loops and convolution chunks (each chunk's GEMM among them) on every core, concurrent requests
each ask BLAS for every core, and spinning BLAS threads take the cores from all of them (measured on 2
cores with other work running: MobileNetV2 at batch 1 took 742 ms with OpenBLAS's threads and 66 ms
without). So `limit_blas_threads()` makes BLAS single-threaded, process-wide (through threadpoolctl, which
reaches whichever BLAS numpy or others loaded), and `matmul` gives BLAS every core back for one product
at a time: a product large enough for BLAS to split, called from a request's thread (not from a pool
thread, whose siblings are busy), while no other such product runs. Products inside pool tasks and the
ones that find another product threaded run single-threaded.

Measured in one process on 2 cores, nothing else running (median ms): BERT-mini at batch 8, 71.5 with
BLAS threads for every product, 102 single-threaded, 75 with products split into row blocks on the pool
(the pool's hand-off costs tens of microseconds, BLAS's spinning threads one); the MLP at batch 32, 0.56,
0.65 and 0.66. One threaded product at a time keeps the first figure without the oversubscription.

A Session applies the limit when it is created unless `SessionOptions(single_threaded_blas=False)` (the
server's `TENSORGATE_SINGLE_THREADED_BLAS=false`) leaves BLAS's threading as it is.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy

from kernels import pool

__all__ = ["THREADED_MIN_FLOPS", "blas_threads_limited", "limit_blas_threads", "matmul"]

# Products of fewer multiply-adds run single-threaded: switching BLAS's thread count costs ~4 us, which a
# batch-1 dense layer (784 x 512: 0.4M, ~30 us) does not win back (the MLP at batch 1: 0.125 ms switching
# at 0.25M, 0.109 at 1M, 0.108 with BLAS threaded throughout).
THREADED_MIN_FLOPS = 1 << 20

_LOCK = threading.Lock()
_LIMITED: bool | None = None
_LIMITER: Any = None  # threadpoolctl's limiter, kept alive so the limit is never restored behind our back
_CONTROLLERS: list[Any] = []  # the BLAS libraries' threadpoolctl controllers
_THREADED = threading.Lock()  # held while one product runs with BLAS's threads


def limit_blas_threads() -> bool:
    """Make every BLAS library in the process single-threaded (once); False where threadpoolctl or a BLAS it
    knows is missing, in which case `matmul` leaves the threading to BLAS."""
    global _LIMITED, _LIMITER
    with _LOCK:
        if _LIMITED is None:
            try:
                from threadpoolctl import ThreadpoolController

                blas = ThreadpoolController().select(user_api="blas")
                _LIMITER = blas.limit(limits=1) if blas.lib_controllers else None
                _CONTROLLERS.extend(blas.lib_controllers)
                _LIMITED = _LIMITER is not None
            except Exception:  # noqa: BLE001  (a BLAS threadpoolctl cannot drive: leave it alone)
                _LIMITED = False
        return _LIMITED


def blas_threads_limited() -> bool:
    return bool(_LIMITED)


def _set_threads(count: int) -> None:
    for controller in _CONTROLLERS:
        controller.set_num_threads(count)


def matmul(xp: Any, a: Any, b: Any, out: Any | None = None) -> Any:
    """a [..., m, k] @ b [..., k, n] as xp.matmul (into `out` if given): with BLAS's threads when it is large,
    called outside the kernel pool and no other product has them (see the module docstring);
    single-threaded otherwise."""
    if not _LIMITED or xp is not numpy or a.size * b.shape[-1] < THREADED_MIN_FLOPS:
        return xp.matmul(a, b, out=out)
    if pool.pool_size() < 2 or pool.in_pool_task() or not _THREADED.acquire(blocking=False):
        return xp.matmul(a, b, out=out)
    try:
        _set_threads(pool.pool_size())
        return numpy.matmul(a, b, out=out)
    finally:
        _set_threads(1)
        _THREADED.release()
