"""Cumulative per-version statistics in the form of Triton's statistics extension
(`GET /v2/models[/{m}[/versions/{v}]]/stats`, gRPC ModelStatistics): counts and total nanoseconds since
the server started, which a client samples to get averages between two readings.

    >>> stats = ModelStatistics()
    >>> stats.record_request("iris", "1", duration_s=0.002, ok=True, rows=4, queue_s=0.0001, compute_s=0.0015)
    >>> stats.record_execution("iris", "1", batch_size=4, compute_s=0.0015)
    >>> stats.document("iris", "1")["inference_count"]
    4

What each figure is here (Triton's definitions, docs/protocol/extension_statistics.md):
- `inference_count`: rows of successful requests (a request of batch 64 counts 64); `execution_count`:
  model executions (a dynamic batch of many requests counts once); `last_inference`: milliseconds since
  the epoch at the end of the last request, 0 before any.
- `inference_stats`: `success` and `fail` (count, total time of the request as the server saw it),
  `queue` (time waiting for a worker or a batch), `compute_infer` (time running the graph).
  `compute_input` and `compute_output` count the same executions with 0 ns: the engine runs on the
  request's arrays and returns arrays, with no framework copy in between (protocol decoding and
  encoding, outside the model in Triton too, are not counted). `cache_hit`/`cache_miss` stay 0: there
  is no response cache.
- `batch_stats`: per executed batch size, the executions and their compute time (input and output as above).
- `memory_usage`: `[{"type": "CPU", "id": 0, "byte_size": N}]` while the version is loaded, N its footprint as
  measured when it loaded (engine.runtime.footprint); empty while it is not in memory (lazy loading, evicted).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

__all__ = ["ModelStatistics"]


@dataclass
class _Duration:
    count: int = 0
    ns: int = 0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.ns += int(seconds * 1e9)

    def document(self) -> dict:
        return {"count": self.count, "ns": self.ns}


@dataclass
class _VersionStats:
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: _Duration = field(default_factory=_Duration)
    fail: _Duration = field(default_factory=_Duration)
    queue: _Duration = field(default_factory=_Duration)
    compute_infer: _Duration = field(default_factory=_Duration)
    # batch size -> (executions, compute time)
    batches: dict[int, _Duration] = field(default_factory=lambda: defaultdict(_Duration))


def _zero_io(count: int) -> dict:
    return {"count": count, "ns": 0}


class ModelStatistics:
    """Counters per (model, version), safe to record from any thread."""

    def __init__(self, clock=time.time):
        self._clock = clock
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, str], _VersionStats] = defaultdict(_VersionStats)

    def record_request(self, model: str, version: str, *, duration_s: float, ok: bool, rows: int = 1,
                       queue_s: float | None = None, compute_s: float | None = None) -> None:
        """One finished inference request of a known model version."""
        with self._lock:
            stats = self._versions[(model, str(version))]
            stats.last_inference_ms = int(self._clock() * 1000)
            if not ok:
                stats.fail.add(duration_s)
                return
            stats.success.add(duration_s)
            stats.inference_count += rows
            if queue_s is not None:
                stats.queue.add(queue_s)
            if compute_s is not None:
                stats.compute_infer.add(compute_s)

    def record_execution(self, model: str, version: str, *, batch_size: int, compute_s: float) -> None:
        """One run of the model over `batch_size` rows (a dynamic batch, or one request alone)."""
        with self._lock:
            stats = self._versions[(model, str(version))]
            stats.execution_count += 1
            stats.batches[batch_size].add(compute_s)

    def document(self, model: str, version: str, resident_bytes: int = 0) -> dict:
        """Triton's `$model_stat` for one version (zeros for one that has served nothing); `resident_bytes`:
        the memory the loaded version holds (0: not in memory)."""
        with self._lock:
            stats = self._versions.get((model, str(version))) or _VersionStats()
            executions = stats.compute_infer.count
            return {
                "name": model,
                "version": str(version),
                "last_inference": stats.last_inference_ms,
                "inference_count": stats.inference_count,
                "execution_count": stats.execution_count,
                "inference_stats": {
                    "success": stats.success.document(),
                    "fail": stats.fail.document(),
                    "queue": stats.queue.document(),
                    "compute_input": _zero_io(executions),
                    "compute_infer": stats.compute_infer.document(),
                    "compute_output": _zero_io(executions),
                    "cache_hit": _zero_io(0),
                    "cache_miss": _zero_io(0),
                },
                "response_stats": {},
                "batch_stats": [
                    {"batch_size": size, "compute_input": _zero_io(d.count), "compute_infer": d.document(),
                     "compute_output": _zero_io(d.count)}
                    for size, d in sorted(stats.batches.items())
                ],
                "memory_usage": [{"type": "CPU", "id": 0, "byte_size": resident_bytes}] if resident_bytes else [],
            }
