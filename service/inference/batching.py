"""Dynamic batching: requests for the same model version and the same feed/fetch signature wait
briefly for company, run as one batch, and each gets back exactly its own rows.

A `BatchScheduler` belongs to one loaded version. It keeps one queue per batch key: the signature
(feed and fetch tensors) plus everything that must agree for rows to be stacked (each feed's dtype
and non-batch dimensions). `num_batch_threads` threads each take the most urgent ready batch: the
queue whose head has waited `batch_timeout_micros`, or holds `max_batch_size` rows. A batch is
padded up to the next `allowed_batch_sizes` entry (copies of its first row) and the padding sliced
off the results. Requests larger than `max_batch_size` are split and their results reassembled.
Higher `priority` (a smaller number, as in Triton; 0 is the default, taken as lowest) goes first;
requests past their deadline or whose client went away are dropped without being computed.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.errors import DeadlineExceeded, ServiceError, Unavailable

__all__ = ["BatchingOptions", "QueueFull", "BatchScheduler", "BatchStats", "resolve_batching"]

log = logging.getLogger("tensorgate.batching")


@dataclass(frozen=True)
class BatchingOptions:
    """A model's batching settings (config.yaml `batching:`, over the server's defaults)."""

    max_batch_size: int = 32
    batch_timeout_micros: int = 1000
    allowed_batch_sizes: tuple[int, ...] = ()
    max_enqueued_batches: int = 64
    num_batch_threads: int = 1

    def __post_init__(self) -> None:
        if self.max_batch_size < 1 or self.batch_timeout_micros < 0 or self.max_enqueued_batches < 1 or self.num_batch_threads < 1:
            raise ValueError("max_batch_size, max_enqueued_batches and num_batch_threads must be >= 1, batch_timeout_micros >= 0")
        sizes = self.allowed_batch_sizes
        if sizes:
            if list(sizes) != sorted(set(sizes)) or sizes[0] < 1:
                raise ValueError(f"allowed_batch_sizes must be increasing positive sizes, got {list(sizes)}")
            if sizes[-1] != self.max_batch_size:
                raise ValueError(f"the last of allowed_batch_sizes ({sizes[-1]}) must equal max_batch_size ({self.max_batch_size})")

    def padded_size(self, rows: int) -> int:
        return next((s for s in self.allowed_batch_sizes if s >= rows), rows)


def resolve_batching(config: Mapping | None, defaults: BatchingOptions, enabled_by_default: bool) -> BatchingOptions | None:
    """A model's batching options from its config.yaml `batching:` mapping over the server defaults;
    None when batching is off. An absent key takes the server's default (on or off); a mapping turns
    it on unless it says `enabled: false`. Raises ValueError naming a bad key or value."""
    if config is None:
        return defaults if enabled_by_default else None
    if not isinstance(config, Mapping):
        raise ValueError("batching must be a mapping of settings")
    known = {f for f in BatchingOptions.__dataclass_fields__} | {"enabled"}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ValueError(f"unknown batching setting(s) {unknown}; known: {sorted(known)}")
    if config.get("enabled", True) is False:
        return None
    values = {k: v for k, v in config.items() if k != "enabled"}
    if "allowed_batch_sizes" in values:
        values["allowed_batch_sizes"] = tuple(values["allowed_batch_sizes"] or ())
    for k, v in values.items():
        if k != "allowed_batch_sizes" and (isinstance(v, bool) or not isinstance(v, int)):
            raise ValueError(f"batching {k} must be an integer, got {v!r}")
    merged = {**defaults.__dict__, **values}
    if "max_batch_size" in values and "allowed_batch_sizes" not in values:
        merged["allowed_batch_sizes"] = ()  # the server's sizes were for its own max_batch_size
    return BatchingOptions(**merged)


class QueueFull(ServiceError):
    """The model's batch queue holds `max_enqueued_batches` batches already; retry shortly."""

    status = 429

    def __init__(self, message: str, retry_after_s: int = 1, *, status: int = 429):
        super().__init__(message, headers={"Retry-After": str(retry_after_s)})
        self.status = status  # TensorFlow Serving's clients expect 503 (UNAVAILABLE) instead


@contextlib.contextmanager
def full_queue_unavailable() -> Iterator[None]:
    """Around a TensorFlow Serving request: its clients expect a full batch queue as UNAVAILABLE (503), not 429."""
    try:
        yield
    except QueueFull as e:
        raise QueueFull(e.message, status=503) from None


@dataclass(frozen=True)
class BatchStats:
    """What one executed batch reports (for metrics): rows of real requests, padded size, seconds."""

    rows: int
    padded: int
    requests: int
    compute_s: float


@dataclass(eq=False)
class _Task:
    key: tuple
    feeds: dict[str, np.ndarray]
    rows: int
    priority: int
    deadline: float | None
    future: Future
    enqueued: float = field(default_factory=time.monotonic)
    started: float | None = None  # when its batch began computing (queue time ends)
    trace: Any = None  # the request's RequestTrace (service.observability.tracing) when it is traced


