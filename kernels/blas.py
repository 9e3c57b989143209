"""BLAS threading: matrix products split over the engine's thread pool, BLAS itself single-threaded.

OpenBLAS (numpy's BLAS) starts its own threads for large products and keeps them spinning for a while
after each one. In a model server they then compete with everything else: with the engine's thread pool
running compiled kernels between two GEMMs, with other requests' GEMMs (each asking for every core), and
with the event loop. `limit_blas_threads()` makes BLAS single-threaded, process-wide (through
threadpoolctl, which knows how to reach each BLAS library numpy or others loaded), and `matmul` gives large
products their parallelism back by splitting their rows over the engine's pool, where they queue with the
rest of the engine's work instead of oversubscribing the cores. Small products (a batch-1 dense layer) run
inline, on the calling thread, with no hand-off at all.

A Session applies the limit when it is created unless `SessionOptions(single_threaded_blas=False)` (the
server's `TENSORGATE_SINGLE_THREADED_BLAS=false`) leaves BLAS as it is. Measured on 2 cores with other
work running (load average 4): MobileNetV2 at batch 1 took 742 ms with OpenBLAS's own threads and 66 ms
with them off and its GEMMs split over the pool; at batch 32, 2871 ms against 737 ms.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy

from kernels import conv

__all__ = ["PARALLEL_MIN_FLOPS", "blas_threads_limited", "limit_blas_threads", "matmul"]

# Products of at least this many multiply-adds are split over the pool (the caller takes one part). The
# hand-off costs ~20-40 us; a [128, 256] x [256, 128] product (~0.15 ms on one core) repays it.
PARALLEL_MIN_FLOPS = 4 << 20

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

                controller = ThreadpoolController()
                blas = controller.select(user_api="blas")
                _LIMITER = blas.limit(limits=1) if blas.lib_controllers else None
                _LIMITED = _LIMITER is not None
            except Exception:  # noqa: BLE001  (a BLAS threadpoolctl cannot drive: leave it alone)
                _LIMITED = False
        return _LIMITED


def blas_threads_limited() -> bool:
    return bool(_LIMITED)


def _in_pool_worker() -> bool:
    return threading.current_thread().name.startswith(conv.POOL_THREAD_PREFIX)


def matmul(xp: Any, a: Any, b: Any, out: Any | None = None) -> Any:
    """a [m, k] @ b [k, n] (into `out` if given). With BLAS single-threaded and a large enough product on
    numpy, row blocks of `a` run on the engine's pool, one BLAS call each; otherwise one call here."""
    m, k = a.shape
    n = b.shape[1]
    if not _LIMITED or m * n * k < PARALLEL_MIN_FLOPS or xp is not numpy:  # the common, cheap exits first
        return xp.matmul(a, b, out=out)
    workers = conv.pool_size()
    if workers < 2 or m < 2 * workers or _in_pool_worker():
        return xp.matmul(a, b, out=out)
    if out is None:
        out = numpy.empty((m, n), dtype=numpy.result_type(a.dtype, b.dtype))
    step = -(-m // workers)
    bounds = [(r, min(r + step, m)) for r in range(0, m, step)]
    conv.run_tasks(lambda rows: numpy.matmul(a[rows[0]:rows[1]], b, out=out[rows[0]:rows[1]]), bounds)
    return out
