"""The engine's kernel thread pool, and how a kernel's work is cut into chunks for it.

Large CPU kernels split their output into `Chunk`s of whole images (or, for large images, row blocks of
one image) so that each chunk's working set stays in cache, and run them with `run_chunks` / `run_tasks`
on one process-wide pool, a thread per available core: numpy's ufunc loops, BLAS and the compiled
kernels release the GIL, so chunks run in parallel. The caller is one of as many runners as there are
cores, each drawing the next chunk when it finishes one, and work submitted from a pool thread runs inline (waiting on the pool it occupies could deadlock);
`in_pool_task` tells BLAS threading (kernels.blas) when the cores are taken already.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy

__all__ = ["POOL_THREAD_PREFIX", "Chunk", "chunks", "configure", "in_pool_task", "pool_size", "run_chunks", "run_tasks"]

@dataclass(frozen=True)
class Chunk:
    """Images [b0, b1) and output rows [r0, r1): a unit of work whose output block is contiguous."""

    b0: int
    b1: int
    r0: int
    r1: int

    @property
    def rows(self) -> tuple[int, int]:
        return self.r0, self.r1


def chunks(batch: int, out_h: int, row_cost: int, budget: int) -> list[Chunk]:
    """Split [batch, out_h] output rows into chunks of about `budget` cost (`row_cost` per output row):
    several whole images per chunk, or row blocks of one image when an image alone is over budget."""
    per_image = max(out_h * row_cost, 1)
    if per_image <= budget or out_h <= 1:
        step = max(budget // per_image, 1)
        return [Chunk(b, min(b + step, batch), 0, out_h) for b in range(0, batch, step)]
    rows = max(budget // max(row_cost, 1), 1)
    return [Chunk(b, b + 1, r, min(r + rows, out_h)) for b in range(batch) for r in range(0, out_h, rows)]


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
# The pool's threads are named with this prefix: work submitted from one of them runs inline instead of
# waiting on the pool it occupies (which could deadlock).
POOL_THREAD_PREFIX = "tensorgate-kernel"
_CALLER = threading.local()


_THREADS: int | None = None  # set by configure(); None: one thread per available core


@functools.cache
def _cpu_count() -> int:
    # Read once: the affinity (a container's cpuset) does not change under a running server, and the
    # syscall would cost a microsecond on every kernel call that asks.
    if _THREADS is not None:
        return _THREADS
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def configure(threads: int | None) -> None:
    """Size the kernel pool: `threads` threads (1 runs every kernel on its caller's thread), or None for
    one per available core. TensorFlow's intra-op parallelism; the server calls it at start-up, before
    the pool exists (a pool already started keeps its threads, and the new size applies to splitting)."""
    global _THREADS
    if threads is not None and threads < 1:
        raise ValueError(f"the kernel pool needs at least one thread, got {threads}")
    _THREADS = threads
    _cpu_count.cache_clear()


def pool_size() -> int:
    """How many threads the engine's kernel pool has (one per available core)."""
    return _cpu_count()


def run_tasks(work: Callable[[Any], None], items: Sequence[Any]) -> None:
    """work(item) for every item, on min(len(items), pool threads) runners, the caller one of them, each
    drawing the next item when it finishes one (in order on the caller when that is one runner, or when the
    caller is a pool task itself). An item's exception stops the runners and is raised here.

    Runners rather than an item per pool task: handing every item to a pool as large as the cores ran one
    thread more than there are cores while the caller took its share (three threads on two cores, the last
    item finishing alone), and paid a hand-off per item; runners hand off once each and draw items as
    small as the kernel's cache blocking wants."""
    global _POOL
    runners = min(len(items), _cpu_count())
    if runners < 2 or in_pool_task():
        for item in items:
            work(item)
        return
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = ThreadPoolExecutor(max_workers=_cpu_count(), thread_name_prefix=POOL_THREAD_PREFIX)
    # next() on itertools.count is one C call: atomic under the GIL, so no two runners draw the same item.
    drawn = itertools.count()
    failed: list[BaseException] = []

    def runner() -> None:
        while not failed:
            i = next(drawn)
            if i >= len(items):
                return
            try:
                work(items[i])
            except BaseException as e:  # noqa: BLE001 - any failure stops the other runners, raised below
                failed.append(e)
                return

    futures = [_POOL.submit(runner) for _ in range(runners - 1)]
    # The caller is a runner rather than idling while it waits: the calling thread's core is not left to the
    # scheduler. While it runs, it counts as a pool thread.
    _CALLER.in_task = True
    try:
        runner()
    finally:
        _CALLER.in_task = False
        for future in futures:
            future.result()
    if failed:
        raise failed[0]


def in_pool_task() -> bool:
    """Whether this thread is running one of run_tasks' items (a pool thread, or the caller taking its
    share): work it would hand to the pool, or to BLAS's threads, has siblings using the cores already."""
    return threading.current_thread().name.startswith(POOL_THREAD_PREFIX) or getattr(_CALLER, "in_task", False)


def run_chunks(xp: Any, work: Callable[[Chunk], None], parts: list[Chunk]) -> None:
    """Run `work` on every chunk: on the thread pool for numpy (ufuncs, BLAS and compiled kernels release
    the GIL), in order otherwise (a GPU runs each chunk's launches asynchronously already)."""
    if xp is not numpy:
        for part in parts:
            work(part)
        return
    run_tasks(work, parts)