def _batch_key(feeds: Mapping[str, np.ndarray], fetches: Sequence[str]) -> tuple:
    return (tuple((name, a.dtype.str, a.shape[1:]) for name, a in sorted(feeds.items())), tuple(fetches))


class BatchScheduler:
    """Batches the requests of one model version.

        >>> scheduler = BatchScheduler(run=servable.run, options=BatchingOptions(max_batch_size=32))
        >>> outputs = scheduler.submit({"x:0": x}, ["y:0"]).result()
    """

    def __init__(
        self,
        run: Callable[[Mapping[str, np.ndarray], Sequence[str]], list[np.ndarray]],
        options: BatchingOptions,
        *,
        name: str = "",
        on_batch: Callable[[BatchStats], None] | None = None,
    ):
        self._run = run
        self.options = options
        self._on_batch = on_batch
        self._cv = threading.Condition()
        self._queues: dict[tuple, list[tuple[int, int, _Task]]] = {}  # key -> heap of (priority, seq, task)
        self._fetches: dict[tuple, tuple[str, ...]] = {}
        self._seq = itertools.count()
        self._queued_rows = 0
        self._closed = False
        self._unbatchable: set[tuple] = set()  # signatures whose outputs are not batch-major
        self._threads = [
            threading.Thread(target=self._loop, name=f"tensorgate-batch-{name}-{i}", daemon=True) for i in range(options.num_batch_threads)
        ]
        for t in self._threads:
            t.start()

    # --- submitting --------------------------------------------------------------------------------

    def submit(self, feeds: Mapping[str, np.ndarray], fetches: Sequence[str], *, priority: int = 0,
               deadline: float | None = None, trace: Any = None) -> Future:
        """Queue a request; the future's result is (outputs in fetch order, queue seconds, compute
        seconds), or its error.

        All feeds must share their first dimension (the batch). Requests over `max_batch_size` rows
        are split into several tasks and reassembled. Cancelling the future drops the request if it
        has not started computing. A traced request (`trace`) learns the span of the batch it ran in.
        """
        rows = {a.shape[0] if a.ndim else None for a in feeds.values()}
        if len(rows) != 1 or None in rows:
            # Nothing to batch along: run alone, in a batch of its own.
            return self._enqueue_all([dict(feeds)], fetches, priority, deadline, rows=1, batchable=False, trace=trace)
        total = rows.pop()
        step = self.options.max_batch_size
        chunks = [{k: v[i : i + step] for k, v in feeds.items()} for i in range(0, max(total, 1), step)] if total > step else [dict(feeds)]
        return self._enqueue_all(chunks, fetches, priority, deadline, rows=None, batchable=True, trace=trace)

    def _enqueue_all(self, chunks, fetches, priority, deadline, *, rows, batchable, trace=None) -> Future:
        futures = []
        with self._cv:
            if self._closed:
                raise Unavailable("this model version is being replaced or unloaded; retry")
            chunk_rows = [rows or next(iter(c.values())).shape[0] for c in chunks]
            capacity = self.options.max_enqueued_batches * self.options.max_batch_size
            if self._queued_rows + sum(chunk_rows) > capacity:
                self._drop_cancelled()  # requests whose clients left (or timed out) hold no room
            if self._queued_rows + sum(chunk_rows) > capacity and self._queued_rows > 0:
                raise QueueFull(
                    f"the batch queue is full ({self._queued_rows} rows waiting, max_enqueued_batches="
                    f"{self.options.max_enqueued_batches} of max_batch_size={self.options.max_batch_size}); retry later"
                )
            for chunk, n in zip(chunks, chunk_rows):
                key = _batch_key(chunk, fetches) if batchable else ("alone", next(self._seq))
                task = _Task(key, chunk, n, priority, deadline, Future(), trace=trace)
                self._fetches[key] = tuple(fetches)
                heapq.heappush(self._queues.setdefault(key, []), (self._rank(priority), next(self._seq), task))
                self._queued_rows += n
                futures.append(task.future)
            self._cv.notify_all()
        return futures[0] if len(futures) == 1 else _gather(futures)

    def _drop_cancelled(self) -> None:
        """Take requests whose futures were cancelled out of the queues (under the lock)."""
        for key, heap in self._queues.items():
            kept = [entry for entry in heap if not entry[2].future.cancelled()]
            if len(kept) != len(heap):
                self._queued_rows -= sum(entry[2].rows for entry in heap if entry[2].future.cancelled())
                heapq.heapify(kept)
                self._queues[key] = kept

    @staticmethod
    def _rank(priority: int) -> int:
        # Triton: 1 is the highest priority, larger numbers lower, 0 the default (lowest).
        return priority if priority > 0 else 2**31

    # --- the batch threads -------------------------------------------------------------------------

    def _ready(self, now: float) -> tuple[float, tuple | None]:
        """The most urgent queue that is ready now, or how long until the next one will be."""
        best, best_rank, wait = None, None, None
        timeout = self.options.batch_timeout_micros / 1e6
        for key, heap in self._queues.items():
            if not heap:
                continue
            rank, _, head = heap[0]
            oldest = min(t.enqueued for _, _, t in heap)
            rows = sum(t.rows for _, _, t in heap)
            due = oldest + timeout
            if rows >= self.options.max_batch_size or due <= now or key[0] == "alone":
                if best_rank is None or (rank, oldest) < best_rank:
                    best, best_rank = key, (rank, oldest)
            else:
                wait = due - now if wait is None else min(wait, due - now)
        return (0.0 if best is not None else (wait if wait is not None else None)), best

    def _take(self, key: tuple, now: float) -> list[_Task]:
        heap = self._queues[key]
        batch: list[_Task] = []
        rows = 0
        while heap and rows + heap[0][2].rows <= self.options.max_batch_size:
            _, _, task = heapq.heappop(heap)
            self._queued_rows -= task.rows
            if not task.future.set_running_or_notify_cancel():
                continue  # the client went away or gave up: never computed
            if task.deadline is not None and now > task.deadline:
                task.future.set_exception(DeadlineExceeded("request timed out in the batch queue"))
                continue
            task.started = now
            batch.append(task)
            rows += task.rows
        if not heap:
            del self._queues[key]
        return batch

    def _loop(self) -> None:
        while True:
            with self._cv:
                while True:
                    if self._closed and not any(self._queues.values()):
                        return
                    wait, key = self._ready(time.monotonic())
                    if key is not None:
                        batch = self._take(key, time.monotonic())
                        fetches = self._fetches[key]
                        break
                    self._cv.wait(wait)
            if batch:
                self._execute(key, batch, fetches)

    def _execute(self, key: tuple, batch: list[_Task], fetches: tuple[str, ...]) -> None:
        start = time.perf_counter()
        start_ns = time.time_ns()
        rows = sum(t.rows for t in batch)
        padded = rows
        try:
            if key in self._unbatchable or len(batch) == 1 and self.options.padded_size(rows) == rows:
                results = [self._run(task.feeds, fetches) for task in batch]
            else:
                results, padded = self._execute_batch(key, batch, fetches, rows)
        except BaseException as e:  # every waiting request learns of the failure
            for task in batch:
                task.future.set_exception(e)
            return
        compute_s = time.perf_counter() - start
        traces = [task.trace for task in batch if task.trace is not None]
        if traces:  # before the results: a request reads its batch's span once its future is done
            traces[0].tracing.batch(traces, start_ns, start_ns + int(compute_s * 1e9), rows,
                                    {"tensorgate.batch.rows": rows, "tensorgate.batch.padded_size": padded,
                                     "tensorgate.batch.requests": len(batch)})
        for task, outputs in zip(batch, results):
            task.future.set_result((outputs, task.started - task.enqueued, compute_s))
        if self._on_batch is not None:
            self._on_batch(BatchStats(rows, padded, len(batch), compute_s))

    def _execute_batch(self, key: tuple, batch: list[_Task], fetches: tuple[str, ...], rows: int) -> tuple[list, int]:
        padded = self.options.padded_size(rows)
        feeds = {}
        for name in batch[0].feeds:
            parts = [t.feeds[name] for t in batch]
            if padded > rows:
                # NOTE: padding repeats a real row, as TensorFlow Serving does: zeros could produce
                # NaN or errors (a log, a division) where real rows never would.
                parts.append(np.repeat(parts[0][:1], padded - rows, axis=0))
            feeds[name] = np.concatenate(parts) if len(parts) > 1 else parts[0]
        outputs = self._run(feeds, fetches)
        if any(o.ndim == 0 or o.shape[0] != padded for o in outputs):
            # Outputs that do not follow the batch cannot be split: this signature runs alone from now on.
            log.warning("outputs %s do not have the batch as their first dimension; not batching them", list(fetches))
            self._unbatchable.add(key)
            return [self._run(task.feeds, fetches) for task in batch], rows
        results, offset = [], 0
        for task in batch:
            results.append([o[offset : offset + task.rows] for o in outputs])
            offset += task.rows
        return results, padded

    def close(self) -> None:
        """Stop taking requests; queued ones still run, then the threads end."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()


def _gather(futures: list[Future]) -> Future:
    """One future for the chunks of a split request: their outputs concatenated in order."""
    combined: Future = Future()
    remaining = [len(futures)]
    lock = threading.Lock()

    def done(_: Future) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0] or combined.done():
                return
        if any(f.cancelled() for f in futures):
            combined.cancel()
            return
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            combined.set_exception(errors[0])
            return
        parts = [f.result() for f in futures]
        outputs = [np.concatenate([p[0][i] for p in parts]) for i in range(len(parts[0][0]))]
        combined.set_result((outputs, max(p[1] for p in parts), sum(p[2] for p in parts)))

    def cancel_all(f: Future) -> None:
        if f.cancelled():
            for part in futures:
                part.cancel()

    for f in futures:
        f.add_done_callback(done)
    combined.add_done_callback(cancel_all)
    return combined
