"""Admission to the inference threads: a worker pool whose queue is bounded, so that a server past
its capacity sheds load at once (503 with Retry-After) instead of queueing requests into timeouts.

A request waits in the queue from its submission until a thread picks it up; one cancelled while it
waits (its client left, its deadline passed) gives its place back at once and never runs. A request is
admitted once: its later steps (a large body is decoded by one task, then computed by another) queue
without being refused, so that work begun for it is never thrown away by the bound. The pool
also knows how much work is running, so a server shutting down can tell whether threads are still
busy when its grace period ends.

    >>> pool = AdmissionPool(threads=4, max_queued=256)
    >>> future = pool.submit(servable.run, feeds, fetches)   # Overloaded when 256 already wait
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from service.errors import Unavailable

__all__ = ["AdmissionPool", "Overloaded"]

# Seconds a shed client is told to wait: long enough for a queue of requests of tens of milliseconds to
# drain, and the smallest value Retry-After can say.
RETRY_AFTER_S = 1

# Set in a request's own context (its asyncio task) once it has been admitted.
_admitted: contextvars.ContextVar[bool] = contextvars.ContextVar("tensorgate_admitted", default=False)


class Overloaded(Unavailable):
    """Every inference thread is busy and `max_queued_requests` requests already wait for one."""

    def __init__(self, message: str, retry_after_s: int = RETRY_AFTER_S):
        super().__init__(message, headers={"Retry-After": str(retry_after_s)})
        self.retry_after_s = retry_after_s


class AdmissionPool:
    """A ThreadPoolExecutor that admits at most `max_queued` tasks waiting for a thread."""

    def __init__(self, threads: int, max_queued: int, *, thread_name_prefix: str = "tensorgate-infer"):
        self.threads = threads
        self.max_queued = max_queued
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=thread_name_prefix)
        self._lock = threading.Lock()
        self._queued = 0
        self._running = 0

    @property
    def queued(self) -> int:
        """Tasks waiting for a thread."""
        return self._queued

    @property
    def running(self) -> int:
        """Tasks a thread is running."""
        return self._running

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Queue `fn(*args)` for a thread; Overloaded (503, Retry-After) when the queue is full and the
        calling request (its context) has not been admitted before."""
        with self._lock:
            if self._queued >= self.max_queued and not _admitted.get():
                raise Overloaded(
                    f"the server is overloaded: {self.threads} inference threads are busy and {self._queued} requests "
                    f"wait for one (max_queued_requests={self.max_queued}); retry after {RETRY_AFTER_S} s")
            self._queued += 1
        _admitted.set(True)

        # A Future either starts running or is cancelled while it waits (concurrent.futures decides under
        # its own lock), so exactly one of `run` and the cancelled callback gives the queue place back.
        def run() -> Any:
            with self._lock:
                self._queued -= 1
                self._running += 1
            try:
                return fn(*args)
            finally:
                with self._lock:
                    self._running -= 1

        try:
            future = self._executor.submit(run)
        except BaseException:
            self._give_back()
            raise
        future.add_done_callback(lambda f: f.cancelled() and self._give_back())
        return future

    def _give_back(self) -> None:
        """A queue place back: the task was cancelled while it waited, or never submitted."""
        with self._lock:
            self._queued -= 1

    def shutdown(self) -> None:
        """Run no more queued tasks; running ones finish in their threads."""
        self._executor.shutdown(wait=False, cancel_futures=True)
