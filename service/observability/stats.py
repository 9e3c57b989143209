"""Live request statistics: a rolling window of per-model latency, rate, errors, queue time and batch
size, cheap enough to record on every request and summarised on demand for the dashboard.

    >>> stats = LiveStats(window_s=300, bucket_s=5)
    >>> stats.record_request("iris_classifier", "1", "v2", duration_s=0.0012, ok=True, queue_s=0.0001)
    >>> stats.record_batch("iris_classifier", "1", size=8)
    >>> stats.snapshot()["models"]["iris_classifier"]["p50_ms"]
    1.2

Each model keeps a ring of `window_s / bucket_s` time buckets; a bucket is `bucket_s` wide and aligned
to multiples of `bucket_s` on the clock, and the one a slot holds is replaced (not aged) when the clock
reaches a newer bucket for that slot. The window is the current, partial bucket plus the full buckets
before it, as many as fit in the ring. Memory is bounded: at most `max_samples` durations (per signature) and
queue times per bucket (reservoir-sampled beyond that), and at most `max_models` models.

Definitions used by `snapshot()` (the dashboard and its tests rely on them):

- percentiles are nearest-rank: the smallest sample such that at least p% of the samples are <= it.
  Over the window, a bucket that kept `k` of its `n` samples weighs each one `n / k`, so a busy
  bucket counts as much as its traffic, not as its sample; with no bucket over `max_samples` this is
  exactly nearest-rank over every request.
- every request is timed, failed or not: the latency is what clients saw, and the error rate says how
  many of them failed.
- `rps` is `requests / span_s`. Over the window, `span_s` runs from the start of the oldest bucket
  holding data for the model to the snapshot time; in the series, it is `bucket_s` for a past bucket
  and the time elapsed so far for the current one. Either span is at least `min(1, bucket_s)`
  seconds, because a rate over a few milliseconds of data is noise. `span_s` is in the snapshot so
  that a reader can recompute every rate.
- `error_rate` is `errors / requests` (0 for no requests); latencies and queue times are in ms.
- `signatures` splits a model's window by the signature its requests ran (requests that failed before one was
  resolved count under ""): the same figures. Durations are sampled per signature; a model's percentiles weigh
  each signature's samples by the traffic they stand for, as across buckets.
"""

from __future__ import annotations

import math
import random
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Sequence

# Only snapshot() uses numpy: recording stays plain Python, O(1), with no array calls per request.
import numpy as np

__all__ = ["LiveStats", "nearest_rank"]

# Per bucket: more distinct versions or protocols than this (only bad input makes that many) are
# counted under "other", so that a client inventing names cannot grow memory.
_MAX_KEYS = 32
_OTHER = "other"


