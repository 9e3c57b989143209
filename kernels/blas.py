"""BLAS threading: BLAS single-threaded; a large product split into blocks on the engine's kernel pool.

OpenBLAS (numpy's BLAS) starts its own threads for large products and keeps them spinning for a while
after each one. Left to itself in a model server it oversubscribes the cores: the engine's kernel pool runs
compiled loops and convolution chunks (each chunk's GEMM among them) on every core, concurrent requests
each ask BLAS for every core, and spinning BLAS threads take the cores from all of them (measured on 2
cores with other work running: MobileNetV2 at batch 1 took 742 ms with OpenBLAS's threads and 66 ms
without). So `limit_blas_threads()` makes BLAS single-threaded, process-wide (through threadpoolctl, which
reaches whichever BLAS numpy or others loaded), and `matmul` splits a product large enough to share into
one block per pool thread (rows of the left operand, else columns of the right one, else the leading batch
axis), each a single-threaded BLAS call: a product called from a request's thread, not from a pool task,
whose siblings have the cores already.

Earlier, one such product at a time got BLAS's own threads back. That was a little faster on an idle
machine (ResNet50 at batch 1: 71 ms against 87 with the GEMMs split over the pool) and disastrous on a busy
one, which a server's machine is (other processes, a container's CPU quota): in one run on 2 cores with
other processes taking about three cores' worth, six consecutive ResNet50 batch-1 runs took 0.1-4.9 s with
BLAS's threads and 0.11-0.28 s with single-threaded BLAS, spinning BLAS threads waiting on each other
for cores the scheduler had given away. Pool threads block instead of spinning.

A Session applies the limit when it is created unless `SessionOptions(single_threaded_blas=False)` (the
server's `TENSORGATE_SINGLE_THREADED_BLAS=false`) leaves BLAS's threading as it is; `matmul` then leaves
each product to BLAS.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy

from kernels import pool

__all__ = ["SPLIT_MIN_FLOPS", "blas_threads_limited", "limit_blas_threads", "matmul"]

# Products of fewer multiply-adds run in one piece: a hand-off to the pool costs tens of microseconds, and
# on a busy machine waiting for the second thread costs more (a 64x256x1024 product, 16M: 0.51 ms split, 0.37
# whole; T5 at batch 1: 25 ms with a 1M threshold, 17 with none), which small products do not win back.
SPLIT_MIN_FLOPS = 1 << 23
# Row or column blocks narrower than this are not worth a task (BLAS's kernels work in panels).
_MIN_BLOCK = 16
_BLAS_DTYPES = (numpy.dtype(numpy.float32), numpy.dtype(numpy.float64))

_LOCK = threading.Lock()
_LIMITED: bool | None = None
_LIMITER: Any = None  # threadpoolctl's limiter, kept alive so the limit is never restored behind our back


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
                _LIMITED = _LIMITER is not None
            except Exception:  # noqa: BLE001  (a BLAS threadpoolctl cannot drive: leave it alone)
                _LIMITED = False
        return _LIMITED


def blas_threads_limited() -> bool:
    return bool(_LIMITED)


def _blocks(size: int, parts: int) -> list[tuple[int, int]]:
    step = -(-size // parts)
    return [(i, min(i + step, size)) for i in range(0, size, step)]


def matmul(xp: Any, a: Any, b: Any, out: Any | None = None) -> Any:
    """a [..., m, k] @ b [..., k, n] as xp.matmul (into `out` if given), split over the kernel pool when it
    is large, BLAS is single-threaded and the caller is not a pool task itself (see the module docstring)."""
    if (not _LIMITED or xp is not numpy or a.size * b.shape[-1] < SPLIT_MIN_FLOPS or a.ndim < 2 or b.ndim < 2
            or a.dtype != b.dtype or a.dtype not in _BLAS_DTYPES):
        return xp.matmul(a, b, out=out)
    workers = pool.pool_size()
    if workers < 2 or pool.in_pool_task():
        return xp.matmul(a, b, out=out)
    m, n = a.shape[-2], b.shape[-1]
    if a.ndim == b.ndim == 2:
        if m >= workers * _MIN_BLOCK:
            axis = "rows"
        elif n >= workers * _MIN_BLOCK:
            axis = "columns"
        else:
            return xp.matmul(a, b, out=out)
    elif a.ndim == b.ndim and a.shape[:-2] == b.shape[:-2] and a.shape[0] >= workers:
        axis = "batch"
    else:
        return xp.matmul(a, b, out=out)
    result = out if out is not None else numpy.empty((*a.shape[:-1], n), a.dtype)
    if axis == "rows":
        blocks = _blocks(m, workers)
        work = lambda r: numpy.matmul(a[r[0]:r[1]], b, out=result[r[0]:r[1]])
    elif axis == "columns":
        blocks = _blocks(n, workers)
        work = lambda c: numpy.matmul(a, b[:, c[0]:c[1]], out=result[:, c[0]:c[1]])
    else:
        blocks = _blocks(a.shape[0], workers)
        work = lambda i: numpy.matmul(a[i[0]:i[1]], b[i[0]:i[1]], out=result[i[0]:i[1]])
    pool.run_tasks(work, blocks)
    return result