def nearest_rank(
    values: Sequence[float] | np.ndarray, ps: Sequence[int], weights: np.ndarray | None = None
) -> list[float | None]:
    """The nearest-rank p-th percentiles (each p in 1..100) of `values`, optionally weighted; None if empty.

    The p-th percentile is the smallest value whose cumulative weight reaches p% of the total (with
    unit weights: the value of rank ceil(p * n / 100)).

    NOTE: the test is `cumulative * 100 >= p * total`, not `cumulative >= p / 100 * total`: 0.95 * 100
    is 95.00000000000001 in binary floating point and would pick one rank too high. With unit weights
    both sides are exact integers.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return [None for _ in ps]
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(np.ones_like(values) if weights is None else weights[order])
    total = cumulative[-1]
    # The first position whose cumulative * 100 reaches p * total (min(): guard an ulp short at the top).
    ranks = [min(int(np.searchsorted(cumulative * 100, p * total, side="left")), values.size - 1) for p in ps]
    return [float(values[order[r]]) for r in ranks]


class _Reservoir:
    """Up to `capacity` values out of `seen`, each kept with equal probability (Vitter's algorithm R)."""

    __slots__ = ("values", "seen")

    def __init__(self) -> None:
        self.values = array("d")  # 8 bytes a value, not a Python float object each
        self.seen = 0

    def add(self, value: float, capacity: int, rng: random.Random) -> None:
        self.seen += 1
        if len(self.values) < capacity:
            self.values.append(value)
        else:
            slot = rng.randrange(self.seen)
            if slot < capacity:
                self.values[slot] = value

    def weight(self) -> float:
        """How many requests each kept value stands for (1.0 until the reservoir is full)."""
        return self.seen / len(self.values) if self.values else 0.0

    def array(self) -> np.ndarray:
        return np.frombuffer(self.values, dtype=np.float64) if self.values else np.empty(0)

    def copy(self) -> _Reservoir:
        copy = _Reservoir()
        copy.values, copy.seen = array("d", self.values), self.seen
        return copy


class _Bucket:
    """What one model did during one `bucket_s`-wide slice of time (`index` = start // bucket_s)."""

    __slots__ = (
        "index", "requests", "errors", "queue", "batches", "batch_sum", "batch_max", "versions", "protocols", "signatures",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.requests = 0
        self.errors = 0
        self.queue = _Reservoir()
        self.batches = 0
        self.batch_sum = 0
        self.batch_max = 0
        self.versions: dict[str, int] = {}
        self.protocols: dict[str, int] = {}
        self.signatures: dict[str, _Signature] = {}  # each with its requests' durations

    def durations(self) -> list[_Reservoir]:
        return [sig.durations for sig in self.signatures.values()]


class _Signature:
    """One signature's requests within a bucket."""

    __slots__ = ("requests", "errors", "durations")

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.durations = _Reservoir()

    def copy(self) -> _Signature:
        copy = _Signature()
        copy.requests, copy.errors, copy.durations = self.requests, self.errors, self.durations.copy()
        return copy


def _count(counts: dict[str, int], key: str) -> None:
    if key not in counts and len(counts) >= _MAX_KEYS:
        key = _OTHER
    counts[key] = counts.get(key, 0) + 1


class _Ring:
    """A model's buckets, one slot per bucket in the window; a slot holding an older bucket is reused."""

    __slots__ = ("slots", "last_index")

    def __init__(self, size: int) -> None:
        self.slots: list[_Bucket | None] = [None] * size
        self.last_index = -1

    def bucket(self, index: int) -> _Bucket:
        slot = index % len(self.slots)
        bucket = self.slots[slot]
        if bucket is None or bucket.index != index:
            bucket = self.slots[slot] = _Bucket(index)
        self.last_index = max(self.last_index, index)
        return bucket

    def live(self, current: int) -> list[_Bucket]:
        """The buckets inside the window ending at bucket `current`, oldest first."""
        oldest = current - len(self.slots) + 1
        found = [b for b in self.slots if b is not None and oldest <= b.index <= current]
        return sorted(found, key=lambda b: b.index)


class LiveStats:
    """Thread-safe rolling statistics of requests and batches per model (see the module docstring).

        >>> stats = LiveStats(window_s=60, bucket_s=1, clock=lambda: 1000.0)
        >>> stats.record_request("half_plus_two", "1", "tfserving", duration_s=0.002, ok=False)
        >>> stats.snapshot()["models"]["half_plus_two"]["error_rate"]
        1.0

    `record_request` and `record_batch` are O(1) under one lock; `snapshot` copies the live buckets
    under the lock and computes outside it. `max_samples` caps the durations (and the queue times)
    kept per bucket, `max_models` the models tracked (the least recently seen one goes first), and
    `seed` fixes the reservoir sampling for reproducible tests.
    """

    def __init__(
        self,
        window_s: float = 300.0,
        bucket_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        *,
        max_samples: int = 2048,
        max_models: int = 1024,
        seed: int | None = None,
    ):
        if bucket_s <= 0 or window_s < bucket_s:
            raise ValueError(f"need 0 < bucket_s <= window_s, got bucket_s={bucket_s}, window_s={window_s}")
        self.window_s = float(window_s)
        self.bucket_s = float(bucket_s)
        self.buckets = math.ceil(window_s / bucket_s - 1e-9)  # 300 / 5 -> 60, not 61 from a rounding error
        self.max_samples = max_samples
        self.max_models = max_models
        self._clock = clock
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._models: dict[str, _Ring] = {}

    def record_request(
        self, model: str, version: str, protocol: str, duration_s: float, ok: bool, queue_s: float | None = None,
        signature: str = "",
    ) -> None:
        """One finished request: its end-to-end duration, whether it succeeded, its time in a queue and the
        signature it ran."""
        index = self._index(self._clock())
        with self._lock:
            bucket = self._ring(model, index).bucket(index)
            bucket.requests += 1
            if not ok:
                bucket.errors += 1
            if queue_s is not None:
                bucket.queue.add(queue_s, self.max_samples, self._rng)
            _count(bucket.versions, str(version))
            _count(bucket.protocols, protocol)
            by_signature = bucket.signatures.get(signature)
            if by_signature is None:
                if len(bucket.signatures) >= _MAX_KEYS:
                    signature = _OTHER
                by_signature = bucket.signatures.setdefault(signature, _Signature())
            by_signature.requests += 1
            by_signature.errors += 0 if ok else 1
            by_signature.durations.add(duration_s, self.max_samples, self._rng)

    def record_batch(self, model: str, version: str, size: int) -> None:
        """One batch the model ran, of `size` requests' worth of rows."""
        index = self._index(self._clock())
        with self._lock:
            bucket = self._ring(model, index).bucket(index)
            bucket.batches += 1
            bucket.batch_sum += size
            bucket.batch_max = max(bucket.batch_max, size)

    def snapshot(self) -> dict:
        """Every model with data in the window: totals over the window and one point per bucket.

        Shape (numbers are floats unless noted; null where there is nothing to measure)::

            {"generated_at": unix_s, "window_s": 300.0, "bucket_s": 5.0,
             "models": {name: {"requests": int, "errors": int, "span_s": s, "rps": x, "error_rate": x,
                               "p50_ms": x, "p95_ms": x, "p99_ms": x, "queue_p50_ms": x, "queue_p95_ms": x,
                               "batches": int, "batch_size_mean": x, "batch_size_max": int,
                               "versions": {version: int}, "protocols": {protocol: int},
                               "signatures": {signature: {"requests": int, "errors": int, "rps": x,
                                                          "error_rate": x, "p50_ms": x, "p95_ms": x, "p99_ms": x}},
                               "series": [{"t": bucket_start_unix_s, "span_s": s, "requests": int,
                                           "errors": int, "rps": x, "error_rate": x, "p50_ms": x,
                                           "p95_ms": x, "p99_ms": x, "queue_ms": x (p50),
                                           "batch_size": x (mean), "batch_size_max": int}, ...]}}}

        `series` has one point per bucket of the window, oldest first, empty buckets included, so
        that charts share one time axis; models are sorted by name.
        """
        now = self._clock()
        current = self._index(now)
        with self._lock:
            self._forget_idle(current)
            copies = {name: [_copy(b) for b in ring.live(current)] for name, ring in self._models.items()}
        models = {name: self._summary(buckets, current, now) for name, buckets in sorted(copies.items()) if buckets}
        return {"generated_at": now, "window_s": self.window_s, "bucket_s": self.bucket_s, "models": models}

    # -- internals --------------------------------------------------------------------------------

    def _index(self, t: float) -> int:
        return math.floor(t / self.bucket_s)

    def _ring(self, model: str, index: int) -> _Ring:
        ring = self._models.get(model)
        if ring is None:
            if len(self._models) >= self.max_models:
                self._make_room(index)
            ring = self._models[model] = _Ring(self.buckets)
        return ring

    def _make_room(self, current: int) -> None:
        # Only when a new model arrives at the cap: O(models), not on the per-request path.
        self._forget_idle(current)
        if len(self._models) >= self.max_models:
            stalest = min(self._models, key=lambda name: self._models[name].last_index)
            del self._models[stalest]

    def _forget_idle(self, current: int) -> None:
        """Drop models whose every bucket has left the window: they have nothing left to show."""
        oldest = current - self.buckets + 1
        for name in [n for n, ring in self._models.items() if ring.last_index < oldest]:
            del self._models[name]

    def _span(self, start: float, now: float, longest: float) -> float:
        return min(longest, max(now - start, min(1.0, self.bucket_s)))

    def _summary(self, buckets: list[_Bucket], current: int, now: float) -> dict:
        requests = sum(b.requests for b in buckets)
        errors = sum(b.errors for b in buckets)
        batches = sum(b.batches for b in buckets)
        span = self._span(buckets[0].index * self.bucket_s, now, self.window_s)
        p50, p95, p99 = _window_percentiles([r for b in buckets for r in b.durations()], (50, 95, 99))
        queue_p50, queue_p95 = _window_percentiles([b.queue for b in buckets], (50, 95))
        return {
            "requests": requests,
            "errors": errors,
            "span_s": span,
            "rps": requests / span,
            "error_rate": errors / requests if requests else 0.0,
            "p50_ms": p50,
            "p95_ms": p95,
            "p99_ms": p99,
            "queue_p50_ms": queue_p50,
            "queue_p95_ms": queue_p95,
            "batches": batches,
            "batch_size_mean": sum(b.batch_sum for b in buckets) / batches if batches else None,
            "batch_size_max": max(b.batch_max for b in buckets) if batches else None,
            "versions": _merge(b.versions for b in buckets),
            "protocols": _merge(b.protocols for b in buckets),
            "signatures": self._signatures(buckets, span),
            "series": self._series(buckets, current, now),
        }

    @staticmethod
    def _signatures(buckets: list[_Bucket], span: float) -> dict[str, dict]:
        names = sorted({name for b in buckets for name in b.signatures})
        summaries = {}
        for name in names:
            parts = [b.signatures[name] for b in buckets if name in b.signatures]
            requests, errors = sum(p.requests for p in parts), sum(p.errors for p in parts)
            p50, p95, p99 = _window_percentiles([p.durations for p in parts], (50, 95, 99))
            summaries[name] = {"requests": requests, "errors": errors, "rps": requests / span,
                               "error_rate": errors / requests if requests else 0.0,
                               "p50_ms": p50, "p95_ms": p95, "p99_ms": p99}
        return summaries

    def _series(self, buckets: list[_Bucket], current: int, now: float) -> list[dict]:
        by_index = {b.index: b for b in buckets}
        points = []
        for index in range(current - self.buckets + 1, current + 1):
            start = index * self.bucket_s
            span = self._span(start, now, self.bucket_s)
            b = by_index.get(index) or _Bucket(index)
            p50, p95, p99 = _window_percentiles(b.durations(), (50, 95, 99))
            (queue_p50,) = _ms(nearest_rank(b.queue.array(), (50,)))
            points.append(
                {
                    "t": start,
                    "span_s": span,
                    "requests": b.requests,
                    "errors": b.errors,
                    "rps": b.requests / span,
                    "error_rate": b.errors / b.requests if b.requests else 0.0,
                    "p50_ms": p50,
                    "p95_ms": p95,
                    "p99_ms": p99,
                    "queue_ms": queue_p50,
                    "batch_size": b.batch_sum / b.batches if b.batches else None,
                    "batch_size_max": b.batch_max if b.batches else None,
                }
            )
        return points


def _window_percentiles(reservoirs: list[_Reservoir], ps: Sequence[int]) -> list[float | None]:
    """Percentiles in ms over several buckets' samples, each weighted by the traffic it stands for."""
    values = np.concatenate([r.array() for r in reservoirs]) if reservoirs else np.empty(0)
    weights = np.concatenate([np.full(len(r.values), r.weight()) for r in reservoirs]) if reservoirs else None
    return _ms(nearest_rank(values, ps, weights))


def _copy(bucket: _Bucket) -> _Bucket:
    """A bucket detached from the ring, so that the summary can run without the lock."""
    copy = _Bucket(bucket.index)
    copy.requests, copy.errors = bucket.requests, bucket.errors
    copy.queue = bucket.queue.copy()
    copy.batches, copy.batch_sum, copy.batch_max = bucket.batches, bucket.batch_sum, bucket.batch_max
    copy.versions, copy.protocols = dict(bucket.versions), dict(bucket.protocols)
    copy.signatures = {name: sig.copy() for name, sig in bucket.signatures.items()}
    return copy


def _merge(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for c in counts:
        for key, n in c.items():
            merged[key] = merged.get(key, 0) + n
    return dict(sorted(merged.items()))


def _ms(seconds: list[float | None]) -> list[float | None]:
    return [None if s is None else s * 1000.0 for s in seconds]
